package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/bagkeeper/bagkeeper/agent/toolpb"
	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/state/statetest"
	"github.com/bagkeeper/bagkeeper/sidecar/unixsock"
	"github.com/bagkeeper/bagkeeper/test/wait"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// hookTool is the jujuc binary the tests' hooks call, built once.
var hookTool string

func TestMain(m *testing.M) {
	if dir := os.Getenv(hookHelperEnv); dir != "" {
		os.Exit(runOneHook(dir))
	}
	dir, err := os.MkdirTemp("", "agent-test")
	if err != nil {
		panic(err)
	}
	hookTool = filepath.Join(dir, "jujuc")
	out, err := exec.Command("go", "build", "-o", hookTool, "../cmd/jujuc").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building jujuc: %v\n%s", err, out)
		os.Exit(1)
	}
	code := 0
	func() {
		defer os.RemoveAll(dir)
		goleak.VerifyTestMain(m,
			goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
			goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		)
	}()
	os.Exit(code)
}

// newMemStore returns the shared in-memory store at the real clock (the
// agent compares leases with its own clock, which is the store's).
func newMemStore(t testing.TB) *statetest.Store {
	s := statetest.New(t, "app")
	s.SetNow(time.Now())
	return s
}

// charm writes a charm whose dispatch runs script (bash) for every hook,
// after appending the hook's name to hooks.log in the charm directory.
func charm(t testing.TB, script string) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"metadata.yaml": "name: app\npeers:\n  cluster:\n    interface: app-peers\n",
		"config.yaml":   "options:\n  colour:\n    type: string\n    default: blue\n",
		"dispatch":      "#!/bin/bash\necho \"$JUJU_HOOK_NAME ${JUJU_REMOTE_UNIT:-}\" >> \"$JUJU_CHARM_DIR/hooks.log\"\n" + script + "\nexit 0\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

type testAgent struct {
	*Agent
	store  *statetest.Store
	dir    string
	socket string
	cancel context.CancelFunc
	done   chan error
}

type agentOpt func(*Config)

// startAgent runs an agent for unit app/0 of store against the charm in dir.
func startAgent(t *testing.T, store *statetest.Store, dir string, opts ...agentOpt) *testAgent {
	t.Helper()
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
	ch, err := LoadCharm(dir)
	if err != nil {
		t.Fatal(err)
	}
	toolsDir := filepath.Join(sockDir, "tools")
	cfg := Config{
		Store: store, Unit: func() string { return "app/0" }, Member: "app-0/x", Pod: "pod-1",
		Charm: ch, Listener: ln, Socket: socket, ToolsDir: toolsDir, ToolBinary: hookTool,
		Runner:     LocalRunner{ToolsDir: toolsDir, Logger: slog.New(slog.DiscardHandler)},
		Address:    "10.1.2.3",
		RetryDelay: 50 * time.Millisecond, MaxRetryDelay: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: store.Now,
	}
	for _, o := range opts {
		o(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ta := &testAgent{Agent: a, store: store, dir: dir, socket: socket, cancel: cancel, done: make(chan error, 1)}
	go func() { ta.done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-ta.done
		a.Close()
		ln.Close()
	})
	return ta
}

func (a *testAgent) hooks() []string {
	b, _ := os.ReadFile(filepath.Join(a.dir, "hooks.log"))
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

func waitFor(t *testing.T, what string, cond func() error) {
	t.Helper()
	wait.Until(t, 20*time.Second, what, cond)
}

// twoUnits makes app/0 (this agent's, the leader) and app/1.
func twoUnits(s *statetest.Store) int64 {
	s.Must(state.ClaimUnitOp("app-0/x", "app-0", 0, 0), state.ClaimUnitOp("app-1/x", "app-1", 1, 0))
	s.Must(state.ClaimLeaseOp("app/0", "app-0/x", int64(time.Minute)))
	return s.Must(state.EnsureRelationOp("cluster", "app-peers", true, "", "")).GetOps()[0].GetRelationId()
}

func bag(s *statetest.Store, rel int64, owner string) map[string]string {
	b, ok := s.State().Bag(rel, owner)
	if !ok {
		return nil
	}
	return b.Data.Map()
}

func TestHookWritesCommitWithTheCursorOnlyOnSuccess(t *testing.T) {
	s := newMemStore(t)
	rel := twoUnits(s)
	dir := charm(t, `
case "$JUJU_HOOK_NAME" in
cluster-relation-joined)
	relation-set "joined-by=$JUJU_UNIT_NAME"
	relation-set --app "from-leader=yes"
	state-set "seen=$JUJU_REMOTE_UNIT"
	open-port 8080/tcp
	[ -e "$JUJU_CHARM_DIR/fixed" ] || exit 3 ;;
esac`)
	a := startAgent(t, s, dir)
	waitFor(t, "relation-joined to fail at least twice", func() error {
		n := strings.Count(strings.Join(a.hooks(), "\n"), "cluster-relation-joined")
		if n < 2 {
			return fmt.Errorf("relation-joined ran %d times", n)
		}
		return nil
	})
	if b := bag(s, rel, "app/0"); b["joined-by"] != "" {
		t.Fatalf("a failed hook's relation-set committed: %v", b)
	}
	if b := bag(s, rel, "app"); b != nil {
		t.Fatalf("a failed hook's app write committed: %v", b)
	}
	if st := s.State().CharmState("app/0"); st.Value("seen") != "" {
		t.Fatal("a failed hook's state-set committed")
	}
	if e := s.State().UnitExtra("app/0"); e.HookError != "cluster-relation-joined" || len(e.Ports) != 0 {
		t.Fatalf("unit extras while failing: %+v", e)
	}
	if err := os.WriteFile(filepath.Join(dir, "fixed"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the retried hook to commit", func() error {
		if bag(s, rel, "app/0")["joined-by"] != "app/0" {
			return errors.New("not committed")
		}
		return nil
	})
	st := s.State()
	if bag(s, rel, "app")["from-leader"] != "yes" || st.CharmState("app/0").Value("seen") != "app/1" {
		t.Fatalf("commit incomplete: app %v state %v", bag(s, rel, "app"), st.CharmState("app/0"))
	}
	if e := st.UnitExtra("app/0"); e.HookError != "" || fmt.Sprint(e.Ports) != "[8080/tcp]" {
		t.Fatalf("after success: %+v", e)
	}
	cur, _ := DecodeCursor(st.Cursor("app/0"))
	if rc := cur.Relations[rel]; rc == nil || !hasKey(rc.Units, "app/1") {
		t.Fatalf("cursor did not advance with the hook: %+v", cur.Relations[rel])
	}
	// The unit's address was seeded into its bag.
	if bag(s, rel, "app/0")["private-address"] != "10.1.2.3" {
		t.Fatalf("address not seeded: %v", bag(s, rel, "app/0"))
	}
}

func hasKey(m map[string]uint64, k string) bool {
	_, ok := m[k]
	return ok
}

func TestKilledHookCommitsNothingAndRunsAgain(t *testing.T) {
	s := newMemStore(t)
	rel := twoUnits(s)
	dir := charm(t, `
if [ "$JUJU_HOOK_NAME" = cluster-relation-joined ]; then
	relation-set "attempt=$(wc -l < "$JUJU_CHARM_DIR/hooks.log")"
	if [ ! -e "$JUJU_CHARM_DIR/killed" ]; then
		touch "$JUJU_CHARM_DIR/killed"
		kill -9 $$
	fi
fi`)
	startAgent(t, s, dir)
	waitFor(t, "the hook to run again and commit", func() error {
		if bag(s, rel, "app/0")["attempt"] == "" {
			return errors.New("not committed")
		}
		return nil
	})
	if _, err := os.Stat(filepath.Join(dir, "killed")); err != nil {
		t.Fatal("the hook was never killed")
	}
}

func TestNonLeaderCannotWriteTheApplicationBag(t *testing.T) {
	s := newMemStore(t)
	s.Must(state.ClaimUnitOp("app-0/x", "app-0", 0, 0), state.ClaimUnitOp("app-1/x", "app-1", 1, 0))
	s.Must(state.ClaimLeaseOp("app/1", "app-1/x", int64(time.Minute)))
	rel := s.Must(state.EnsureRelationOp("cluster", "app-peers", true, "", "")).GetOps()[0].GetRelationId()
	dir := charm(t, `
if [ "$JUJU_HOOK_NAME" = start ]; then
	relation-set -r cluster:0 --app k=v 2> "$JUJU_CHARM_DIR/err"
	echo $? > "$JUJU_CHARM_DIR/code"
	status-get --application 2> "$JUJU_CHARM_DIR/sg-err"
	echo $? >> "$JUJU_CHARM_DIR/sg-err"
	status-set --application active fine 2> "$JUJU_CHARM_DIR/ss-err"
	echo $? >> "$JUJU_CHARM_DIR/ss-err"
	is-leader > "$JUJU_CHARM_DIR/is-leader.tmp"
	mv "$JUJU_CHARM_DIR/is-leader.tmp" "$JUJU_CHARM_DIR/is-leader"
fi`)
	startAgent(t, s, dir)
	// The charm renames its last file into place, so once it exists
	// every file is complete (a redirect alone creates an empty file
	// before is-leader writes to it).
	waitFor(t, "start", func() error {
		_, err := os.Stat(filepath.Join(dir, "is-leader"))
		return err
	})
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		return string(b)
	}
	if read("code") != "1\n" || read("err") != "ERROR cannot write relation settings\n" || read("is-leader") != "False\n" {
		t.Fatalf("code %q stderr %q is-leader %q", read("code"), read("err"), read("is-leader"))
	}
	if bag(s, rel, "app") != nil {
		t.Fatal("a non-leader wrote the application bag")
	}
	// Juju's hook context refuses the application's status to a non-leader.
	if got, want := read("sg-err"), "ERROR finding application status: this unit is not the leader\n1\n"; got != want {
		t.Errorf("status-get --application by a non-leader: %q, want %q", got, want)
	}
	if got, want := read("ss-err"), "ERROR this unit is not the leader\n1\n"; got != want {
		t.Errorf("status-set --application by a non-leader: %q, want %q", got, want)
	}
	if _, ok := s.State().Status("app"); ok {
		t.Error("a non-leader set the application's status")
	}
}

func TestDeposedLeaderCannotCommitTheApplicationBag(t *testing.T) {
	s := newMemStore(t)
	rel := twoUnits(s)
	dir := charm(t, `
if [ "$JUJU_HOOK_NAME" = cluster-relation-joined ]; then
	relation-set --app "written-while=$(is-leader)"
	touch "$JUJU_CHARM_DIR/wrote"
	while [ ! -e "$JUJU_CHARM_DIR/go" ]; do sleep 0.01; done
fi`)
	a := startAgent(t, s, dir)
	waitFor(t, "the hook to write as leader", func() error {
		_, err := os.Stat(filepath.Join(dir, "wrote"))
		return err
	})
	// Leadership moves while the hook runs: the lease runs out and app/1
	// takes it.
	s.Advance(2 * time.Minute)
	s.Must(state.ClaimLeaseOp("app/1", "app-1/x", int64(time.Minute)))
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the refused commit to be recorded", func() error {
		if e := s.State().UnitExtra("app/0"); e.HookError != "cluster-relation-joined" || !strings.Contains(e.HookErrorMessage, "no longer the leader") {
			return fmt.Errorf("hook error %+v", e)
		}
		return nil
	})
	if b := bag(s, rel, "app"); b != nil {
		t.Fatalf("a deposed leader's application bag write committed: %v", b)
	}
	_ = a
}

func TestToolsRefuseAnotherContextAndTheSocketIsGroupOnly(t *testing.T) {
	s := newMemStore(t)
	twoUnits(s)
	dir := charm(t, "")
	a := startAgent(t, s, dir)
	fi, err := os.Stat(a.socket)
	if err != nil || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket mode %v %v", fi.Mode().Perm(), err)
	}
	conn, err := grpc.NewClient("unix://"+a.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = toolpb.NewHookToolsClient(conn).Run(context.Background(), &toolpb.RunRequest{ContextId: "app/0-install-forged", Dir: "/", Command: "is-leader"})
	if err == nil || !strings.Contains(err.Error(), "bad request: bad context: app/0-install-forged") {
		t.Fatalf("forged context: %v", err)
	}
	_, err = toolpb.NewHookToolsClient(conn).Run(context.Background(), &toolpb.RunRequest{ContextId: "x", Dir: "relative", Command: "is-leader"})
	if err == nil || !strings.Contains(err.Error(), "Dir is not absolute") {
		t.Fatalf("relative dir: %v", err)
	}
}

func TestConfigFileChangeFiresConfigChanged(t *testing.T) {
	s := newMemStore(t)
	twoUnits(s)
	dir := charm(t, `[ "$JUJU_HOOK_NAME" = config-changed ] && config-get colour >> "$JUJU_CHARM_DIR/colours"`)
	cfgFile := filepath.Join(t.TempDir(), "config.yaml")
	changed := make(chan struct{}, 1)
	a := startAgent(t, s, dir, func(c *Config) { c.ConfigFile, c.ConfigChanged = cfgFile, changed })
	colours := func() string {
		b, _ := os.ReadFile(filepath.Join(dir, "colours"))
		return string(b)
	}
	waitFor(t, "the first config-changed", func() error {
		if colours() != "blue\n" {
			return fmt.Errorf("colours %q", colours())
		}
		return nil
	})
	// Written as Kubernetes updates a mounted ConfigMap: atomically.
	write := func(content string) {
		t.Helper()
		tmp := cfgFile + ".tmp"
		if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, cfgFile); err != nil {
			t.Fatal(err)
		}
	}
	write("colour: green\n")
	changed <- struct{}{}
	waitFor(t, "config-changed with the new value", func() error {
		if colours() != "blue\ngreen\n" {
			return fmt.Errorf("colours %q", colours())
		}
		return nil
	})
	// A broken file keeps the config the unit has.
	write("colour: [not, a, string\n")
	changed <- struct{}{}
	write("nosuchoption: 1\n")
	changed <- struct{}{}
	write("colour: red\n")
	changed <- struct{}{}
	waitFor(t, "config-changed after the file was fixed", func() error {
		if colours() != "blue\ngreen\nred\n" {
			return fmt.Errorf("colours %q", colours())
		}
		return nil
	})
	// A file that vanishes (a deleted ConfigMap) keeps it too, rather than
	// resetting the unit to the charm's defaults.
	before := a.configHash()
	if err := os.Remove(cfgFile); err != nil {
		t.Fatal(err)
	}
	if err := a.reloadConfig(); err != nil || a.configHash() != before {
		t.Fatalf("after the file vanished: %v, config %s, want %s still", err, a.configHash(), before)
	}
	write("colour: yellow\n")
	changed <- struct{}{}
	waitFor(t, "config-changed once the file is back", func() error {
		if colours() != "blue\ngreen\nred\nyellow\n" {
			return fmt.Errorf("colours %q", colours())
		}
		return nil
	})
}

func TestConfigFileMissingAtStartMeansDefaultsUntilItAppears(t *testing.T) {
	s := newMemStore(t)
	twoUnits(s)
	dir := charm(t, `[ "$JUJU_HOOK_NAME" = config-changed ] && config-get colour >> "$JUJU_CHARM_DIR/colours"`)
	cfgFile := filepath.Join(t.TempDir(), "config.yaml")
	changed := make(chan struct{}, 1)
	startAgent(t, s, dir, func(c *Config) { c.ConfigFile, c.ConfigChanged = cfgFile, changed })
	colours := func() string {
		b, _ := os.ReadFile(filepath.Join(dir, "colours"))
		return string(b)
	}
	waitFor(t, "config-changed with the default", func() error {
		if colours() != "blue\n" {
			return fmt.Errorf("colours %q", colours())
		}
		return nil
	})
	if err := os.WriteFile(cfgFile, []byte("colour: red\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	changed <- struct{}{}
	waitFor(t, "config-changed once the file appeared", func() error {
		if colours() != "blue\nred\n" {
			return fmt.Errorf("colours %q", colours())
		}
		return nil
	})
}

func TestRemoteHookRunnerRunsHooksInItsOwnContainer(t *testing.T) {
	s := newMemStore(t)
	rel := twoUnits(s)
	dir := charm(t, `[ "$JUJU_HOOK_NAME" = cluster-relation-joined ] && relation-set "runner=remote"`)
	remote := NewRemoteRunner()
	a := startAgent(t, s, dir, func(c *Config) { c.Runner = remote })
	// The runner sees the charm at another path, as another container would.
	other := t.TempDir()
	if err := os.Symlink(dir, filepath.Join(other, "charm")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- RunHookRunner(ctx, HookRunnerConfig{Socket: a.socket, CharmDir: filepath.Join(other, "charm"), ToolsDir: filepath.Join(other, "tools"), ToolBinary: hookTool, Name: "charm", Logger: slog.New(slog.DiscardHandler)})
	}()
	defer func() { cancel(); <-done }()
	waitFor(t, "a hook run by the remote runner to commit", func() error {
		if bag(s, rel, "app/0")["runner"] != "remote" {
			return errors.New("not yet")
		}
		return nil
	})
}

func TestStoppingHookRunnerRunsTheStopHookFirst(t *testing.T) {
	s := newMemStore(t)
	twoUnits(s)
	dir := charm(t, "")
	remote := NewRemoteRunner()
	var ta *testAgent
	stopCalled := make(chan struct{})
	ta = startAgent(t, s, dir, func(c *Config) {
		c.Runner = remote
		// What the sidecar does: stop the hooks, then run the stop hook.
		c.RunnerStopping = func(ctx context.Context) {
			close(stopCalled)
			ta.cancel()
			<-ta.done
			ta.done <- nil // for the cleanup
			ta.Stop(ctx)
		}
	})
	other := t.TempDir()
	if err := os.Symlink(dir, filepath.Join(other, "charm")); err != nil {
		t.Fatal(err)
	}
	ctx, sigterm := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- RunHookRunner(ctx, HookRunnerConfig{Socket: ta.socket, CharmDir: filepath.Join(other, "charm"), ToolsDir: filepath.Join(other, "tools"), ToolBinary: hookTool, Name: "charm", Logger: slog.New(slog.DiscardHandler)})
	}()
	// Started as the store says: the start hook committed (Stop runs the
	// stop hook only for a started unit; its name in hooks.log is written
	// before the commit).
	waitFor(t, "start", func() error {
		if cur, err := DecodeCursor(s.State().Cursor("app/0")); err != nil || !cur.Started {
			return fmt.Errorf("not started (%v)", err)
		}
		return nil
	})
	// SIGTERM to the charm container: the runner asks the agent to run
	// the stop hook, keeps serving hooks until it has, then returns.
	sigterm()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the hook runner did not return after the stop hook")
	}
	select {
	case <-stopCalled:
	default:
		t.Fatal("the runner returned without telling the agent it stops")
	}
	h := ta.hooks()
	if strings.TrimSpace(h[len(h)-1]) != "stop" {
		t.Fatalf("hooks %q: the last one is not stop", h)
	}
}

func TestRemovedUnitRunsStopAndRemoveAndCommitsNothing(t *testing.T) {
	s := newMemStore(t)
	twoUnits(s)
	dir := charm(t, `[ "$JUJU_HOOK_NAME" = remove ] && state-set "gone=yes"`)
	a := startAgent(t, s, dir)
	waitFor(t, "start", func() error {
		if !strings.Contains(strings.Join(a.hooks(), ","), "start") {
			return errors.New("not started")
		}
		return nil
	})
	s.Must(state.ReleaseUnitOp("app/0", "", "scaled down"), state.RemoveUnitOp("app/0", 0, "removed by an operator"))
	waitFor(t, "stop and remove", func() error {
		h := a.hooks()
		if len(h) < 2 || strings.TrimSpace(h[len(h)-2]) != "stop" || strings.TrimSpace(h[len(h)-1]) != "remove" {
			return fmt.Errorf("hooks %q", h)
		}
		return nil
	})
	if s.State().CharmState("app/0").Len() != 0 {
		t.Fatal("a removed unit's hook committed")
	}
}

func TestFailedHookRunsAgainBeforeAnyOther(t *testing.T) {
	s := newMemStore(t)
	rel := twoUnits(s)
	dir := charm(t, `
if [ "$JUJU_HOOK_NAME" = config-changed ] && [ "$(config-get colour)" = red ] && [ ! -e "$JUJU_CHARM_DIR/fixed" ]; then
	exit 1
fi`)
	cfgFile := filepath.Join(t.TempDir(), "config.yaml")
	changed := make(chan struct{}, 1)
	a := startAgent(t, s, dir, func(c *Config) { c.ConfigFile, c.ConfigChanged = cfgFile, changed })
	count := func(hook string) int { return strings.Count(strings.Join(a.hooks(), "\n"), hook) }
	waitFor(t, "the unit to settle", func() error {
		if count("cluster-relation-changed") == 0 {
			return errors.New("not yet")
		}
		return nil
	})
	if err := os.WriteFile(cfgFile+".tmp", []byte("colour: red\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(cfgFile+".tmp", cfgFile); err != nil {
		t.Fatal(err)
	}
	changed <- struct{}{}
	waitFor(t, "config-changed to fail", func() error {
		if e := s.State().UnitExtra("app/0"); e.HookError != "config-changed" {
			return fmt.Errorf("hook error %q", e.HookError)
		}
		return nil
	})
	// Another event becomes due; it must wait for the failed hook.
	before := count("cluster-relation-changed")
	s.Must(state.UpdateBagOp(rel, "app/1", map[string]string{"k": "v"}))
	failures := count("config-changed")
	waitFor(t, "config-changed to be retried", func() error {
		if count("config-changed") < failures+2 {
			return errors.New("not retried yet")
		}
		return nil
	})
	if n := count("cluster-relation-changed"); n != before {
		t.Fatalf("a relation hook ran while config-changed was failing: %v", a.hooks())
	}
	if err := os.WriteFile(filepath.Join(dir, "fixed"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the relation hook after the retried config-changed succeeded", func() error {
		if count("cluster-relation-changed") == before {
			return errors.New("not yet")
		}
		return nil
	})
	if e := s.State().UnitExtra("app/0"); e.HookError != "" {
		t.Fatalf("hook error not cleared: %+v", e)
	}
}

func TestTakenOverHolderCommitsNothingAndStopsRunningHooks(t *testing.T) {
	s := newMemStore(t)
	rel := twoUnits(s)
	// config-changed waits (as a hook of a paused pod would) until the
	// test lets it go, then writes to its unit bag and charm state.
	dir := charm(t, `
if [ "$JUJU_HOOK_NAME" = config-changed ]; then
	touch "$JUJU_CHARM_DIR/waiting"
	while [ ! -e "$JUJU_CHARM_DIR/go" ]; do sleep 0.01; done
	relation-set -r cluster:0 "from=old-holder"
	state-set "old=yes"
fi`)
	a := startAgent(t, s, dir)
	waitFor(t, "config-changed to start", func() error {
		_, err := os.Stat(filepath.Join(dir, "waiting"))
		return err
	})
	// Another member (a new incarnation of the pod) takes app/0 over.
	s.Must(state.ClaimUnitOp("app-0/y", "app-0", 0, 0))
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// The old holder's hook ends, and its commit is refused.
	waitFor(t, "the agent to stop running app/0's hooks", func() error {
		if a.unit() != "" {
			return fmt.Errorf("agent still runs %s", a.unit())
		}
		return nil
	})
	st := s.State()
	if got := bag(s, rel, "app/0")["from"]; got != "" {
		t.Fatalf("the taken-over holder's relation-set committed: from=%q", got)
	}
	if st.CharmState("app/0").Value("old") != "" {
		t.Fatal("the taken-over holder's state-set committed")
	}
	cur, _ := DecodeCursor(st.Cursor("app/0"))
	if cur.ConfigHash != "" {
		t.Fatalf("the refused hook moved app/0's cursor: %+v", cur)
	}
	if h := a.hooks(); strings.TrimSpace(h[len(h)-1]) != "config-changed" {
		t.Fatalf("hooks ran after the refused one: %v", h)
	}
}

func TestNoHookRunsUntilTheMemberHasCaughtUp(t *testing.T) {
	s := newMemStore(t)
	twoUnits(s)
	dir := charm(t, "")
	var ready atomic.Bool
	var asked atomic.Int32
	startAgent(t, s, dir, func(c *Config) {
		c.Ready = func() (bool, string) {
			asked.Add(1)
			if ready.Load() {
				return true, ""
			}
			return false, "catching up: the state machine has applied 3 of 40"
		}
	})
	// The agent keeps asking; as long as the member is behind, no hook runs.
	waitFor(t, "the agent to ask whether the member caught up, again and again", func() error {
		if asked.Load() < 5 {
			return fmt.Errorf("asked %d times", asked.Load())
		}
		return nil
	})
	if _, err := os.Stat(filepath.Join(dir, "hooks.log")); err == nil {
		t.Fatal("a hook ran on a member that had not caught up")
	}
	ready.Store(true)
	waitFor(t, "install once caught up", func() error {
		if _, err := os.Stat(filepath.Join(dir, "hooks.log")); err != nil {
			return err
		}
		return nil
	})
}

// TestAPodThatMovesToAnotherUnitStartsThatUnitsLife: the pod's unit app/0
// is taken over; the pod then gets a new unit, app/2, and later another
// pod's released unit app/1. Each unit's life goes on from its own cursor:
// the new unit runs Juju's first-start sequence, the existing one the
// pod-churn sequence; no hook of a unit runs after the pod lost it, and
// every hook sees the unit it runs for.
func TestAPodThatMovesToAnotherUnitStartsThatUnitsLife(t *testing.T) {
	s := newMemStore(t)
	rel := twoUnits(s) // app/0 (this pod, leader), app/1 (another pod)
	var unit atomic.Value
	unit.Store("app/0")
	dir := charm(t, `echo "$JUJU_UNIT_NAME $JUJU_HOOK_NAME ${JUJU_REMOTE_UNIT:-}" >> "$JUJU_CHARM_DIR/units.log"`)
	a := startAgent(t, s, dir, func(c *Config) { c.Unit = func() string { return unit.Load().(string) } })
	runs := func() []string {
		b, _ := os.ReadFile(filepath.Join(dir, "units.log"))
		var out []string
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			out = append(out, strings.TrimSpace(l))
		}
		return out
	}
	waitFor(t, "app/0's first-start sequence", func() error {
		if !slices.Contains(runs(), "app/0 cluster-relation-changed app/1") {
			return fmt.Errorf("%q", runs())
		}
		return nil
	})
	// app/1's own pod runs its first hooks too (its cursor is in the store).
	s.Must(state.SetCursorOp("app/1", Cursor{Installed: true, Started: true, Pod: "pod-of-app-1", ConfigHash: a.configHash()}.Encode()))
	// Another member takes app/0 over; this pod then claims a new unit.
	s.Must(state.ClaimUnitOp("app-0/other", "other-pod", 0, 0))
	s.Must(state.ClaimUnitOp(memberOf(a), "pod-1", 2, 0))
	unit.Store("app/2")
	waitFor(t, "app/2's first-start sequence", func() error {
		if !slices.Contains(runs(), "app/2 cluster-relation-changed app/1") {
			return fmt.Errorf("%q", runs())
		}
		return nil
	})
	var app2 []string
	for _, r := range runs() {
		if strings.HasPrefix(r, "app/2 ") {
			app2 = append(app2, strings.TrimSpace(strings.TrimPrefix(r, "app/2 ")))
		}
	}
	want := []string{"install", "cluster-relation-created", "leader-settings-changed", "config-changed", "start"}
	if len(app2) < len(want) || !slices.Equal(app2[:len(want)], want) {
		t.Fatalf("app/2 began with %q, want Juju's first-start sequence %q", app2, want)
	}
	// app/1's pod stops and releases it; this pod claims it: the pod-churn
	// sequence of an existing unit, from app/1's own cursor.
	n := len(runs())
	s.Must(state.ReleaseUnitOp("app/1", "", "pod stopped"), state.ReleaseUnitOp("app/2", "", "pod moved"))
	s.Must(state.ClaimUnitOp(memberOf(a), "pod-1", 1, 0))
	unit.Store("app/1")
	waitFor(t, "app/1's pod-churn sequence", func() error {
		if !slices.Contains(runs()[n:], "app/1 start") {
			return fmt.Errorf("%q", runs()[n:])
		}
		return nil
	})
	var app1 []string
	for _, r := range runs()[n:] {
		if strings.HasPrefix(r, "app/1 ") {
			app1 = append(app1, strings.TrimSpace(strings.TrimPrefix(r, "app/1 ")))
		}
	}
	if len(app1) < 4 || !slices.Equal(app1[:4], []string{"upgrade-charm", "config-changed", "leader-settings-changed", "start"}) {
		t.Fatalf("app/1 began with %q, want the pod-churn sequence", app1)
	}
	for _, r := range runs()[n:] {
		if strings.HasPrefix(r, "app/0 ") || strings.HasPrefix(r, "app/2 ") {
			t.Fatalf("a hook ran for a unit the pod no longer held: %q", r)
		}
	}
	_ = rel
}

func memberOf(a *testAgent) string { return a.cfg.Member }

// checkGoalState checks goal-state's JSON as Juju's controller makes it:
// every unit with its workload status and since (unknown, since it was
// created, for a unit that set none); relations with other applications
// only (no peer relation), the remote application and its units joined
// since the relation was made.
func checkGoalState(t *testing.T, file string, st *state.State) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	type entry struct{ Status, Since string }
	var gs struct {
		Units     map[string]entry
		Relations map[string]map[string]entry
	}
	if err := json.Unmarshal(b, &gs); err != nil {
		t.Fatalf("goal-state: %v: %s", err, b)
	}
	format := func(tm time.Time) string { return tm.UTC().Format("2006-01-02 15:04:05Z") }
	u1, _ := st.Unit("app/1")
	db, _ := st.FindRelation("db", "pg", "db")
	wantUnits := map[string]entry{"app/1": {"unknown", format(u1.Created)}}
	if ws, ok := st.Status("app/0"); ok {
		wantUnits["app/0"] = entry{ws.Status, format(ws.Since)}
	} else {
		u0, _ := st.Unit("app/0")
		wantUnits["app/0"] = entry{"unknown", format(u0.Created)}
	}
	wantRelations := map[string]map[string]entry{"db": {"pg": {"joined", format(db.Created)}, "pg/0": {"joined", format(db.Created)}}}
	if !maps.Equal(gs.Units, wantUnits) || len(gs.Relations) != 1 || !maps.Equal(gs.Relations["db"], wantRelations["db"]) {
		t.Errorf("goal-state: %s\nwant units %v, relations %v", b, wantUnits, wantRelations)
	}
}

// TestHookOfARemovedRelationMayStillWriteToIt: relation-departed and
// relation-broken of a relation between applications that was removed may
// write to it, as in Juju; the writes go with the relation, and the hooks
// commit once each instead of failing on a relation that is gone.
func TestHookOfARemovedRelationMayStillWriteToIt(t *testing.T) {
	s := newMemStore(t)
	twoUnits(s)
	rel := s.Must(state.EnsureRelationOp("db", "pgsql", false, "pg", "db")).GetOps()[0].GetRelationId()
	view := state.SetRemoteViewOp(rel, "pg", "cluster-pg", 5, map[string]string{"password": "pw"}, map[string]map[string]string{"pg/0": {"host": "h"}})
	view.GetSetRemoteView().RemoteModel = "model-of-pg"
	s.Must(view)
	dir := charm(t, `
case $JUJU_HOOK_NAME in
db-relation-joined)
	relation-get - pg/7 2>"$JUJU_CHARM_DIR/not-in-relation"; echo "exit $?" >>"$JUJU_CHARM_DIR/not-in-relation"
	network-get db -r "$JUJU_RELATION_ID" --ingress-address >"$JUJU_CHARM_DIR/ingress"
	goal-state --format=json >"$JUJU_CHARM_DIR/goal-state"
	relation-model-get --format=json >"$JUJU_CHARM_DIR/remote-model"
	relation-model-get -r "$(relation-ids cluster)" --format=json >"$JUJU_CHARM_DIR/peer-model"
	;;
db-relation-departed|db-relation-broken)
	relation-set -r "$JUJU_RELATION_ID" "gone=yes" 2>>"$JUJU_CHARM_DIR/errors" || echo "$JUJU_HOOK_NAME: relation-set failed" >>"$JUJU_CHARM_DIR/errors"
	;;
esac`)
	a := startAgent(t, s, dir, func(c *Config) { c.ModelUUID = "model-of-app" })
	count := func(hook string) int { return strings.Count(strings.Join(a.hooks(), "\n"), hook) }
	waitFor(t, "the relation to be joined", func() error {
		if count("db-relation-changed pg/0") == 0 {
			return fmt.Errorf("hooks so far: %v", a.hooks())
		}
		return nil
	})
	// relation-model-get answers the remote application's model, and this
	// one's for a peer relation.
	for file, want := range map[string]string{"remote-model": `{"uuid":"model-of-pg"}`, "peer-model": `{"uuid":"model-of-app"}`} {
		if b, _ := os.ReadFile(filepath.Join(dir, file)); strings.TrimSpace(string(b)) != want {
			t.Errorf("relation-model-get (%s): %q, want %q", file, b, want)
		}
	}
	// network-get answers this unit's address for the relation, and
	// goal-state lists the remote unit and application as joined.
	if b, _ := os.ReadFile(filepath.Join(dir, "ingress")); strings.TrimSpace(string(b)) != "10.1.2.3" {
		t.Errorf("network-get db --ingress-address: %q", b)
	}
	checkGoalState(t, filepath.Join(dir, "goal-state"), s.State())
	// A remote unit that is not in the relation: Juju's permission denied.
	if b, _ := os.ReadFile(filepath.Join(dir, "not-in-relation")); string(b) != "ERROR permission denied\nexit 1\n" {
		t.Errorf("relation-get of a unit not in the relation: %q", b)
	}
	s.Must(state.RemoveRelationOp(rel))
	waitFor(t, "relation-broken", func() error {
		if count("db-relation-broken") == 0 {
			return fmt.Errorf("hooks so far: %v", a.hooks())
		}
		cur, err := DecodeCursor(s.State().Cursor("app/0"))
		if err != nil {
			return err
		}
		if _, ok := cur.Relations[rel]; ok {
			return errors.New("the cursor still holds the relation")
		}
		return nil
	})
	if d, b := count("db-relation-departed pg/0"), count("db-relation-broken"); d != 1 || b != 1 {
		t.Errorf("departed ran %d times and broken %d times, want once each: %v", d, b, a.hooks())
	}
	if e := s.State().UnitExtra("app/0"); e.HookError != "" {
		t.Errorf("hook error %+v", e)
	}
}

func TestHookRunnerOnAWrongSocketSaysSo(t *testing.T) {
	var logs syncBuf
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	socket := filepath.Join(t.TempDir(), "no-agent-here.sock")
	go func() {
		done <- RunHookRunner(ctx, HookRunnerConfig{Socket: socket, CharmDir: t.TempDir(), Name: "charm", StopTimeout: time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	}()
	waitFor(t, "a warning about the socket", func() error {
		if l := logs.String(); !strings.Contains(l, "cannot reach the unit agent") || !strings.Contains(l, socket) {
			return fmt.Errorf("logs: %s", l)
		}
		return nil
	})
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the hook runner did not stop")
	}
}

// syncBuf is a buffer several goroutines log to.
type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestHookMetricsAndGauges(t *testing.T) {
	s := newMemStore(t)
	twoUnits(s)
	dir := charm(t, `[ "$JUJU_HOOK_NAME" = config-changed ] && [ ! -e "$JUJU_CHARM_DIR/ok" ] && { touch "$JUJU_CHARM_DIR/ok"; exit 1; }; true`)
	m := NewMetrics()
	a := startAgent(t, s, dir, func(c *Config) { c.Metrics = m })
	waitFor(t, "start, after config-changed failed once", func() error {
		if !strings.Contains(strings.Join(a.hooks(), ","), "start") {
			return errors.New("not started")
		}
		return nil
	})
	for _, c := range []struct {
		hook, result string
		want         float64
	}{{"install", "ok", 1}, {"config-changed", "failed", 1}, {"config-changed", "ok", 1}, {"start", "ok", 1}} {
		if got := testutil.ToFloat64(m.hooks.WithLabelValues(c.hook, c.result)); got != c.want {
			t.Errorf("bagkeeper_hooks_total{hook=%q,result=%q} = %v, want %v", c.hook, c.result, got, c.want)
		}
	}
	if n := testutil.CollectAndCount(m.duration); n < 3 {
		t.Errorf("%d hook duration series, want one per hook name", n)
	}
	waitFor(t, "no hook due", func() error {
		due, _, failing := a.Gauges()
		if due != 0 || failing {
			return fmt.Errorf("due %d, failing %v", due, failing)
		}
		return nil
	})
}
