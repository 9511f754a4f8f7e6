//go:build linux

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
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

	// An operator removes the two units, through two different pods.
	survivors := c.runningPods()
	for i, u := range goneNames {
		via := survivors[i]
		r := runCLI(t, 30*time.Second, "unit", "remove", "--admin-socket", via.sock, u)
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
