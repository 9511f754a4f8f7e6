package raftstore

import (
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bagkeeper/bagkeeper/raftstore/transport"
	"github.com/hashicorp/raft"
)

// TestAFollowerVotesOnceItsLeaderIsSilentForAHeartbeatTimeout: one
// follower's own heartbeat timer is made a minute long, so its raft goes
// on naming the dead leader for a minute. The other follower, which
// notices the leader's silence after its 200 ms timeout, must still be
// elected: the first follower grants its pre-vote and vote once it has not
// heard from the leader for the group's heartbeat timeout. (hashicorp/raft
// alone refuses both until its own timer fires.)
func TestAFollowerVotesOnceItsLeaderIsSilentForAHeartbeatTimeout(t *testing.T) {
	c, l, slow, quick := threeVoters(t)
	slow.node.silenceWatchOff.Store(true)
	slowTimer(t, slow)
	c.crash(l.pod)
	waitLeads(t, quick, "while "+slow.pod+" still names the dead leader")
	if _, id := slow.node.raft.LeaderWithID(); id != quick.node.ID() {
		// It learns the new leader from its first append.
		eventually(t, 5*time.Second, slow.pod+" follows the new leader", func() error {
			if _, id := slow.node.raft.LeaderWithID(); id != quick.node.ID() {
				return fmt.Errorf("%s names %q", slow.pod, id)
			}
			return nil
		})
	}
}

// threeVoters starts a group of three voters (with opts) and returns it,
// its leader and its two followers, once every member holds every entry.
func threeVoters(t *testing.T, opts ...nodeOpt) (c *testCluster, leader, a, b *testNode) {
	t.Helper()
	c = newTestCluster(t, "app")
	for _, p := range []string{"app-0", "app-1", "app-2"} {
		c.start(p, append([]nodeOpt{withExpect(3)}, opts...)...)
	}
	leader = c.leader(10 * time.Second)
	eventually(t, 10*time.Second, "three voters", func() error {
		if v, _ := c.voters(leader); len(v) != 3 {
			return fmt.Errorf("voters %v", v)
		}
		return nil
	})
	// Every member holds every entry, and the leader has no more to write
	// (its log ends in the barrier that follows its own writes): a
	// follower left behind by the last entries could never win an
	// election in which only one of the followers stands (the other, with
	// the newer log, refuses it, and its own raft timer is a minute long).
	eventually(t, 10*time.Second, "every entry on every member", func() error {
		last := leader.node.raft.LastIndex()
		if ci := leader.node.raft.CommitIndex(); ci != last {
			return fmt.Errorf("the leader has committed %d of %d", ci, last)
		}
		var e raft.Log
		if err := leader.node.logs.GetLog(last, &e); err != nil || e.Type == raft.LogCommand {
			return fmt.Errorf("the leader's last entry (%d) is a command, or unreadable (%v): a barrier follows", last, err)
		}
		for _, n := range c.running() {
			if li := n.node.raft.LastIndex(); li != last {
				return fmt.Errorf("%s holds %d of %d", n.pod, li, last)
			}
		}
		return nil
	})
	var followers []*testNode
	for _, n := range c.running() {
		if n != leader {
			followers = append(followers, n)
		}
	}
	return c, leader, followers[0], followers[1]
}

// waitLeads waits until n is the leader.
func waitLeads(t *testing.T, n *testNode, while string) {
	t.Helper()
	eventually(t, 10*time.Second, n.pod+" elected "+while, func() error {
		if st := n.node.raft.State(); st != raft.Leader {
			return fmt.Errorf("%s is %s", n.pod, st)
		}
		return nil
	})
}

// slowTimer makes n's raft wait a minute without its leader before it
// stands for election by itself.
func slowTimer(t *testing.T, n *testNode) {
	t.Helper()
	n.node.reloadMu.Lock()
	defer n.node.reloadMu.Unlock()
	rc := n.node.raft.ReloadableConfig()
	rc.HeartbeatTimeout, rc.ElectionTimeout = time.Minute, time.Minute
	if err := n.node.raft.ReloadConfig(rc); err != nil {
		t.Fatal(err)
	}
}

// TestAVoterStandsOnceItsLeaderIsSilentForAHeartbeatTimeout: both
// followers' raft timers are made a minute long, and only one of them
// watches its leader's silence (two that stand within a few milliseconds
// of each other split the vote, and candidates with a minute's election
// timeout would not try again within the test). A leader must still be
// elected soon after the leader dies, because a voter stands once its
// leader has been silent for the group's heartbeat timeout (and up to
// half of one more), whatever raft's own timer says; and it gets its raft
// timeout back afterwards.
func TestAVoterStandsOnceItsLeaderIsSilentForAHeartbeatTimeout(t *testing.T) {
	c, l, stander, other := threeVoters(t)
	other.node.silenceWatchOff.Store(true)
	slowTimer(t, stander)
	slowTimer(t, other)
	c.crash(l.pod)
	waitLeads(t, stander, "with both followers' raft timers at a minute")
	want := leaderHeartbeatTimeout(stander.node.cfg.HeartbeatTimeout, stander.node.cfg.LeaderLeaseTimeout)
	eventually(t, 5*time.Second, stander.pod+" on the leader's heartbeat timeout", func() error {
		if got := stander.node.raft.ReloadableConfig().HeartbeatTimeout; got != want {
			return fmt.Errorf("raft heartbeat timeout %s, want %s", got, want)
		}
		return nil
	})
}

// TestStandingPutsRaftsHeartbeatTimeoutBack: standForElection lowers
// raft's heartbeat timeout to have it look at its leader now, then puts
// back the one it found (here a follower that still hears its leader, so
// raft does not stand).
func TestStandingPutsRaftsHeartbeatTimeoutBack(t *testing.T) {
	_, l, f, _ := threeVoters(t)
	slowTimer(t, f)
	f.node.standForElection(f.node.cfg.HeartbeatTimeout)
	if got := f.node.raft.ReloadableConfig().HeartbeatTimeout; got != time.Minute {
		t.Errorf("%s's raft heartbeat timeout is %s after standing, want it put back (a minute)", f.pod, got)
	}
	if !l.node.IsLeader() {
		t.Errorf("%s stood and unseated %s, which it still heard", f.pod, l.pod)
	}
}

// TestTheVoteRule: what the rule does with each request, for a follower
// whose leader was last heard from at lastHeard (heartbeat timeout 200ms,
// or the longer silence the member allows when the leader's words came
// late).
func TestTheVoteRule(t *testing.T) {
	now := time.Unix(1000, 0)
	judge := func(lastHeard, allowed time.Duration, state raft.RaftState) *voteJudge {
		if allowed == 0 {
			allowed = 200 * time.Millisecond
		}
		return &voteJudge{
			id: "me", allowed: func() time.Duration { return allowed }, now: func() time.Time { return now },
			state:       func() raft.RaftState { return state },
			leader:      func() raft.ServerAddress { return "leader:1" },
			lastContact: func() time.Time { return now.Add(-lastHeard) },
			term:        func() uint64 { return 5 },
			lastEntry:   func() (uint64, uint64, bool) { return 100, 5, true },
			voter:       func(id raft.ServerID) bool { return id != "learner" },
			header:      func() raft.RPCHeader { return raft.RPCHeader{ID: []byte("me")} },
			logf:        func(string, ...any) {},
		}
	}
	decode := func(b []byte) raft.ServerAddress { return raft.ServerAddress(b) }
	preVote := func(id string, term, lastIndex, lastTerm uint64) *raft.RequestPreVoteRequest {
		return &raft.RequestPreVoteRequest{RPCHeader: raft.RPCHeader{ID: []byte(id), Addr: []byte(id + ":1")}, Term: term, LastLogIndex: lastIndex, LastLogTerm: lastTerm}
	}
	for _, tc := range []struct {
		name      string
		lastHeard time.Duration
		state     raft.RaftState
		req       *raft.RequestPreVoteRequest
		answered  bool
		granted   bool
		allowed   time.Duration
	}{
		{"leader heard within the timeout: raft decides (and refuses)", 150 * time.Millisecond, raft.Follower, preVote("c", 6, 100, 5), false, false, 0},
		{"leader silent, candidate up to date: granted", 250 * time.Millisecond, raft.Follower, preVote("c", 6, 100, 5), true, true, 0},
		{"leader silent, candidate's log newer: granted", 250 * time.Millisecond, raft.Follower, preVote("c", 6, 90, 6), true, true, 0},
		{"leader silent, candidate's log shorter: refused", 250 * time.Millisecond, raft.Follower, preVote("c", 6, 99, 5), true, false, 0},
		{"leader silent, candidate's last term older: refused", 250 * time.Millisecond, raft.Follower, preVote("c", 6, 200, 4), true, false, 0},
		{"leader silent, candidate's term older: raft decides", 250 * time.Millisecond, raft.Follower, preVote("c", 4, 100, 5), false, false, 0},
		{"leader silent, candidate not a voter: raft decides", 250 * time.Millisecond, raft.Follower, preVote("learner", 6, 100, 5), false, false, 0},
		{"a candidate itself: raft decides", 250 * time.Millisecond, raft.Candidate, preVote("c", 6, 100, 5), false, false, 0},
		{"the candidate is the leader raft names: raft decides", 250 * time.Millisecond, raft.Follower, preVote("leader", 6, 100, 5), false, false, 0},
		{"leader's words came late, silent for less than allowed: raft decides", 250 * time.Millisecond, raft.Follower, preVote("c", 6, 100, 5), false, false, 400 * time.Millisecond},
		{"leader's words came late, silent for longer than allowed: granted", 450 * time.Millisecond, raft.Follower, preVote("c", 6, 100, 5), true, true, 400 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch := make(chan raft.RPCResponse, 1)
			handled := judge(tc.lastHeard, tc.allowed, tc.state).judge(raft.RPC{Command: tc.req, RespChan: ch}, decode)
			if handled != tc.answered {
				t.Fatalf("answered here: %v, want %v", handled, tc.answered)
			}
			if !tc.answered {
				if len(ch) != 0 {
					t.Fatal("answered, but said it did not")
				}
				return
			}
			resp := (<-ch).Response.(*raft.RequestPreVoteResponse)
			if resp.Granted != tc.granted || resp.Term != tc.req.Term || string(resp.ID) != "me" {
				t.Fatalf("response %+v, want granted %v at term %d from me", resp, tc.granted, tc.req.Term)
			}
		})
	}

	vote := func() *raft.RequestVoteRequest {
		return &raft.RequestVoteRequest{RPCHeader: raft.RPCHeader{ID: []byte("c"), Addr: []byte("c:1")}, Term: 6, LastLogIndex: 100, LastLogTerm: 5}
	}
	for _, tc := range []struct {
		lastHeard, allowed time.Duration
		marked             bool
	}{{150 * time.Millisecond, 0, false}, {250 * time.Millisecond, 0, true}, {250 * time.Millisecond, 400 * time.Millisecond, false}} {
		req := vote()
		ch := make(chan raft.RPCResponse, 1)
		if judge(tc.lastHeard, tc.allowed, raft.Follower).judge(raft.RPC{Command: req, RespChan: ch}, decode) || len(ch) != 0 {
			t.Fatal("a vote was answered outside raft")
		}
		if req.LeadershipTransfer != tc.marked {
			t.Fatalf("leader last heard %s ago: vote marked %v, want %v", tc.lastHeard, req.LeadershipTransfer, tc.marked)
		}
	}
}

// TestACandidateRefusedTriesAgainAtTheGroupsPace: a voter whose raft runs
// with a minute-long timer stands by the silence rule; its first pre-vote
// fails (the other voter is gone too, and only a listener that answers
// nothing is at its address). It must try again within the group's
// election timeout, not after a minute. (Without standForElection's lower
// election timeout, whether raft drew its candidacy's timer from the
// minute depended on whether followRole reloaded the role's timeouts
// before raft read them: most runs passed even so.)
func TestACandidateRefusedTriesAgainAtTheGroupsPace(t *testing.T) {
	c, l, stander, other := threeVoters(t)
	slowTimer(t, stander)
	addr := other.node.Advertise()
	c.crash(other.pod)
	// What stands in for the other voter counts the pre-votes that reach
	// it, and drops each connection.
	ln, err := transport.Listen(addr, "", transport.Config{App: c.app})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetLocalID(string(other.node.ID()))
	t.Cleanup(func() { ln.Close() })
	var preVotes atomic.Int32
	go func() {
		const rpcRequestPreVote = 4 // hashicorp/raft's wire tag (net_transport.go)
		for {
			conn, err := ln.RaftLayer().Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				b := make([]byte, 1)
				if _, err := io.ReadFull(conn, b); err == nil && b[0] == rpcRequestPreVote {
					preVotes.Add(1)
				}
			}()
		}
	}()
	c.crash(l.pod)
	eventually(t, 10*time.Second, stander.pod+" stands again and again", func() error {
		if n := preVotes.Load(); n < 3 {
			return fmt.Errorf("%d pre-votes reached the other voter's address", n)
		}
		return nil
	})
}

// TestTheVoteRuleKnowsVotersOfAConfigurationNotYetCommittedHere: the vote
// rule counts a candidate as a voter by the latest configuration the
// member holds, as raft does, not only once the member has applied it
// (a member of a new group may not have learned that the first
// configuration committed when the first leader dies).
func TestTheVoteRuleKnowsVotersOfAConfigurationNotYetCommittedHere(t *testing.T) {
	_, l, f, _ := threeVoters(t)
	// As if f had not applied any configuration yet.
	f.node.suffrage.set(raft.Configuration{})
	j := f.node.voteJudge()
	if !j.voter(l.node.ID()) {
		t.Fatalf("%s is a voter of %s's latest configuration, but the vote rule does not count it as one", l.pod, f.pod)
	}
	if j.voter("app-9/none") {
		t.Fatal("the vote rule counts a stranger as a voter")
	}
}
