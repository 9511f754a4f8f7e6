package main

import (
	"errors"
	"strings"
)

// A decoder of HPACK (RFC 7541), the header compression of HTTP/2, for the
// agent's response headers and trailers. golang.org/x/net/http2/hpack does
// the same, but builds its Huffman decoding tree on first use, which costs
// a tool call a tenth of a millisecond; the canonical code below decodes
// from two small constant tables and needs no set-up.

// hfield is a header field.
type hfield struct {
	name, value string
}

// hpackDecoder decodes the header blocks of one connection, in order: they
// share the dynamic table.
type hpackDecoder struct {
	dynamic []hfield // newest last
	size    int      // of the dynamic table, as RFC 7541 §4.1 counts it
	maxSize int      // the dynamic table's current maximum size
}

// hpackTableSize is the maximum size of the dynamic table: the protocol's
// default SETTINGS_HEADER_TABLE_SIZE, which the client does not change.
const hpackTableSize = 4096

var (
	errHPACKInteger  = errors.New("bad integer")
	errHPACKIndex    = errors.New("bad table index")
	errHPACKString   = errors.New("truncated string")
	errHPACKHuffman  = errors.New("bad Huffman code")
	errHPACKResize   = errors.New("bad dynamic table size update")
	errHPACKTruncate = errors.New("truncated header block")
)

// newHPACKDecoder returns a decoder for a new connection.
func newHPACKDecoder() *hpackDecoder {
	return &hpackDecoder{maxSize: hpackTableSize}
}

// decode decodes a complete header block.
func (d *hpackDecoder) decode(b []byte) ([]hfield, error) {
	var fields []hfield
	for len(b) > 0 {
		c := b[0]
		switch {
		case c&0x80 != 0: // indexed field
			i, n, err := hpackInt(b, 7)
			if err != nil {
				return nil, err
			}
			f, err := d.at(i)
			if err != nil {
				return nil, err
			}
			fields, b = append(fields, f), b[n:]
		case c&0xe0 == 0x20: // dynamic table size update
			// Only at the start of a block, though x/net's decoder
			// also takes it after fields while the table is empty,
			// and so does this one.
			if len(fields) > 0 && d.size > 0 {
				return nil, errHPACKResize
			}
			size, n, err := hpackInt(b, 5)
			if err != nil {
				return nil, err
			}
			if size > hpackTableSize {
				return nil, errHPACKResize
			}
			d.maxSize = int(size)
			d.evict(0)
			b = b[n:]
		default: // literal: with incremental indexing (01), or not (0000 and 0001)
			prefix := uint(4)
			if c&0x40 != 0 {
				prefix = 6
			}
			i, n, err := hpackInt(b, prefix)
			if err != nil {
				return nil, err
			}
			b = b[n:]
			var f hfield
			if i == 0 {
				if f.name, n, err = hpackString(b); err != nil {
					return nil, err
				}
				b = b[n:]
			} else {
				nf, err := d.at(i)
				if err != nil {
					return nil, err
				}
				f.name = nf.name
			}
			if f.value, n, err = hpackString(b); err != nil {
				return nil, err
			}
			b = b[n:]
			if prefix == 6 {
				d.add(f)
			}
			fields = append(fields, f)
		}
	}
	return fields, nil
}

// at returns the field at index i of the static table followed by the
// dynamic one.
func (d *hpackDecoder) at(i uint64) (hfield, error) {
	switch {
	case i == 0:
		return hfield{}, errHPACKIndex
	case i <= uint64(len(staticTable)):
		return staticTable[i-1], nil
	case i-uint64(len(staticTable)) <= uint64(len(d.dynamic)):
		return d.dynamic[len(d.dynamic)-int(i-uint64(len(staticTable)))], nil
	}
	return hfield{}, errHPACKIndex
}

// add adds f to the dynamic table, evicting the oldest entries to make room.
func (d *hpackDecoder) add(f hfield) {
	size := entrySize(f)
	if size > d.maxSize {
		d.dynamic, d.size = d.dynamic[:0], 0
		return
	}
	d.evict(size)
	d.dynamic = append(d.dynamic, f)
	d.size += size
}

// evict evicts the oldest entries until room bytes more fit.
func (d *hpackDecoder) evict(room int) {
	n := 0
	for n < len(d.dynamic) && d.size+room > d.maxSize {
		d.size -= entrySize(d.dynamic[n])
		n++
	}
	d.dynamic = append(d.dynamic[:0], d.dynamic[n:]...)
}

func entrySize(f hfield) int { return 32 + len(f.name) + len(f.value) }

// hpackInt decodes an integer with an n-bit prefix (RFC 7541 §5.1). Like
// golang.org/x/net/http2/hpack, it takes up to nine continuation bytes.
func hpackInt(b []byte, n uint) (uint64, int, error) {
	if len(b) == 0 {
		return 0, 0, errHPACKTruncate
	}
	limit := uint64(1)<<n - 1
	v := uint64(b[0]) & limit
	if v < limit {
		return v, 1, nil
	}
	for i, shift := 1, uint(0); i < len(b); i, shift = i+1, shift+7 {
		if shift >= 63 {
			return 0, 0, errHPACKInteger
		}
		v += uint64(b[i]&0x7f) << shift
		if b[i]&0x80 == 0 {
			return v, i + 1, nil
		}
	}
	return 0, 0, errHPACKTruncate
}

// hpackString decodes a string literal (RFC 7541 §5.2).
func hpackString(b []byte) (string, int, error) {
	if len(b) == 0 {
		return "", 0, errHPACKTruncate
	}
	huffman := b[0]&0x80 != 0
	l, n, err := hpackInt(b, 7)
	if err != nil {
		return "", 0, err
	}
	if l > uint64(len(b)-n) {
		return "", 0, errHPACKString
	}
	s := b[n : n+int(l)]
	if !huffman {
		return string(s), n + int(l), nil
	}
	v, err := huffmanDecode(s)
	return v, n + int(l), err
}

// huffmanDecode decodes HPACK's Huffman code (RFC 7541 Appendix B). The code
// is canonical: the codes of each length are consecutive numbers, in the
// order of huffmanSymbols, and the first code of a length follows the last
// of the length before, shifted left. So a code is found by reading bits
// until it falls within the range of its length.
func huffmanDecode(p []byte) (string, error) {
	var out strings.Builder
	out.Grow(len(p) * 8 / 5)
	code, length := 0, 0  // the bits read of the current code
	first, offset := 0, 0 // the first code of this length and its place in huffmanSymbols
	for _, c := range p {
		for bit := 7; bit >= 0; bit-- {
			code = code<<1 | int(c>>bit)&1
			length++
			if length > 30 {
				return "", errHPACKHuffman
			}
			count := int(huffmanCounts[length])
			if uint(code-first) < uint(count) {
				sym := huffmanSymbols[offset+code-first]
				if sym == 256 { // EOS must not appear
					return "", errHPACKHuffman
				}
				out.WriteByte(byte(sym))
				code, length, first, offset = 0, 0, 0, 0
				continue
			}
			first = (first + count) << 1
			offset += count
		}
	}
	// The padding is the most significant bits of EOS: at most 7 ones.
	if length > 7 || code != 1<<length-1 {
		return "", errHPACKHuffman
	}
	return out.String(), nil
}

// huffmanCounts is the number of codes of each length.
var huffmanCounts = [31]uint8{
	0, 0, 0, 0, 0, 10, 26, 32, 6, 0, 5, 3, 2, 6, 2, 3,
	0, 0, 0, 3, 8, 13, 26, 29, 12, 4, 15, 19, 29, 0, 4,
}

// huffmanSymbols lists the symbols by code: by length, then by code. 256
// is EOS.
var huffmanSymbols = [257]uint16{
	48, 49, 50, 97, 99, 101, 105, 111, 115, 116, 32, 37, 45, 46, 47, 51,
	52, 53, 54, 55, 56, 57, 61, 65, 95, 98, 100, 102, 103, 104, 108, 109,
	110, 112, 114, 117, 58, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76,
	77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87, 89, 106, 107, 113, 118,
	119, 120, 121, 122, 38, 42, 44, 59, 88, 90, 33, 34, 40, 41, 63, 39,
	43, 124, 35, 62, 0, 36, 64, 91, 93, 126, 94, 125, 60, 96, 123, 92,
	195, 208, 128, 130, 131, 162, 184, 194, 224, 226, 153, 161, 167, 172, 176, 177,
	179, 209, 216, 217, 227, 229, 230, 129, 132, 133, 134, 136, 146, 154, 156, 160,
	163, 164, 169, 170, 173, 178, 181, 185, 186, 187, 189, 190, 196, 198, 228, 232,
	233, 1, 135, 137, 138, 139, 140, 141, 143, 147, 149, 150, 151, 152, 155, 157,
	158, 165, 166, 168, 174, 175, 180, 182, 183, 188, 191, 197, 231, 239, 9, 142,
	144, 145, 148, 159, 171, 206, 215, 225, 236, 237, 199, 207, 234, 235, 192, 193,
	200, 201, 202, 205, 210, 213, 218, 219, 238, 240, 242, 243, 255, 203, 204, 211,
	212, 214, 221, 222, 223, 241, 244, 245, 246, 247, 248, 250, 251, 252, 253, 254,
	2, 3, 4, 5, 6, 7, 8, 11, 12, 14, 15, 16, 17, 18, 19, 20,
	21, 23, 24, 25, 26, 27, 28, 29, 30, 31, 127, 220, 249, 10, 13, 22,
	256,
}

// staticTable is the static table of RFC 7541 Appendix A; index 1 is first.
var staticTable = [...]hfield{
	{":authority", ""}, {":method", "GET"}, {":method", "POST"}, {":path", "/"},
	{":path", "/index.html"}, {":scheme", "http"}, {":scheme", "https"},
	{":status", "200"}, {":status", "204"}, {":status", "206"}, {":status", "304"},
	{":status", "400"}, {":status", "404"}, {":status", "500"}, {"accept-charset", ""},
	{"accept-encoding", "gzip, deflate"}, {"accept-language", ""}, {"accept-ranges", ""},
	{"accept", ""}, {"access-control-allow-origin", ""}, {"age", ""}, {"allow", ""},
	{"authorization", ""}, {"cache-control", ""}, {"content-disposition", ""},
	{"content-encoding", ""}, {"content-language", ""}, {"content-length", ""},
	{"content-location", ""}, {"content-range", ""}, {"content-type", ""}, {"cookie", ""},
	{"date", ""}, {"etag", ""}, {"expect", ""}, {"expires", ""}, {"from", ""}, {"host", ""},
	{"if-match", ""}, {"if-modified-since", ""}, {"if-none-match", ""}, {"if-range", ""},
	{"if-unmodified-since", ""}, {"last-modified", ""}, {"link", ""}, {"location", ""},
	{"max-forwards", ""}, {"proxy-authenticate", ""}, {"proxy-authorization", ""},
	{"range", ""}, {"referer", ""}, {"refresh", ""}, {"retry-after", ""}, {"server", ""},
	{"set-cookie", ""}, {"strict-transport-security", ""}, {"transfer-encoding", ""},
	{"user-agent", ""}, {"vary", ""}, {"via", ""}, {"www-authenticate", ""},
}
