package main

import (
	"bufio"
	"errors"
	"io"
	"strconv"
)

// Just enough HTTP/2 (RFC 9113) for one unary gRPC call on a connection of
// its own, spoken with prior knowledge (h2c) over the agent's Unix socket.
//
// The client writes the preface, its SETTINGS, the request's HEADERS and as
// much of the request body as the peer's flow-control windows allow in one
// write, then alternates between reading frames and sending more body as
// WINDOW_UPDATEs open the windows. It advertises receive windows as large as
// the largest reply it accepts, so it never has to replenish them.

// Frame types.
const (
	frameData         = 0x0
	frameHeaders      = 0x1
	frameRSTStream    = 0x3
	frameSettings     = 0x4
	framePushPromise  = 0x5
	framePing         = 0x6
	frameGoAway       = 0x7
	frameWindowUpdate = 0x8
	frameContinuation = 0x9
)

// Frame flags.
const (
	flagEndStream  = 0x1 // DATA, HEADERS
	flagAck        = 0x1 // SETTINGS, PING
	flagEndHeaders = 0x4 // HEADERS, CONTINUATION
	flagPadded     = 0x8 // DATA, HEADERS
	flagPriority   = 0x20
)

// Settings.
const (
	settingEnablePush        = 0x2
	settingInitialWindowSize = 0x4
	settingMaxFrameSize      = 0x5
)

const (
	clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

	// The protocol's defaults, in force until the peer's SETTINGS say otherwise.
	defaultWindow   = 65535
	defaultMaxFrame = 16384
	maxWindow       = 1<<31 - 1

	// maxReply is the largest reply body accepted; the receive windows are
	// opened that wide at once. It is the agent's largest reply message,
	// agent.MaxToolReply (9 bags' worth: the most that escaping makes of
	// one bag formatted as JSON, plus 1 MiB), with its 5-byte gRPC
	// prefix; the tests check they agree.
	maxReply = 9*maxInput + 1<<20 + 5
	// recvMaxFrame is the SETTINGS_MAX_FRAME_SIZE advertised.
	recvMaxFrame = 1 << 20
	// readBuffer is the size of the read buffer: frames up to this size are
	// decoded in place.
	readBuffer = 64 << 10
	// maxHeaderBlock bounds a header block split over CONTINUATION frames.
	maxHeaderBlock = 1 << 20
	// writeBatch is roughly how much body is queued per write.
	writeBatch = 1 << 20

	// stream is the id of the call's stream: the first client stream.
	stream = 1
)

// errClosed reports a connection the agent closed before the reply was
// complete.
var errClosed = errors.New("the unit agent closed the connection before the reply was complete")

// h2conn is the client side of one HTTP/2 connection carrying one call.
type h2conn struct {
	w      io.Writer
	r      *bufio.Reader
	dec    *hpackDecoder
	out    []byte // frames queued for the next write
	broken bool   // writing failed
	big    []byte // payload of frames larger than the read buffer

	// Sending the request body.
	body         []byte // what is left to send
	bodySent     bool   // END_STREAM has been queued
	connWindow   int64  // the peer's connection-level window
	streamWindow int64  // the peer's window for our stream
	peerWindow   int64  // the peer's SETTINGS_INITIAL_WINDOW_SIZE
	peerMaxFrame int    // the peer's SETTINGS_MAX_FRAME_SIZE

	// Receiving the reply.
	block          []byte // header block being assembled
	blockStream    uint32 // its stream
	blockEndStream bool   // its HEADERS frame ended the stream
	inBlock        bool   // waiting for CONTINUATION frames
	gotHeaders     bool   // response headers received
	ended          bool   // the peer ended our stream
	goAway         string // why the peer is going away, if it is
	reply          reply
}

// reply is what the peer sent on our stream.
type reply struct {
	httpStatus  string
	contentType string
	trailers    bool   // grpc-status was received
	grpcStatus  string // grpc-status
	grpcMessage string // grpc-message, percent-encoded
	body        []byte // DATA payloads, concatenated
}

// roundTrip sends one request on a new HTTP/2 connection, over rw, and
// reads the reply until the peer ends the stream. headers is the HPACK-encoded
// request header block and body the request body. A protocol violation,
// a reset stream or a closed connection is an error; what the reply says
// is for the caller to judge.
func roundTrip(rw io.ReadWriter, headers, body []byte) (*reply, error) {
	c := &h2conn{
		w:            rw,
		r:            bufio.NewReaderSize(rw, readBuffer),
		dec:          newHPACKDecoder(),
		body:         body,
		connWindow:   defaultWindow,
		streamWindow: defaultWindow,
		peerWindow:   defaultWindow,
		peerMaxFrame: defaultMaxFrame,
	}

	c.out = make([]byte, 0, 512)
	c.out = append(c.out, clientPreface...)
	c.out = appendFrameHeader(c.out, 3*6, frameSettings, 0, 0)
	c.out = appendSetting(c.out, settingEnablePush, 0)
	c.out = appendSetting(c.out, settingInitialWindowSize, maxReply)
	c.out = appendSetting(c.out, settingMaxFrameSize, recvMaxFrame)
	c.out = appendWindowUpdate(c.out, 0, maxReply-defaultWindow)
	// The request's header block is small: it fits in one frame of the
	// minimum size.
	c.out = appendFrameHeader(c.out, len(headers), frameHeaders, flagEndHeaders, stream)
	c.out = append(c.out, headers...)

	for {
		c.queueBody()
		if err := c.flush(); err != nil {
			return nil, err
		}
		if !c.canSend() {
			if err := c.readFrame(); err != nil {
				return nil, err
			}
		}
		if c.ended {
			// Whatever is still queued (acknowledgements) is moot: the
			// connection is closed next.
			return &c.reply, nil
		}
	}
}

// canSend reports whether body is left to send and the windows allow it.
func (c *h2conn) canSend() bool {
	return !c.bodySent && !c.broken && c.connWindow > 0 && c.streamWindow > 0
}

// queueBody queues DATA frames with as much of the body as the peer's
// windows and frame size allow, up to about writeBatch bytes; the last one
// ends the stream.
func (c *h2conn) queueBody() {
	for !c.bodySent && len(c.out) < writeBatch {
		n := min(int64(len(c.body)), int64(c.peerMaxFrame), c.connWindow, c.streamWindow)
		if n <= 0 && len(c.body) > 0 {
			return // blocked by flow control
		}
		n = max(n, 0) // an empty body needs no window
		var flags byte
		if int(n) == len(c.body) {
			flags = flagEndStream
			c.bodySent = true
		}
		c.out = appendFrameHeader(c.out, int(n), frameData, flags, stream)
		c.out = append(c.out, c.body[:n]...)
		c.body = c.body[n:]
		c.connWindow -= n
		c.streamWindow -= n
	}
}

// flush writes the queued frames. When the peer has stopped reading, the
// reply may still be complete, or tell why: a write error other than a
// timeout only stops the writing, and reading goes on.
func (c *h2conn) flush() error {
	if len(c.out) == 0 || c.broken {
		c.out = c.out[:0]
		return nil
	}
	_, err := c.w.Write(c.out)
	c.out = c.out[:0]
	if err != nil {
		if isTimeout(err) {
			return ioError("cannot send to the unit agent", err)
		}
		c.broken = true
	}
	return nil
}

// readFrame reads one frame and acts on it.
func (c *h2conn) readFrame() error {
	hdr, err := c.read(9)
	if err != nil {
		return c.readError(err)
	}
	length := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
	typ, flags := hdr[3], hdr[4]
	sid := uint32(hdr[5]&0x7f)<<24 | uint32(hdr[6])<<16 | uint32(hdr[7])<<8 | uint32(hdr[8])
	if length > recvMaxFrame {
		return protocolError("frame of " + strconv.Itoa(length) + " bytes exceeds the " + strconv.Itoa(recvMaxFrame) + " advertised")
	}
	p, err := c.read(length)
	if err != nil {
		return c.readError(err)
	}
	if c.inBlock && typ != frameContinuation {
		return protocolError("frame of type " + strconv.Itoa(int(typ)) + " inside a header block")
	}
	switch typ {
	case frameData:
		return c.onData(sid, flags, p)
	case frameHeaders:
		return c.onHeaders(sid, flags, p)
	case frameContinuation:
		return c.onContinuation(sid, flags, p)
	case frameRSTStream:
		return c.onRSTStream(sid, p)
	case frameSettings:
		return c.onSettings(sid, flags, p)
	case framePing:
		return c.onPing(sid, flags, p)
	case frameGoAway:
		return c.onGoAway(sid, p)
	case frameWindowUpdate:
		return c.onWindowUpdate(sid, p)
	case framePushPromise:
		return protocolError("PUSH_PROMISE although push is disabled")
	}
	return nil // PRIORITY, and unknown types, are ignored
}

// read returns the next n bytes read. The slice is valid until the next
// call.
func (c *h2conn) read(n int) ([]byte, error) {
	if n <= c.r.Size() {
		p, err := c.r.Peek(n)
		if err != nil {
			return nil, err
		}
		_, _ = c.r.Discard(n) // cannot fail: n bytes are buffered
		return p, nil
	}
	if cap(c.big) < n {
		c.big = make([]byte, n)
	}
	_, err := io.ReadFull(c.r, c.big[:n])
	return c.big[:n], err
}

// readError describes an error reading from the peer.
func (c *h2conn) readError(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		if c.goAway != "" {
			return errors.New(errClosed.Error() + ": " + c.goAway)
		}
		return errClosed
	}
	return ioError("cannot read the reply of the unit agent", err)
}

func (c *h2conn) onData(sid uint32, flags byte, p []byte) error {
	if sid == 0 {
		return protocolError("DATA on stream 0")
	}
	if sid != stream || c.ended {
		return nil
	}
	if !c.gotHeaders {
		return protocolError("DATA before HEADERS")
	}
	p, err := unpad(flags, p)
	if err != nil {
		return err
	}
	if len(c.reply.body)+len(p) > maxReply {
		return errors.New("the reply of the unit agent is larger than " + strconv.Itoa(maxReply) + " bytes")
	}
	c.reply.body = append(c.reply.body, p...)
	if flags&flagEndStream != 0 {
		c.ended = true
	}
	return nil
}

func (c *h2conn) onHeaders(sid uint32, flags byte, p []byte) error {
	if sid == 0 {
		return protocolError("HEADERS on stream 0")
	}
	p, err := unpad(flags, p)
	if err != nil {
		return err
	}
	if flags&flagPriority != 0 {
		if len(p) < 5 {
			return protocolError("short HEADERS frame")
		}
		p = p[5:]
	}
	c.block = append(c.block[:0], p...)
	c.blockStream = sid
	c.blockEndStream = flags&flagEndStream != 0
	if flags&flagEndHeaders == 0 {
		c.inBlock = true
		return nil
	}
	return c.endBlock()
}

func (c *h2conn) onContinuation(sid uint32, flags byte, p []byte) error {
	if !c.inBlock || sid != c.blockStream {
		return protocolError("unexpected CONTINUATION")
	}
	if len(c.block)+len(p) > maxHeaderBlock {
		return protocolError("header block larger than " + strconv.Itoa(maxHeaderBlock) + " bytes")
	}
	c.block = append(c.block, p...)
	if flags&flagEndHeaders == 0 {
		return nil
	}
	c.inBlock = false
	return c.endBlock()
}

// endBlock decodes a complete header block: the response headers, the
// trailers, or both at once (a "trailers-only" reply).
func (c *h2conn) endBlock() error {
	// Every block goes through the decoder, whatever its stream, to keep
	// the HPACK dynamic table in step with the peer's.
	fields, err := c.dec.decode(c.block)
	if err != nil {
		return protocolError("bad header block: " + err.Error())
	}
	if c.blockStream != stream || c.ended {
		return nil
	}
	r := &c.reply
	first := !c.gotHeaders
	if !first && !c.blockEndStream {
		return protocolError("trailers without END_STREAM")
	}
	for _, f := range fields {
		switch f.name {
		case ":status":
			if first {
				r.httpStatus = f.value
			}
		case "content-type":
			if first {
				r.contentType = f.value
			}
		case "grpc-status":
			r.trailers, r.grpcStatus = true, f.value
		case "grpc-message":
			r.grpcMessage = f.value
		}
	}
	if first && r.httpStatus == "" {
		return protocolError("response without :status")
	}
	c.gotHeaders = true
	c.ended = c.blockEndStream
	return nil
}

func (c *h2conn) onRSTStream(sid uint32, p []byte) error {
	if len(p) != 4 || sid == 0 {
		return protocolError("bad RST_STREAM frame")
	}
	if sid != stream || c.ended {
		return nil
	}
	return errors.New("the unit agent reset the call (" + errorCodeName(be32(p)) + ")")
}

func (c *h2conn) onSettings(sid uint32, flags byte, p []byte) error {
	if sid != 0 {
		return protocolError("SETTINGS on a stream")
	}
	if flags&flagAck != 0 {
		if len(p) != 0 {
			return protocolError("SETTINGS acknowledgement with a payload")
		}
		return nil
	}
	if len(p)%6 != 0 {
		return protocolError("SETTINGS frame of " + strconv.Itoa(len(p)) + " bytes")
	}
	for ; len(p) > 0; p = p[6:] {
		id, v := uint16(p[0])<<8|uint16(p[1]), be32(p[2:6])
		switch id {
		case settingInitialWindowSize:
			if v > maxWindow {
				return protocolError("SETTINGS_INITIAL_WINDOW_SIZE " + strconv.FormatUint(uint64(v), 10))
			}
			// A change applies to the open stream's window as a delta.
			c.streamWindow += int64(v) - c.peerWindow
			c.peerWindow = int64(v)
		case settingMaxFrameSize:
			if v < defaultMaxFrame || v > 1<<24-1 {
				return protocolError("SETTINGS_MAX_FRAME_SIZE " + strconv.FormatUint(uint64(v), 10))
			}
			c.peerMaxFrame = int(v)
		}
		// SETTINGS_HEADER_TABLE_SIZE needs nothing: the request uses no
		// dynamic table. The others do not concern a client.
	}
	c.out = appendFrameHeader(c.out, 0, frameSettings, flagAck, 0)
	return nil
}

func (c *h2conn) onPing(sid uint32, flags byte, p []byte) error {
	if sid != 0 || len(p) != 8 {
		return protocolError("bad PING frame")
	}
	if flags&flagAck == 0 {
		c.out = appendFrameHeader(c.out, 8, framePing, flagAck, 0)
		c.out = append(c.out, p...)
	}
	return nil
}

func (c *h2conn) onGoAway(sid uint32, p []byte) error {
	if sid != 0 || len(p) < 8 {
		return protocolError("bad GOAWAY frame")
	}
	last, code := be32(p)&0x7fffffff, be32(p[4:])
	c.goAway = "GOAWAY " + errorCodeName(code) + " " + strconv.Quote(string(p[8:]))
	if last < stream {
		return errors.New("the unit agent refused the call: " + c.goAway)
	}
	return nil // the call goes on
}

func (c *h2conn) onWindowUpdate(sid uint32, p []byte) error {
	if len(p) != 4 {
		return protocolError("bad WINDOW_UPDATE frame")
	}
	inc := int64(be32(p) & 0x7fffffff)
	switch sid {
	case 0:
		c.connWindow = min(c.connWindow+inc, maxWindow)
	case stream:
		c.streamWindow = min(c.streamWindow+inc, maxWindow)
	}
	return nil
}

// unpad strips the padding of a DATA or HEADERS frame.
func unpad(flags byte, p []byte) ([]byte, error) {
	if flags&flagPadded == 0 {
		return p, nil
	}
	if len(p) == 0 || int(p[0]) >= len(p) {
		return nil, protocolError("bad padding")
	}
	return p[1 : len(p)-int(p[0])], nil
}

func appendFrameHeader(b []byte, length int, typ, flags byte, sid uint32) []byte {
	return append(b, byte(length>>16), byte(length>>8), byte(length), typ, flags,
		byte(sid>>24), byte(sid>>16), byte(sid>>8), byte(sid))
}

func appendSetting(b []byte, id uint16, v uint32) []byte {
	return append(b, byte(id>>8), byte(id), byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

func appendWindowUpdate(b []byte, sid uint32, inc uint32) []byte {
	b = appendFrameHeader(b, 4, frameWindowUpdate, 0, sid)
	return append(b, byte(inc>>24), byte(inc>>16), byte(inc>>8), byte(inc))
}

func be32(p []byte) uint32 {
	return uint32(p[0])<<24 | uint32(p[1])<<16 | uint32(p[2])<<8 | uint32(p[3])
}

// errorCodeName names an HTTP/2 error code.
func errorCodeName(code uint32) string {
	names := [...]string{"NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR",
		"SETTINGS_TIMEOUT", "STREAM_CLOSED", "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL",
		"COMPRESSION_ERROR", "CONNECT_ERROR", "ENHANCE_YOUR_CALM", "INADEQUATE_SECURITY",
		"HTTP_1_1_REQUIRED"}
	if int(code) < len(names) {
		return names[code]
	}
	return "error code " + strconv.FormatUint(uint64(code), 10)
}

// protocolError reports a reply that breaks HTTP/2.
func protocolError(msg string) error {
	return errors.New("bad reply from the unit agent: " + msg)
}
