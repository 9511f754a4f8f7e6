package agent

import (
	"context"
	"encoding/json"
	"errors"
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

const testActionsYAML = `
backup:
  description: Back the data up.
  params:
    target:
      type: string
      default: s3
    count:
      type: integer
  required: [count]
broken:
  description: Fails on purpose.
crash:
  description: Exits 3.
`

// actionCharm is charm() with actions.yaml and the actions' code in
// dispatch.
func actionCharm(t *testing.T, script string) string {
	t.Helper()
	dir := charm(t, script)
	if err := os.WriteFile(filepath.Join(dir, "actions.yaml"), []byte(testActionsYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// enqueue validates params as the admin API does and queues the action.
func enqueue(t *testing.T, s *statetest.Store, a *testAgent, unit, name string, params map[string]any) int64 {
	t.Helper()
	spec := a.cfg.Charm.Actions[name]
	if spec == nil {
		t.Fatalf("no action %s", name)
	}
	js, err := spec.ValidateParams(params)
	if err != nil {
		t.Fatal(err)
	}
	return s.Must(state.EnqueueActionOp(unit, name, js)).GetOps()[0].GetActionId()
}

func waitAction(t *testing.T, s *statetest.Store, id int64, status string) *state.Action {
	t.Helper()
	var act *state.Action
	waitFor(t, fmt.Sprintf("action %d to be %s", id, status), func() error {
		var ok bool
		if act, ok = s.State().Action(id); !ok || act.Status != status {
			return fmt.Errorf("action: %+v", act)
		}
		return nil
	})
	return act
}

func results(t *testing.T, a *state.Action) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(a.ResultsJSON, &m); err != nil {
		t.Fatalf("results %q: %v", a.ResultsJSON, err)
	}
	return m
}

const actionScript = `
case "$JUJU_DISPATCH_PATH" in
actions/backup)
	echo "$JUJU_ACTION_NAME $JUJU_ACTION_UUID $JUJU_ACTION_TAG hook=${JUJU_HOOK_NAME-unset} unit=$JUJU_UNIT_NAME" > "$JUJU_CHARM_DIR/action-env"
	echo run >> "$JUJU_CHARM_DIR/backup-runs"
	action-log "starting"
	action-set "result.target=$(action-get target)" "count=$(action-get count)" "all=$(action-get --format json)"
	state-set "backed-up=yes"
	echo to-stdout
	echo to-stderr >&2 ;;
actions/broken)
	action-fail "disk full"
	state-set "broken=ran" ;;
actions/crash)
	state-set "crash=ran"
	exit 3 ;;
esac
if [ -n "$JUJU_HOOK_NAME" ]; then
	action-get 2> "$JUJU_CHARM_DIR/hook-action-get"
fi`

func TestActionRunsWithJujusEnvironmentAndCommitsItsResults(t *testing.T) {
	s := newMemStore(t)
	twoUnits(s)
	a := startAgent(t, s, actionCharm(t, actionScript))
	id := enqueue(t, s, a, "app/0", "backup", map[string]any{"count": 3})
	act := waitAction(t, s, id, state.ActionCompleted)
	env, _ := os.ReadFile(filepath.Join(a.dir, "action-env"))
	if want := fmt.Sprintf("backup %d action-%d hook=unset unit=app/0\n", id, id); string(env) != want {
		t.Fatalf("environment %q, want %q", env, want)
	}
	r := results(t, act)
	if r["count"] != "3" || r["result"].(map[string]any)["target"] != "s3" || r["all"] != `{"count":3,"target":"s3"}` ||
		r["return-code"] != float64(0) || r["stdout"] != "to-stdout\n" || r["stderr"] != "to-stderr\n" {
		t.Fatalf("results %v", r)
	}
	if len(act.Log) != 1 || act.Log[0].Message != "starting" || act.Message != "" || act.Pod != "pod-1" || act.Member != "app-0/x" {
		t.Fatalf("action %+v", act)
	}
	if s.State().CharmState("app/0").Value("backed-up") != "yes" {
		t.Fatal("the action's state-set did not commit with its end")
	}
	// Outside an action the tools fail as Juju's do.
	waitFor(t, "a hook to call action-get", func() error {
		b, err := os.ReadFile(filepath.Join(a.dir, "hook-action-get"))
		if err != nil || string(b) != "ERROR not running an action\n" {
			return fmt.Errorf("%q %v", b, err)
		}
		return nil
	})
}

func TestFailedActionsKeepTheirResultsAndWritesOnlyOnExitZero(t *testing.T) {
	s := newMemStore(t)
	twoUnits(s)
	a := startAgent(t, s, actionCharm(t, actionScript))
	broken := enqueue(t, s, a, "app/0", "broken", nil)
	crash := enqueue(t, s, a, "app/0", "crash", nil)
	act := waitAction(t, s, broken, state.ActionFailed)
	if act.Message != "disk full" {
		t.Fatalf("%+v", act)
	}
	act = waitAction(t, s, crash, state.ActionFailed)
	if act.Message != "exit status 3" || results(t, act)["return-code"] != float64(3) {
		t.Fatalf("%+v %s", act, act.ResultsJSON)
	}
	cs := s.State().CharmState("app/0")
	if cs.Value("broken") != "ran" || cs.Value("crash") != "" {
		t.Fatalf("charm state %v: action-fail's action exited 0 and commits; the crashed one does not", cs.Map())
	}
	// Actions ran in the order they were queued, each once.
	if broken >= crash || !act.Started.After(mustAction(s, broken).Completed.Add(-time.Nanosecond)) {
		t.Fatal("actions overlapped or ran out of order")
	}
}

func mustAction(s *statetest.Store, id int64) *state.Action {
	a, _ := s.State().Action(id)
	return a
}

// An action left running by an earlier life of the agent is failed with a
// clear message, never run again.
func TestActionRunningFromAnEarlierLifeIsFailedNotRunAgain(t *testing.T) {
	s := newMemStore(t)
	twoUnits(s)
	js, _ := json.Marshal(map[string]any{"count": 1})
	id := s.Must(state.EnqueueActionOp("app/0", "backup", js)).GetOps()[0].GetActionId()
	s.Must(state.StartActionOp(id, "app-0/x", "pod-0"))
	next := s.Must(state.EnqueueActionOp("app/0", "broken", nil)).GetOps()[0].GetActionId()
	a := startAgent(t, s, actionCharm(t, actionScript))
	act := waitAction(t, s, id, state.ActionFailed)
	if !strings.HasPrefix(act.Message, ActionAbortedMessage) || !strings.Contains(act.Message, "in pod pod-0") {
		t.Fatalf("message %q", act.Message)
	}
	waitAction(t, s, next, state.ActionFailed)
	if _, err := os.Stat(filepath.Join(a.dir, "backup-runs")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the interrupted action ran again")
	}
}

// A charm without dispatch runs actions/<name>; an action with no code
// fails as Juju says.
func TestActionExecutableWithoutDispatch(t *testing.T) {
	s := newMemStore(t)
	twoUnits(s)
	dir := t.TempDir()
	for name, content := range map[string]string{
		"metadata.yaml": "name: app\n",
		"actions.yaml":  "hello:\n  params:\n    who: {type: string}\nmissing: {}\n",
		"actions/hello": "#!/bin/bash\naction-set \"greeting=hello $(action-get who)\"\n",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	a := startAgent(t, s, dir)
	id := enqueue(t, s, a, "app/0", "hello", map[string]any{"who": "world"})
	if r := results(t, waitAction(t, s, id, state.ActionCompleted)); r["greeting"] != "hello world" {
		t.Fatalf("%v", r)
	}
	id = enqueue(t, s, a, "app/0", "missing", nil)
	if act := waitAction(t, s, id, state.ActionFailed); act.Message != `action not implemented on unit "app/0"` {
		t.Fatalf("%q", act.Message)
	}
}

func TestActionParamsAreValidatedWithDefaults(t *testing.T) {
	specs, err := ParseActions([]byte(testActionsYAML))
	if err != nil {
		t.Fatal(err)
	}
	b := specs["backup"]
	for _, c := range []struct {
		params map[string]any
		want   string
		err    string
	}{
		{map[string]any{"count": 2}, `{"count":2,"target":"s3"}`, ""},
		{map[string]any{"count": 2, "target": "disk"}, `{"count":2,"target":"disk"}`, ""},
		{nil, "", "validation failed: (root): missing property 'count'"},
		{map[string]any{"count": "two"}, "", "validation failed: count: got string, want integer"},
		{map[string]any{"count": 1, "extra": true}, "", "validation failed: (root): additional properties 'extra' not allowed"},
	} {
		got, err := b.ValidateParams(c.params)
		if c.err != "" {
			if err == nil || err.Error() != c.err {
				t.Errorf("%v: err %v, want %q", c.params, err, c.err)
			}
			continue
		}
		if err != nil || string(got) != c.want {
			t.Errorf("%v: %s %v, want %s", c.params, got, err, c.want)
		}
	}
	for doc, want := range map[string]string{
		"Bad_Name: {}\n":                        "bad action name Bad_Name",
		"juju-run: {}\n":                        "cannot use action name juju-run: juju- prefix is reserved",
		"x:\n  params:\n    a: {$ref: '#/b'}\n": `action x: schema key "$ref" not compatible with this version of juju`,
		"x:\n  params:\n    a: {type: bogus}\n": "invalid params schema for action schema x",
		"x:\n  description: [1]\n":              `action x: value for schema key "description" must be a string`,
	} {
		if _, err := ParseActions([]byte(doc)); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%q: %v, want %q", doc, err, want)
		}
	}
}

// The hook runner of another container runs actions as it runs hooks, and
// sends back their output.
func TestRemoteHookRunnerRunsActions(t *testing.T) {
	s := newMemStore(t)
	twoUnits(s)
	dir := actionCharm(t, actionScript)
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
	id := enqueue(t, s, a, "app/0", "backup", map[string]any{"count": 7, "target": "tape"})
	r := results(t, waitAction(t, s, id, state.ActionCompleted))
	if r["count"] != "7" || r["result"].(map[string]any)["target"] != "tape" || r["stdout"] != "to-stdout\n" || r["stderr"] != "to-stderr\n" || r["return-code"] != float64(0) {
		t.Fatalf("results %v", r)
	}
}

// Results that, with the output, are over the limit once encoded: the
// action fails without them, and says why, instead of retrying forever.
func TestActionResultsOverTheLimitFailTheAction(t *testing.T) {
	s := newMemStore(t)
	twoUnits(s)
	a := startAgent(t, s, actionCharm(t, `
if [ "${JUJU_DISPATCH_PATH:-}" = actions/broken ]; then
	action-set "big=$(head -c 100000 /dev/zero | tr '\0' x)"
	head -c 16384 /dev/zero | tr '\0' '\1'
	head -c 16384 /dev/zero | tr '\0' '\1' >&2
fi`))
	id := enqueue(t, s, a, "app/0", "broken", nil)
	act := waitAction(t, s, id, state.ActionFailed)
	if !strings.HasPrefix(act.Message, "the action's results were not committed: action results of ") || len(act.ResultsJSON) != 0 {
		t.Fatalf("message %q, results %d bytes", act.Message, len(act.ResultsJSON))
	}
}
