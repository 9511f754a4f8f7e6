package agent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/metrics"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/bagkeeper/bagkeeper/agent/hooktools"
	"github.com/bagkeeper/bagkeeper/agent/toolpb"
	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/state/statetest"
	"github.com/bagkeeper/bagkeeper/sidecar/unixsock"
)

// The tests here call the hook tool binary, as a hook does, against a real
// agent server in this process whose hook context the test sets: the
// agent's hook loop does not run, and the test plays the hook.

// toolAgent is an agent for unit app/0 of a two-unit application, serving
// the hook tools, with a cluster-relation-changed hook running.
type toolAgent struct {
	*Agent
	store  *statetest.Store
	rel    int64
	socket string
	hc     *hookContext
}

func startToolAgent(t testing.TB, opts ...agentOpt) *toolAgent {
	t.Helper()
	s := newMemStore(t)
	rel := twoUnits(s)
	sockDir, err := os.MkdirTemp("", "ag")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	socket := filepath.Join(sockDir, "agent.sock")
	ln, err := unixsock.Listen(socket, 0o660)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := LoadCharm(charm(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Store: s, Unit: func() string { return "app/0" }, Member: "app-0/x", Pod: "pod-1",
		Charm: ch, Listener: ln, Socket: socket, ToolsDir: filepath.Join(sockDir, "tools"), ToolBinary: hookTool,
		Logger: slog.New(slog.DiscardHandler), Now: s.Now,
	}
	for _, o := range opts {
		o(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.Close()
		ln.Close()
	})
	st := s.State()
	r, ok := st.Relation(rel)
	if !ok {
		t.Fatal("no relation")
	}
	hc := newHookContext(a, "app/0-cluster-relation-changed-1", "app/0", Hook{Name: HookRelationChanged, Relation: r, RemoteUnit: "app/1", RemoteApp: "app"}, st)
	a.running.Store(hc)
	return &toolAgent{Agent: a, store: s, rel: rel, socket: socket, hc: hc}
}

// toolRun is how a tool ended.
type toolRun struct {
	code           int
	stdout, stderr string
}

// run runs tool with args as a hook in dir would: with the hook's
// environment, stdin (nil: empty) and extra open files, the first as
// descriptor 3.
func (ta *toolAgent) run(t testing.TB, dir string, extra []*os.File, stdin io.Reader, tool string, args ...string) toolRun {
	t.Helper()
	cmd := exec.Command(filepath.Join(ta.cfg.ToolsDir, tool), args...)
	cmd.Dir = dir
	cmd.Env = []string{"JUJU_CONTEXT_ID=" + ta.hc.id, "JUJU_AGENT_SOCKET_ADDRESS=" + ta.socket}
	cmd.Stdin = stdin
	cmd.ExtraFiles = extra
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return toolRun{cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()}
}

// written returns what the hook buffered for this unit's bag.
func (ta *toolAgent) written() map[string]string {
	ta.hc.mu.Lock()
	defer ta.hc.mu.Unlock()
	return maps.Clone(ta.hc.unitWrites[ta.rel])
}

// dirOnlyHere opens a directory holding the files given, at a descriptor
// of at least 100 with close-on-exec: only this process (the agent) sees
// the files under /proc/self/fd/N, and a child process (the hook's tool)
// sees nothing there.
func dirOnlyHere(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	high, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 100)
	unix.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(high) })
	return "/proc/self/fd/" + strconv.Itoa(high)
}

// dirOnlyInTheHook returns a directory holding the files given, open as
// *os.File to pass to the tool as descriptor 3: the tool sees the files
// under /proc/self/fd/3, and this process (the agent) does not, as its own
// descriptor 3 is something else.
func dirOnlyInTheHook(t *testing.T, files map[string]string) (*os.File, string) {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if fi, err := os.Stat("/proc/self/fd/3"); err == nil && fi.IsDir() {
		t.Skip("this process's descriptor 3 is a directory: the test could not tell the two sides apart")
	}
	return f, dir
}

// --file names a file in the hook's file system: the tool reads what the
// hook sees at that path, never what the agent sees there.
func TestFileIsReadWhereTheHookRuns(t *testing.T) {
	ta := startToolAgent(t)
	hookDir, _ := dirOnlyInTheHook(t, map[string]string{"settings.yaml": "seen-by: hook\n"})
	got := ta.run(t, "/", []*os.File{hookDir}, nil, "relation-set", "--file", "/proc/self/fd/3/settings.yaml")
	if got != (toolRun{}) || ta.written()["seen-by"] != "hook" {
		t.Fatalf("relation-set --file in the hook's directory: %+v, wrote %v", got, ta.written())
	}

	// A file only the agent could read is not read: for the tool it does
	// not exist, with Juju's error.
	agentDir := dirOnlyHere(t, map[string]string{"secret.yaml": "secret: agent's\n"})
	path := agentDir + "/secret.yaml"
	got = ta.run(t, "/", nil, nil, "relation-set", "--file", path)
	if want := (toolRun{1, "", "ERROR open " + path + ": no such file or directory\n"}); got != want {
		t.Errorf("relation-set --file of the agent's: got %+v, want %+v", got, want)
	}
	got = ta.run(t, "/", nil, nil, "state-set", "--file", path)
	if want := (toolRun{1, "", "ERROR open " + path + ": no such file or directory\n"}); got != want {
		t.Errorf("state-set --file of the agent's: got %+v, want %+v", got, want)
	}
	if w := ta.written(); w["secret"] != "" {
		t.Errorf("the agent's file was read: wrote %v", w)
	}

	// A relative path is the hook's working directory's.
	wd := t.TempDir()
	if err := os.WriteFile(filepath.Join(wd, "rel.yaml"), []byte("{relative: yes}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := ta.run(t, wd, nil, nil, "relation-set", "--file", "rel.yaml"); got != (toolRun{}) || ta.written()["relative"] != "yes" {
		t.Errorf("relative --file: %+v, wrote %v", got, ta.written())
	}
}

// heapAllocated is the bytes this process has allocated on the heap.
func heapAllocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// --file /dev/zero fails at the limit, in the hook's tool, and the agent
// never holds more than a little of it.
func TestEndlessFileFailsAtTheLimit(t *testing.T) {
	ta := startToolAgent(t)
	before := heapAllocated()
	// Should the agent itself read /dev/zero, fail at once instead of
	// when the machine runs out of memory.
	done := make(chan struct{})
	defer close(done)
	go func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if heapAllocated()-before > 1<<30 {
					panic("the agent allocated 1 GiB while relation-set read /dev/zero")
				}
			}
		}
	}()
	got := ta.run(t, "/", nil, nil, "relation-set", "--file", "/dev/zero")
	grew := heapAllocated() - before
	if want := (toolRun{1, "", "ERROR file /dev/zero is over the 16777216 byte limit\n"}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if grew > 4<<20 {
		t.Errorf("the agent allocated %d bytes while the tool ran", grew)
	}
	if w := ta.written(); len(w) != 0 {
		t.Errorf("wrote %d keys", len(w))
	}
}

// -o/--output writes the file in the hook's file system, with exactly the
// bytes stdout would have had.
func TestOutputFileIsWrittenWhereTheHookRuns(t *testing.T) {
	ta := startToolAgent(t)
	if got := ta.run(t, "/", nil, nil, "relation-set", "a=1", "b=two words"); got != (toolRun{}) {
		t.Fatal(got)
	}
	hookDir, dir := dirOnlyInTheHook(t, nil)
	for _, format := range []string{"smart", "yaml", "json"} {
		want := ta.run(t, "/", nil, nil, "relation-get", "--format", format, "-", "app/0")
		if want.code != 0 || want.stdout == "" {
			t.Fatalf("relation-get --format %s: %+v", format, want)
		}
		got := ta.run(t, "/", []*os.File{hookDir}, nil, "relation-get", "--format", format, "-o", "/proc/self/fd/3/out", "-", "app/0")
		if got != (toolRun{}) {
			t.Errorf("with -o: %+v", got)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "out")); err != nil || string(b) != want.stdout {
			t.Errorf("--format %s: the output file holds %q (%v), stdout would have had %q", format, b, err, want.stdout)
		}
	}
	// Relative to the hook's working directory.
	if got := ta.run(t, dir, nil, nil, "is-leader", "--output", "leader"); got != (toolRun{}) {
		t.Errorf("is-leader --output: %+v", got)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "leader")); err != nil || string(b) != "True\n" {
		t.Errorf("is-leader --output wrote %q (%v)", b, err)
	}
	// A directory only the agent has is not written to.
	agentDir := dirOnlyHere(t, nil)
	got := ta.run(t, "/", nil, nil, "is-leader", "-o", agentDir+"/out")
	if want := (toolRun{1, "", "ERROR open " + agentDir + "/out: no such file or directory\n"}); got != want {
		t.Errorf("-o into the agent's directory: got %+v, want %+v", got, want)
	}
}

// The limits of the hook tools are the store's.
func TestToolInputLimitIsTheBagLimit(t *testing.T) {
	if hooktools.MaxFileSize != state.MaxBagSize {
		t.Errorf("the tools read up to %d bytes, a bag holds %d", hooktools.MaxFileSize, state.MaxBagSize)
	}
}

// A key that no key=value argument could name is refused, from a file or
// an argument, before anything is buffered.
func TestRelationSetRefusesKeysWithEqualsOrSpace(t *testing.T) {
	ta := startToolAgent(t)
	wd := t.TempDir()
	for name, content := range map[string]string{"eq.yaml": "{'a=b': x, ok: y}", "space.json": `{"a b": "x", "ok": "y"}`} {
		if err := os.WriteFile(filepath.Join(wd, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		args []string
		want toolRun
	}{
		{[]string{"--file", "eq.yaml"}, toolRun{1, "", "ERROR invalid key \"a=b\"\n"}},
		{[]string{"--file", "space.json"}, toolRun{1, "", "ERROR invalid key \"a b\"\n"}},
		{[]string{"--file", "-"}, toolRun{1, "", "ERROR invalid key \"a=b\"\n"}},
		{[]string{"ok=y", "a b=x"}, toolRun{2, "", "ERROR invalid key \"a b\"\n"}},
	} {
		if got := ta.run(t, wd, nil, strings.NewReader(`{"a=b": "x"}`), "relation-set", tc.args...); got != tc.want {
			t.Errorf("relation-set %q: got %+v, want %+v", tc.args, got, tc.want)
		}
	}
	if w := ta.written(); len(w) != 0 {
		t.Errorf("wrote %v", w)
	}
}

// refuseEveryone makes the socket's credential check refuse every caller,
// this process's user and root too.
func refuseEveryone(c *Config) { c.allowUID = func(int) bool { return false } }

// A caller the credential check refuses is told why, by every tool, and
// can do nothing else on the socket: no tool runs, and the hook runner's
// service answers as the tools' does.
func TestRefusedCallerIsToldWhy(t *testing.T) {
	ta := startToolAgent(t, refuseEveryone, func(c *Config) {
		c.AllowedUIDs = []int{1000, 1001}
		c.Runner = NewRemoteRunner()
	})
	me := os.Getuid()
	why := "permission denied: uid " + strconv.Itoa(me) + " may not use the unit agent's socket (allowed: the agent's uid " +
		strconv.Itoa(me) + ", root, and --hook-uids 1000,1001)"
	for _, args := range [][]string{{"relation-set", "k=v"}, {"is-leader"}, {"relation-set", "--file", "-"}} {
		got := ta.run(t, "/", nil, strings.NewReader("{k: v}"), args[0], args[1:]...)
		if want := (toolRun{1, "", "ERROR " + why + "\n"}); got != want {
			t.Errorf("%q: got %+v, want %+v", args, got, want)
		}
	}
	if w := ta.written(); len(w) != 0 {
		t.Errorf("a refused caller's relation-set wrote %v", w)
	}

	conn, err := grpc.NewClient("unix://"+ta.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	refused := func(what string, err error) {
		t.Helper()
		if status.Code(err) != codes.PermissionDenied || status.Convert(err).Message() != why {
			t.Errorf("%s: %v, want PermissionDenied: %s", what, err, why)
		}
	}
	_, err = toolpb.NewHookToolsClient(conn).Run(ctx, &toolpb.RunRequest{ContextId: ta.hc.id, Dir: "/", Command: "relation-set", Args: []string{"k=v"}})
	refused("HookTools.Run", err)
	_, err = toolpb.NewHookRunnerClient(conn).Done(ctx, &toolpb.HookResult{ContextId: ta.hc.id})
	refused("HookRunner.Done", err)
	stream, err := toolpb.NewHookRunnerClient(conn).Hooks(ctx, &toolpb.RunnerHello{Name: "intruder"})
	if err == nil {
		_, err = stream.Recv()
	}
	refused("HookRunner.Hooks", err)
	err = conn.Invoke(ctx, "/grpc.health.v1.Health/Check", &toolpb.DoneAck{}, &toolpb.DoneAck{})
	refused("another service", err)
	if w := ta.written(); len(w) != 0 {
		t.Errorf("a refused caller wrote %v", w)
	}
}

// Without --hook-uids, the message says how to allow more users.
func TestRefusalWithoutHookUIDs(t *testing.T) {
	ta := startToolAgent(t, refuseEveryone)
	me := strconv.Itoa(os.Getuid())
	want := toolRun{1, "", "ERROR permission denied: uid " + me + " may not use the unit agent's socket (allowed: the agent's uid " +
		me + " and root; bagkeeper run --hook-uids allows others)\n"}
	if got := ta.run(t, "/", nil, nil, "is-leader"); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// The real check: a user that is neither the agent's nor root nor listed
// (run as root, the test can be one).
func TestOtherUserIsRefused(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run a tool as another user")
	}
	ta := startToolAgent(t, func(c *Config) { c.AllowedUIDs = []int{4000} })
	// The other user reaches the socket through its group (root's, 0) and
	// runs a copy of the tool binary it can read.
	if err := os.Chmod(filepath.Dir(ta.socket), 0o750); err != nil {
		t.Fatal(err)
	}
	binDir, err := os.MkdirTemp("", "jc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(binDir) })
	bin, err := os.ReadFile(hookTool)
	if err != nil {
		t.Fatal(err)
	}
	tool := filepath.Join(binDir, "is-leader")
	if err := os.WriteFile(tool, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for uid, want := range map[uint32]toolRun{
		4321: {1, "", "ERROR permission denied: uid 4321 may not use the unit agent's socket (allowed: the agent's uid 0, root, and --hook-uids 4000)\n"},
		4000: {0, "True\n", ""},
	} {
		cmd := exec.Command(tool)
		cmd.Dir = "/"
		cmd.Env = []string{"JUJU_CONTEXT_ID=" + ta.hc.id, "JUJU_AGENT_SOCKET_ADDRESS=" + ta.socket}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: 0}}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
		if got := (toolRun{cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()}); got != want {
			t.Errorf("uid %d: got %+v, want %+v", uid, got, want)
		}
	}
}

// lowercase returns n bytes of a to z, a plain YAML scalar.
func lowercase(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte(i*7%26)
	}
	return string(b)
}

// A bag exactly at the limit goes through relation-set --file (a file of
// exactly the input limit, plus an argument) and comes back whole through
// relation-get; one byte more is refused.
func TestBagAtTheLimitRoundTrips(t *testing.T) {
	ta := startToolAgent(t)
	if b := bag(ta.store, ta.rel, "app/0"); len(b) != 0 {
		t.Fatalf("the unit's bag holds %v already", b)
	}
	wd := t.TempDir()
	value := lowercase(state.MaxBagSize - len("a: \n"))
	file := "a: " + value + "\n" // the largest file a tool reads
	if len(file) != hooktools.MaxFileSize {
		t.Fatalf("file of %d bytes", len(file))
	}
	if err := os.WriteFile(filepath.Join(wd, "bag.yaml"), []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	// Keys and values: 1 + len(value) + 1 + 2 bytes, the bag limit.
	if got := ta.run(t, wd, nil, nil, "relation-set", "--file", "bag.yaml", "b=yz"); got != (toolRun{}) {
		t.Fatalf("relation-set of a bag at the limit: %+v", got)
	}
	want := `{"a":"` + value + `","b":"yz"}` + "\n"
	if got := ta.run(t, wd, nil, nil, "relation-get", "--format=json", "-", "app/0"); got.code != 0 || got.stdout != want || got.stderr != "" {
		t.Errorf("relation-get --format=json: exit %d, %d bytes (want %d), stderr %q", got.code, len(got.stdout), len(want), got.stderr)
	}
	if got := ta.run(t, wd, nil, nil, "relation-get", "a", "app/0"); got.code != 0 || got.stdout != value+"\n" {
		t.Errorf("relation-get a: exit %d, %d bytes, stderr %q", got.code, len(got.stdout), got.stderr)
	}
	got := ta.run(t, wd, nil, nil, "relation-set", "b=xyz")
	if want := (toolRun{1, "", "ERROR relation data of app/0 in cluster:0 would be 16777217 bytes, over the 16777216 byte limit\n"}); got != want {
		t.Errorf("one byte over: got %+v, want %+v", got, want)
	}
}

// The largest reply: a bag at the limit whose every byte JSON writes as
// six (\u003c), read as JSON: 96 MiB. (The bag is committed directly: how
// it was written does not matter here.)
func TestLargestReply(t *testing.T) {
	if raceDetector {
		// It checks sizes, not concurrency, and the race detector makes
		// encoding and copying 96 MiB take half a minute.
		t.Skip("slow with the race detector; run without -race")
	}
	ta := startToolAgent(t)
	half := strings.Repeat("<", state.MaxBagSize/2-1)
	ta.store.Must(state.UpdateBagOp(ta.rel, "app/1", map[string]string{"a": half, "b": half}))
	st := ta.store.State()
	ta.hc = newHookContext(ta.Agent, ta.hc.id, ta.hc.unit, ta.hc.hook, st)
	ta.running.Store(ta.hc)

	esc := strings.Repeat(`\u003c`, len(half))
	want := `{"a":"` + esc + `","b":"` + esc + `"}` + "\n"
	got := ta.run(t, "/", nil, nil, "relation-get", "--format=json", "-", "app/1")
	if got.code != 0 || got.stdout != want || got.stderr != "" {
		t.Errorf("relation-get --format=json: exit %d, %d bytes (want %d), stderr %q", got.code, len(got.stdout), len(want), trunc(got.stderr))
	}
}

func trunc(s string) string {
	if len(s) > 300 {
		return s[:300] + "..."
	}
	return s
}
