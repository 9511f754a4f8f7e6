package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/bagkeeper/bagkeeper/agent/hooktools"
	"github.com/bagkeeper/bagkeeper/agent/toolpb"
)

func TestToolSendsItsCallAndPrintsTheReply(t *testing.T) {
	t.Parallel()
	a := startAgent(t, answer(&toolpb.RunResponse{
		Code: 2, Stdout: []byte("partial\x00out"), Stderr: []byte("ERROR unrecognized args: [\"x\"]\n"),
	}))
	got := runTool(t, hookEnv(a.addr), nil, "/var/lib/juju/tools/relation-get", "-r", "db:1", "", "-", "--app", "é")
	wantResult(t, got, result{2, "partial\x00out", "ERROR unrecognized args: [\"x\"]\n"})

	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	want := &toolpb.RunRequest{
		ContextId: "unit-0-hook-1", Dir: wd, Command: "relation-get",
		Args: []string{"-r", "db:1", "", "-", "--app", "é"}, ClientFiles: true,
	}
	reqs := a.requests()
	if len(reqs) != 1 || !proto.Equal(reqs[0], want) {
		t.Errorf("agent received %v, want [%v]", reqs, want)
	}
}

func TestToolPassesExitCodesThrough(t *testing.T) {
	t.Parallel()
	for _, code := range []int32{0, 1, 2, 3, 127} {
		a := startAgent(t, answer(&toolpb.RunResponse{Code: code, Stdout: []byte("out\n")}))
		got := runTool(t, hookEnv(a.addr), nil, "is-leader")
		wantResult(t, got, result{int(code), "out\n", ""})
	}
}

func TestToolWithEmptyReplyPrintsNothing(t *testing.T) {
	t.Parallel()
	a := startAgent(t, answer(&toolpb.RunResponse{}))
	wantResult(t, runTool(t, hookEnv(a.addr), nil, "relation-set", "k="), result{})
}

func TestStdinIsSentOnlyWhenTheAgentAsks(t *testing.T) {
	t.Parallel()
	a := startAgent(t, func(req *toolpb.RunRequest) (*toolpb.RunResponse, error) {
		if !req.StdinSet {
			return &toolpb.RunResponse{NeedStdin: true}, nil
		}
		return &toolpb.RunResponse{Stdout: req.Stdin}, nil
	})
	got := runTool(t, hookEnv(a.addr), strings.NewReader("some standard input"), "relation-set", "--file", "-")
	wantResult(t, got, result{0, "some standard input", ""})

	reqs := a.requests()
	if len(reqs) != 2 || reqs[0].StdinSet || len(reqs[0].Stdin) != 0 || !reqs[1].StdinSet {
		t.Fatalf("agent received %v, want a call without stdin then one with it", reqs)
	}
	if !slices.Equal(reqs[0].Args, reqs[1].Args) || reqs[0].Command != reqs[1].Command {
		t.Errorf("the second call differs from the first: %v", reqs)
	}
}

func TestEmptyStdinIsSentAsSet(t *testing.T) {
	t.Parallel()
	a := startAgent(t, func(req *toolpb.RunRequest) (*toolpb.RunResponse, error) {
		return &toolpb.RunResponse{NeedStdin: !req.StdinSet}, nil
	})
	wantResult(t, runTool(t, hookEnv(a.addr), strings.NewReader(""), "state-set", "--file", "-"), result{})
	if n := len(a.requests()); n != 2 {
		t.Errorf("agent received %d calls, want 2", n)
	}
}

func TestAgentAskingForStdinTwiceIsAnError(t *testing.T) {
	t.Parallel()
	a := startAgent(t, answer(&toolpb.RunResponse{NeedStdin: true}))
	wantError(t, runTool(t, hookEnv(a.addr), strings.NewReader("x"), "relation-set"), "asked again for stdin")
}

// randomBytes returns n bytes that no layer could compress.
func randomBytes(n int) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{1})
	r.Read(b)
	return b
}

func TestLargeStdin(t *testing.T) {
	t.Parallel()
	in := randomBytes(16 << 20)
	a := startAgent(t, func(req *toolpb.RunRequest) (*toolpb.RunResponse, error) {
		if !req.StdinSet {
			return &toolpb.RunResponse{NeedStdin: true}, nil
		}
		if !bytes.Equal(req.Stdin, in) {
			return &toolpb.RunResponse{Code: 1, Stderr: []byte("stdin differs\n")}, nil
		}
		return &toolpb.RunResponse{Stdout: []byte("ok\n")}, nil
	})
	wantResult(t, runTool(t, hookEnv(a.addr), bytes.NewReader(in), "relation-set", "--file", "-"), result{0, "ok\n", ""})
}

func TestAgentRejectingALargeRequestIsAnError(t *testing.T) {
	t.Parallel()
	// grpc-go's default limit, 4 MiB, answered before the request is all sent.
	a := serveAgent(t, listen(t), func(req *toolpb.RunRequest) (*toolpb.RunResponse, error) {
		return &toolpb.RunResponse{NeedStdin: !req.StdinSet}, nil
	}, grpc.MaxRecvMsgSize(4<<20))
	got := runTool(t, hookEnv(a.addr), bytes.NewReader(randomBytes(16<<20)), "relation-set", "--file", "-")
	wantError(t, got, "grpc: received message larger than max")
}

func TestLargeReply(t *testing.T) {
	t.Parallel()
	out, errOut := randomBytes(16<<20), randomBytes(100<<10)
	a := startAgent(t, answer(&toolpb.RunResponse{Stdout: out, Stderr: errOut}))
	got := runTool(t, hookEnv(a.addr), nil, "relation-get", "-")
	if got.code != 0 || got.stdout != string(out) || got.stderr != string(errOut) {
		t.Errorf("got exit %d, %d bytes of stdout and %d of stderr; want 0, %d and %d, as sent",
			got.code, len(got.stdout), len(got.stderr), len(out), len(errOut))
	}
}

func TestAgentErrorsArePrintedAsJujuDoes(t *testing.T) {
	t.Parallel()
	for _, msg := range []string{
		"bad request: bad context: ben",
		"bad request: Dir is not absolute",
		`bad request: unknown command "witchcraft"`,
		"100% not ascii: ünïcödé\ttab\nnewline",
	} {
		a := startAgent(t, func(*toolpb.RunRequest) (*toolpb.RunResponse, error) {
			return nil, status.Error(codes.InvalidArgument, msg)
		})
		wantResult(t, runTool(t, hookEnv(a.addr), nil, "relation-get"), result{1, "", "ERROR " + msg + "\n"})
	}
}

func TestAgentWithoutTheServiceIsAnError(t *testing.T) {
	t.Parallel()
	a := startAgent(t, nil)
	wantError(t, runTool(t, hookEnv(a.addr), nil, "relation-get"), "unknown service bagkeeper.tools.v1.HookTools")
}

func TestAgentErrorWithoutMessageNamesTheCode(t *testing.T) {
	t.Parallel()
	a := startAgent(t, func(*toolpb.RunRequest) (*toolpb.RunResponse, error) {
		return nil, status.Error(codes.Unavailable, "")
	})
	wantError(t, runTool(t, hookEnv(a.addr), nil, "relation-get"), "gRPC status Unavailable")
}

func TestEnvironmentErrors(t *testing.T) {
	t.Parallel()
	a := startAgent(t, answer(&toolpb.RunResponse{}))
	for _, tc := range []struct {
		name  string
		unset string
		set   map[string]string
		want  string
	}{
		{name: "no context", unset: "JUJU_CONTEXT_ID", want: "ERROR JUJU_CONTEXT_ID not set\n"},
		{name: "no socket", unset: "JUJU_AGENT_SOCKET_ADDRESS", want: "ERROR JUJU_AGENT_SOCKET_ADDRESS not set\n"},
		{
			name: "tcp", set: map[string]string{"JUJU_AGENT_SOCKET_NETWORK": "tcp"},
			want: "ERROR JUJU_AGENT_SOCKET_NETWORK is tcp; only unix is supported\n",
		},
		{
			name: "no context wins", unset: "JUJU_CONTEXT_ID", set: map[string]string{"JUJU_AGENT_SOCKET_ADDRESS": ""},
			want: "ERROR JUJU_CONTEXT_ID not set\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := hookEnv(a.addr)
			delete(env, tc.unset)
			for k, v := range tc.set {
				env[k] = v
			}
			wantResult(t, runTool(t, env, nil, "relation-get"), result{1, "", tc.want})
		})
	}
	if n := len(a.requests()); n != 0 {
		t.Errorf("the agent was called %d times", n)
	}
}

func TestNetworkMayBeUnset(t *testing.T) {
	t.Parallel()
	a := startAgent(t, answer(&toolpb.RunResponse{Stdout: []byte("True\n")}))
	env := hookEnv(a.addr)
	delete(env, "JUJU_AGENT_SOCKET_NETWORK")
	wantResult(t, runTool(t, env, nil, "is-leader"), result{0, "True\n", ""})
}

func TestAbstractSocket(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("abstract Unix sockets are Linux's")
	}
	ln, err := net.Listen("unix", "@"+filepath.Base(socketPath(t))+"-abstract")
	if err != nil {
		t.Fatal(err)
	}
	a := serveAgent(t, ln, answer(&toolpb.RunResponse{Stdout: []byte("ok\n")}))
	wantResult(t, runTool(t, hookEnv(a.addr), nil, "relation-get"), result{0, "ok\n", ""})
}

func TestMissingSocketIsAClearError(t *testing.T) {
	t.Parallel()
	addr := socketPath(t)
	wantResult(t, runTool(t, hookEnv(addr), nil, "relation-get"),
		result{1, "", "ERROR cannot reach the unit agent at " + addr + ": no such file or directory\n"})
}

func TestSocketNobodyListensOnIsAClearError(t *testing.T) {
	t.Parallel()
	// A socket bound to the path but never listening: connecting to it is
	// refused. (A listener closed at once would not do: a parallel test
	// that forks a process keeps a copy of every descriptor until the
	// child execs, so for that moment the socket would still listen.)
	addr := socketPath(t)
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	err = syscall.Bind(fd, &syscall.SockaddrUnix{Name: addr})
	syscall.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	wantResult(t, runTool(t, hookEnv(addr), nil, "relation-get"),
		result{1, "", "ERROR cannot reach the unit agent at " + addr + ": connection refused\n"})
}

func TestAgentClosingMidReplyIsAnError(t *testing.T) {
	t.Parallel()
	a := startAgent(t, answer(&toolpb.RunResponse{Stdout: randomBytes(1 << 20)}))
	for _, limit := range []int64{0, 9, 100, 64 << 10} {
		addr := proxy(t, a.addr, limit)
		wantError(t, runTool(t, hookEnv(addr), nil, "relation-get"), errClosed.Error())
	}
}

func TestAgentThatNeverAnswersTimesOut(t *testing.T) {
	t.Parallel()
	ln := listen(t)
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c // held open, never answered
		}
		close(accepted)
	}()
	env := hookEnv(ln.Addr().String())
	c := &client{
		getenv: func(k string) string { return env[k] }, stdin: failReader{t},
		stdout: new(bytes.Buffer), stderr: new(bytes.Buffer), timeout: 100 * time.Millisecond,
	}
	code := c.main([]string{"relation-get"})
	stderr := c.stderr.(*bytes.Buffer).String()
	if code != 1 || stderr != "ERROR cannot read the reply of the unit agent: the unit agent did not answer in time\n" {
		t.Errorf("got exit %d stderr %q", code, stderr)
	}
	if conn, ok := <-accepted; ok {
		conn.Close()
	}
}

func TestUsage(t *testing.T) {
	t.Parallel()
	got := runTool(t, nil, nil, "/usr/bin/jujuc")
	if got.code != 2 || got.stdout != "" || !strings.Contains(got.stderr, "bagkeeper install-tools DIR") {
		t.Errorf("jujuc alone: got exit %d stdout %q stderr %q, want exit 2 and the usage on stderr", got.code, got.stdout, got.stderr)
	}
	got = runTool(t, nil, nil, "jujuc", "--help")
	if got.code != 0 || got.stderr != "" || !strings.Contains(got.stdout, "\n    relation-get\n") {
		t.Errorf("jujuc --help: got exit %d stdout %q stderr %q, want exit 0 and the usage on stdout", got.code, got.stdout, got.stderr)
	}
	wantError(t, runTool(t, nil, nil, "jujuc", "--bogus"), "unknown option --bogus")
}

func TestJujucToolForm(t *testing.T) {
	t.Parallel()
	a := startAgent(t, answer(&toolpb.RunResponse{Stdout: []byte("db:1\n")}))
	wantResult(t, runTool(t, hookEnv(a.addr), nil, "jujuc", "relation-ids", "db"), result{0, "db:1\n", ""})
	if reqs := a.requests(); len(reqs) != 1 || reqs[0].Command != "relation-ids" || !slices.Equal(reqs[0].Args, []string{"db"}) {
		t.Errorf("agent received %v", reqs)
	}
}

func TestUsageListsEveryTool(t *testing.T) {
	t.Parallel()
	if names := hooktools.Names(); !slices.Equal(tools, names) {
		t.Errorf("usage lists %v, the agent serves %v", tools, names)
	}
}

func TestIOErrorsDescribeTimeouts(t *testing.T) {
	t.Parallel()
	for err, want := range map[error]string{
		syscall.EAGAIN:              "reading: the unit agent did not answer in time",
		syscall.ECONNRESET:          errClosed.Error(),
		syscall.EPIPE:               errClosed.Error(),
		errors.New("boom"):          "reading: boom",
		fmt.Errorf("x: %w", io.EOF): "reading: x: EOF",
	} {
		if got := ioError("reading", err); got.Error() != want {
			t.Errorf("ioError(%v) = %q, want %q", err, got, want)
		}
	}
}
