package raftstore

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestNonVotersGetPacedHeartbeatsAndKeepTheirLeader: in a group of three
// voters and two non-voters, the leader sends each non-voter at most one
// heartbeat per nonVoterHeartbeatEvery while the voters get raft's own
// pace; the non-voters wait longer before they forget the leader, and
// never forget it meanwhile; a non-voter promoted to voter (a voter died)
// gets the voters' timeout and pace again.
func TestNonVotersGetPacedHeartbeatsAndKeepTheirLeader(t *testing.T) {
	c := newTestCluster(t, "app")
	three := func(cfg *Config) { cfg.Voters = 3 }
	for _, p := range []string{"app-0", "app-1", "app-2"} {
		c.start(p, withExpect(3), three)
	}
	l := c.leader(10 * time.Second)
	for _, p := range []string{"app-3", "app-4"} {
		c.start(p, three)
	}
	hb := l.node.cfg.HeartbeatTimeout
	every := nonVoterHeartbeatEvery(hb)
	timeoutOf := func(n *testNode) time.Duration { return n.node.raft.ReloadableConfig().HeartbeatTimeout }
	var voters, nonVoters []*testNode
	eventually(t, 15*time.Second, "3 voters and 2 non-voters, each with the heartbeat timeout of its suffrage", func() error {
		vs, nvs := c.voters(l)
		if len(vs) != 3 || len(nvs) != 2 {
			return fmt.Errorf("voters %v, non-voters %v", vs, nvs)
		}
		voters, nonVoters = nil, nil
		for _, n := range c.running() {
			want := hb
			switch {
			case n == l:
				want = leaderHeartbeatTimeout(hb, l.node.cfg.LeaderLeaseTimeout)
			case slices.Contains(nvs, string(n.node.ID())):
				nonVoters = append(nonVoters, n)
				want = nonVoterTimeoutFactor * hb
			case n != l:
				voters = append(voters, n)
			}
			if got := timeoutOf(n); got != want {
				return fmt.Errorf("%s: heartbeat timeout %s, want %s", n.pod, got, want)
			}
		}
		return nil
	})

	// A window of 2 s: count the heartbeats the leader sends, and watch
	// that every non-voter knows the leader all along.
	const window = 2 * time.Second
	before := map[*testNode]int{}
	for _, n := range append(slices.Clone(voters), nonVoters...) {
		before[n] = l.node.paced.heartbeatsSent(n.node.ID())
	}
	end := time.Now().Add(window)
	for time.Now().Before(end) {
		for _, n := range nonVoters {
			if id, _ := n.node.Leader(); id != l.node.ID() {
				t.Fatalf("non-voter %s knows the leader as %q, want %s", n.pod, id, l.node.ID())
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	most := int(window/every) + 2
	for _, n := range nonVoters {
		got := l.node.paced.heartbeatsSent(n.node.ID()) - before[n]
		t.Logf("non-voter %s: %d heartbeats in %s", n.pod, got, window)
		if got > most {
			t.Errorf("non-voter %s got %d heartbeats in %s, want at most %d (one per %s)", n.pod, got, window, most, every)
		}
	}
	for _, n := range voters {
		got := l.node.paced.heartbeatsSent(n.node.ID()) - before[n]
		t.Logf("voter %s: %d heartbeats in %s", n.pod, got, window)
		if got <= most {
			lhb := leaderHeartbeatTimeout(hb, l.node.cfg.LeaderLeaseTimeout)
			t.Errorf("voter %s got %d heartbeats in %s, want more than a non-voter's %d (raft's pace, one per %s to %s)", n.pod, got, window, most, lhb/10, lhb/5)
		}
	}

	// A voter dies; autopilot promotes a non-voter, which gets the voters'
	// heartbeat timeout back.
	c.crash(voters[0].pod)
	eventually(t, 20*time.Second, "a non-voter promoted, with the voters' heartbeat timeout", func() error {
		for _, n := range nonVoters {
			if v, ok := l.node.suffrage.of(n.node.ID()); ok && v == raft.Voter {
				if got := timeoutOf(n); got != hb {
					return fmt.Errorf("promoted %s has heartbeat timeout %s, want %s", n.pod, got, hb)
				}
				return nil
			}
		}
		vs, nvs := c.voters(l)
		return fmt.Errorf("voters %v, non-voters %v", vs, nvs)
	})
}

// TestTheLeaderRunsRaftWithItsOwnHeartbeatTimeout: the leader's raft runs
// with leaderHeartbeatTimeout (raft's heartbeats come less often), the
// followers' with the group's; the group keeps its leader at that pace (no
// new term: the leader hears a quorum within every lease); when
// leadership moves, each member takes the timeouts of its new role.
func TestTheLeaderRunsRaftWithItsOwnHeartbeatTimeout(t *testing.T) {
	c, l, a, _ := threeVoters(t)
	hb, election := l.node.cfg.HeartbeatTimeout, l.node.cfg.ElectionTimeout
	lhb := leaderHeartbeatTimeout(hb, l.node.cfg.LeaderLeaseTimeout)
	if lhb <= hb {
		t.Fatalf("leader's heartbeat timeout %s, want longer than the group's %s", lhb, hb)
	}
	timeouts := func(leader *testNode) error {
		for _, n := range c.running() {
			wantHB, wantElection := hb, election
			if n == leader {
				wantHB, wantElection = lhb, max(lhb, election)
			}
			rc := n.node.raft.ReloadableConfig()
			if rc.HeartbeatTimeout != wantHB || rc.ElectionTimeout != wantElection {
				return fmt.Errorf("%s (leader %v): heartbeat timeout %s, election timeout %s; want %s, %s", n.pod, n == leader, rc.HeartbeatTimeout, rc.ElectionTimeout, wantHB, wantElection)
			}
		}
		return nil
	}
	eventually(t, 5*time.Second, "the leader on its own heartbeat timeout, the followers on the group's", func() error { return timeouts(l) })

	// Ten leases at the leader's pace: still the same term and leader.
	term := l.node.raft.CurrentTerm()
	end := time.Now().Add(10 * l.node.cfg.LeaderLeaseTimeout)
	for time.Now().Before(end) {
		if !l.node.IsLeader() || l.node.raft.CurrentTerm() != term {
			t.Fatalf("%s lost leadership at the leader's heartbeat pace (term %d, now %d)", l.pod, term, l.node.raft.CurrentTerm())
		}
		time.Sleep(5 * time.Millisecond)
	}

	if err := l.node.TransferLeadership(applyCtx(t), a.node.ID()); err != nil {
		t.Fatalf("transfer to %s: %v", a.pod, err)
	}
	waitLeads(t, a, "by transfer")
	eventually(t, 5*time.Second, "the new leader on its own heartbeat timeout, the old one on the group's", func() error { return timeouts(a) })
}
