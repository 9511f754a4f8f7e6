package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/state/statetest"
)

// execScript reads through the hook tools and writes through them, as an
// operator's command might.
const execScript = `[ "$PWD" -ef "$JUJU_CHARM_DIR" ] && in=charm-dir
echo "unit=$JUJU_UNIT_NAME ctx=${JUJU_CONTEXT_ID:+set} in=$in action=${JUJU_ACTION_NAME-unset} dispatch=${JUJU_DISPATCH_PATH-unset} hook=${JUJU_HOOK_NAME-unset}"
echo "rel=$(relation-ids cluster) peer=$(relation-get -r "$(relation-ids cluster)" colour app/1) state=$(state-get seen) leader=$(leader-get mood)"
action-get >/dev/null 2>&1 || echo "action-get refused" >&2
state-set "exec=ran"
exit ${CODE:-0}`

// joinedPeer waits until app/0 has seen app/1 join the peer relation.
func joinedPeer(t *testing.T, s *statetest.Store, rel int64) {
	t.Helper()
	waitFor(t, "app/0 to see app/1 join", func() error {
		cur, err := DecodeCursor(s.State().Cursor("app/0"))
		if err != nil {
			return err
		}
		if rc := cur.Relations[rel]; rc == nil || rc.Units == nil {
			return fmt.Errorf("cursor %s", s.State().Cursor("app/0"))
		} else if _, ok := rc.Units["app/1"]; !ok {
			return fmt.Errorf("cursor %s", s.State().Cursor("app/0"))
		}
		return nil
	})
}

func execIn(t *testing.T, s *statetest.Store, command string, timeout time.Duration) int64 {
	t.Helper()
	return s.Must(state.EnqueueActionOp("app/0", state.ExecAction, ExecParamsJSON(command, timeout))).GetOps()[0].GetActionId()
}

func seedExec(s *statetest.Store, rel int64) {
	s.Must(state.UpdateBagOp(rel, "app/1", map[string]string{"colour": "green"}),
		state.UpdateCharmStateOp("app/0", map[string]string{"seen": "before"}),
		state.UpdateLeaderSettingsOp(map[string]string{"mood": "calm"}))
}

func checkExecResults(t *testing.T, s *statetest.Store, rel int64, id int64) {
	t.Helper()
	act := waitAction(t, s, id, state.ActionCompleted)
	r := results(t, act)
	want := fmt.Sprintf("unit=app/0 ctx=set in=charm-dir action=unset dispatch=unset hook=unset\nrel=cluster:%d peer=green state=before leader=calm\n", rel)
	if r["stdout"] != want || r["stderr"] != "action-get refused\n" || r["return-code"] != float64(0) {
		t.Fatalf("results %q, want stdout %q", r, want)
	}
	if got := s.State().CharmState("app/0").Value("exec"); got != "ran" {
		t.Fatalf("the command's state-set did not commit: %q", got)
	}
}

// bagkeeper exec: the command runs in the unit's hook context (the tools
// work, the relations are those the unit has seen), not in an action's,
// and its writes commit when it exits 0.
func TestExecRunsACommandInTheUnitsHookContext(t *testing.T) {
	s := newMemStore(t)
	rel := twoUnits(s)
	seedExec(s, rel)
	a := startAgent(t, s, charm(t, ""))
	joinedPeer(t, s, rel)
	checkExecResults(t, s, rel, execIn(t, s, execScript, 0))
	if _, err := os.Stat(filepath.Join(a.dir, "actions")); err == nil {
		t.Fatal("an actions directory appeared")
	}
}

// A command that exits non-zero fails, keeps its output and code, and its
// writes do not commit; one past its timeout is killed.
func TestExecExitCodeAndTimeout(t *testing.T) {
	s := newMemStore(t)
	rel := twoUnits(s)
	seedExec(s, rel)
	a := startAgent(t, s, charm(t, ""))
	joinedPeer(t, s, rel)
	id := execIn(t, s, "CODE=7; "+execScript, 0)
	act := waitAction(t, s, id, state.ActionFailed)
	if r := results(t, act); r["return-code"] != float64(7) || !strings.Contains(r["stdout"].(string), "peer=green") || act.Message != "exit status 7" {
		t.Fatalf("%+v %s", act, act.ResultsJSON)
	}
	if s.State().CharmState("app/0").Value("exec") != "" {
		t.Fatal("a failed command's writes committed")
	}
	start := time.Now()
	id = execIn(t, s, "echo started; sleep 30", 300*time.Millisecond)
	act = waitAction(t, s, id, state.ActionFailed)
	if act.Message != "timed out after 300ms" || results(t, act)["stdout"] != "started\n" || time.Since(start) > 15*time.Second {
		t.Fatalf("%+v %s", act, act.ResultsJSON)
	}
	_ = a
}

// The hook runner of another container runs commands too, with its own
// charm directory and tools.
func TestRemoteHookRunnerRunsExec(t *testing.T) {
	s := newMemStore(t)
	rel := twoUnits(s)
	seedExec(s, rel)
	dir := charm(t, "")
	a := startAgent(t, s, dir, func(c *Config) { c.Runner = NewRemoteRunner() })
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
	joinedPeer(t, s, rel)
	id := execIn(t, s, execScript, 0)
	act := waitAction(t, s, id, state.ActionCompleted)
	if _, ok := results(t, act)["stdout"]; !ok {
		t.Fatalf("%s", act.ResultsJSON)
	}
	checkExecResults(t, s, rel, id)
	id = execIn(t, s, "sleep 30", 300*time.Millisecond)
	if act := waitAction(t, s, id, state.ActionFailed); act.Message != "timed out after 300ms" {
		t.Fatalf("%+v", act)
	}
}
