//go:build linux

package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestGracefulLeaderStopHandsOverLeadership stops the leader of a
// StatefulSet-style application with SIGTERM, as Kubernetes does for a
// rolling restart. The leader must hand leadership over before it stops
// (writes resume without waiting for an election), release its unit (and
// nothing else), stay in the configuration (its disk comes back), and on
// restart get the same unit back with every bag (invariants 1 and 2).
func TestGracefulLeaderStopHandsOverLeadership(t *testing.T) {
	c := newCluster(t)
	c.startCluster(3)
	before := c.waitOneCluster(startTimeout, "before the stop", wantVoters(3))
	lp := c.leaderPod(before)
	want := seed(t, lp, before.unitNames(), 512)
	before = c.waitOneCluster(startTimeout, "after seeding", wantVoters(3))
	unit := before.statuses[lp.name].GetUnit()
	f := c.followers(before)[0]
	rel := relationID(t, want, "replicas")

	stopped := time.Now()
	lp.process().signal(syscall.SIGTERM)
	// The first write after the signal, through a follower, retried by the
	// sidecar itself until a leader takes it.
	if err := f.setBag(10*time.Second, rel, "web", map[string]string{"after-stop": "1"}); err != nil {
		t.Fatalf("a write through %s after the leader's SIGTERM: %v", f.name, err)
	}
	took := time.Since(stopped)
	t.Logf("first write committed %v after SIGTERM to the leader", took.Round(time.Millisecond))
	if !lp.process().wait(20 * time.Second) {
		t.Fatalf("%s did not stop within 20s of SIGTERM", lp.name)
	}
	if code := lp.process().exitCode(); code != 0 {
		t.Errorf("%s exited with status %d after SIGTERM, want 0", lp.name, code)
	}
	c.writePeers()
	if log := lp.lastLog(); !strings.Contains(log, "leadership transferred before shutdown") {
		t.Errorf("%s did not hand leadership over before stopping:\n%s", lp.name, lastLines(log, 30))
	}
	if took > 5*time.Second {
		t.Errorf("writes resumed only %v after the leader's graceful stop", took)
	}
	rec := want[bagID{rel, "web"}]
	rec.data["after-stop"] = "1"
	rec.revision++
	want[bagID{rel, "web"}] = rec

	mid := c.waitOneCluster(startTimeout, "the old leader stopped, its unit released, still a member",
		sameIDs(before), sameClusterID(before), wantVoters(3),
		wantUnits(before.units, map[string][]string{unit: {"released"}}), unitState(unit, "released"))
	if mid.leader == before.leader {
		t.Fatalf("the stopped pod %s is still named leader", before.leader)
	}

	lp.start()
	c.waitReady(lp)
	after := c.waitOneCluster(startTimeout, "the old leader back with its unit",
		sameIDs(before), sameClusterID(before), wantVoters(3), wantUnits(before.units, nil), allUnitsActive)
	if got := after.statuses[lp.name].GetUnit(); got != unit {
		t.Fatalf("%s came back holding %q, want its unit %s", lp.name, got, unit)
	}
	c.waitBags(want)
	c.mustCommit(want, lp)
}
