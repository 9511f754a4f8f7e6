//go:build linux

package e2e

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// leaseSampler asks every running pod, every 50 ms, which unit holds the
// application leadership lease and until when, and keeps the intervals in
// which no unit could have said is-leader True: no pod answering knew of a
// lease with at least the 30 s is-leader promises still to run.
type leaseSampler struct {
	cc      *charmCluster
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	holders map[string]bool
	gaps    []string
	samples int
}

func sampleLeases(cc *charmCluster) *leaseSampler {
	s := &leaseSampler{cc: cc, stop: make(chan struct{}), done: make(chan struct{}), holders: map[string]bool{}}
	go s.loop()
	return s
}

func (s *leaseSampler) loop() {
	defer close(s.done)
	var gapStart time.Time
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			if !gapStart.IsZero() {
				s.gaps = append(s.gaps, fmt.Sprintf("from %s to the end", gapStart.Format("15:04:05.000")))
			}
			return
		case <-tick.C:
		}
		now := time.Now()
		led, answered := false, false
		for _, p := range s.cc.runningPods() {
			st, err := p.statusNoProbe()
			if err != nil {
				continue
			}
			answered = true
			if u := st.GetLeaderUnit(); u != "" {
				s.mu.Lock()
				s.holders[u] = true
				s.mu.Unlock()
				if time.Unix(0, st.GetLeaseExpiresUnixNano()).Sub(now) >= 30*time.Second {
					led = true
				}
			}
		}
		if !answered {
			continue
		}
		s.mu.Lock()
		s.samples++
		switch {
		case !led && gapStart.IsZero():
			gapStart = now
		case led && !gapStart.IsZero():
			s.gaps = append(s.gaps, fmt.Sprintf("%s for %v", gapStart.Format("15:04:05.000"), now.Sub(gapStart).Round(time.Millisecond)))
			gapStart = time.Time{}
		}
		s.mu.Unlock()
	}
}

// finish stops sampling and returns the units seen holding the lease and
// the leaderless intervals.
func (s *leaseSampler) finish() (holders []string, gaps []string, samples int) {
	close(s.stop)
	<-s.done
	for u := range s.holders {
		holders = append(holders, u)
	}
	slices.Sort(holders)
	return holders, s.gaps, s.samples
}

// testLeaderPodReplaced replaces the pod of the leader's unit — killed,
// empty disk, new address — while every unit runs config-changed. The
// lease belongs to the unit: the new pod claims the unit and renews it, so
// no other unit is elected, no unit runs leader-elected (and no follower
// leader-settings-changed), the lease never runs below what is-leader
// promises, and the replaced unit runs only the churn sequence of a leader
// (no install, no joins).
func testLeaderPodReplaced(t *testing.T, cc *charmCluster) {
	cc.waitOneCluster(startTimeout, "before the leader's pod is replaced", wantVoters(3), wantMembers(3), allUnitsActive)
	l, lUnit := cc.leader()
	base := cc.marks()
	sampler := sampleLeases(cc)
	defer func() {
		if sampler != nil {
			sampler.finish()
		}
	}()

	cc.writeConfig("colour: teal\n")
	l.kill()
	killed := time.Now()
	l.wipe()
	l.move()
	cc.freshPod(l)
	l.start()
	cc.waitReady(l)
	cc.waitOneCluster(startTimeout, "the leader's new pod holding its unit", wantVoters(3), wantMembers(3), allUnitsActive, cc.unitsHeldByRunningPods)
	waitFor(t, startTimeout, lUnit+"'s new pod to renew the lease", func() (bool, string) {
		st, err := l.status()
		if err != nil {
			return false, err.Error()
		}
		return st.GetLeaderUnit() == lUnit && time.Until(time.Unix(0, st.GetLeaseExpiresUnixNano())) > 50*time.Second,
			fmt.Sprintf("lease held by %q until %s", st.GetLeaderUnit(), time.Unix(0, st.GetLeaseExpiresUnixNano()).Format(time.TimeOnly))
	})
	t.Logf("%s's pod back and renewing %v after the kill", lUnit, time.Since(killed).Round(time.Millisecond))
	cc.waitPeerBags("every unit's colour teal", colours(cc, "teal", "teal"))
	cc.settle("the leader's replacement")
	holders, gaps, samples := sampler.finish()
	sampler = nil

	if !slices.Equal(holders, []string{lUnit}) {
		t.Errorf("the lease was held by %v while %s's pod was replaced, want only %s", holders, lUnit, lUnit)
	}
	if len(gaps) > 0 {
		t.Errorf("in %d samples, no unit could say is-leader True: %s", samples, strings.Join(gaps, "; "))
	}
	for _, p := range cc.runningPods() {
		u := cc.unitOf(p)
		for _, r := range cc.hooksSince(p, base) {
			switch {
			case r.hook == "leader-elected", r.hook == "install", r.hook == peerJoined, r.hook == "replicas-relation-departed",
				r.hook == "leader-settings-changed" && u != lUnit:
				t.Errorf("%s ran %s while the leader's pod was replaced:\n%s", u, r, runsString(cc.hooksSince(p, base)))
			}
		}
	}
	wantChurn := []hookRun{{lUnit, "upgrade-charm", ""}, {lUnit, "config-changed", ""}, {lUnit, "start", ""}}
	runs := cc.hooks(l)
	if len(runs) > len(wantChurn) && runs[0] == (hookRun{lUnit, "config-changed", ""}) {
		// The old pod was killed in the config-changed the new config
		// started: interrupted, it runs first in the new pod, then the
		// churn sequence.
		runs = runs[1:]
	}
	if len(runs) < len(wantChurn) || !slices.Equal(runs[:len(wantChurn)], wantChurn) {
		t.Errorf("the leader's new pod ran\n%s\nwant first the churn sequence of a leader:\n%s", runsString(runs), runsString(wantChurn))
	}
	if nl, _ := cc.leader(); nl != l {
		t.Errorf("after the replacement %s leads, want %s", cc.unitOf(nl), lUnit)
	}
}

// testInterruptedHookRunsFirst kills a pod's sidecar (kill -9; same pod,
// same disk) while its config-changed runs, after a peer's bag changed: as
// Juju's uniter runs the operation it recorded, the restarted sidecar runs
// config-changed again before the relation-changed that came due, although
// relation events come first in the usual order.
func testInterruptedHookRunsFirst(t *testing.T, cc *charmCluster) {
	cc.waitOneCluster(startTimeout, "three voters before the interruption", wantVoters(3), wantMembers(3), allUnitsActive)
	leader, leaderUnit := cc.leader()
	p := cc.nonLeaders()[0]
	unit := cc.unitOf(p)
	cc.touch(p, "hold-config-changed")
	defer cc.remove(p, "hold-config-changed", "holding")
	base := cc.marks()
	cc.writeConfig("colour: amber\n")
	cc.waitFile(p, "holding")
	if err := leader.setBag(10*time.Second, cc.rel, leaderUnit, map[string]string{"note": "written while " + unit + " was in config-changed"}); err != nil {
		t.Fatalf("writing %s's bag: %v", leaderUnit, err)
	}
	p.kill()
	cc.remove(p, "hold-config-changed", "holding")
	p.start()
	cc.waitReady(p)
	// The held run, then the same hook again first; the relation-changed
	// for the leader's bag (and the peers' colour changes) after it.
	want := []hookRun{{unit, "config-changed", ""}, {unit, "config-changed", ""}}
	changed := hookRun{unit, peerChanged, leaderUnit}
	waitFor(t, startTimeout, unit+" to run the interrupted hook and the one due", func() (bool, string) {
		return slices.Contains(cc.hooksSince(p, base), changed), runsString(cc.hooksSince(p, base))
	})
	cc.settle("the interrupted hook")
	if runs := cc.hooksSince(p, base); len(runs) < len(want) || !slices.Equal(runs[:len(want)], want) {
		t.Errorf("%s ran\n%s\nwant first the interrupted config-changed, then it again before any other hook", unit, runsString(runs))
	}
	cc.waitPeerBags("every unit's colour amber", colours(cc, "amber", "amber"))
}
