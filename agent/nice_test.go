package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bagkeeper/bagkeeper/test/wait"
)

// niceOf returns the nice value in a /proc/<pid>/stat or
// /proc/<pid>/task/<tid>/stat file's content (field 19; the command name,
// field 2, is in parentheses and may hold spaces).
func niceOf(t *testing.T, stat string) int {
	t.Helper()
	fields := strings.Fields(stat[strings.LastIndexByte(stat, ')')+1:])
	n, err := strconv.Atoi(fields[16]) // field 19 counted from field 3
	if err != nil {
		t.Fatalf("no nice value in %q: %v", stat, err)
	}
	return n
}

// processNices returns the nice value of each of this process's threads.
func processNices(t *testing.T) map[string]int {
	t.Helper()
	tasks, err := filepath.Glob("/proc/self/task/*/stat")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // a thread that ended meanwhile
		}
		out[p] = niceOf(t, string(b))
	}
	return out
}

// mainNice returns the nice value of this process's main thread.
func mainNice(t *testing.T) int {
	t.Helper()
	return processNices(t)["/proc/self/task/"+strconv.Itoa(os.Getpid())+"/stat"]
}

// childStat runs a hook with LocalRunner{Nice: nice} in dir whose child
// (cat) writes its own /proc/self/stat to dir/name, and returns what it
// wrote. It calls nothing on a testing.T, so tests may run it from any
// goroutine.
func childStat(nice int, dir, name string) (string, error) {
	out := filepath.Join(dir, name)
	res := LocalRunner{Nice: nice}.Run(context.Background(), HookRun{ContextID: "nice", Hook: "install", Dir: dir,
		Command: "cat /proc/self/stat > " + out, Env: map[string]string{}})
	if res.Err != nil || res.ExitCode != 0 {
		return "", fmt.Errorf("the hook failed: %v, exit %d", res.Err, res.ExitCode)
	}
	b, err := os.ReadFile(out)
	return string(b), err
}

// TestAHookRunsAtALowerPriorityThanTheAgent: a hook (and what it starts)
// runs with the agent's nice value plus LocalRunner.Nice, capped at 19,
// and every thread of the agent keeps its own.
func TestAHookRunsAtALowerPriorityThanTheAgent(t *testing.T) {
	before := processNices(t)
	mine := mainNice(t)
	for _, tc := range []struct {
		nice, want int
	}{{0, mine}, {DefaultHookNice, min(19, mine+DefaultHookNice)}, {19, 19}} {
		stat, err := childStat(tc.nice, t.TempDir(), "stat")
		if err != nil {
			t.Fatalf("Nice %d: %v", tc.nice, err)
		}
		if got := niceOf(t, stat); got != tc.want {
			t.Errorf("Nice %d: the hook's child ran at nice %d, want %d", tc.nice, got, tc.want)
		}
	}
	wait.Until(t, 5*time.Second, "every thread of the agent at its own nice value", func() error {
		for p, n := range processNices(t) {
			if was, ok := before[p]; (ok && n != was) || (!ok && n != mine) {
				return fmt.Errorf("%s runs at nice %d", p, n)
			}
		}
		return nil
	})
}

// TestTheMainThreadIsNeverTheNicedOne: a goroutine on the main thread
// (which the runtime cannot end, so it would stay at the hook's nice
// value) hands the start of a hook to another thread and leaves its own
// value as it was. The test makes the first thread other than the main one
// that asks a main one too.
func TestTheMainThreadIsNeverTheNicedOne(t *testing.T) {
	var mainTid atomic.Int64
	real := isMainThread
	isMainThread = func() bool { return real() || mainTid.CompareAndSwap(0, int64(syscall.Gettid())) }
	t.Cleanup(func() { isMainThread = real })
	mine := mainNice(t)
	stat, err := childStat(DefaultHookNice, t.TempDir(), "stat")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := niceOf(t, stat), min(19, mine+DefaultHookNice); got != want {
		t.Errorf("the hook's child ran at nice %d, want %d", got, want)
	}
	tid := mainTid.Load()
	if tid == 0 {
		t.Fatal("no thread was asked whether it is the main one")
	}
	// The "main" thread went back to the runtime's pool: it still runs,
	// at the value it had.
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/stat", tid))
	if err != nil {
		t.Fatalf("the thread taken for the main one has ended: %v", err)
	}
	if got := niceOf(t, string(b)); got != mine {
		t.Errorf("the thread taken for the main one runs at nice %d, want %d", got, mine)
	}
}

// TestHooksStartedTogetherAllRunNiced: hooks started at the same moment
// (actions and exec'd commands run beside a unit's hook) each start at
// the raised value, a child each starts at once too, and afterwards the
// agent has no thread at a raised value and no more threads than the
// runtime keeps.
func TestHooksStartedTogetherAllRunNiced(t *testing.T) {
	mine := mainNice(t)
	want := min(19, mine+DefaultHookNice)
	const hooks = 16
	threadsBefore := len(processNices(t))
	dir := t.TempDir()
	type result struct {
		i    int
		stat string
		err  error
	}
	results := make(chan result, hooks)
	for i := range hooks {
		go func() {
			stat, err := childStat(DefaultHookNice, dir, fmt.Sprintf("stat-%d", i))
			results <- result{i, stat, err}
		}()
	}
	for range hooks {
		r := <-results
		if r.err != nil {
			t.Errorf("hook %d: %v", r.i, r.err)
		} else if got := niceOf(t, r.stat); got != want {
			t.Errorf("hook %d: its child ran at nice %d, want %d", r.i, got, want)
		}
	}
	wait.Until(t, 5*time.Second, "every thread of the agent at its own nice value, none left over", func() error {
		nices := processNices(t)
		for p, n := range nices {
			if n != mine {
				return fmt.Errorf("%s runs at nice %d", p, n)
			}
		}
		// The threads that started hooks end with them; the runtime may
		// have started a few of its own meanwhile, not one a hook.
		if len(nices) >= threadsBefore+hooks {
			return fmt.Errorf("%d threads, %d before %d hooks", len(nices), threadsBefore, hooks)
		}
		return nil
	})
}
