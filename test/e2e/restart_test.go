//go:build linux

package e2e

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

// TestKilledMemberRestartedOnItsDiskKeepsIdentityAndBags kills a follower
// (or the leader) with SIGKILL and restarts it on its own disk, at the same
// address or at a new one (a rescheduled pod with a new IP). The member must come back under
// the same raft id (its disk, hence its votes, are intact), the cluster
// must record its new address, and nothing else may change: every bag
// committed before the crash is identical on every member (invariant 1),
// the units are exactly those of before, all active and held by the same
// members (invariant 2), and there is one configuration with one leader
// (invariant 4).
func TestKilledMemberRestartedOnItsDiskKeepsIdentityAndBags(t *testing.T) {
	for _, tc := range []struct {
		name       string
		leader     bool
		newAddress bool
	}{
		{"follower, same address", false, false},
		{"follower, new address", false, true},
		{"leader, new address", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			c.startCluster(3)
			before := c.waitOneCluster(startTimeout, "before the fault", wantVoters(3))
			want := seed(t, c.leaderPod(before), before.unitNames(), 512)
			before = c.waitOneCluster(startTimeout, "after seeding", wantVoters(3))

			f := c.followers(before)[0]
			if tc.leader {
				f = c.leaderPod(before)
			}
			oldID := before.selfOf(f)
			f.kill()
			if !tc.leader {
				checkStatusWithMemberDown(t, c.leaderPod(before), oldID)
			}
			if tc.newAddress {
				f.move()
			}
			f.start()
			c.waitReady(f)

			after := c.waitOneCluster(startTimeout, "after the restart",
				wantVoters(3), wantMembers(3), sameIDs(before), wantUnits(before.units, nil), allUnitsActive,
				addressOf(oldID, f.addr()), sameClusterID(before))
			if got := after.selfOf(f); got != oldID {
				t.Fatalf("%s came back as %s, want its old raft id %s (its disk was kept)", f.name, got, oldID)
			}
			for name, u := range after.units {
				if u.member != before.units[name].member {
					t.Errorf("unit %s moved from %s to %s", name, before.units[name].member, u.member)
				}
			}
			c.waitBags(want)
			c.mustCommit(want, f)
		})
	}
}

// checkStatusWithMemberDown asks p for its status, with a member down:
// within a short deadline the answer must come, reporting the member
// unreachable and every other member reachable; and an answer from p's
// own view only (skip_probe) must list all members without asking them.
func checkStatusWithMemberDown(t *testing.T, p *pod, down string) {
	t.Helper()
	for _, skip := range []bool{false, true} {
		var st *adminpb.StatusResponse
		start := time.Now()
		err := p.adminCall(time.Second, func(ctx context.Context, c adminpb.AdminClient) error {
			var err error
			st, err = c.Status(ctx, &adminpb.StatusRequest{SkipProbe: skip})
			return err
		})
		if err != nil {
			t.Fatalf("status (skip_probe %v) from %s with %s down, within 1s: %v after %s", skip, p.name, down, err, time.Since(start))
		}
		if len(st.GetMembers()) != 3 {
			t.Fatalf("status (skip_probe %v) lists %d members, want 3", skip, len(st.GetMembers()))
		}
		for _, m := range st.GetMembers() {
			wantReachable := m.GetId() != down
			if skip {
				wantReachable = m.GetId() == st.GetSelf()
			}
			if m.GetReachable() != wantReachable {
				t.Fatalf("status (skip_probe %v) from %s with %s down: member %s reachable=%v (error %q), want %v", skip, p.name, down, m.GetId(), m.GetReachable(), m.GetError(), wantReachable)
			}
		}
	}
}

// TestWipedMemberRejoinsAsNewIncarnationWithAllBags wipes a member's volume
// and restarts it, usually on a new address, as a pod rescheduled to
// another node without its disk. It must rejoin under a NEW raft id (same pod,
// new incarnation: invariant 3, no vote amnesia), have every bag before its
// /readyz first answers 200 (invariant 1: the bags are back before the
// first hook could run), and the old incarnation must leave the
// configuration, with the voters back at the target of 3. The follower and
// the leader case differ: a wiped leader forces an election first.
//
// The group snapshots often, so the new incarnation is caught up by an
// installed snapshot and not only by replaying the log.
func TestWipedMemberRejoinsAsNewIncarnationWithAllBags(t *testing.T) {
	for _, tc := range []struct {
		name        string
		leader      bool
		sameAddress bool
	}{
		{"follower", false, false},
		{"leader", true, false},
		{"follower on its old address", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t,
				"--raft-snapshot-threshold", "16",
				"--raft-trailing-logs", "4",
				"--raft-snapshot-interval", "300ms")
			c.startCluster(3)
			before := c.waitOneCluster(startTimeout, "before the fault", wantVoters(3))
			lp := c.leaderPod(before)
			want := seed(t, lp, before.unitNames(), 16<<10)
			want = churn(t, lp, want, 40)
			before = c.waitOneCluster(startTimeout, "after seeding", wantVoters(3))
			c.waitBags(want)
			c.waitSnapshots()

			victim := c.followers(before)[0]
			if tc.leader {
				victim = lp
			}
			oldID := before.selfOf(victim)
			victim.kill()
			victim.wipe()
			if !tc.sameAddress {
				victim.move()
			}
			victim.start()

			// The first moment /readyz says ready, the pod's own copy of the
			// state must already hold every bag.
			readyAt := time.Now()
			var got bagSet
			pollFast(t, startTimeout, victim.name+" to turn ready", func() (bool, string) {
				code, body := victim.readyz()
				if code != http.StatusOK {
					return false, fmt.Sprintf("%d %s%s", code, body, exitNote(victim))
				}
				var err error
				if got, err = victim.bags(); err != nil {
					t.Fatalf("%s is ready but its bags cannot be read: %v", victim.name, err)
				}
				return true, ""
			})
			t.Logf("%s ready %v after its start", victim.name, time.Since(readyAt).Round(time.Millisecond))
			if d := diffBags(want, got); d != "" {
				t.Fatalf("%s answered ready before it had all bags: %s", victim.name, d)
			}
			if !strings.Contains(victim.lastLog(), "Installed remote snapshot") {
				t.Errorf("%s caught up without installing a snapshot; the scenario meant to cover that path", victim.name)
			}

			after := c.waitOneCluster(startTimeout, "the new incarnation promoted and the old one gone",
				wantVoters(3), wantMembers(3), without(oldID), wantUnits(before.units, nil), allUnitsActive,
				c.unitsHeldByRunningPods, sameClusterID(before))
			newID := after.selfOf(victim)
			if newID == oldID {
				t.Fatalf("%s rejoined with its old raft id %s after losing its disk", victim.name, oldID)
			}
			if !strings.HasPrefix(newID, victim.name+"/") {
				t.Fatalf("the new incarnation's id %s does not name the pod %s", newID, victim.name)
			}
			if m, _ := after.member(newID); m.suffrage != "Voter" || m.address != victim.addr() {
				t.Fatalf("the new incarnation is %+v, want a voter at %s", m, victim.addr())
			}
			c.waitBags(want)
			c.mustCommit(want, victim)
		})
	}
}

// TestAllPodsKilledAndRestartedOnNewAddresses kills every pod at once and
// restarts all of them at new addresses (a whole StatefulSet rescheduled).
// Discovery (the peers file) only knows the new addresses, the raft
// configuration only the old ones. The members must find each other again
// as ONE cluster with the same cluster id and every bag, and the
// configuration must record the new addresses (invariants 1, 2 and 4).
//
// When every pod keeps its disk, the raft ids stay the same. When one pod
// also lost its disk — a majority still has theirs — it comes back as a new
// incarnation, the old one leaves, and nothing committed is lost.
func TestAllPodsKilledAndRestartedOnNewAddresses(t *testing.T) {
	for _, tc := range []struct {
		name string
		wipe bool
	}{
		{"every disk kept", false},
		{"one disk lost", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			pods := c.startCluster(3)
			before := c.waitOneCluster(startTimeout, "before the fault", wantVoters(3))
			want := seed(t, c.leaderPod(before), before.unitNames(), 1024)
			before = c.waitOneCluster(startTimeout, "after seeding", wantVoters(3))

			var wg sync.WaitGroup
			for _, p := range pods {
				wg.Go(func() { p.process().kill() })
			}
			wg.Wait()
			c.writePeers()
			wiped := pods[1]
			if tc.wipe {
				wiped.wipe()
			}
			for _, p := range pods {
				p.move()
			}
			c.startAll(pods)
			c.waitReady(pods...)

			checks := []viewCheck{wantVoters(3), wantMembers(3), sameClusterID(before),
				wantUnits(before.units, nil), allUnitsActive, c.unitsHeldByRunningPods}
			for _, p := range pods {
				if tc.wipe && p == wiped {
					checks = append(checks, without(before.selfOf(p)))
					continue
				}
				checks = append(checks, addressOf(before.selfOf(p), p.addr()))
			}
			after := c.waitOneCluster(startTimeout, "the same cluster on the new addresses", checks...)
			for _, p := range pods {
				kept := !(tc.wipe && p == wiped)
				if got := after.selfOf(p); (got == before.selfOf(p)) != kept {
					t.Errorf("%s (disk kept: %v) is %s, was %s", p.name, kept, got, before.selfOf(p))
				}
				if u := after.statuses[p.name].GetUnit(); u != before.statuses[p.name].GetUnit() {
					t.Errorf("%s holds %s, held %s", p.name, u, before.statuses[p.name].GetUnit())
				}
			}
			c.waitBags(want)
			c.mustCommit(want, pods[0])
		})
	}
}

// TestWipedVoterCannotVoteBeforePromotion wipes one voter and, while its
// new incarnation is still a non-voter (promotion is held off), kills a
// second voter. The cluster must then have no leader at all — the wiped
// member's vote must not count (invariant 3: it never reuses its old
// identity, and a new one votes only once caught up and promoted) — and
// once the killed voter returns, every bag committed before the faults must
// be on every member (invariant 1). Both the leader and a follower are
// tried as the second victim.
func TestWipedVoterCannotVoteBeforePromotion(t *testing.T) {
	for _, tc := range []struct {
		name         string
		secondLeader bool
	}{
		{"then the leader killed", true},
		{"then a follower killed", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, "--promote-after", "30s")
			c.startCluster(3)
			before := c.waitOneCluster(startTimeout, "before the faults", wantVoters(3))
			lp := c.leaderPod(before)
			want := seed(t, lp, before.unitNames(), 2048)
			before = c.waitOneCluster(startTimeout, "after seeding", wantVoters(3))

			followers := c.followers(before)
			wiped, other := followers[0], followers[1]
			oldID := before.selfOf(wiped)
			wiped.kill()
			wiped.wipe()
			wiped.move()
			wiped.start()
			c.waitReady(wiped)
			mid := c.waitOneCluster(startTimeout, "the new incarnation admitted as a non-voter",
				wantVoters(2), wantMembers(3), without(oldID), sameClusterID(before))
			newID := mid.selfOf(wiped)
			if m, _ := mid.member(newID); newID == oldID || m.suffrage != "Nonvoter" {
				t.Fatalf("the wiped pod is %s (%+v); want a new incarnation, a non-voter", newID, m)
			}
			c.waitBags(want, wiped)

			killed := other
			if tc.secondLeader {
				killed = lp
			}
			killed.kill()
			// Two voters configured, one alive: no quorum, whatever the
			// wiped member does.
			waitFor(t, 10*time.Second, "the cluster to have no leader", noLeader(c))
			holdFor(t, 2*time.Second, "no leader without a quorum of voters", noLeader(c))

			killed.start()
			c.waitReady(c.runningPods()...)
			after := c.waitOneCluster(startTimeout, "a leader again, the wiped member still a non-voter",
				wantVoters(2), wantMembers(3), without(oldID), sameClusterID(before),
				wantUnits(before.units, nil), allUnitsActive, suffrageOf(newID, "Nonvoter"))
			if after.leader == newID {
				t.Fatalf("the non-voter %s leads", newID)
			}
			c.waitBags(want)
			c.mustCommit(want, wiped)
		})
	}
}

// waitSnapshots waits until every running pod has taken a raft snapshot
// (and so compacted its log): a member that joins now must be sent a
// snapshot.
func (c *cluster) waitSnapshots() {
	c.t.Helper()
	pods := c.runningPods()
	waitFor(c.t, startTimeout, "a raft snapshot on every member", func() (bool, string) {
		var missing []string
		for _, p := range pods {
			entries, _ := os.ReadDir(filepath.Join(p.dataDir, "raft", "snapshots"))
			if len(entries) == 0 {
				missing = append(missing, p.name)
			}
		}
		return len(missing) == 0, "no snapshot yet on " + strings.Join(missing, ", ")
	})
}

// noLeader holds when no running pod knows a leader or is one, and none
// calls itself ready.
func noLeader(c *cluster) func() (bool, string) {
	return func() (bool, string) {
		var seen []string
		for _, p := range c.runningPods() {
			if code, body := p.readyz(); code == http.StatusOK {
				seen = append(seen, p.name+" is ready without a leader: "+body)
			}
			st, err := p.status()
			if err != nil {
				// Status needs the raft configuration only, it answers
				// without a leader.
				return false, p.name + ": " + err.Error()
			}
			if st.GetLeader() != "" {
				seen = append(seen, p.name+" sees leader "+st.GetLeader())
			}
		}
		return len(seen) == 0, strings.Join(seen, "; ")
	}
}

// pollFast is waitFor with a 5ms tick, for catching the first moment a
// condition holds.
func pollFast(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var last string
	for {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s\nlast observed: %s", timeout, what, last)
		}
		<-tick.C
	}
}

// ---- view checks used by the restart scenarios ----

// sameIDs requires the configuration to hold exactly the raft ids of v.
func sameIDs(v clusterView) viewCheck {
	want := memberIDs(v)
	return func(got clusterView) string {
		if g := memberIDs(got); g != want {
			return fmt.Sprintf("members %s, want the same ids as before: %s", g, want)
		}
		return ""
	}
}

func memberIDs(v clusterView) string {
	ids := make([]string, len(v.members))
	for i, m := range v.members {
		ids[i] = m.id
	}
	return strings.Join(ids, ",")
}

func sameClusterID(v clusterView) viewCheck {
	return func(got clusterView) string {
		if got.clusterID != v.clusterID {
			return fmt.Sprintf("cluster id %s, want %s (a new cluster was formed)", got.clusterID, v.clusterID)
		}
		return ""
	}
}

func addressOf(id, addr string) viewCheck {
	return func(v clusterView) string {
		m, ok := v.member(id)
		if !ok {
			return id + " is not a member"
		}
		if m.address != addr {
			return fmt.Sprintf("%s is configured at %s, want %s", id, m.address, addr)
		}
		return ""
	}
}

func without(id string) viewCheck {
	return func(v clusterView) string {
		if _, ok := v.member(id); ok {
			return id + " is still a member"
		}
		return ""
	}
}

func suffrageOf(id, suffrage string) viewCheck {
	return func(v clusterView) string {
		m, ok := v.member(id)
		if !ok {
			return id + " is not a member"
		}
		if m.suffrage != suffrage {
			return fmt.Sprintf("%s is a %s, want a %s", id, m.suffrage, suffrage)
		}
		return ""
	}
}

// ---- writes ----

// relationID returns the id of the relation of want whose key starts with
// endpoint + ":".
func relationID(t *testing.T, want bagSet, endpoint string) int64 {
	t.Helper()
	for id, b := range want {
		if strings.HasPrefix(b.relation, endpoint+":") {
			return id.rel
		}
	}
	t.Fatalf("no relation %s among the seeded bags", endpoint)
	return 0
}

// churn updates the application's peer bag n times through p (to fill the
// log past a snapshot) and returns the updated expectations.
func churn(t *testing.T, p *pod, want bagSet, n int) bagSet {
	t.Helper()
	rel := relationID(t, want, "replicas")
	for i := range n {
		if err := p.setBag(10*time.Second, rel, "web", map[string]string{"counter": fmt.Sprint(i)}); err != nil {
			t.Fatalf("update %d through %s: %v", i, p.name, err)
		}
	}
	got, err := p.bags()
	if err != nil {
		t.Fatal(err)
	}
	if got[bagID{rel, "web"}].data["counter"] != fmt.Sprint(n-1) {
		t.Fatalf("%s does not read its own last write", p.name)
	}
	return got
}

// mustCommit shows the cluster takes writes: it commits a new key through
// p, waits until every running pod holds it, and records it in want.
func (c *cluster) mustCommit(want bagSet, p *pod) {
	c.t.Helper()
	rel := relationID(c.t, want, "replicas")
	id := bagID{rel, "web"}
	key, val := "probe-"+randHex(4), randHex(8)
	if err := p.setBag(10*time.Second, rel, "web", map[string]string{key: val}); err != nil {
		c.t.Fatalf("a write through %s after the fault failed: %v", p.name, err)
	}
	b := want[id]
	data := map[string]string{key: val}
	for k, v := range b.data {
		data[k] = v
	}
	want[id] = bagView{relation: b.relation, data: data, revision: b.revision + 1}
	c.waitBags(want)
}

// TestAddressReusedByNewPodWhileMemberIsDown kills a follower and, while it
// is down, starts a new pod (a scale-out) on the very address the dead
// member had — Kubernetes reuses pod IPs. Then the dead member comes back,
// with its disk, on another address. In the end there must be one cluster
// of the four pods, with the returning member under its old raft id (its
// disk, hence its votes, are intact), its unit and every bag unchanged, and
// the new pod holding a new unit (invariants 1, 2 and 4).
func TestAddressReusedByNewPodWhileMemberIsDown(t *testing.T) {
	c := newCluster(t)
	pods := c.startCluster(3)
	before := c.waitOneCluster(startTimeout, "before the fault", wantVoters(3))
	want := seed(t, c.leaderPod(before), before.unitNames(), 512)
	before = c.waitOneCluster(startTimeout, "after seeding", wantVoters(3))

	down := c.followers(before)[0]
	downID := before.selfOf(down)
	down.kill()
	newcomer := c.newPod("web-3")
	newcomer.host = down.host // the freed IP goes to the next pod
	down.move()
	newcomer.start()
	c.waitReady(newcomer)
	mid := c.waitOneCluster(startTimeout, "the new pod admitted", func(v clusterView) string {
		if _, ok := v.member(v.selfOf(newcomer)); !ok {
			return newcomer.name + " is not a member"
		}
		return ""
	})
	if _, ok := mid.member(downID); !ok {
		t.Logf("note: %s was removed from the configuration while down, because %s took its address", downID, newcomer.name)
	}

	down.start()
	c.waitReady(pods...)
	after := c.waitOneCluster(startTimeout, "four members, the returning one under its old id",
		wantMembers(4), wantVoters(3), sameClusterID(before), addressOf(downID, down.addr()),
		allUnitsActive, func(v clusterView) string {
			grown := maps.Clone(before.units)
			grown["web/3"] = v.units["web/3"]
			if d := unitChurn(grown, v.units, nil); d != "" {
				return "unit churn: " + d
			}
			if u := v.units["web/3"]; u.member != v.selfOf(newcomer) {
				return fmt.Sprintf("web/3 is held by %q, want the new pod %s", u.member, v.selfOf(newcomer))
			}
			return ""
		})
	for name, u := range before.units {
		if after.units[name].member != u.member {
			t.Errorf("unit %s moved from %s to %s", name, u.member, after.units[name].member)
		}
	}
	c.waitBags(want)
	c.mustCommit(want, down)
}

// TestProcessOnDeadVotersAddressCannotVoteForIt is the dangerous form of IP
// reuse. Two of three voters die; a fresh bagkeeper process of the same
// application — a new pod that got one dead voter's IP and has not joined
// yet (its discovery is empty and it looks again only much later) — sits on
// that voter's address. Raft messages for the dead voter now reach it. It
// must not be counted as that voter: the one surviving voter must NOT
// become leader (invariant 3: nothing votes with a memory it does not
// have). If it does, a write it acknowledges is committed on the survivor
// and the impostor only, and is lost once the real voters come back — with
// every voter's disk intact (invariant 1).
func TestProcessOnDeadVotersAddressCannotVoteForIt(t *testing.T) {
	c := newCluster(t)
	c.startCluster(3)
	before := c.waitOneCluster(startTimeout, "before the faults", wantVoters(3))
	survivor := c.leaderPod(before)
	want := seed(t, survivor, before.unitNames(), 256)
	before = c.waitOneCluster(startTimeout, "after seeding", wantVoters(3))
	followers := c.followers(before)
	a, b := followers[0], followers[1]
	a.kill()
	b.kill()
	// The survivor steps down once its leader lease runs out.
	waitFor(t, 10*time.Second, survivor.name+" to step down without a quorum", noLeader(c))

	noDiscovery := filepath.Join(c.dir, "impostor-peers")
	if err := os.WriteFile(noDiscovery, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	impostor := c.newPod("web-9", "--peers-file", noDiscovery, "--join-interval", "1m")
	impostor.host, impostor.outsider = a.host, true
	impostor.start()

	leaderless := true
	err := poll(3*time.Second, "a leader (there must be none)", func() (bool, string) {
		st, err := survivor.status()
		if err == nil && st.GetLeader() == st.GetSelf() {
			return true, ""
		}
		return false, ""
	})
	if err == nil {
		leaderless = false
		t.Errorf("%s became leader with only itself and a fresh process at %s's address %s: that process voted as %s",
			survivor.name, a.name, a.addr(), before.selfOf(a))
	}

	rel := relationID(t, want, "replicas")
	werr := survivor.setBag(3*time.Second, rel, "web", map[string]string{"acknowledged": "yes"})
	switch {
	case werr == nil && leaderless:
		t.Fatalf("a write committed through %s without a quorum of voters", survivor.name)
	case werr == nil:
		// The client was told the write is committed: it must survive.
		rec := want[bagID{rel, "web"}]
		rec.data["acknowledged"] = "yes"
		rec.revision++
		want[bagID{rel, "web"}] = rec
		t.Logf("a write through %s was acknowledged as committed", survivor.name)
	}

	impostor.kill()
	survivor.kill()
	a.start()
	b.start()
	c.waitOneCluster(startTimeout, "the two real voters elect a leader", sameClusterID(before), sameIDs(before))
	survivor.start()
	c.waitReady(c.runningPods()...)
	c.waitOneCluster(startTimeout, "all three voters back", sameClusterID(before), sameIDs(before), wantVoters(3))
	waitFor(t, startTimeout, "every acknowledged write on every member", func() (bool, string) {
		var bad []string
		for _, p := range c.runningPods() {
			got, err := p.bags()
			if err != nil {
				return false, err.Error()
			}
			if d := diffBags(want, got); d != "" {
				bad = append(bad, p.name+": "+d)
			}
		}
		return len(bad) == 0, strings.Join(bad, "; ")
	})
}
