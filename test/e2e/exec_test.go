//go:build linux

package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// execCLI runs `bagkeeper exec ARGS...` against pod p's sidecar.
func execCLI(t *testing.T, p *pod, args ...string) cliResult {
	t.Helper()
	return runCLI(t, 60*time.Second, append([]string{"exec", "--admin-socket", p.sock}, args...)...)
}

// TestExecThroughTheCLI runs commands in a unit's hook context with
// `bagkeeper exec`, through a pod other than the unit's: the hook tools
// answer inside, the output and the exit status come back as the
// command's, its writes commit when it exits 0, and mistakes are refused.
func TestExecThroughTheCLI(t *testing.T) {
	cc := newAppCluster(t, "web", actionCharm(t))
	cc.startPods(3)
	cc.settle("the install sequence")
	pods := cc.runningPods()
	via, target := pods[0], pods[1]
	unit := cc.unitOf(target)

	script := `echo "unit=$JUJU_UNIT_NAME action=${JUJU_ACTION_NAME-unset} rel=$(relation-ids replicas) seen=$(state-get exec-seen)"; echo oops >&2; state-set exec-seen=yes; exit ${CODE:-0}`
	r := execCLI(t, via, unit, "--", "CODE=3; "+script)
	if r.code != 3 || !strings.HasPrefix(r.stdout, "unit="+unit+" action=unset rel=replicas:") || !strings.HasSuffix(r.stdout, " seen=\n") || r.stderr != "oops\n" {
		t.Fatalf("exec exiting 3: %s", r)
	}
	// That one failed: its state-set did not commit. This one commits.
	if r = execCLI(t, via, unit, "--", script); r.code != 0 || !strings.HasSuffix(r.stdout, " seen=\n") {
		t.Fatalf("exec: %s", r)
	}
	if r = execCLI(t, pods[2], "--format", "json", unit, "--", "state-get", "exec-seen"); r.code != 0 {
		t.Fatalf("exec --format json: %s", r)
	}
	var out struct {
		Unit   string `json:"unit"`
		Code   *int   `json:"code"`
		Stdout string `json:"stdout"`
		Stderr string `json:"stderr"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.Unit != unit || out.Code == nil || *out.Code != 0 || out.Stdout != "yes\n" {
		t.Fatalf("exec --format json: %+v %v\n%s", out, err, r)
	}
	// Arguments are kept as they are, not read by a shell.
	if r = execCLI(t, via, unit, "--", "echo", "$JUJU_UNIT_NAME", "a b"); r.code != 0 || r.stdout != "$JUJU_UNIT_NAME a b\n" {
		t.Fatalf("exec with arguments: %s", r)
	}
	if r = execCLI(t, via, "--timeout", "500ms", unit, "--", "sleep 20"); r.code != 1 || !strings.Contains(r.stderr, "timed out after 500ms") {
		t.Fatalf("exec past its timeout: %s", r)
	}
	r = execCLI(t, via, "--all", "--", "echo $JUJU_UNIT_NAME")
	if r.code != 0 || strings.Count(r.stdout, "==") != 6 {
		t.Fatalf("exec --all: %s", r)
	}
	for _, u := range cc.units() {
		if !strings.Contains(r.stdout, "== "+u+" (exit 0) ==\n"+u+"\n") {
			t.Errorf("exec --all: no output of %s: %s", u, r)
		}
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"web/9", "--", "true"}, 1, `unit "web/9" not found`},
		{[]string{unit}, 2, "no command given"},
		{[]string{}, 2, "expected UNIT -- COMMAND"},
	} {
		if r := execCLI(t, via, c.args...); r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("exec %q: %s\nwant exit %d with %q", c.args, r, c.code, c.want)
		}
	}
	r = actionsCLI(t, via, "list", "--unit", unit)
	if r.code != 0 || !strings.Contains(r.stdout, "juju-exec") {
		t.Errorf("actions list does not show the commands: %s", r)
	}
	// A pod that stops releases its unit: no pod would run the command.
	gone := pods[2]
	gone.stop()
	r = execCLI(t, via, cc.unitOf(gone), "--", "true")
	if want := `unit "` + cc.unitOf(gone) + `" is released, not active`; r.code != 1 || !strings.Contains(r.stderr, want) {
		t.Errorf("exec on a released unit: %s\nwant exit 1 with %q", r, want)
	}
}
