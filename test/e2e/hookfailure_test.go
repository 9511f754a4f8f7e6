//go:build linux

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// failingCharm is the e2e charm whose config-changed fails on unit web/1
// (exit 3, saying why) until the file "fixed" exists in its charm
// directory.
func failingCharm(t *testing.T) string {
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
	fail := `if [ "$JUJU_HOOK_NAME" = config-changed ] && [ "$JUJU_UNIT_NAME" = web/1 ] && [ ! -e "$JUJU_CHARM_DIR/fixed" ]; then
	echo "reading the settings of $JUJU_UNIT_NAME"
	echo "config-changed cannot go on: the file fixed is missing" >&2
	exit 3
fi
`
	if err := os.WriteFile(filepath.Join(dir, "dispatch"), []byte(shebang+"\n"+fail+rest), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// showUnit is `bagkeeper show-unit --format json` decoded, in part.
type showUnit struct {
	Name      string `json:"name"`
	State     string `json:"state"`
	HookError *struct {
		Hook        string `json:"hook"`
		ExitCode    int    `json:"exit_code"`
		Attempt     int    `json:"attempt"`
		NextAttempt string `json:"next_attempt"`
		OutputTail  string `json:"output_tail"`
	} `json:"hook_error"`
	History []struct {
		Hook     string `json:"hook"`
		OK       bool   `json:"ok"`
		ExitCode int    `json:"exit_code"`
		Member   string `json:"member"`
	} `json:"hook_history"`
}

func showUnitOf(t *testing.T, p *pod, unit string) (showUnit, cliResult) {
	t.Helper()
	r := runCLI(t, 30*time.Second, "show-unit", "--admin-socket", p.sock, "--format", "json", unit)
	var su showUnit
	if r.code == 0 {
		if err := json.Unmarshal([]byte(r.stdout), &su); err != nil {
			t.Fatalf("show-unit %s: %v\n%s", unit, err, r)
		}
	}
	return su, r
}

// TestFailedHookIsShownAndRetriedOnRequest: a unit whose config-changed
// fails shows the attempt, the next attempt and the hook's output in status
// and show-unit, from any pod; 'unit retry' runs it again at once (the
// backoff is ten minutes), and once its cause is fixed a retry makes it
// succeed, which the unit's hook history then shows.
func TestFailedHookIsShownAndRetriedOnRequest(t *testing.T) {
	cc := newAppCluster(t, "web", failingCharm(t), "--hook-retry-delay", "10m")
	cc.startPods(3)
	pods := cc.runningPods()
	var failing *pod
	for _, p := range pods {
		if cc.unitOf(p) == "web/1" {
			failing = p
		}
	}
	if failing == nil {
		t.Fatalf("no pod holds web/1")
	}
	other := pods[0]
	if other == failing {
		other = pods[2]
	}

	waitFor(t, startTimeout, "status to show the failed config-changed of web/1", func() (bool, string) {
		r := runCLI(t, 30*time.Second, "status", "--admin-socket", other.sock)
		return r.code == 0 && strings.Contains(r.stdout, "error: hook failed: config-changed (attempt 1, next in "), r.String()
	})
	r := runCLI(t, 30*time.Second, "status", "--admin-socket", other.sock, "--format", "json")
	var st struct {
		Units []struct {
			Name        string `json:"name"`
			HookError   string `json:"hook_error"`
			Attempt     int    `json:"hook_error_attempt"`
			NextAttempt string `json:"hook_error_next_attempt"`
		} `json:"units"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("status json: %v\n%s", err, r)
	}
	for _, u := range st.Units {
		if u.Name == "web/1" {
			next, err := time.Parse(time.RFC3339Nano, u.NextAttempt)
			if u.HookError != "config-changed" || u.Attempt != 1 || err != nil || time.Until(next) < 5*time.Minute {
				t.Errorf("status json of web/1: %+v (%v)", u, err)
			}
		}
	}
	su, r := showUnitOf(t, other, "web/1")
	if r.code != 0 || su.HookError == nil || su.HookError.Hook != "config-changed" || su.HookError.ExitCode != 3 || su.HookError.Attempt != 1 ||
		!strings.Contains(su.HookError.OutputTail, "reading the settings of web/1\n") || !strings.Contains(su.HookError.OutputTail, "the file fixed is missing") {
		t.Fatalf("show-unit web/1: %+v\n%s", su.HookError, r)
	}

	// A retry while the cause is still there: attempt 2 fails at once.
	if r := runCLI(t, 30*time.Second, "unit", "retry", "--admin-socket", other.sock, "web/1"); r.code != 0 || !strings.Contains(r.stdout, "retry of config-changed requested (attempt 1 failed last)") {
		t.Fatalf("unit retry: %s", r)
	}
	waitFor(t, startTimeout, "the retried config-changed to fail again", func() (bool, string) {
		su, r := showUnitOf(t, failing, "web/1")
		return su.HookError != nil && su.HookError.Attempt == 2, r.String()
	})

	cc.touch(failing, "fixed")
	asked := time.Now()
	if r := runCLI(t, 30*time.Second, "unit", "retry", "--admin-socket", failing.sock, "web/1"); r.code != 0 {
		t.Fatalf("unit retry: %s", r)
	}
	waitFor(t, startTimeout, "the retried config-changed to succeed", func() (bool, string) {
		su, r := showUnitOf(t, other, "web/1")
		return su.HookError == nil && r.code == 0, r.String()
	})
	if d := time.Since(asked); d > time.Minute {
		t.Fatalf("the retry took %v: the ten-minute backoff ran out instead", d)
	}
	su, r = showUnitOf(t, other, "web/1")
	var fails, oks int
	for _, h := range su.History {
		if h.Hook == "config-changed" && !h.OK && h.ExitCode == 3 {
			fails++
		}
		if h.Hook == "config-changed" && h.OK {
			oks++
		}
	}
	if fails != 2 || oks != 1 || su.History[0].Hook != "install" || su.History[len(su.History)-1].Member == "" {
		t.Fatalf("history of web/1: %+v\n%s", su.History, r)
	}
	text := runCLI(t, 30*time.Second, "show-unit", "--admin-socket", other.sock, "web/1")
	if text.code != 0 || !strings.Contains(text.stdout, "web/1:\n  state: active\n") || !strings.Contains(text.stdout, "config-changed failed (exit 3)") || strings.Contains(text.stdout, "hook-error:") {
		t.Errorf("show-unit web/1: %s", text)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"unit", "retry", "web/1"}, "unit web/1 has no failed hook to retry"},
		{[]string{"unit", "retry", "web/9"}, "unit web/9 does not exist"},
		{[]string{"show-unit", "web/9"}, `unit "web/9" does not exist`},
	} {
		args := append(append(c.args[:len(c.args)-1:len(c.args)-1], "--admin-socket", other.sock), c.args[len(c.args)-1])
		if r := runCLI(t, 30*time.Second, args...); r.code != 1 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%q: %s\nwant exit 1 with %q", c.args, r, c.want)
		}
	}
	if logs := failing.allLogs() + other.allLogs(); !strings.Contains(logs, "hook retry requested by an operator") {
		t.Errorf("the sidecars did not log the retry request")
	}
}
