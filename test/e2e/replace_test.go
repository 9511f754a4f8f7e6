//go:build linux

package e2e

import (
	"crypto/rand"
	"fmt"
	"sync"
	"testing"
	"time"
)

// deploymentPodName returns a pod name as a Deployment's ReplicaSet gives
// it: no ordinal, a template hash and a random suffix.
func deploymentPodName(app, hash string) string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	var b [5]byte
	_, _ = rand.Read(b[:])
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return fmt.Sprintf("%s-%s-%s", app, hash, b[:])
}

// TestRollingReplacementWithNewNamesKeepsEveryUnit replaces every pod of a
// Deployment-style application one by one, as a rolling update does: the
// old pod gets SIGTERM (it releases its unit and leaves the raft group), and
// a new pod with a new name, a new address and an empty volume starts and
// claims a unit.
//
// Every unit must be claimed again with its bags, none may be created or
// removed at any step (invariant 2: identity is never inferred from a pod
// list), every bag survives (invariant 1), and at the end the configuration
// holds only the new pods, with the voters back at the target.
//
// Kubernetes moves on to the next pod as soon as the new one is ready; the
// first two cases do exactly that, with the fast promotion the other tests
// use and with the product's default --promote-after of 5s. The last waits
// until the voters are back at the target before each step, which
// separates the unit handling from how fast the membership keeps up.
func TestRollingReplacementWithNewNamesKeepsEveryUnit(t *testing.T) {
	for _, tc := range []struct {
		name          string
		promoteAfter  string
		waitForVoters bool
	}{
		{"paced by readiness", "1s", false},
		{"paced by readiness, default promote-after", "5s", false},
		{"paced by promotion", "1s", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testRollingReplacement(t, tc.promoteAfter, tc.waitForVoters)
		})
	}
}

func testRollingReplacement(t *testing.T, promoteAfter string, waitForVoters bool) {
	c := newCluster(t, "--unit-mode", "claim", "--unit-remove-after", "1m", "--promote-after", promoteAfter)
	minVoters := watchVoters(t, c)
	old := make([]*pod, 3)
	for i := range old {
		old[i] = c.newPod(deploymentPodName(c.app, "7f9c5d"), "--bootstrap-expect", "3")
	}
	c.startAll(old)
	c.waitReady(old...)
	before := c.waitOneCluster(startTimeout, "the initial cluster", wantVoters(3), wantMembers(3), allUnitsActive)
	if names := before.unitNames(); fmt.Sprint(names) != "[web/0 web/1 web/2]" {
		t.Fatalf("units %v, want web/0, web/1 and web/2", names)
	}
	want := seed(t, c.leaderPod(before), before.unitNames(), 2048)
	before = c.waitOneCluster(startTimeout, "after seeding", wantVoters(3), allUnitsActive)

	// Replace the followers first and the leader last, as a rolling update
	// might; the order is not under the application's control.
	order := append(c.followers(before), c.leaderPod(before))
	for step, o := range order {
		unit := before.statuses[o.name].GetUnit()
		o.stop()
		c.waitOneCluster(startTimeout, fmt.Sprintf("step %d: %s stopped and gone from the configuration", step, o.name),
			without(before.selfOf(o)),
			wantUnits(before.units, map[string][]string{unit: {"released"}}),
			unitState(unit, "released"))

		n := c.newPod(deploymentPodName(c.app, "5b8e21"), "--bootstrap-expect", "3")
		n.start()
		c.waitReady(n)
		checks := []viewCheck{wantUnits(before.units, nil), allUnitsActive, c.unitsHeldByRunningPods}
		if waitForVoters {
			checks = append(checks, wantVoters(3), wantMembers(3))
		}
		v := c.waitOneCluster(startTimeout, fmt.Sprintf("step %d: %s replaced by %s", step, o.name, n.name), checks...)
		if got := v.statuses[n.name].GetUnit(); got != unit {
			t.Fatalf("step %d: %s claimed %s, want %s, the unit %s released", step, n.name, got, unit, o.name)
		}
		if u := v.units[unit]; u.pod != n.name {
			t.Fatalf("step %d: unit %s records pod %q, want %q", step, unit, u.pod, n.name)
		}
		c.waitBags(want)
	}

	final := c.waitOneCluster(startTimeout, "only the new pods, three voters",
		wantVoters(3), wantMembers(3), wantUnits(before.units, nil), allUnitsActive, c.unitsHeldByRunningPods,
		sameClusterID(before))
	for _, o := range old {
		if _, ok := final.member(before.selfOf(o)); ok {
			t.Errorf("the stopped pod %s is still a member", o.name)
		}
	}
	c.waitBags(want)
	c.mustCommit(want, c.runningPods()[0])
	t.Logf("fewest voters seen during the replacement: %d", minVoters())
}

// watchVoters samples the configuration (as the first running pod that
// answers reports it) until the test ends, and returns a function giving
// the fewest voters seen so far.
func watchVoters(t *testing.T, c *cluster) func() int {
	var mu sync.Mutex
	fewest := -1
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			for _, p := range c.runningPods() {
				st, err := p.status()
				if err != nil {
					continue
				}
				n := 0
				for _, m := range st.GetMembers() {
					if m.GetSuffrage() == "Voter" {
						n++
					}
				}
				mu.Lock()
				if n > 0 && (fewest < 0 || n < fewest) {
					fewest = n
				}
				mu.Unlock()
				break
			}
		}
	}()
	t.Cleanup(func() { close(done); <-stopped })
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return fewest
	}
}

func unitState(unit, state string) viewCheck {
	return func(v clusterView) string {
		if u, ok := v.units[unit]; !ok || u.state != state {
			return fmt.Sprintf("unit %s is %q, want %s", unit, u.state, state)
		}
		return ""
	}
}
