//go:build linux

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// debugLogEvent is a line of `bagkeeper debug-log --format json`.
type debugLogEvent struct {
	Time      string `json:"time"`
	LocalTime bool   `json:"local_time"`
	Index     uint64 `json:"index"`
	Unit      string `json:"unit"`
	Member    string `json:"member"`
	Kind      string `json:"kind"`
	Details   string `json:"details"`
	Summary   bool   `json:"summary"`
}

// debugLog is a running `bagkeeper debug-log --format json` and the
// events it printed so far.
type debugLog struct {
	mu     sync.Mutex
	events []debugLogEvent
	bad    []string
	done   chan struct{}
}

func followDebugLog(t *testing.T, p *pod, args ...string) *debugLog {
	t.Helper()
	cmd := exec.Command(bkBin, append([]string{"debug-log", "--admin-socket", p.sock, "--format", "json"}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &debugLog{done: make(chan struct{})}
	go func() {
		defer close(d.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var e debugLogEvent
			d.mu.Lock()
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				d.bad = append(d.bad, sc.Text())
			} else {
				d.events = append(d.events, e)
			}
			d.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		<-d.done
		if err := cmd.Wait(); err != nil {
			t.Errorf("debug-log ended with %v after an interrupt: %s", err, stderr.String())
		}
	})
	return d
}

// find returns the events since from that match.
func (d *debugLog) find(from int, match func(debugLogEvent) bool) []debugLogEvent {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []debugLogEvent
	for _, e := range d.events[min(from, len(d.events)):] {
		if match(e) {
			out = append(out, e)
		}
	}
	return out
}

func (d *debugLog) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.events)
}

func (d *debugLog) String() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var b strings.Builder
	for _, e := range d.events {
		fmt.Fprintf(&b, "%s #%d %s %s %s: %s (summary %v)\n", e.Time, e.Index, e.Unit, e.Member, e.Kind, e.Details, e.Summary)
	}
	for _, l := range d.bad {
		b.WriteString("not JSON: " + l + "\n")
	}
	return b.String()
}

// TestDebugLogFollowsHooksAndMembership follows debug-log on one member of
// a three-pod cluster: the summary comes first, then the hooks that a bag
// written with `bags set` starts run and commit on the units, and when the
// raft leader's pod is killed, another member leads.
func TestDebugLogFollowsHooksAndMembership(t *testing.T) {
	cc := newCharmCluster(t)
	cc.startPods(3)
	cc.settle("the install sequence")
	pods := cc.runningPods()
	st, err := pods[0].status()
	if err != nil {
		t.Fatal(err)
	}
	leaderID := st.GetLeader()
	var victim, watch *pod
	for _, p := range pods {
		s, err := p.statusNoProbe()
		if err != nil {
			t.Fatal(err)
		}
		if s.GetSelf() == leaderID {
			victim = p
		} else if watch == nil {
			watch = p
		}
	}
	if victim == nil || watch == nil || len(st.GetRelations()) != 1 {
		t.Fatalf("raft leader %q among %d pods, relations %v", leaderID, len(pods), st.GetRelations())
	}
	rel := st.GetRelations()[0].GetId()

	d := followDebugLog(t, watch)
	waitFor(t, startTimeout, "the summary", func() (bool, string) {
		units := d.find(0, func(e debugLogEvent) bool {
			return e.Summary && e.Kind == "unit" && strings.HasPrefix(e.Details, "active, held by")
		})
		leaders := d.find(0, func(e debugLogEvent) bool { return e.Summary && e.Kind == "raft-leader" && e.Member == leaderID })
		return len(units) == 3 && len(leaders) == 1, d.String()
	})
	summaryEnd := d.len()
	if extra := d.find(summaryEnd, func(e debugLogEvent) bool { return e.Summary }); len(extra) > 0 {
		t.Fatalf("summary lines after the summary: %v", extra)
	}

	mark := d.len()
	r := runCLI(t, startTimeout, "bags", "set", "--admin-socket", watch.sock, "--relation", "replicas:"+strconv.FormatInt(rel, 10), "web", "debug-log-key="+randHex(4))
	if r.code != 0 {
		t.Fatalf("bags set: %s", r)
	}
	// The application's leader unit is not told of its own application's
	// bag; the others run relation-changed.
	appLeader := d.find(0, func(e debugLogEvent) bool { return e.Summary && e.Kind == "leader" })
	if len(appLeader) != 1 {
		t.Fatalf("no application leader in the summary:\n%s", d)
	}
	waitFor(t, startTimeout, "the other units' relation-changed to run and commit", func() (bool, string) {
		for _, u := range cc.units() {
			if u == appLeader[0].Unit {
				continue
			}
			running := d.find(mark, func(e debugLogEvent) bool {
				return e.Unit == u && e.Kind == "hook-running" && strings.Contains(e.Details, "relation-changed") && e.LocalTime && e.Index > 0
			})
			committed := d.find(mark, func(e debugLogEvent) bool {
				return e.Unit == u && e.Kind == "hook-committed" && strings.Contains(e.Details, "relation-changed")
			})
			if len(running) == 0 || len(committed) == 0 || committed[len(committed)-1].Index < running[0].Index {
				return false, u + " has not run relation-changed yet:\n" + d.String()
			}
		}
		return true, ""
	})

	mark = d.len()
	victim.kill()
	waitFor(t, startTimeout, "another member to lead the raft group", func() (bool, string) {
		leads := d.find(mark, func(e debugLogEvent) bool {
			return e.Kind == "raft-leader" && e.Member != "" && e.Member != leaderID && e.Details == "leads the raft group"
		})
		return len(leads) > 0, d.String()
	})
	// Indexes never go back.
	var last uint64
	for _, e := range d.find(summaryEnd, func(debugLogEvent) bool { return true }) {
		if e.Index < last {
			t.Fatalf("index %d after %d:\n%s", e.Index, last, d.String())
		}
		last = e.Index
	}

	t.Logf("the events seen:\n%s", d)

	// --no-tail prints the summary and ends; --unit keeps one unit's.
	unit := cc.unitOf(watch)
	r = runCLI(t, startTimeout, "debug-log", "--admin-socket", watch.sock, "--no-tail", "--unit", unit)
	if r.code != 0 || !strings.Contains(r.stdout, " "+unit+" now: unit: active, held by ") || strings.Contains(r.stdout, "raft-leader") {
		t.Fatalf("debug-log --no-tail --unit %s: %s", unit, r)
	}
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if !strings.Contains(line, " "+unit+" ") && !strings.Contains(line, " "+unit+" (") {
			t.Errorf("debug-log --unit %s printed %q", unit, line)
		}
	}
}
