package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bagkeeper/bagkeeper/agent/toolpb"
)

// buildStatic builds the main package in dir (relative to this package's
// directory) as a static, stripped binary named out in a new temporary
// directory, and returns its path.
func buildStatic(tb testing.TB, dir, out string) string {
	tb.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		tb.Skip("no go command to build the binary with")
	}
	bin := filepath.Join(tb.TempDir(), out)
	cmd := exec.Command(goTool, "build", "-trimpath", "-ldflags=-s -w", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("go build: %v\n%s", err, b)
	}
	return bin
}

// toolLink creates a symlink named tool to bin, as the agent installs them,
// and returns its path.
func toolLink(tb testing.TB, bin, tool string) string {
	tb.Helper()
	link := filepath.Join(tb.TempDir(), tool)
	if err := os.Symlink(bin, link); err != nil {
		tb.Fatal(err)
	}
	return link
}

// execTool runs path with args, env and stdin, from dir.
func execTool(t *testing.T, path, dir string, env map[string]string, stdin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	cmd.Env = []string{}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return result{cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()}
}

func TestBinaryDispatchesOnItsName(t *testing.T) {
	t.Parallel()
	bin := buildStatic(t, ".", "jujuc")
	a := startAgent(t, func(req *toolpb.RunRequest) (*toolpb.RunResponse, error) {
		switch {
		case req.Command == "relation-set" && !req.StdinSet:
			return &toolpb.RunResponse{NeedStdin: true}, nil
		case req.Command == "relation-set":
			return &toolpb.RunResponse{Stdout: req.Stdin}, nil
		}
		return &toolpb.RunResponse{Code: 3, Stdout: []byte(req.Command + " " + strings.Join(req.Args, ",") + "\n"), Stderr: []byte("warning\n")}, nil
	})
	env := hookEnv(a.addr)
	wd := t.TempDir()

	got := execTool(t, toolLink(t, bin, "relation-get"), wd, env, "", "-r", "db:1", "-", "app/0")
	wantResult(t, got, result{3, "relation-get -r,db:1,-,app/0\n", "warning\n"})
	reqs := a.requests()
	if len(reqs) != 1 || reqs[0].ContextId != env["JUJU_CONTEXT_ID"] {
		t.Fatalf("agent received %v", reqs)
	}
	if !sameFile(t, reqs[0].Dir, wd) || !filepath.IsAbs(reqs[0].Dir) {
		t.Errorf("agent received dir %q, want %q", reqs[0].Dir, wd)
	}

	wantResult(t, execTool(t, toolLink(t, bin, "relation-set"), wd, env, "{a: b}", "--file", "-"), result{0, "{a: b}", ""})
	wantResult(t, execTool(t, bin, wd, env, "", "is-leader", "--format=json"), result{3, "is-leader --format=json\n", "warning\n"})

	delete(env, "JUJU_CONTEXT_ID")
	wantResult(t, execTool(t, toolLink(t, bin, "is-leader"), wd, env, ""), result{1, "", "ERROR JUJU_CONTEXT_ID not set\n"})
	// --help outside a hook still answers, and exits 0.
	got = execTool(t, toolLink(t, bin, "relation-get"), wd, env, "", "--help")
	if got.code != 0 || !strings.HasPrefix(got.stdout, "Usage: relation-get") || got.stderr != "" {
		t.Errorf("relation-get --help outside a hook: got exit %d stdout %q stderr %q", got.code, got.stdout, got.stderr)
	}

	got = execTool(t, bin, wd, nil, "")
	if got.code != 2 || got.stdout != "" || !strings.HasPrefix(got.stderr, "Usage: jujuc TOOL") {
		t.Errorf("jujuc alone: got exit %d stdout %q stderr %q", got.code, got.stdout, got.stderr)
	}
}

func sameFile(t *testing.T, a, b string) bool {
	t.Helper()
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}

// TestBinaryIsLean guards the start-up time: the binary links the standard
// library only, and not its net package.
func TestBinaryIsLean(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	out, err := exec.Command(goTool, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	nonStd := strings.Fields(string(out))
	if want := []string{"github.com/bagkeeper/bagkeeper/cmd/jujuc"}; !slices.Equal(nonStd, want) {
		t.Errorf("depends on %v, want the standard library only", nonStd[:len(nonStd)-1])
	}
	out, err = exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range strings.Fields(string(out)) {
		if p == "net" || strings.HasPrefix(p, "net/") || strings.HasPrefix(p, "crypto/") || p == "encoding/json" {
			t.Errorf("depends on %s", p)
		}
	}
}
