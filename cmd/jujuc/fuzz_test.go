package main

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bagkeeper/bagkeeper/agent/toolpb"
)

// FuzzReadResponse feeds arbitrary bytes to the client as the agent's side
// of the connection: the frame, HPACK, gRPC and protobuf decoding must
// neither panic nor hang, whatever the agent sends.
func FuzzReadResponse(f *testing.F) {
	for _, seed := range recordedReplies(f) {
		f.Add(seed)
	}
	for _, seed := range craftedReplies(f) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, server []byte) {
		rw := struct {
			io.Reader
			io.Writer
		}{bytes.NewReader(server), io.Discard}
		resp, err := invoke(rw, &request{contextID: "c", dir: "/", command: "relation-get", args: []string{"-"}})
		if err == nil && len(resp.stdout)+len(resp.stderr) > len(server) {
			t.Fatal("decoded more output than was received")
		}
	})
}

// recordedReplies returns what a grpc-go server sends a client for a few
// calls: real framing, with HPACK's Huffman coding and dynamic table.
func recordedReplies(tb testing.TB) [][]byte {
	responses := []func(*toolpb.RunRequest) (*toolpb.RunResponse, error){
		answer(&toolpb.RunResponse{Stdout: []byte("foo: bar\n")}),
		answer(&toolpb.RunResponse{Code: 2, Stderr: []byte("ERROR unrecognized args\n")}),
		answer(&toolpb.RunResponse{Stdout: randomBytes(40 << 10)}),
		func(*toolpb.RunRequest) (*toolpb.RunResponse, error) {
			return nil, status.Error(codes.PermissionDenied, "bad request: bad context: ben 100%")
		},
	}
	var seeds [][]byte
	for _, run := range responses {
		a := startAgent(tb, run)
		addr, recorded := recorder(tb, a.addr)
		runTool(tb, hookEnv(addr), nil, "relation-get")
		seeds = append(seeds, recorded())
	}
	return seeds
}

// recorder forwards one connection from a new socket to target and returns
// the socket's address and a function returning what target sent so far.
func recorder(tb testing.TB, target string) (string, func() []byte) {
	ln := listen(tb)
	var mu sync.Mutex
	var got bytes.Buffer
	var wg sync.WaitGroup
	tb.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		s, err := net.Dial("unix", target)
		if err != nil {
			return
		}
		defer s.Close()
		go func() {
			_, _ = io.Copy(s, c)
			s.Close()
		}()
		buf := make([]byte, 32<<10)
		for {
			n, err := s.Read(buf)
			mu.Lock()
			got.Write(buf[:n])
			mu.Unlock()
			if _, werr := c.Write(buf[:n]); err != nil || werr != nil {
				return
			}
		}
	}()
	return ln.Addr().String(), func() []byte {
		mu.Lock()
		defer mu.Unlock()
		return bytes.Clone(got.Bytes())
	}
}

// craftedReplies returns server byte streams built frame by frame, for
// corners a grpc-go server does not show.
func craftedReplies(tb testing.TB) [][]byte {
	var out bytes.Buffer
	fr := http2.NewFramer(&out, nil)
	var hbuf bytes.Buffer
	enc := hpack.NewEncoder(&hbuf)
	block := func(pairs ...string) []byte {
		hbuf.Reset()
		for i := 0; i < len(pairs); i += 2 {
			_ = enc.WriteField(hpack.HeaderField{Name: pairs[i], Value: pairs[i+1]})
		}
		return bytes.Clone(hbuf.Bytes())
	}
	var seeds [][]byte
	take := func() {
		seeds = append(seeds, bytes.Clone(out.Bytes()))
		out.Reset()
	}
	msg := message([]byte{0x08, 0x02, 0x12, 0x02, 'o', 'k', 0x20, 0x01})

	_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 10}, http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 14})
	_ = fr.WriteSettingsAck()
	_ = fr.WritePing(false, [8]byte{1})
	_ = fr.WriteWindowUpdate(0, 100)
	_ = fr.WriteWindowUpdate(stream, 100)
	blk := block(":status", "200", "content-type", "application/grpc")
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: blk[:2], PadLength: 3, Priority: http2.PriorityParam{Weight: 3}})
	_ = fr.WriteContinuation(stream, true, blk[2:])
	_ = fr.WriteDataPadded(stream, false, msg[:4], []byte{0, 0})
	_ = fr.WriteData(stream, false, msg[4:])
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: block("grpc-status", "0"), EndStream: true, EndHeaders: true})
	take()

	_ = fr.WriteSettings()
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, EndStream: true, EndHeaders: true,
		BlockFragment: block(":status", "200", "grpc-status", "3", "grpc-message", "caf%C3%A9")})
	take()

	_ = fr.WriteGoAway(stream, http2.ErrCodeNo, []byte("bye"))
	_ = fr.WriteRSTStream(stream, http2.ErrCodeInternal)
	take()
	return seeds
}
