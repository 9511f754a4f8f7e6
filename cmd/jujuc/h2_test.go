package main

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// peer is a scripted HTTP/2 server: the tests below drive it frame by
// frame to reach the corners a grpc-go server does not show.
type peer struct {
	t   testing.TB
	fr  *http2.Framer
	buf bytes.Buffer
	enc *hpack.Encoder
}

// exchange runs roundTrip with body against a peer running script, over a
// Unix socket, and returns what roundTrip returned.
func exchange(t *testing.T, body []byte, script func(p *peer)) (*reply, error) {
	t.Helper()
	ln := listen(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		preface := make([]byte, len(clientPreface))
		if _, err := io.ReadFull(c, preface); err != nil || string(preface) != clientPreface {
			t.Errorf("read preface %q, %v", preface, err)
			return
		}
		p := &peer{t: t, fr: http2.NewFramer(c, c)}
		p.enc = hpack.NewEncoder(&p.buf)
		script(p)
	}()
	c, err := net.Dial("unix", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := roundTrip(c, requestHeaders(runPath), body)
	c.Close()
	<-done
	return r, err
}

// block HPACK-encodes name, value pairs with the peer's encoder, which
// indexes them in its dynamic table and Huffman-codes where shorter.
func (p *peer) block(pairs ...string) []byte {
	p.buf.Reset()
	for i := 0; i < len(pairs); i += 2 {
		if err := p.enc.WriteField(hpack.HeaderField{Name: pairs[i], Value: pairs[i+1]}); err != nil {
			p.t.Fatal(err)
		}
	}
	return bytes.Clone(p.buf.Bytes())
}

// readRequest reads the client's frames up to the end of its request and
// returns the request's header fields and body. It checks the client's
// SETTINGS and acknowledges them.
func (p *peer) readRequest() (map[string]string, []byte) {
	fields := map[string]string{}
	var body []byte
	dec := hpack.NewDecoder(4096, func(f hpack.HeaderField) { fields[f.Name] = f.Value })
	for {
		f, err := p.fr.ReadFrame()
		if err != nil {
			p.t.Errorf("reading the request: %v", err)
			return fields, body
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if v, ok := f.Value(http2.SettingInitialWindowSize); !ok || v != maxReply {
					p.t.Errorf("client's initial window: %d, want %d", v, maxReply)
				}
				p.write(p.fr.WriteSettingsAck())
			}
		case *http2.HeadersFrame:
			if _, err := dec.Write(f.HeaderBlockFragment()); err != nil {
				p.t.Error(err)
			}
			if f.StreamEnded() {
				return fields, body
			}
		case *http2.DataFrame:
			body = append(body, f.Data()...)
			if f.StreamEnded() {
				return fields, body
			}
		}
	}
}

func (p *peer) write(err error) {
	if err != nil {
		p.t.Errorf("writing a frame: %v", err)
	}
}

// headers writes a HEADERS frame with pairs.
func (p *peer) headers(endStream bool, pairs ...string) {
	p.write(p.fr.WriteHeaders(http2.HeadersFrameParam{
		StreamID: stream, BlockFragment: p.block(pairs...), EndStream: endStream, EndHeaders: true,
	}))
}

// message returns a gRPC length-prefixed message.
func message(b []byte) []byte {
	return append(newMessage(len(b)), b...)
}

// okReply writes a complete successful reply carrying msg.
func (p *peer) okReply(msg []byte) {
	p.headers(false, ":status", "200", "content-type", "application/grpc")
	p.write(p.fr.WriteData(stream, false, message(msg)))
	p.headers(true, "grpc-status", "0", "grpc-message", "")
}

func TestRequestHeadersAreWhatGRPCExpects(t *testing.T) {
	t.Parallel()
	var fields map[string]string
	var body []byte
	r, err := exchange(t, message([]byte("req")), func(p *peer) {
		fields, body = p.readRequest()
		p.okReply([]byte("resp"))
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		":method": "POST", ":scheme": "http", ":path": runPath, ":authority": "localhost",
		"content-type": "application/grpc", "te": "trailers", "user-agent": "bagkeeper-jujuc",
	}
	if len(fields) != len(want) {
		t.Errorf("request headers %v, want %v", fields, want)
	}
	for k, v := range want {
		if fields[k] != v {
			t.Errorf("request header %s = %q, want %q", k, fields[k], v)
		}
	}
	if string(body) != string(message([]byte("req"))) {
		t.Errorf("request body %q", body)
	}
	if msg, err := r.result(); err != nil || string(msg) != "resp" {
		t.Errorf("result %q, %v", msg, err)
	}
}

func TestRequestBodyRespectsFlowControlAndFrameSize(t *testing.T) {
	t.Parallel()
	body := message(randomBytes(300 << 10))
	var got []byte
	var pingAcked bool
	_, err := exchange(t, body, func(p *peer) {
		const window = 1000
		connWin, streamWin := int64(defaultWindow), int64(defaultWindow)
		p.write(p.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: window}))
		p.write(p.fr.WritePing(false, [8]byte{1, 2, 3}))
		for {
			f, err := p.fr.ReadFrame()
			if err != nil {
				t.Errorf("reading the request: %v", err)
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if f.IsAck() { // from here on, the client counts with our window
					streamWin += window - defaultWindow
				} else {
					p.write(p.fr.WriteSettingsAck())
				}
			case *http2.PingFrame:
				pingAcked = f.IsAck() && f.Data == [8]byte{1, 2, 3}
			case *http2.DataFrame:
				n := int64(len(f.Data()))
				connWin -= n
				streamWin -= n
				if connWin < 0 || streamWin < 0 || n > defaultMaxFrame {
					t.Errorf("DATA of %d bytes overruns the windows: connection %d, stream %d", n, connWin, streamWin)
					return
				}
				got = append(got, f.Data()...)
				if f.StreamEnded() {
					p.okReply(nil)
					return
				}
			}
			// Reopen exhausted windows to a small size.
			if connWin <= 0 {
				p.write(p.fr.WriteWindowUpdate(0, uint32(window-connWin)))
				connWin = window
			}
			if streamWin <= 0 {
				p.write(p.fr.WriteWindowUpdate(stream, uint32(window-streamWin)))
				streamWin = window
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, body) {
		t.Errorf("received %d bytes of body, want the %d sent", len(got), len(body))
	}
	if !pingAcked {
		t.Error("the client did not acknowledge the PING")
	}
}

func TestReplyFramingCorners(t *testing.T) {
	t.Parallel()
	msg := message([]byte("hello, split and padded"))
	r, err := exchange(t, message(nil), func(p *peer) {
		p.readRequest()
		p.write(p.fr.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 20}))
		p.write(p.fr.WritePriority(3, http2.PriorityParam{Weight: 1}))
		p.write(p.fr.WriteRawFrame(0xfe, 0, stream, []byte("unknown frame type")))
		// A header block split over HEADERS (padded, with priority) and
		// CONTINUATION.
		blk := p.block(":status", "200", "content-type", "application/grpc+proto", "x-long", strings.Repeat("x", 100))
		p.write(p.fr.WriteHeaders(http2.HeadersFrameParam{
			StreamID: stream, BlockFragment: blk[:10], PadLength: 7,
			Priority: http2.PriorityParam{StreamDep: 0, Weight: 15},
		}))
		p.write(p.fr.WriteContinuation(stream, false, blk[10:20]))
		p.write(p.fr.WriteContinuation(stream, true, blk[20:]))
		p.write(p.fr.WriteDataPadded(stream, false, msg[:3], []byte{0, 0, 0}))
		p.write(p.fr.WriteData(stream, false, nil))
		p.write(p.fr.WriteDataPadded(stream, false, msg[3:], make([]byte, 255)))
		// The same fields again, now from the dynamic table.
		p.headers(true, "x-long", strings.Repeat("x", 100), "grpc-status", "0")
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := r.result(); err != nil || string(got) != "hello, split and padded" {
		t.Errorf("result %q, %v", got, err)
	}
}

func TestLargeReplyFrames(t *testing.T) {
	t.Parallel()
	want := randomBytes(3 << 20)
	r, err := exchange(t, message(nil), func(p *peer) {
		p.readRequest()
		p.headers(false, ":status", "200", "content-type", "application/grpc")
		m := message(want)
		// Frames as large as the client allows, and the read buffer can hold.
		for len(m) > 0 {
			n := min(len(m), recvMaxFrame)
			p.write(p.fr.WriteData(stream, false, m[:n]))
			m = m[n:]
		}
		p.headers(true, "grpc-status", "0")
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := r.result(); err != nil || !bytes.Equal(got, want) {
		t.Errorf("result of %d bytes, %v; want the %d sent", len(got), err, len(want))
	}
}

func TestReplyErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		script func(p *peer)
		want   string // in the error of roundTrip, or else of result
	}{{
		name: "trailers only",
		script: func(p *peer) {
			p.headers(true, ":status", "200", "content-type", "application/grpc",
				"grpc-status", "7", "grpc-message", "permission denied: caf%C3%A9 100%25 %zz%")
		},
		want: "permission denied: café 100% %zz%",
	}, {
		name: "http error",
		script: func(p *peer) {
			p.headers(true, ":status", "503", "content-type", "text/plain")
		},
		want: "the unit agent replied with HTTP status 503",
	}, {
		name: "no grpc-status",
		script: func(p *peer) {
			p.headers(false, ":status", "200", "content-type", "application/grpc")
			p.write(p.fr.WriteData(stream, true, message(nil)))
		},
		want: "without a gRPC status",
	}, {
		name: "bad grpc-status",
		script: func(p *peer) {
			p.headers(true, ":status", "200", "grpc-status", "x")
		},
		want: `bad gRPC status "x"`,
	}, {
		name: "wrong content type",
		script: func(p *peer) {
			p.headers(false, ":status", "200", "content-type", "application/json")
			p.headers(true, "grpc-status", "0")
		},
		want: `content-type "application/json"`,
	}, {
		name: "no message",
		script: func(p *peer) {
			p.headers(true, ":status", "200", "content-type", "application/grpc", "grpc-status", "0")
		},
		want: "sent no reply message",
	}, {
		name: "compressed",
		script: func(p *peer) {
			p.headers(false, ":status", "200", "content-type", "application/grpc")
			m := message([]byte("x"))
			m[0] = 1
			p.write(p.fr.WriteData(stream, false, m))
			p.headers(true, "grpc-status", "0")
		},
		want: "compressed",
	}, {
		name: "two messages",
		script: func(p *peer) {
			p.headers(false, ":status", "200", "content-type", "application/grpc")
			p.write(p.fr.WriteData(stream, false, append(message([]byte("a")), message([]byte("b"))...)))
			p.headers(true, "grpc-status", "0")
		},
		want: "more than one",
	}, {
		name: "reset",
		script: func(p *peer) {
			p.write(p.fr.WriteRSTStream(stream, http2.ErrCodeCancel))
		},
		want: "the unit agent reset the call (CANCEL)",
	}, {
		name: "refused",
		script: func(p *peer) {
			p.write(p.fr.WriteGoAway(0, http2.ErrCodeNo, []byte("shutting down")))
		},
		want: `the unit agent refused the call: GOAWAY NO_ERROR "shutting down"`,
	}, {
		name: "closed after goaway",
		script: func(p *peer) {
			p.write(p.fr.WriteGoAway(stream, http2.ErrCodeEnhanceYourCalm, nil))
			p.headers(false, ":status", "200", "content-type", "application/grpc")
		},
		want: errClosed.Error() + `: GOAWAY ENHANCE_YOUR_CALM ""`,
	}, {
		name: "data before headers",
		script: func(p *peer) {
			p.write(p.fr.WriteData(stream, true, message(nil)))
		},
		want: "DATA before HEADERS",
	}, {
		name: "push",
		script: func(p *peer) {
			p.write(p.fr.WritePushPromise(http2.PushPromiseParam{
				StreamID: stream, PromiseID: 2, BlockFragment: p.block(":path", "/"), EndHeaders: true,
			}))
		},
		want: "PUSH_PROMISE",
	}, {
		name: "bad hpack",
		script: func(p *peer) {
			p.write(p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: []byte{0xff, 0xff}, EndHeaders: true}))
		},
		want: "bad header block",
	}, {
		name: "interrupted header block",
		script: func(p *peer) {
			p.write(p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: p.block(":status", "200")}))
			p.write(p.fr.WritePing(false, [8]byte{}))
		},
		want: "inside a header block",
	}, {
		name: "frame too large",
		script: func(p *peer) {
			_ = p.fr.WriteRawFrame(0xfe, 0, 0, make([]byte, recvMaxFrame+1)) // the client may close first
		},
		want: "exceeds the 1048576 advertised",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, err := exchange(t, message(nil), func(p *peer) {
				p.readRequest()
				tc.script(p)
			})
			if err == nil {
				_, err = r.result()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestStatusErrorKeepsTheCode(t *testing.T) {
	t.Parallel()
	r := &reply{httpStatus: "200", trailers: true, grpcStatus: "5", grpcMessage: "gone"}
	_, err := r.result()
	var se *statusError
	if !errors.As(err, &se) || se.code != 5 || se.Error() != "gone" {
		t.Errorf("got %#v", err)
	}
	if got := (&statusError{code: 99}).Error(); !strings.Contains(got, "gRPC status 99") {
		t.Errorf("got %q", got)
	}
}

func TestEmptyRequestBody(t *testing.T) {
	t.Parallel()
	var body []byte
	r, err := exchange(t, nil, func(p *peer) {
		_, body = p.readRequest()
		p.okReply([]byte("x"))
	})
	if err != nil || len(body) != 0 {
		t.Fatalf("body %q, error %v", body, err)
	}
	if got, err := r.result(); err != nil || string(got) != "x" {
		t.Errorf("result %q, %v", got, err)
	}
}
