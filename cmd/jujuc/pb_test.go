package main

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/bagkeeper/bagkeeper/agent/toolpb"
)

func TestRequestEncodingMatchesGeneratedCode(t *testing.T) {
	t.Parallel()
	for _, r := range []request{
		{},
		{contextID: "ctx", dir: "/d", command: "relation-get", args: []string{"", "-", "é", strings.Repeat("a", 300)}},
		{command: "relation-set", stdinSet: true},
		{command: "relation-set", stdinSet: true, stdin: randomBytes(70000)},
		{command: "relation-set", clientFiles: true},
		{command: "relation-set", clientFiles: true, filePath: "/charm/s\xff", file: randomBytes(70000)},
		{command: "state-set", clientFiles: true, filePath: "/x", fileError: "open /x: no such file or directory"},
		{contextID: "c", command: "relation-set", stdinSet: true, stdin: []byte("s"), clientFiles: true, filePath: "/f", file: []byte("{}"), fileError: "e"},
	} {
		got := r.appendTo(nil)
		if len(got) != r.size() {
			t.Errorf("%+v: size() is %d, encoding has %d bytes", r, r.size(), len(got))
		}
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(&toolpb.RunRequest{
			ContextId: r.contextID, Dir: r.dir, Command: r.command, Args: r.args,
			StdinSet: r.stdinSet, Stdin: r.stdin, ClientFiles: r.clientFiles,
			FilePath: []byte(r.filePath), File: r.file, FileError: []byte(r.fileError),
		})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%+v encodes as\n%x\nwant\n%x", r, trunc(string(got)), trunc(string(want)))
		}
	}
}

func TestResponseDecoding(t *testing.T) {
	t.Parallel()
	for _, want := range []*toolpb.RunResponse{
		{},
		{Code: 2, Stdout: []byte("out"), Stderr: []byte("err"), NeedStdin: true},
		{Code: -1},
		{Code: math.MinInt32, Stdout: randomBytes(1 << 17)},
		{Code: math.MaxInt32},
		{NeedFile: []byte("/charm/settings.yaml")},
		{Code: 1, Stderr: []byte("--format flag deprecated"), OutputPath: []byte("/charm/o\xff"), Output: randomBytes(1 << 17)},
		{OutputPath: []byte("/charm/empty")},
	} {
		b, err := proto.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		got, err := parseResponse(b)
		if err != nil {
			t.Fatalf("%v: %v", want, err)
		}
		if !sameResponse(got, want) {
			t.Errorf("decoded %+v, want %v", got, want)
		}
	}
}

func TestResponseDecodingSkipsUnknownFields(t *testing.T) {
	t.Parallel()
	var b []byte
	b = protowire.AppendTag(b, 9, protowire.VarintType)
	b = protowire.AppendVarint(b, 1<<63)
	b = protowire.AppendTag(b, 10, protowire.Fixed32Type)
	b = protowire.AppendFixed32(b, 7)
	b = protowire.AppendTag(b, 11, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, 7)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendBytes(b, []byte("first"))
	b = protowire.AppendTag(b, 12, protowire.StartGroupType)
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, []byte("inner"))
	b = protowire.AppendTag(b, 12, protowire.EndGroupType)
	b = protowire.AppendTag(b, 1, protowire.BytesType) // code with the wrong wire type
	b = protowire.AppendBytes(b, []byte("x"))
	b = protowire.AppendTag(b, 1<<29-1, protowire.BytesType)
	b = protowire.AppendBytes(b, []byte("last field number"))
	b = protowire.AppendTag(b, 2, protowire.BytesType) // the last one wins
	b = protowire.AppendBytes(b, []byte("second"))
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, 3)

	got, err := parseResponse(b)
	if err != nil || got.code != 3 || string(got.stdout) != "second" {
		t.Errorf("decoded %+v, %v", got, err)
	}
	var want toolpb.RunResponse
	if err := proto.Unmarshal(b, &want); err != nil || want.Code != 3 || string(want.Stdout) != "second" {
		t.Errorf("the generated code decodes %v, %v", &want, err)
	}
}

func TestResponseDecodingErrors(t *testing.T) {
	t.Parallel()
	for _, b := range [][]byte{
		{0x08},                   // varint missing
		{0x12, 0x05, 'a'},        // bytes truncated
		{0x00},                   // field number 0
		{0x0e},                   // wire type 6
		{0x0c},                   // end group without start
		{0x63, 0x6c},             // group 12 closed as 13
		{0x63},                   // group not closed
		{0x15, 0, 0},             // fixed32 truncated
		{0x19, 0, 0, 0, 0, 0, 0}, // fixed64 truncated
		{0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}, // varint overflow
		append(bytes.Repeat([]byte{0x63}, maxGroupDepth+2), bytes.Repeat([]byte{0x64}, maxGroupDepth+2)...),
	} {
		if r, err := parseResponse(b); err == nil {
			t.Errorf("%x decodes as %+v", b, r)
		}
		if err := proto.Unmarshal(b, new(toolpb.RunResponse)); err == nil {
			t.Errorf("%x: the generated code accepts it", b)
		}
	}
}

// FuzzParseResponse checks the decoder against the generated code: what
// one accepts the other does, with the same values.
func FuzzParseResponse(f *testing.F) {
	for _, m := range []*toolpb.RunResponse{
		{}, {Code: -2, Stdout: []byte("o"), Stderr: []byte("e"), NeedStdin: true},
		{NeedFile: []byte("/f"), OutputPath: []byte("/o"), Output: []byte("out")},
	} {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	f.Add([]byte{0x63, 0x0a, 0x00, 0x64})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := parseResponse(b)
		var want toolpb.RunResponse
		werr := proto.Unmarshal(b, &want)
		if (err == nil) != (werr == nil) {
			t.Fatalf("%x: parseResponse error %v, generated code error %v", b, err, werr)
		}
		if err == nil && !sameResponse(got, &want) {
			t.Fatalf("%x: decoded %+v, the generated code %v", b, got, &want)
		}
	})
}

func TestGroupDepthLimitMatchesGeneratedCode(t *testing.T) {
	t.Parallel()
	for depth := maxGroupDepth - 1; depth <= maxGroupDepth+3; depth++ {
		b := append(bytes.Repeat([]byte{0x63}, depth), bytes.Repeat([]byte{0x64}, depth)...)
		_, err := parseResponse(b)
		werr := proto.Unmarshal(b, new(toolpb.RunResponse))
		if (err == nil) != (werr == nil) {
			t.Errorf("%d nested groups: parseResponse error %v, generated code error %v", depth, err, werr)
		}
	}
}

// sameResponse reports whether the hand decoder's r has the values of the
// generated code's m.
func sameResponse(r response, m *toolpb.RunResponse) bool {
	return r.code == m.Code && bytes.Equal(r.stdout, m.Stdout) && bytes.Equal(r.stderr, m.Stderr) &&
		r.needStdin == m.NeedStdin && r.needFile == string(m.NeedFile) &&
		r.outputPath == string(m.OutputPath) && bytes.Equal(r.output, m.Output)
}
