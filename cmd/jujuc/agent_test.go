package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"

	"github.com/bagkeeper/bagkeeper/agent/toolpb"
)

// fakeAgent is a real grpc-go HookTools server on a Unix socket, whose Run
// is the test's function. It records the requests it receives.
type fakeAgent struct {
	toolpb.UnimplementedHookToolsServer
	addr string
	run  func(*toolpb.RunRequest) (*toolpb.RunResponse, error)

	mu   sync.Mutex
	reqs []*toolpb.RunRequest
}

func (a *fakeAgent) Run(_ context.Context, req *toolpb.RunRequest) (*toolpb.RunResponse, error) {
	a.mu.Lock()
	a.reqs = append(a.reqs, req)
	a.mu.Unlock()
	return a.run(req)
}

// requests returns the requests received so far.
func (a *fakeAgent) requests() []*toolpb.RunRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]*toolpb.RunRequest(nil), a.reqs...)
}

// socketPath returns a path for a Unix socket in a new directory removed
// when the test ends. Unix socket paths are limited to 108 bytes, which
// t.TempDir's long names can exceed, hence the short name.
func socketPath(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "jc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "s")
}

// listen listens on a new Unix socket.
func listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("unix", socketPath(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// startAgent serves a fakeAgent whose Run is run; a nil run registers no
// service at all.
func startAgent(t testing.TB, run func(*toolpb.RunRequest) (*toolpb.RunResponse, error)) *fakeAgent {
	t.Helper()
	return serveAgent(t, listen(t), run)
}

// serveAgent is startAgent on ln, with the server's options opts, if any.
func serveAgent(t testing.TB, ln net.Listener, run func(*toolpb.RunRequest) (*toolpb.RunResponse, error), opts ...grpc.ServerOption) *fakeAgent {
	t.Helper()
	a := &fakeAgent{addr: ln.Addr().String(), run: run}
	if opts == nil {
		// The agent must accept the largest bags: 16 MiB of keys and values.
		opts = []grpc.ServerOption{grpc.MaxRecvMsgSize(64 << 20)}
	}
	srv := grpc.NewServer(opts...)
	if run != nil {
		toolpb.RegisterHookToolsServer(srv, a)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return a
}

// answer returns a Run function that always answers resp.
func answer(resp *toolpb.RunResponse) func(*toolpb.RunRequest) (*toolpb.RunResponse, error) {
	return func(*toolpb.RunRequest) (*toolpb.RunResponse, error) { return resp, nil }
}

// result is what a tool run printed and its exit code.
type result struct {
	code           int
	stdout, stderr string
}

// runTool runs the client in this process as argv[0] with args, with env
// as its whole environment.
func runTool(t testing.TB, env map[string]string, stdin io.Reader, argv ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if stdin == nil {
		stdin = failReader{t}
	}
	c := &client{
		getenv:  func(k string) string { return env[k] },
		stdin:   stdin,
		stdout:  &stdout,
		stderr:  &stderr,
		timeout: waitTimeout,
	}
	code := c.main(argv)
	return result{code, stdout.String(), stderr.String()}
}

// hookEnv is the environment of a hook whose agent listens at addr.
func hookEnv(addr string) map[string]string {
	return map[string]string{
		"JUJU_CONTEXT_ID":           "unit-0-hook-1",
		"JUJU_AGENT_SOCKET_ADDRESS": addr,
		"JUJU_AGENT_SOCKET_NETWORK": "unix",
	}
}

// failReader fails the test when read: stdin must be read only when the
// agent asks for it.
type failReader struct{ t testing.TB }

func (r failReader) Read([]byte) (int, error) {
	r.t.Error("stdin was read although the agent did not ask for it")
	return 0, io.EOF
}

// proxy forwards connections from a new socket to the agent at target,
// passing at most limit bytes of the agent's side to the client before it
// closes both connections. It stops when the test ends.
func proxy(t testing.TB, target string, limit int64) string {
	t.Helper()
	ln := listen(t)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("unix", target)
			if err != nil {
				c.Close()
				continue
			}
			wg.Add(2)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(s, c)
				s.Close()
			}()
			go func() {
				defer wg.Done()
				_, _ = io.Copy(c, io.LimitReader(s, limit))
				c.Close()
				s.Close()
			}()
		}
	}()
	return ln.Addr().String()
}

// wantResult fails the test unless got is want.
func wantResult(t testing.TB, got, want result) {
	t.Helper()
	if got != want {
		t.Errorf("got exit %d stdout %q stderr %q\nwant exit %d stdout %q stderr %q",
			got.code, trunc(got.stdout), trunc(got.stderr), want.code, trunc(want.stdout), trunc(want.stderr))
	}
}

func trunc(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// wantError fails the test unless the run failed as the client fails, with
// a message containing substr.
func wantError(t testing.TB, got result, substr string) {
	t.Helper()
	if got.code != 1 || got.stdout != "" || !strings.HasPrefix(got.stderr, "ERROR ") ||
		!strings.HasSuffix(got.stderr, "\n") || !strings.Contains(got.stderr, substr) {
		t.Errorf("got exit %d stdout %q stderr %q, want exit 1 and ERROR ...%s...", got.code, got.stdout, got.stderr, substr)
	}
}
