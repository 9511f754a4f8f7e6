package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/bagkeeper/bagkeeper/agent"
	"github.com/bagkeeper/bagkeeper/agent/hooktools"
	"github.com/bagkeeper/bagkeeper/agent/toolpb"
	"github.com/bagkeeper/bagkeeper/raftstore/state"
)

// jujuc keeps to the standard library, so its limits are constants of its
// own: they must be the agent's.
func TestLimitsAreTheAgents(t *testing.T) {
	t.Parallel()
	for what, n := range map[string]int{"the agent's tools accept": hooktools.MaxFileSize, "a bag holds": state.MaxBagSize} {
		if maxInput != n {
			t.Errorf("jujuc reads up to %d bytes, %s %d", maxInput, what, n)
		}
	}
	if maxReply != agent.MaxToolReply+5 {
		t.Errorf("jujuc accepts a reply body of %d bytes, the agent sends a message of up to %d (and its 5-byte prefix)", maxReply, agent.MaxToolReply)
	}
}

// echoFile is an agent whose tool reads the file path: it asks for it,
// then prints what it was sent on stdout, or the error on stderr.
func echoFile(path string) func(*toolpb.RunRequest) (*toolpb.RunResponse, error) {
	return func(req *toolpb.RunRequest) (*toolpb.RunResponse, error) {
		switch {
		case !req.ClientFiles:
			return &toolpb.RunResponse{Code: 1, Stderr: []byte("ERROR no client_files\n")}, nil
		case string(req.FilePath) != path:
			return &toolpb.RunResponse{NeedFile: []byte(path)}, nil
		case len(req.FileError) > 0:
			return &toolpb.RunResponse{Code: 1, Stderr: []byte("ERROR " + string(req.FileError) + "\n")}, nil
		}
		return &toolpb.RunResponse{Stdout: req.File}, nil
	}
}

func TestFileIsReadByTheClient(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "settings.yaml")
	content := append([]byte("a: b\n"), randomBytes(1<<20)...)
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, echoFile(path))
	got := runTool(t, hookEnv(a.addr), nil, "relation-set", "--file", path)
	if got.code != 0 || got.stdout != string(content) || got.stderr != "" {
		t.Errorf("got exit %d, %d bytes of stdout, stderr %q; want 0 and the file's %d bytes", got.code, len(got.stdout), got.stderr, len(content))
	}
	reqs := a.requests()
	if len(reqs) != 2 || len(reqs[0].FilePath) != 0 || len(reqs[0].File) != 0 || string(reqs[1].FilePath) != path {
		t.Errorf("agent received %d calls: %v", len(reqs), reqs)
	}

	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wantResult(t, runTool(t, hookEnv(startAgent(t, echoFile(empty)).addr), nil, "relation-set", "--file", empty), result{})
}

// The error reading the file is sent to the agent, whose tool reports it:
// the texts are os.ReadFile's, which Juju's tools print.
func TestFileErrorsAreSentToTheTool(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for path, want := range map[string]string{
		filepath.Join(dir, "missing"): "open " + filepath.Join(dir, "missing") + ": no such file or directory",
		dir:                           "read " + dir + ": is a directory",
	} {
		a := startAgent(t, echoFile(path))
		wantResult(t, runTool(t, hookEnv(a.addr), nil, "relation-set", "--file", path), result{1, "", "ERROR " + want + "\n"})
	}
}

// /dev/zero never ends: the client stops reading past the limit, and the
// tool fails with a clear error, quickly.
func TestEndlessFileStopsAtTheLimit(t *testing.T) {
	t.Parallel()
	a := startAgent(t, echoFile("/dev/zero"))
	wantResult(t, runTool(t, hookEnv(a.addr), nil, "relation-set", "--file", "/dev/zero"),
		result{1, "", "ERROR file /dev/zero is over the 16777216 byte limit\n"})
	if reqs := a.requests(); len(reqs) != 2 || len(reqs[1].File) != 0 {
		t.Errorf("the agent was sent %d bytes of the file", len(reqs[len(reqs)-1].File))
	}
}

// A regular file over the limit is refused by its size, unread; one at the
// limit is sent whole.
func TestLargeFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	huge := filepath.Join(dir, "huge")
	if err := os.WriteFile(huge, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(huge, 1<<40); err != nil { // sparse: no disk used
		t.Skip(err)
	}
	a := startAgent(t, echoFile(huge))
	wantResult(t, runTool(t, hookEnv(a.addr), nil, "relation-set", "--file", huge),
		result{1, "", "ERROR file " + huge + " is over the 16777216 byte limit\n"})

	atLimit := filepath.Join(dir, "at-limit")
	content := randomBytes(maxInput)
	if err := os.WriteFile(atLimit, content, 0o600); err != nil {
		t.Fatal(err)
	}
	a = startAgent(t, echoFile(atLimit))
	got := runTool(t, hookEnv(a.addr), nil, "relation-set", "--file", atLimit)
	if got.code != 0 || got.stdout != string(content) {
		t.Errorf("a file at the limit: exit %d, %d bytes back, stderr %q", got.code, len(got.stdout), got.stderr)
	}
}

func TestStdinOverTheLimitIsAnError(t *testing.T) {
	t.Parallel()
	a := startAgent(t, func(req *toolpb.RunRequest) (*toolpb.RunResponse, error) {
		return &toolpb.RunResponse{NeedStdin: !req.StdinSet}, nil
	})
	zeros, err := os.Open("/dev/zero")
	if err != nil {
		t.Skip(err)
	}
	defer zeros.Close()
	wantResult(t, runTool(t, hookEnv(a.addr), zeros, "relation-set", "--file", "-"),
		result{1, "", "ERROR stdin is over the 16777216 byte limit\n"})
	if n := len(a.requests()); n != 1 {
		t.Errorf("the agent got %d calls, want 1: stdin over the limit is not sent", n)
	}
	wantResult(t, runTool(t, hookEnv(a.addr), bytes.NewReader(make([]byte, maxInput)), "relation-set", "--file", "-"), result{})
}

func TestAgentAskingForAFileByARelativePathIsAnError(t *testing.T) {
	t.Parallel()
	a := startAgent(t, answer(&toolpb.RunResponse{NeedFile: []byte("etc/passwd")}))
	wantError(t, runTool(t, hookEnv(a.addr), nil, "relation-set", "--file", "x"), "relative path: etc/passwd")
}

func TestAgentAskingForASecondFileIsAnError(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	a := startAgent(t, func(req *toolpb.RunRequest) (*toolpb.RunResponse, error) {
		return &toolpb.RunResponse{NeedFile: []byte("/nonexistent/" + string(rune('a'+n.Add(1))))}, nil
	})
	wantError(t, runTool(t, hookEnv(a.addr), nil, "relation-set", "--file", "x"), "asked for /nonexistent/c after /nonexistent/b")
	a = startAgent(t, answer(&toolpb.RunResponse{NeedFile: []byte("/nonexistent")}))
	wantError(t, runTool(t, hookEnv(a.addr), nil, "relation-set", "--file", "x"), "asked again for /nonexistent, which it was sent")
}

// -o/--output: the client writes the file the agent returns, with exactly
// the bytes sent, replacing what it held, with mode 0666 less the umask.
func TestOutputFileIsWrittenByTheClient(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "out")
	if err := os.WriteFile(path, bytes.Repeat([]byte("old "), 1000), 0o600); err != nil {
		t.Fatal(err)
	}
	out := randomBytes(3 << 20)
	a := startAgent(t, answer(&toolpb.RunResponse{Stderr: []byte("warning\n"), OutputPath: []byte(path), Output: out}))
	wantResult(t, runTool(t, hookEnv(a.addr), nil, "relation-get", "-o", "out"), result{0, "", "warning\n"})
	if b, err := os.ReadFile(path); err != nil || !bytes.Equal(b, out) {
		t.Errorf("output file has %d bytes (%v), want the %d sent", len(b), err, len(out))
	}

	fresh := filepath.Join(dir, "fresh")
	a = startAgent(t, answer(&toolpb.RunResponse{OutputPath: []byte(fresh)}))
	wantResult(t, runTool(t, hookEnv(a.addr), nil, "relation-get", "-o", "fresh"), result{})
	fi, err := os.Stat(fresh)
	if err != nil || fi.Size() != 0 {
		t.Fatalf("an empty output: %v %v", fi, err)
	}
	umask := syscall.Umask(0)
	syscall.Umask(umask)
	if want := os.FileMode(0o666 &^ umask); fi.Mode().Perm() != want {
		t.Errorf("output file mode %v, want %v", fi.Mode().Perm(), want)
	}
}

// A file that cannot be written fails the tool with the error Juju's tool
// prints, after what the tool printed.
func TestOutputFileThatCannotBeWritten(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "nosuchdir", "out")
	a := startAgent(t, answer(&toolpb.RunResponse{Stderr: []byte("warning\n"), OutputPath: []byte(path), Output: []byte("x")}))
	wantResult(t, runTool(t, hookEnv(a.addr), nil, "relation-get", "-o", path),
		result{1, "", "warning\nERROR open " + path + ": no such file or directory\n"})

	a = startAgent(t, answer(&toolpb.RunResponse{OutputPath: []byte("out")}))
	got := runTool(t, hookEnv(a.addr), nil, "relation-get", "-o", "out")
	wantError(t, got, "relative path: out")
	if _, err := os.Stat("out"); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("a relative output path was written: %v", err)
	}
}
