//go:build linux

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// actionsYAML declares the actions of the e2e charm with actions.
const actionsYAML = `
greet:
  description: Says hello.
  params:
    who:
      type: string
      default: world
    times:
      type: integer
  required: [times]
block:
  description: Counts its runs, then waits for the file "unblock".
`

// The actions' code. dispatch hands an action to it, as an ops charm's
// dispatch would.
var actionScripts = map[string]string{
	"greet": `#!/bin/bash
set -eu
who=$(action-get who)
action-log "greeting $who"
action-set "greeting=hello $who" "times=$(action-get times)"
state-set "greeted=$who"
echo "said hello"
`,
	"block": `#!/bin/bash
set -eu
charm=$JUJU_CHARM_DIR
echo "$JUJU_ACTION_UUID" >>"$charm/block-runs"
echo $$ >"$charm/block.pid"
touch "$charm/blocking"
while [ ! -e "$charm/unblock" ]; do
	# The agent that runs this action is gone: so is the action.
	kill -0 "$PPID" 2>/dev/null || exit 1
	sleep 0.05
done
action-set "unblocked=yes"
`,
}

// actionCharm makes a copy of the e2e charm with actions.yaml, the actions
// and a dispatch that runs them.
func actionCharm(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "charm")
	if err := copyDir("testdata/charm", dir); err != nil {
		t.Fatal(err)
	}
	dispatch, err := os.ReadFile(filepath.Join(dir, "dispatch"))
	if err != nil {
		t.Fatal(err)
	}
	shebang, rest, _ := strings.Cut(string(dispatch), "\n")
	dispatch = []byte(shebang + "\ncase ${JUJU_DISPATCH_PATH:-} in actions/*) exec \"$JUJU_CHARM_DIR/$JUJU_DISPATCH_PATH\" ;; esac\n" + rest)
	files := map[string]string{"dispatch": string(dispatch), "actions.yaml": actionsYAML}
	for name, script := range actionScripts {
		files["actions/"+name] = script
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// actionsCLI runs `bagkeeper actions ARGS...` against pod p's sidecar.
func actionsCLI(t *testing.T, p *pod, args ...string) cliResult {
	t.Helper()
	return runCLI(t, 60*time.Second, append([]string{"actions", args[0], "--admin-socket", p.sock}, args[1:]...)...)
}

// task is `bagkeeper actions show --format json` decoded.
type task struct {
	ID      string         `json:"id"`
	Action  string         `json:"action"`
	Unit    string         `json:"unit"`
	Status  string         `json:"status"`
	Message string         `json:"message"`
	Results map[string]any `json:"results"`
	Log     []string       `json:"log"`
	Pod     string         `json:"pod"`
}

func showTask(t *testing.T, p *pod, id string) (task, cliResult) {
	t.Helper()
	r := actionsCLI(t, p, "show", "--format", "json", id)
	var tk task
	if r.code == 0 {
		if err := json.Unmarshal([]byte(r.stdout), &tk); err != nil {
			t.Fatalf("actions show: %v\n%s", err, r)
		}
	}
	return tk, r
}

// TestActionsThroughTheCLI runs charm actions on a three-sidecar cluster
// with the CLI, queued through a pod other than the unit's: the results,
// the log and the output come back as `juju run` prints them; bad
// parameters, unknown actions and units are refused with clear errors;
// --background returns at once and `actions show` and `actions list` tell
// the rest.
func TestActionsThroughTheCLI(t *testing.T) {
	cc := newAppCluster(t, "web", actionCharm(t))
	cc.startPods(3)
	cc.settle("the install sequence")
	pods := cc.runningPods()
	via, target := pods[0], pods[1]
	unit := cc.unitOf(target)

	r := actionsCLI(t, via, "run", unit, "greet", "who=bob", "times=3")
	if r.code != 0 {
		t.Fatalf("actions run: %s", r)
	}
	if want := "greeting: hello bob\ntimes: \"3\"\nsaid hello\n"; r.stdout != want {
		t.Errorf("actions run printed %q, want %q", r.stdout, want)
	}
	if want := "Running operation 1 with 1 task\n  - task 1 on unit-web-1\n\nWaiting for task 1...\n"; !strings.HasPrefix(r.stderr, want) || !strings.Contains(r.stderr, " greeting bob\n") {
		t.Errorf("actions run stderr %q, want it to start with %q and show the log message", r.stderr, want)
	}
	tk, sr := showTask(t, pods[2], "1")
	if sr.code != 0 || tk.Status != "completed" || tk.Unit != unit || tk.Action != "greet" || tk.Results["greeting"] != "hello bob" ||
		tk.Results["return-code"] != float64(0) || len(tk.Log) != 1 || !strings.HasSuffix(tk.Log[0], " greeting bob") || tk.Pod == "" {
		t.Errorf("actions show 1: %+v\n%s", tk, sr)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{unit, "greet", "times=abc"}, "validation failed: times: got string, want integer"},
		{[]string{unit, "greet"}, "validation failed: (root): missing property 'times'"},
		{[]string{unit, "greet", "times=1", "colour=red"}, "additional properties 'colour' not allowed"},
		{[]string{unit, "nope"}, `action "nope" not defined on unit "web/1"`},
		{[]string{"web/9", "greet", "times=1"}, `unit "web/9" not found`},
	} {
		r := actionsCLI(t, via, append([]string{"run"}, c.args...)...)
		if r.code != 1 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("actions run %q: %s\nwant exit 1 with %q", c.args, r, c.want)
		}
	}

	r = actionsCLI(t, pods[2], "run", "--background", cc.unitOf(pods[0]), "greet", "times=1")
	if r.code != 0 || r.stdout != "Scheduled operation 2 with task 2\nCheck task status with 'bagkeeper actions show 2'\n" {
		t.Fatalf("actions run --background: %s", r)
	}
	waitFor(t, startTimeout, "the background action to complete", func() (bool, string) {
		tk, r := showTask(t, via, "2")
		return tk.Status == "completed" && tk.Results["greeting"] == "hello world", r.String()
	})
	r = actionsCLI(t, via, "list", "--unit", unit)
	if r.code != 0 || !strings.Contains(r.stdout, "1   web/1  greet   completed") || strings.Contains(r.stdout, "web/0") {
		t.Errorf("actions list --unit %s: %s", unit, r)
	}
}

// TestActionOfAKilledPodIsFailedNotRunAgain kills -9 the pod whose action
// runs: once the pod is back, the action is reported failed with a message
// that says what happened, and its code ran exactly once.
func TestActionOfAKilledPodIsFailedNotRunAgain(t *testing.T) {
	cc := newAppCluster(t, "web", actionCharm(t))
	cc.startPods(3)
	cc.settle("the install sequence")
	pods := cc.runningPods()
	via, target := pods[0], pods[2]
	unit := cc.unitOf(target)
	defer cc.touch(target, "unblock") // never leave the action waiting
	defer func() {
		// The action's process, if it outlived its pod.
		if pid, err := strconv.Atoi(strings.TrimSpace(cc.read(target, "block.pid"))); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}()

	r := actionsCLI(t, via, "run", "--background", unit, "block")
	if r.code != 0 {
		t.Fatalf("actions run --background: %s", r)
	}
	id := strings.Fields(r.stdout)[2]
	cc.waitFile(target, "blocking")
	tk, sr := showTask(t, via, id)
	if tk.Status != "running" {
		t.Fatalf("the blocked action is not running: %+v\n%s", tk, sr)
	}
	target.kill()
	target.start()
	waitFor(t, startTimeout, "the action to be reported failed", func() (bool, string) {
		tk, r := showTask(t, via, id)
		return tk.Status == "failed", r.String()
	})
	tk, _ = showTask(t, via, id)
	if !strings.Contains(tk.Message, "the unit's agent stopped while the action was running (its pod died or was replaced); the action was not run again") {
		t.Errorf("message %q does not say what happened", tk.Message)
	}
	cc.touch(target, "unblock")
	cc.settle("the restarted pod")
	// The restarted agent runs the next action: the failed one stays failed.
	r = actionsCLI(t, via, "run", unit, "greet", "times=2")
	if r.code != 0 {
		t.Fatalf("an action after the restart: %s", r)
	}
	if runs := cc.read(target, "block-runs"); runs != id+"\n" {
		t.Errorf("the action's code ran %q times (one line per run), want exactly once", runs)
	}
	if tk, _ := showTask(t, via, id); tk.Status != "failed" {
		t.Errorf("the killed action is %s after the restart, want failed", tk.Status)
	}
	r = actionsCLI(t, via, "run", unit, "block")
	if r.code != 0 {
		t.Fatalf("a second block action (unblocked): %s", r)
	}
	if runs := strings.Fields(cc.read(target, "block-runs")); len(runs) != 2 || runs[0] != id {
		t.Errorf("block runs %q, want the killed one once and the new one once", runs)
	}
}
