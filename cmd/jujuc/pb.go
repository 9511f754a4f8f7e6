package main

import "errors"

// The two messages of bagkeeper.tools.v1.HookTools/Run, encoded and decoded
// by hand: the generated code would pull in the protobuf runtime, whose
// reflection and registry cost more at start-up than the whole call.

// request is a RunRequest.
type request struct {
	contextID   string   // field 1
	dir         string   // field 2
	command     string   // field 3
	args        []string // field 4
	stdinSet    bool     // field 5
	stdin       []byte   // field 6
	clientFiles bool     // field 7
	filePath    string   // field 8
	file        []byte   // field 9
	fileError   string   // field 10
}

// response is a RunResponse.
type response struct {
	code       int32  // field 1
	stdout     []byte // field 2
	stderr     []byte // field 3
	needStdin  bool   // field 4
	needFile   string // field 5
	outputPath string // field 6
	output     []byte // field 7
}

// Protobuf wire types.
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireStart   = 3 // start group
	wireEnd     = 4 // end group
	wireFixed32 = 5
)

// maxGroupDepth bounds the nesting of unknown groups that parseResponse
// skips, as the protobuf runtime does (protowire.DefaultRecursionLimit).
const maxGroupDepth = 10000

// Field numbers: a message's fields are numbered up to maxField, but the
// protobuf runtime skips fields inside unknown groups numbered up to
// maxGroupField.
const (
	maxField      = 1<<29 - 1
	maxGroupField = 1<<31 - 1
)

var (
	errTruncated  = errors.New("truncated message")
	errBadVarint  = errors.New("bad varint")
	errBadTag     = errors.New("bad field tag")
	errBadGroup   = errors.New("bad group")
	errDeepGroups = errors.New("groups nested too deep")
)

// size returns the encoded size of r, so that it can be encoded without
// growing the buffer (stdin or a file can be megabytes).
func (r *request) size() int {
	n := lenFieldSize(len(r.contextID)) + lenFieldSize(len(r.dir)) + lenFieldSize(len(r.command))
	for _, a := range r.args {
		n += 1 + varintSize(uint64(len(a))) + len(a)
	}
	if r.stdinSet {
		n += 2
	}
	n += lenFieldSize(len(r.stdin))
	if r.clientFiles {
		n += 2
	}
	return n + lenFieldSize(len(r.filePath)) + lenFieldSize(len(r.file)) + lenFieldSize(len(r.fileError))
}

// appendTo appends r in protobuf encoding to b. Like the generated code, it
// leaves out empty singular fields and keeps empty elements of args.
func (r *request) appendTo(b []byte) []byte {
	b = appendLenField(b, 1, r.contextID)
	b = appendLenField(b, 2, r.dir)
	b = appendLenField(b, 3, r.command)
	for _, a := range r.args {
		b = append(b, 4<<3|wireBytes)
		b = appendVarint(b, uint64(len(a)))
		b = append(b, a...)
	}
	if r.stdinSet {
		b = append(b, 5<<3|wireVarint, 1)
	}
	b = appendLenField(b, 6, r.stdin)
	if r.clientFiles {
		b = append(b, 7<<3|wireVarint, 1)
	}
	b = appendLenField(b, 8, r.filePath)
	b = appendLenField(b, 9, r.file)
	return appendLenField(b, 10, r.fileError)
}

// lenFieldSize is the encoded size of a non-repeated length-delimited field
// of n bytes with a field number below 16; an empty one is not encoded.
func lenFieldSize(n int) int {
	if n == 0 {
		return 0
	}
	return 1 + varintSize(uint64(n)) + n
}

// appendLenField appends a non-repeated string or bytes field (number < 16)
// unless it is empty.
func appendLenField[T string | []byte](b []byte, num byte, v T) []byte {
	if len(v) == 0 {
		return b
	}
	b = append(b, num<<3|wireBytes)
	b = appendVarint(b, uint64(len(v)))
	return append(b, v...)
}

func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func varintSize(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// parseResponse decodes a RunResponse. Unknown fields, and known fields
// with an unexpected wire type, are skipped as the protobuf runtime does;
// for repeated occurrences of a field the last one wins. The byte slices of
// the result alias b.
func parseResponse(b []byte) (response, error) {
	var r response
	for len(b) > 0 {
		num, typ, n, err := consumeTag(b, maxField)
		if err != nil {
			return response{}, err
		}
		b = b[n:]
		switch {
		case num == 1 && typ == wireVarint:
			v, n, err := consumeVarint(b)
			if err != nil {
				return response{}, err
			}
			r.code, b = int32(v), b[n:]
		case typ == wireBytes && (num == 2 || num == 3 || num == 5 || num == 6 || num == 7):
			v, n, err := consumeBytes(b)
			if err != nil {
				return response{}, err
			}
			switch num {
			case 2:
				r.stdout = v
			case 3:
				r.stderr = v
			case 5:
				r.needFile = string(v)
			case 6:
				r.outputPath = string(v)
			case 7:
				r.output = v
			}
			b = b[n:]
		case num == 4 && typ == wireVarint:
			v, n, err := consumeVarint(b)
			if err != nil {
				return response{}, err
			}
			r.needStdin, b = v != 0, b[n:]
		default:
			n, err := skipField(b, num, typ, 0)
			if err != nil {
				return response{}, err
			}
			b = b[n:]
		}
	}
	return r, nil
}

// consumeTag decodes a field tag: the field number (1 to max) and wire type.
func consumeTag(b []byte, max uint64) (num uint64, typ int, n int, err error) {
	v, n, err := consumeVarint(b)
	if err != nil {
		return 0, 0, 0, err
	}
	num, typ = v>>3, int(v&7)
	if num == 0 || num > max {
		return 0, 0, 0, errBadTag
	}
	return num, typ, n, nil
}

// consumeVarint decodes a varint of at most ten bytes.
func consumeVarint(b []byte) (uint64, int, error) {
	var v uint64
	for i := 0; i < 10; i++ {
		if i == len(b) {
			return 0, 0, errTruncated
		}
		c := b[i]
		if i == 9 && c > 1 {
			return 0, 0, errBadVarint
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, i + 1, nil
		}
	}
	return 0, 0, errBadVarint
}

// consumeBytes decodes the length and contents of a length-delimited field.
func consumeBytes(b []byte) ([]byte, int, error) {
	l, n, err := consumeVarint(b)
	if err != nil {
		return nil, 0, err
	}
	if l > uint64(len(b)-n) {
		return nil, 0, errTruncated
	}
	return b[n : n+int(l)], n + int(l), nil
}

// skipField returns the size of the value of a field whose tag has just
// been read.
func skipField(b []byte, num uint64, typ int, depth int) (int, error) {
	switch typ {
	case wireVarint:
		_, n, err := consumeVarint(b)
		return n, err
	case wireFixed64:
		if len(b) < 8 {
			return 0, errTruncated
		}
		return 8, nil
	case wireFixed32:
		if len(b) < 4 {
			return 0, errTruncated
		}
		return 4, nil
	case wireBytes:
		_, n, err := consumeBytes(b)
		return n, err
	case wireStart:
		if depth > maxGroupDepth {
			return 0, errDeepGroups
		}
		total := 0
		for {
			inner, ityp, n, err := consumeTag(b[total:], maxGroupField)
			if err != nil {
				return 0, err
			}
			total += n
			if ityp == wireEnd {
				if inner != num {
					return 0, errBadGroup
				}
				return total, nil
			}
			n, err = skipField(b[total:], inner, ityp, depth+1)
			if err != nil {
				return 0, err
			}
			total += n
		}
	default: // an end group without a start, or wire types 6 and 7
		return 0, errBadTag
	}
}
