package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/http2/hpack"
)

func TestHuffmanDecodesWhatXNetEncodes(t *testing.T) {
	t.Parallel()
	inputs := []string{"", "application/grpc", "bad request: bad context: ben", strings.Repeat("\xff\x00~", 50)}
	for c := 0; c < 256; c++ {
		inputs = append(inputs, string([]byte{byte(c)}), strings.Repeat(string([]byte{byte(c)}), 9))
	}
	inputs = append(inputs, string(randomBytes(10000)))
	for _, s := range inputs {
		got, err := huffmanDecode(hpack.AppendHuffmanString(nil, s))
		if err != nil || got != s {
			t.Errorf("%q decodes as %q, %v", trunc(s), trunc(got), err)
		}
	}
}

func TestHuffmanRejectsBadPadding(t *testing.T) {
	t.Parallel()
	for _, p := range [][]byte{
		{0x00},                   // "0" then 3 bits of zeros
		{0xff},                   // 8 bits of padding
		{0x07, 0xff},             // "0" then 11 bits of padding
		{0xff, 0xff, 0xff, 0xfc}, // EOS, which must not appear
	} {
		if got, err := huffmanDecode(p); err == nil {
			t.Errorf("%x decodes as %q", p, got)
		}
		if _, err := hpack.HuffmanDecodeToString(p); err == nil {
			t.Errorf("%x: x/net decodes it", p)
		}
	}
}

func TestStaticTableMatchesXNet(t *testing.T) {
	t.Parallel()
	for i, f := range staticTable {
		var buf bytes.Buffer
		if err := hpack.NewEncoder(&buf).WriteField(hpack.HeaderField{Name: f.name, Value: f.value}); err != nil {
			t.Fatal(err)
		}
		// x/net encodes a field of the static table with its index,
		// or for a name alone its index with a literal value.
		b := buf.Bytes()
		idx, _, err := hpackInt(b, 7)
		if b[0]&0x40 != 0 {
			idx, _, err = hpackInt(b, 6)
		}
		if err != nil || idx != uint64(i+1) {
			t.Errorf("entry %d %v: x/net encodes it as %x", i+1, f, b)
		}
	}
}

func TestHPACKDecodesGRPCHeaders(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	want := [][]hfield{
		{{":status", "200"}, {"content-type", "application/grpc"}, {"x-custom", strings.Repeat("v", 3000)}},
		{{"x-custom", strings.Repeat("v", 3000)}, {"grpc-status", "0"}, {"grpc-message", ""}},
		{{"x-custom", strings.Repeat("v", 3000)}, {"x-other", strings.Repeat("w", 2000)}, {"x-custom", strings.Repeat("v", 3000)}},
	}
	d := newHPACKDecoder()
	for i, block := range want {
		buf.Reset()
		if i == 2 {
			enc.SetMaxDynamicTableSize(1000) // emits a size update
		}
		for _, f := range block {
			if err := enc.WriteField(hpack.HeaderField{Name: f.name, Value: f.value}); err != nil {
				t.Fatal(err)
			}
		}
		got, err := d.decode(buf.Bytes())
		if err != nil || !slices.Equal(got, block) {
			t.Errorf("block %d: got %v, %v", i, got, err)
		}
	}
}

func TestHPACKCornersMatchXNet(t *testing.T) {
	t.Parallel()
	for _, b := range [][]byte{
		{0x80},                   // index 0
		{0xbe},                   // index 62, an empty dynamic table
		{0x3f, 0xe2, 0x1f},       // table size 4097
		{0x88, 0x20},             // ... after a field, with an empty table: allowed
		{0x40, 0x01, 'a'},        // value missing
		{0x40, 0x05, 'a'},        // name truncated
		{0x00, 0x81, 0x00, 0x00}, // bad Huffman padding in the name
		{0xff},                   // integer truncated
		{0xff, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}, // integer overflow
	} {
		_, err := newHPACKDecoder().decode(b)
		_, xerr := hpack.NewDecoder(hpackTableSize, nil).DecodeFull(b)
		if (err == nil) != (xerr == nil) {
			t.Errorf("%x: error %v, x/net's %v", b, err, xerr)
		}
	}
}

// FuzzHPACK checks the decoder against x/net's on a sequence of header
// blocks sharing a dynamic table: they accept the same blocks and decode
// the same fields.
func FuzzHPACK(f *testing.F) {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for _, kv := range [][2]string{{":status", "200"}, {"content-type", "application/grpc"}, {"grpc-status", "3"}, {"grpc-message", "caf%C3%A9"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	f.Add(buf.Bytes(), uint8(3))
	f.Add([]byte{0x3f, 0xe1, 0x1f, 0x40, 0x01, 'a', 0x81, 0x1f, 0xbe}, uint8(4))
	f.Fuzz(func(t *testing.T, b []byte, cut uint8) {
		d, x := newHPACKDecoder(), hpack.NewDecoder(hpackTableSize, nil)
		for len(b) > 0 {
			n := min(int(cut)+1, len(b))
			block := b[:n]
			b = b[n:]
			got, err := d.decode(block)
			want, xerr := x.DecodeFull(block)
			if (err == nil) != (xerr == nil) {
				t.Fatalf("%x: error %v, x/net's %v", block, err, xerr)
			}
			if err != nil {
				return
			}
			if len(got) != len(want) {
				t.Fatalf("%x: %v, x/net %v", block, got, want)
			}
			for i := range got {
				if got[i].name != want[i].Name || got[i].value != want[i].Value {
					t.Fatalf("%x: %v, x/net %v", block, got, want)
				}
			}
		}
	})
}
