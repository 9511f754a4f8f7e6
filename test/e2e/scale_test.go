//go:build linux

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

// TestScaleOutKeepsVotersAtTargetAndUnitsLeaveOnlyWhenRemoved grows the
// application to 7 pods: the voters must stay at the target of 3, every
// other member a non-voter that still holds all data. Then two pods — one
// voter, one non-voter — die for good. Their units must NOT be removed
// while they are merely gone — not even released: they are StatefulSet
// units, which only pod <app>-N can hold, so releasing them would serve
// nobody — and nothing else may depart; the dead voter's vote is handed to a
// healthy non-voter. Only `bagkeeper unit remove`, the real CLI, removes the
// two units, and only those (invariant 2: a unit departs by explicit removal
// or after a long grace period, never because a pod vanished). Their
// relation bags stay readable.
func TestScaleOutKeepsVotersAtTargetAndUnitsLeaveOnlyWhenRemoved(t *testing.T) {
	c := newCluster(t,
		"--unit-release-after", "2s",
		"--unit-remove-after", "10m",
		"--dead-voter-after", "3s",
		"--dead-member-after", "10m")
	pods := c.startCluster(3)
	more := make([]*pod, 4)
	for i := range more {
		more[i] = c.newPod(fmt.Sprintf("web-%d", 3+i), "--bootstrap-expect", "3")
	}
	c.startAll(more)
	pods = append(pods, more...)
	c.waitReady(pods...)
	scaled := c.waitOneCluster(startTimeout, "seven members, three voters", wantMembers(7), wantVoters(3), allUnitsActive)
	if n := len(scaled.units); n != 7 {
		t.Fatalf("%d units after scaling to 7 pods, want 7: %v", n, scaled.units)
	}
	// Four caught-up, healthy non-voters for well over --promote-after:
	// none of them may become a fourth voter.
	holdFor(t, 3*time.Second, "three voters among seven healthy members", func() (bool, string) {
		v, problem := c.observeCluster()
		if problem != "" {
			return false, problem
		}
		if p := wantVoters(3)(v); p != "" {
			return false, p + "\n  view: " + v.String()
		}
		return true, ""
	})
	want := seed(t, pods[0], scaled.unitNames(), 512)
	scaled = c.waitOneCluster(startTimeout, "after seeding", wantMembers(7), wantVoters(3), allUnitsActive)

	// The victims: a voter that does not lead, and a non-voter.
	var deadVoter, deadNonvoter *pod
	for _, p := range pods {
		id := scaled.selfOf(p)
		m, _ := scaled.member(id)
		switch {
		case id == scaled.leader:
		case m.suffrage == "Voter" && deadVoter == nil:
			deadVoter = p
		case m.suffrage == "Nonvoter" && deadNonvoter == nil:
			deadNonvoter = p
		}
	}
	gone := []*pod{deadVoter, deadNonvoter}
	var goneNames []string
	for _, p := range gone {
		goneNames = append(goneNames, scaled.statuses[p.name].GetUnit())
		p.kill()
	}
	t.Logf("killed %s (voter, unit %s) and %s (non-voter, unit %s)", deadVoter.name, goneNames[0], deadNonvoter.name, goneNames[1])

	// Gone, not removed: every unit as it was, the members kept, the dead
	// voter's vote handed on; and so for longer than --unit-release-after.
	merelyGone := []viewCheck{sameIDs(scaled), wantUnits(scaled.units, nil), allUnitsActive, voterHealthy(c)}
	c.waitOneCluster(startTimeout, "the dead voter replaced", merelyGone...)
	holdFor(t, 4*time.Second, "the dead pods' units neither released nor removed, everything else in place", func() (bool, string) {
		v, problem := c.observeCluster()
		if problem != "" {
			return false, problem
		}
		for _, chk := range merelyGone {
			if p := chk(v); p != "" {
				return false, p + "\n  view: " + v.String()
			}
		}
		return true, ""
	})

	// An operator removes the two units, through two different pods. They
	// are still active (their pods had ordinals), so it takes --force.
	survivors := c.runningPods()
	for i, u := range goneNames {
		via := survivors[i]
		r := runCLI(t, 30*time.Second, "unit", "remove", "--admin-socket", via.sock, u)
		if r.code != 1 || !strings.Contains(r.stderr, "unit "+u+" is active") || !strings.Contains(r.stderr, "give --force") {
			t.Fatalf("bagkeeper unit remove %s (active) without --force through %s: %s", u, via.name, r)
		}
		r = runCLI(t, 30*time.Second, "unit", "remove", "--admin-socket", via.sock, "--force", u)
		if r.code != 0 || !strings.Contains(r.stdout, "unit "+u+" removed") {
			t.Fatalf("bagkeeper unit remove %s through %s: %s", u, via.name, r)
		}
	}
	removed := map[string][]string{goneNames[0]: {"removed"}, goneNames[1]: {"removed"}}
	after := c.waitOneCluster(startTimeout, "exactly the two units removed",
		sameIDs(scaled), wantUnits(scaled.units, removed),
		unitState(goneNames[0], "removed"), unitState(goneNames[1], "removed"))
	for name, u := range after.units {
		if removed[name] == nil && (u.state != "active" || u.member != scaled.units[name].member) {
			t.Errorf("unit %s is %s held by %s, want active held by %s as before", name, u.state, u.member, scaled.units[name].member)
		}
	}
	c.waitBags(want)
	c.mustCommit(want, survivors[0])
}

// voterHealthy requires three voters, all of them running pods.
func voterHealthy(c *cluster) viewCheck {
	return func(v clusterView) string {
		running := map[string]bool{}
		for _, st := range v.statuses {
			running[st.GetSelf()] = true
		}
		var dead []string
		for _, id := range v.voters() {
			if !running[id] {
				dead = append(dead, id)
			}
		}
		if len(v.voters()) != 3 || len(dead) > 0 {
			return fmt.Sprintf("voters %v, of which %v do not run; want three running voters", v.voters(), dead)
		}
		return ""
	}
}

// TestPodRestartedAfterItsUnitWasRemovedGetsItBack: a StatefulSet pod is
// killed, an operator removes its unit (--force: it was still active), and
// the pod starts again on its disk. Its restored state still shows the
// unit held by it; the removal comes only as it catches up. It must claim
// the unit again, as a new unit, and turn ready: not take the removal for
// news ("unit removed while the pod runs") and wait for a restart.
func TestPodRestartedAfterItsUnitWasRemovedGetsItBack(t *testing.T) {
	// Frequent snapshots: the restarted member restores its unit from one.
	c := newCluster(t, "--raft-snapshot-threshold", "16", "--raft-snapshot-interval", "200ms", "--raft-trailing-logs", "16")
	pods := c.startCluster(3)
	v := c.waitOneCluster(startTimeout, "the cluster", wantVoters(3))
	seed(t, c.leaderPod(v), v.unitNames(), 64)
	victim := c.followers(v)[0]
	unit := v.statuses[victim.name].GetUnit()
	// More entries than a snapshot's worth, so its disk has one with the unit.
	rel, err := c.leaderPod(v).ensureRelation(&adminpb.EnsureRelationRequest{Endpoint: "replicas", Interface: "web-peers", Peer: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 64 {
		if err := c.leaderPod(v).setBag(10*time.Second, rel, "web", map[string]string{"n": itoa(int64(i))}); err != nil {
			t.Fatal(err)
		}
	}
	victim.kill()
	var via *pod
	for _, p := range pods {
		if p != victim {
			via = p
		}
	}
	if r := runCLI(t, 30*time.Second, "unit", "remove", "--admin-socket", via.sock, "--force", unit); r.code != 0 {
		t.Fatalf("unit remove --force %s: %s", unit, r)
	}
	for i := range 64 {
		if err := via.setBag(10*time.Second, rel, "web", map[string]string{"after": itoa(int64(i))}); err != nil {
			t.Fatal(err)
		}
	}
	victim.start()
	waitFor(t, startTimeout, "the restarted pod to hold "+unit+" again, active, caught up and ready", func() (bool, string) {
		// A linearizable read first: the pod's copy has caught up with
		// every write above, the removal included.
		if _, err := victim.getBags(); err != nil {
			return false, err.Error()
		}
		st, err := victim.statusNoProbe()
		if err != nil {
			return false, err.Error()
		}
		if !st.GetReady() {
			return false, "not ready: " + st.GetNotReadyReason()
		}
		for _, u := range st.GetUnits() {
			if u.GetName() == unit {
				return st.GetUnit() == unit && u.GetState() == "active" && u.GetMember() == st.GetSelf(), fmt.Sprintf("this pod holds %q; %s is %s held by %s", st.GetUnit(), unit, u.GetState(), u.GetMember())
			}
		}
		return false, unit + " not in the status"
	})
	if log := victim.allLogs(); strings.Contains(log, "unit removed while the pod runs") {
		t.Fatalf("the restarted pod took the removal it replayed for news:\n%s", lastLines(log, 30))
	}
}
