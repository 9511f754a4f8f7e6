package raftstore

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/bagkeeper/bagkeeper/raftstore/peerpb"
	"github.com/bagkeeper/bagkeeper/raftstore/state"
)

// TestWhoASettledMemberProbes: a voter probes every address each round; a
// non-voter probes the voters' every round (their configured addresses and
// where the book has them) and each other address once in
// nonVoterProbeSpread rounds.
func TestWhoASettledMemberProbes(t *testing.T) {
	servers := []raft.Server{
		{ID: "v0", Address: "10.0.0.1:7400", Suffrage: raft.Voter},
		{ID: "v1", Address: "10.0.0.2:7400", Suffrage: raft.Voter},
		{ID: "v2", Address: "10.0.0.3:7400", Suffrage: raft.Voter},
	}
	for i := range 20 {
		servers = append(servers, raft.Server{ID: raft.ServerID(fmt.Sprintf("n%02d", i)), Address: raft.ServerAddress(fmt.Sprintf("10.0.1.%d:7400", i)), Suffrage: raft.Nonvoter})
	}
	// v2 moved; it answers at a discovered address.
	book := map[raft.ServerID]raft.ServerAddress{"v2": "10.0.2.3:7400"}
	var addrs []string
	for _, s := range servers {
		if s.ID != "n00" {
			addrs = append(addrs, string(s.Address))
		}
	}
	addrs = append(addrs, "10.0.2.3:7400", "10.0.3.1:7400") // discovered: v2, and someone not in the configuration
	slices.Sort(addrs)

	for _, self := range []raft.ServerID{"v0", "v2"} {
		for round := range uint64(3) {
			if got := probedThisRound(addrs, servers, self, book, round); !slices.Equal(got, addrs) {
				t.Fatalf("voter %s, round %d: probes %v, want every address %v", self, round, got, addrs)
			}
		}
	}

	voters := []string{"10.0.0.1:7400", "10.0.0.2:7400", "10.0.0.3:7400", "10.0.2.3:7400"}
	seen := map[string]int{}
	for round := range uint64(3 * nonVoterProbeSpread) {
		got := probedThisRound(addrs, servers, "n00", book, round)
		for _, a := range voters {
			if !slices.Contains(got, a) {
				t.Fatalf("non-voter, round %d: probes %v, not the voter address %s", round, got, a)
			}
		}
		if others := len(got) - len(voters); others > (len(addrs)-len(voters))/nonVoterProbeSpread+1 {
			t.Fatalf("non-voter, round %d: probes %d addresses besides the voters' of %d: %v", round, others, len(addrs)-len(voters), got)
		}
		for _, a := range got {
			if !slices.Contains(addrs, a) {
				t.Fatalf("non-voter, round %d: probes %s, which is not a candidate", round, a)
			}
			seen[a]++
		}
	}
	for _, a := range addrs {
		if slices.Contains(voters, a) {
			continue
		}
		if seen[a] != 3 {
			t.Errorf("non-voter: %s probed %d times in %d rounds, want 3", a, seen[a], 3*nonVoterProbeSpread)
		}
	}

	// Not (yet) in the configuration, or nothing known: everything.
	if got := probedThisRound(addrs, servers, "new", book, 1); !slices.Equal(got, addrs) {
		t.Fatalf("a member not in the configuration probes %v, want every address", got)
	}
}

// TestSettledNonVotersProbeTheVotersAndFewOthers: in a running group,
// what each member probed in its last round: a voter every other member,
// a non-voter every voter and, once settled, not every other non-voter —
// though each of them over enough rounds.
func TestSettledNonVotersProbeTheVotersAndFewOthers(t *testing.T) {
	c := newTestCluster(t, "app")
	var nodes []*testNode
	for _, p := range []string{"app-0", "app-1", "app-2"} {
		nodes = append(nodes, c.start(p, withExpect(3)))
	}
	l := c.leader(20 * time.Second)
	for _, p := range []string{"app-3", "app-4", "app-5", "app-6"} {
		nodes = append(nodes, c.start(p))
	}
	eventually(t, 20*time.Second, "four non-voters", func() error {
		if vs, nvs := c.voters(l); len(vs) != 3 || len(nvs) != 4 {
			return fmt.Errorf("voters %v, non-voters %v", vs, nvs)
		}
		return nil
	})
	addrOf := map[string]string{}
	voter := map[string]bool{}
	cfg, err := l.node.Configuration()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range cfg.Servers {
		addrOf[string(s.ID)] = string(s.Address)
		voter[string(s.ID)] = s.Suffrage == raft.Voter
	}
	// Only rounds begun after the configuration was complete count: a
	// round is stored as it ends, and rounds follow one another, so the
	// second report seen to change began after this point.
	last := map[string]*probeReport{}
	changes := map[string]int{}
	for _, n := range nodes {
		last[n.pod] = n.node.lastProbe.Load()
	}
	thinned := map[string]bool{}             // non-voters seen probing fewer than all
	probedBy := map[string]map[string]bool{} // non-voter → other non-voters' addresses it probed
	eventually(t, 30*time.Second, "every non-voter to probe fewer than all in a round, and each other one over the rounds", func() error {
		for _, n := range nodes {
			r := n.node.lastProbe.Load()
			if r != last[n.pod] {
				last[n.pod] = r
				changes[n.pod]++
			}
			if changes[n.pod] < 2 {
				continue
			}
			id := string(n.node.ID())
			var missing []string
			for other, a := range addrOf {
				if other == id || slices.Contains(r.addrs, a) {
					continue
				}
				if voter[id] || voter[other] {
					t.Fatalf("%s (voter: %v) did not probe %s (voter: %v) in its last round: %v", id, voter[id], other, voter[other], r.addrs)
				}
				missing = append(missing, other)
			}
			if voter[id] {
				continue
			}
			if len(missing) > 0 {
				thinned[id] = true
			}
			if probedBy[id] == nil {
				probedBy[id] = map[string]bool{}
			}
			for _, a := range r.addrs {
				probedBy[id][a] = true
			}
		}
		for _, n := range nodes {
			if changes[n.pod] < 2 {
				return fmt.Errorf("%s has not ended a round begun since", n.pod)
			}
		}
		for id := range voter {
			if voter[id] {
				continue
			}
			if !thinned[id] {
				return fmt.Errorf("%s probed every member in each round seen", id)
			}
			for other := range voter {
				if other != id && !probedBy[id][addrOf[other]] {
					return fmt.Errorf("%s has not probed %s yet", id, other)
				}
			}
		}
		return nil
	})
}

// TestProbesAskForBriefAnswers: the cluster loop's probes get who answers
// and where without the configuration, the state hashes or the last log
// term (every member answers some every round); a full Info answer, which
// the leader's health polls, status and recovery use, still carries them.
func TestProbesAskForBriefAnswers(t *testing.T) {
	c := newTestCluster(t, "app")
	for _, p := range []string{"web-a", "web-b", "web-c"} {
		c.start(p, withExpect(3))
	}
	l := c.leader(10 * time.Second)
	f := c.follower(l)
	mustApply(t, l.node, state.HashStateOp())
	var full *peerpb.InfoResponse
	eventually(t, 10*time.Second, "the follower's full Info to name three members and a state hash", func() error {
		var err error
		if full, err = l.node.infoOf(applyCtx(t), f.node.Advertise(), time.Second); err != nil {
			return err
		}
		if len(full.GetConfiguration()) != 3 || len(full.GetStateHashes()) == 0 || full.GetLastLogTerm() == 0 {
			return fmt.Errorf("%d servers, %d state hashes, last log term %d", len(full.GetConfiguration()), len(full.GetStateHashes()), full.GetLastLogTerm())
		}
		return nil
	})
	infos := l.node.probe(applyCtx(t), []string{f.node.Advertise()})
	if len(infos) != 1 {
		t.Fatalf("probe answers %v", infos)
	}
	got := infos[0].info
	if got.GetServerId() != string(f.node.ID()) || got.GetAddress() != f.node.Advertise() || !got.GetHasState() || got.GetClusterId() != full.GetClusterId() {
		t.Fatalf("a probe's answer lacks who answered: %v", got)
	}
	if len(got.GetConfiguration()) != 0 || len(got.GetStateHashes()) != 0 || got.GetLastLogTerm() != 0 {
		t.Fatalf("a probe's answer carries %d servers, %d state hashes and last log term %d, want none", len(got.GetConfiguration()), len(got.GetStateHashes()), got.GetLastLogTerm())
	}
}
