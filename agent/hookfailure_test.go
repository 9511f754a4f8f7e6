package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
)

// failUntilFixed fails hook (exit 3, after writing more than the tail
// keeps, ending with a line naming the attempt) until the charm directory
// has a file "fixed".
func failUntilFixed(hook string) string {
	return fmt.Sprintf(`
if [ "$JUJU_HOOK_NAME" = %s ] && [ ! -e "$JUJU_CHARM_DIR/fixed" ]; then
	for i in $(seq 1 200); do echo "noise line $i of a failing hook"; done
	n=$(grep -c '^%s' "$JUJU_CHARM_DIR/hooks.log")
	echo "cannot go on: no fixed file (run $n)" >&2
	exit 3
fi`, hook, hook)
}

func TestFailedHookRecordsItsOutputTailAttemptsAndHistory(t *testing.T) {
	s := newMemStore(t)
	twoUnits(s)
	dir := charm(t, failUntilFixed("config-changed"))
	a := startAgent(t, s, dir)
	waitFor(t, "config-changed to fail three times", func() error {
		if e := s.State().UnitExtra("app/0"); e.HookErrorAttempt < 3 {
			return fmt.Errorf("hook error %q attempt %d", e.HookError, e.HookErrorAttempt)
		}
		return nil
	})
	e := s.State().UnitExtra("app/0")
	if n := a.HookAttempt(); n < 3 {
		t.Errorf("the attempt gauge says %d", n)
	}
	if e.HookError != "config-changed" || e.HookErrorExitCode != 3 || !strings.Contains(e.HookErrorMessage, "exited with status 3") {
		t.Fatalf("failure %+v", e)
	}
	if len(e.HookErrorOutputTail) > state.MaxHookOutputTail || len(e.HookErrorOutputTail) < state.MaxHookOutputTail-100 ||
		!strings.HasSuffix(e.HookErrorOutputTail, fmt.Sprintf("cannot go on: no fixed file (run %d)\n", e.HookErrorAttempt)) || strings.Contains(e.HookErrorOutputTail, "noise line 1 ") {
		t.Fatalf("output tail of %d bytes: ...%q", len(e.HookErrorOutputTail), e.HookErrorOutputTail[max(0, len(e.HookErrorOutputTail)-200):])
	}
	// The agent's clock stands still in these tests: the next attempt is
	// that clock plus the backoff of this attempt (50ms doubling to 200ms).
	if want := a.retryDelay(e.HookErrorAttempt); !e.HookErrorNextAttempt.Equal(s.Now().Add(want)) {
		t.Fatalf("next attempt %v, want now + %v", e.HookErrorNextAttempt.Sub(s.Now()), want)
	}
	for attempt, want := range map[int]time.Duration{1: 50 * time.Millisecond, 2: 100 * time.Millisecond, 3: 200 * time.Millisecond, 9: 200 * time.Millisecond} {
		if got := a.retryDelay(attempt); got != want {
			t.Errorf("backoff after attempt %d: %v, want %v", attempt, got, want)
		}
	}
	var failures int
	for _, h := range e.History {
		if h.Hook == "config-changed" {
			if h.OK || h.ExitCode != 3 || h.Member != "app-0/x" || !strings.Contains(h.Error, "status 3") {
				t.Fatalf("history record of a failure: %+v", h)
			}
			failures++
		}
	}
	if failures < 3 || e.History[0].Hook != "install" || !e.History[0].OK {
		t.Fatalf("history %+v", e.History)
	}

	if err := os.WriteFile(filepath.Join(dir, "fixed"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "config-changed to succeed", func() error {
		if e := s.State().UnitExtra("app/0"); e.HookError != "" {
			return fmt.Errorf("still failing: attempt %d", e.HookErrorAttempt)
		}
		return nil
	})
	e = s.State().UnitExtra("app/0")
	if n := a.HookAttempt(); n != 0 {
		t.Errorf("the attempt gauge says %d after a success", n)
	}
	if e.HookErrorAttempt != 0 || e.HookErrorOutputTail != "" || e.HookErrorExitCode != 0 || !e.HookErrorNextAttempt.IsZero() {
		t.Fatalf("a success left failure details: %+v", e)
	}
	var ok bool
	for _, h := range e.History {
		ok = ok || h.Hook == "config-changed" && h.OK
	}
	if !ok {
		t.Fatalf("the success is not in the history: %+v", e.History)
	}
}

func TestRetryRequestRunsTheFailedHookAtOnce(t *testing.T) {
	s := newMemStore(t)
	twoUnits(s)
	dir := charm(t, failUntilFixed("install"))
	a := startAgent(t, s, dir, func(c *Config) { c.RetryDelay, c.MaxRetryDelay = time.Hour, time.Hour })
	count := func() int { return strings.Count(strings.Join(a.hooks(), "\n"), "install") }
	waitFor(t, "install to fail", func() error {
		if e := s.State().UnitExtra("app/0"); e.HookError != "install" {
			return fmt.Errorf("hook error %q", e.HookError)
		}
		return nil
	})
	if e := s.State().UnitExtra("app/0"); e.HookErrorAttempt != 1 || e.HookErrorNextAttempt.Sub(s.Now()) != time.Hour {
		t.Fatalf("first failure: attempt %d, next in %v", e.HookErrorAttempt, e.HookErrorNextAttempt.Sub(s.Now()))
	}
	// Only a retry request can explain another attempt within the hour.
	s.Must(state.RequestHookRetryOp("app/0"))
	waitFor(t, "the requested retry to fail again", func() error {
		if e := s.State().UnitExtra("app/0"); e.HookErrorAttempt != 2 {
			return fmt.Errorf("attempt %d, install ran %d times", e.HookErrorAttempt, count())
		}
		return nil
	})
	if n := count(); n != 2 {
		t.Fatalf("install ran %d times, want 2", n)
	}
	if err := os.WriteFile(filepath.Join(dir, "fixed"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s.Must(state.RequestHookRetryOp("app/0"))
	waitFor(t, "the requested retry to succeed", func() error {
		if e := s.State().UnitExtra("app/0"); e.HookError != "" {
			return fmt.Errorf("hook error %q attempt %d", e.HookError, e.HookErrorAttempt)
		}
		if !strings.Contains(strings.Join(a.hooks(), "\n"), "start") {
			return errors.New("start has not run after install")
		}
		return nil
	})
	if err := s.Do(state.RequestHookRetryOp("app/0")); err == nil || !strings.Contains(err.Error(), "no failed hook") {
		t.Fatalf("a retry request with no failed hook: %v", err)
	}
}

func TestHookHistoryIsBoundedAndInOrder(t *testing.T) {
	s := newMemStore(t)
	rel := twoUnits(s)
	dir := charm(t, "")
	a := startAgent(t, s, dir)
	ran := func() []string { return a.hooks() }
	// Each change of app/1's bag is a cluster-relation-changed for app/0.
	for i := range 25 {
		before := len(ran())
		s.Must(state.UpdateBagOp(rel, "app/1", map[string]string{"n": fmt.Sprint(i)}))
		waitFor(t, "the relation-changed of a change", func() error {
			if h := s.State().UnitExtra("app/0").History; len(ran()) <= before || len(h) == 0 || h[len(h)-1].Hook != "cluster-relation-changed" {
				return errors.New("not yet")
			}
			return nil
		})
	}
	waitFor(t, "the history to hold every hook run", func() error {
		h := s.State().UnitExtra("app/0").History
		log := ran()
		if len(log) < state.MaxHookHistory+5 {
			return fmt.Errorf("%d hooks ran", len(log))
		}
		if len(h) != state.MaxHookHistory {
			return fmt.Errorf("%d records", len(h))
		}
		// The history is the last hooks run, in the order they ran.
		for i, r := range h {
			if want, got := log[len(log)-len(h)+i], strings.TrimSpace(r.Hook+" "+r.RemoteUnit); want != got {
				return fmt.Errorf("record %d is %q, the log says %q", i, got, want)
			}
		}
		return nil
	})
	last := s.State().UnitExtra("app/0").History[state.MaxHookHistory-1]
	if !last.OK || last.Relation != fmt.Sprintf("cluster:%d", rel) || last.RemoteUnit != "app/1" || last.Member != "app-0/x" || last.Started.IsZero() {
		t.Fatalf("last record %+v", last)
	}
}

// A hook run by a remote hook runner (another container of the pod) has
// its output tail recorded as well: the runner sends it with the result.
func TestFailedHookOfARemoteRunnerRecordsItsOutputTail(t *testing.T) {
	s := newMemStore(t)
	twoUnits(s)
	dir := charm(t, failUntilFixed("install"))
	remote := NewRemoteRunner()
	a := startAgent(t, s, dir, func(c *Config) { c.Runner = remote })
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
	waitFor(t, "install to fail in the remote runner", func() error {
		if e := s.State().UnitExtra("app/0"); e.HookError != "install" || e.HookErrorAttempt < 1 {
			return fmt.Errorf("hook error %q attempt %d", e.HookError, e.HookErrorAttempt)
		}
		return nil
	})
	e := s.State().UnitExtra("app/0")
	if e.HookErrorExitCode != 3 || len(e.HookErrorOutputTail) > state.MaxHookOutputTail || !strings.Contains(e.HookErrorOutputTail, "cannot go on: no fixed file (run ") {
		t.Fatalf("failure recorded from the remote runner: exit %d, tail ...%q", e.HookErrorExitCode, e.HookErrorOutputTail[max(0, len(e.HookErrorOutputTail)-100):])
	}
}

func TestClipKeepsWholeCharacters(t *testing.T) {
	if got := clip("short", 10); got != "short" {
		t.Errorf("%q", got)
	}
	if got := clip("ab\u00e9cd", 3); got != "ab…" {
		t.Errorf("clipped inside a character: %q", got)
	}
}
