package main

import (
	"errors"
	"io"
	"strconv"
	"strings"
)

// gRPC over HTTP/2, as described in grpc/grpc's doc/PROTOCOL-HTTP2.md, for
// one unary call without compression.

// runPath is the :path of HookTools/Run.
const runPath = "/bagkeeper.tools.v1.HookTools/Run"

// requestHeaders is the HPACK header block of a call to path: literal
// fields without indexing and without Huffman coding, with the static
// table's names where it has them, so that the block needs no encoder.
func requestHeaders(path string) []byte {
	b := make([]byte, 0, 128)
	b = append(b, 0x80|3, 0x80|6) // :method POST, :scheme http (static 3 and 6)
	b = appendLiteral(b, 4, "", path)
	b = appendLiteral(b, 1, "", "localhost")         // :authority
	b = appendLiteral(b, 31, "", "application/grpc") // content-type
	b = appendLiteral(b, 0, "te", "trailers")        // te
	b = appendLiteral(b, 58, "", "bagkeeper-jujuc")  // user-agent
	return b
}

// appendLiteral appends a "literal header field without indexing" (RFC 7541
// §6.2.2) whose name is static table entry index, or name when index is 0.
func appendLiteral(b []byte, index int, name, value string) []byte {
	b = appendHPACKInt(b, 0, 4, index)
	if index == 0 {
		b = appendHPACKString(b, name)
	}
	return appendHPACKString(b, value)
}

// appendHPACKString appends a string literal without Huffman coding.
func appendHPACKString(b []byte, s string) []byte {
	b = appendHPACKInt(b, 0, 7, len(s))
	return append(b, s...)
}

// appendHPACKInt appends v as an integer with an n-bit prefix (RFC 7541
// §5.1); first holds the bits above the prefix.
func appendHPACKInt(b []byte, first byte, n uint, v int) []byte {
	limit := 1<<n - 1
	if v < limit {
		return append(b, first|byte(v))
	}
	b = append(b, first|byte(limit))
	for v -= limit; v >= 0x80; v >>= 7 {
		b = append(b, byte(v)|0x80)
	}
	return append(b, byte(v))
}

// newMessage returns a buffer for a length-prefixed message of size bytes,
// with the 5-byte prefix already in place: the message is appended to it.
func newMessage(size int) []byte {
	b := make([]byte, 5, 5+size)
	b[1], b[2], b[3], b[4] = byte(size>>24), byte(size>>16), byte(size>>8), byte(size)
	return b
}

// statusError is a call that ended with a gRPC status other than OK. Its
// message is the status message, which the agent writes for users to read.
type statusError struct {
	code int
	msg  string
}

func (e *statusError) Error() string {
	if e.msg != "" {
		return e.msg
	}
	return "the unit agent failed the call with gRPC status " + codeName(e.code)
}

// result returns the reply message of a completed unary call, or the error
// the call ended with.
func (r *reply) result() ([]byte, error) {
	if r.httpStatus != "200" && !r.trailers {
		return nil, errors.New("the unit agent replied with HTTP status " + r.httpStatus)
	}
	if !r.trailers {
		return nil, errors.New("the unit agent ended the call without a gRPC status")
	}
	code, err := strconv.Atoi(r.grpcStatus)
	if err != nil {
		return nil, errors.New("the unit agent replied with a bad gRPC status " + strconv.Quote(r.grpcStatus))
	}
	if code != 0 {
		return nil, &statusError{code: code, msg: percentDecode(r.grpcMessage)}
	}
	if !strings.HasPrefix(r.contentType, "application/grpc") {
		return nil, errors.New("the unit agent replied with content-type " + strconv.Quote(r.contentType))
	}
	b := r.body
	if len(b) < 5 {
		return nil, errors.New("the unit agent sent no reply message")
	}
	if b[0] != 0 {
		return nil, errors.New("the unit agent sent a compressed reply, which is not supported")
	}
	n := uint64(be32(b[1:5]))
	if n != uint64(len(b)-5) {
		return nil, errors.New("the unit agent sent a truncated reply message, or more than one")
	}
	return b[5:], nil
}

// percentDecode decodes a grpc-message value: bytes outside printable
// ASCII, and '%', are sent as %XX. A '%' not followed by two hex digits
// stands for itself.
func percentDecode(s string) string {
	if strings.IndexByte(s, '%') < 0 {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			hi, ok1 := unhex(s[i+1])
			lo, ok2 := unhex(s[i+2])
			if ok1 && ok2 {
				b = append(b, hi<<4|lo)
				i += 2
				continue
			}
		}
		b = append(b, s[i])
	}
	return string(b)
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// codeName names a gRPC status code.
func codeName(code int) string {
	names := [...]string{"OK", "Canceled", "Unknown", "InvalidArgument", "DeadlineExceeded",
		"NotFound", "AlreadyExists", "PermissionDenied", "ResourceExhausted",
		"FailedPrecondition", "Aborted", "OutOfRange", "Unimplemented", "Internal",
		"Unavailable", "DataLoss", "Unauthenticated"}
	if code >= 0 && code < len(names) {
		return names[code]
	}
	return strconv.Itoa(code)
}

// invoke makes one Run call over rw.
func invoke(rw io.ReadWriter, req *request) (response, error) {
	msg := req.appendTo(newMessage(req.size()))
	r, err := roundTrip(rw, requestHeaders(runPath), msg)
	if err != nil {
		return response{}, err
	}
	b, err := r.result()
	if err != nil {
		return response{}, err
	}
	resp, err := parseResponse(b)
	if err != nil {
		return response{}, errors.New("bad reply from the unit agent: " + err.Error())
	}
	return resp, nil
}
