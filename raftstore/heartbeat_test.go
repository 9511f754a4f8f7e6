package raftstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
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
	every := l.node.paced.every
	if want := nonVoterHeartbeatEvery(hb, l.node.cfg.Autopilot.UnhealthyAfter); every != want {
		t.Fatalf("non-voter heartbeats every %s, want %s", every, want)
	}
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
				want, _ = nonVoterTimeouts(hb, l.node.cfg.ElectionTimeout, every)
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

// votersAndANonVoter starts three voters and a fourth member that joins
// as a non-voter, all with opts (which must keep the voters at three), and
// returns the leader, another voter and the non-voter.
func votersAndANonVoter(t *testing.T, opts nodeOpt) (l, voter, nv *testNode) {
	t.Helper()
	c := newTestCluster(t, "app")
	for _, p := range []string{"app-0", "app-1", "app-2"} {
		c.start(p, withExpect(3), opts)
	}
	l = c.leader(20 * time.Second)
	nv = c.start("app-3", opts)
	eventually(t, 20*time.Second, "app-3 to be a non-voter", func() error {
		if vs, nvs := c.voters(l); len(vs) != 3 || !slices.Contains(nvs, string(nv.node.ID())) {
			return fmt.Errorf("voters %v, non-voters %v", vs, nvs)
		}
		return nil
	})
	voter = c.follower(l)
	for voter == nv {
		voter = c.follower(l)
	}
	return l, voter, nv
}

// batchInterval is the non-voter append interval of the batching tests:
// long against a write, so that batching shows in counts and a prompt
// write in time even on a busy machine.
const batchInterval = 1500 * time.Millisecond

// batching sets a group of three voters up for the batching tests.
func batching(cfg *Config) {
	cfg.Voters = 3
	cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 2*time.Second, 2*time.Second, time.Second
	cfg.NonvoterAppendInterval = batchInterval
	// The idle appends (one per commit timeout) come less often than the
	// interval, as they do with the defaults.
	cfg.CommitTimeout = 5 * time.Second
}

// TestAppendsToANonVoterComeInBatches: under a stream of writes the
// leader sends a non-voter one append per NonvoterAppendInterval (the
// writes batched) while a voter gets them as they come; a lone write after
// a quiet spell reaches the non-voter without waiting for the interval
// (the appends of the first half interval after a quiet spell are not
// held); the non-voter applies every write.
func TestAppendsToANonVoterComeInBatches(t *testing.T) {
	const interval = batchInterval
	l, voter, nv := votersAndANonVoter(t, batching)
	rel := mustApply(t, l.node, state.EnsureRelationOp("peers", "p", true, "", "")).GetOps()[0].GetRelationId()
	applied := func(n *testNode, idx uint64) func() error {
		return func() error {
			if got := n.node.StateIndex(); got < idx {
				return fmt.Errorf("applied %d, want %d", got, idx)
			}
			return nil
		}
	}

	// A lone write after a quiet spell.
	eventually(t, 10*time.Second, "no append to the non-voter for an interval", func() error {
		if since := time.Since(l.node.paced.paceOf(nv.node.ID()).last); since <= interval {
			return fmt.Errorf("last append %s ago", since)
		}
		return nil
	})
	t0 := time.Now()
	idx := mustApply(t, l.node, state.UpdateBagOp(rel, "app", map[string]string{"lone": "1"})).GetIndex()
	eventually(t, 10*time.Second, "the non-voter to apply the lone write", applied(nv, idx))
	if took := time.Since(t0); took >= interval/2 {
		t.Fatalf("a lone write after a quiet spell took %s to reach the non-voter, want well under the interval %s", took, interval)
	}

	// A stream of writes for three intervals: the appends that start in
	// the first half interval after the quiet spell are not held; count
	// those of the last two intervals.
	var nvBefore, vBefore, writes int
	start := time.Now()
	counting := false
	for end := start.Add(3 * interval); time.Now().Before(end); {
		if !counting && time.Since(start) >= interval {
			counting = true
			nvBefore, vBefore = l.node.paced.paceOf(nv.node.ID()).sent, l.node.paced.paceOf(voter.node.ID()).sent
		}
		idx = mustApply(t, l.node, state.UpdateBagOp(rel, "app", map[string]string{"n": fmt.Sprint(writes)})).GetIndex()
		if counting {
			writes++
		}
	}
	nvGot := l.node.paced.paceOf(nv.node.ID()).sent - nvBefore
	vGot := l.node.paced.paceOf(voter.node.ID()).sent - vBefore
	// One per interval, the one under way at either end, and full appends
	// (not held: the non-voter catching up).
	most := 2 + 2 + writes/maxAppendEntries + 1
	t.Logf("%d writes in the last two intervals: %d appends to the voter %s, %d to the non-voter %s", writes, vGot, voter.pod, nvGot, nv.pod)
	if writes < 4*most {
		t.Fatalf("only %d writes in %s: too few to tell batching", writes, 2*interval)
	}
	if nvGot > most {
		t.Errorf("the non-voter got %d appends for %d writes in two intervals, want at most %d", nvGot, writes, most)
	}
	if vGot < writes/2 {
		t.Errorf("the voter got %d appends for %d writes, want them as they come", vGot, writes)
	}
	eventually(t, 10*time.Second, "the non-voter to apply every write", applied(nv, idx))
}

// TestANonVoterWithLongHeartbeatGapsStaysHealthy: with a non-voter
// heartbeat interval longer than half of UnhealthyAfter (1.5 s against
// 1 s), an idle non-voter answers the leader only once per gap; the
// leader counts it healthy all along (its threshold is 2.5 gaps), it
// knows its leader all along, and it gets one heartbeat per gap. Once it
// dies, the leader counts it unhealthy.
func TestANonVoterWithLongHeartbeatGapsStaysHealthy(t *testing.T) {
	const every = 1500 * time.Millisecond
	opts := func(cfg *Config) {
		cfg.Voters = 3
		cfg.NonvoterHeartbeatInterval = every
		cfg.CommitTimeout = 5 * time.Second // no idle appends in the window
		// The leader's health polls of a settled member come every ten
		// intervals (5 s): between them only the heartbeats tell it the
		// non-voter is there.
		cfg.Autopilot.Interval, cfg.Autopilot.UnhealthyAfter = 500*time.Millisecond, time.Second
	}
	c := newTestCluster(t, "app")
	for _, p := range []string{"app-0", "app-1", "app-2"} {
		c.start(p, withExpect(3), opts)
	}
	l := c.leader(20 * time.Second)
	nv := c.start("app-3", opts)
	if unhealthy := l.node.cfg.Autopilot.UnhealthyAfter; unhealthy >= every {
		t.Fatalf("UnhealthyAfter %s: the test wants heartbeat gaps longer than it", unhealthy)
	}
	id := nv.node.ID()
	health := func() (MemberHealth, bool) {
		for _, m := range l.node.MemberHealth() {
			if m.ID == id {
				return m, true
			}
		}
		return MemberHealth{}, false
	}
	eventually(t, 20*time.Second, "app-3 a healthy non-voter that knows the leader", func() error {
		if m, ok := health(); !ok || m.Voter || !m.Healthy {
			return fmt.Errorf("health %+v (known %v)", m, ok)
		}
		if leader, _ := nv.node.Leader(); leader != l.node.ID() {
			return fmt.Errorf("it knows the leader as %q", leader)
		}
		// It runs raft with a non-voter's timeouts once it has applied the
		// configuration that makes it one.
		if want, _ := nonVoterTimeouts(nv.node.cfg.HeartbeatTimeout, nv.node.cfg.ElectionTimeout, every); nv.node.raft.ReloadableConfig().HeartbeatTimeout != want {
			return fmt.Errorf("it runs raft with a heartbeat timeout of %s, want %s", nv.node.raft.ReloadableConfig().HeartbeatTimeout, want)
		}
		return nil
	})
	const window = 3 * every
	before := l.node.paced.heartbeatsSent(id)
	for end := time.Now().Add(window); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if m, _ := health(); !m.Healthy {
			t.Fatalf("the leader counts the idle non-voter unhealthy between two heartbeats: %+v", m)
		}
		if leader, _ := nv.node.Leader(); leader != l.node.ID() {
			t.Fatalf("the non-voter knows the leader as %q, want %s", leader, l.node.ID())
		}
	}
	got := l.node.paced.heartbeatsSent(id) - before
	t.Logf("%d heartbeats to the non-voter in %s (one per %s)", got, window, every)
	if most := int(window/every) + 2; got > most {
		t.Errorf("the non-voter got %d heartbeats in %s, want at most %d", got, window, most)
	}

	c.crash(nv.pod)
	eventually(t, 20*time.Second, "the leader to count the dead non-voter unhealthy (or remove it)", func() error {
		if m, ok := health(); ok && m.Healthy {
			return fmt.Errorf("health %+v", m)
		}
		return nil
	})
}

// TestAnAppendANonVoterTookStandsForAHeartbeat: under a stream of writes a
// non-voter gets an append every append interval, shorter than the gap
// between its heartbeats; each append it takes tells it the leader, so the
// leader sends it no heartbeat meanwhile, and it knows its leader all
// along. Once the writes stop, its heartbeats come again.
func TestAnAppendANonVoterTookStandsForAHeartbeat(t *testing.T) {
	opts := func(cfg *Config) {
		cfg.Voters = 3
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = time.Second, time.Second, 500*time.Millisecond
		cfg.Autopilot.UnhealthyAfter = 2 * time.Second
		cfg.NonvoterAppendInterval = 100 * time.Millisecond
		cfg.CommitTimeout = 5 * time.Second
	}
	l, _, nv := votersAndANonVoter(t, opts)
	every, appendEvery := l.node.paced.every, l.node.paced.appendEvery()
	if appendEvery*4 > every {
		t.Fatalf("appends every %s, heartbeats every %s: the appends must come several times per heartbeat", appendEvery, every)
	}
	rel := mustApply(t, l.node, state.EnsureRelationOp("peers", "p", true, "", "")).GetOps()[0].GetRelationId()
	id := nv.node.ID()

	// The writes of the first heartbeat gap only start the stream; count
	// the heartbeats of the three gaps after it.
	start := time.Now()
	mustApply(t, l.node, state.UpdateBagOp(rel, "app", map[string]string{"n": "start"}))
	for time.Since(start) < every {
		mustApply(t, l.node, state.UpdateBagOp(rel, "app", map[string]string{"n": time.Now().String()}))
	}
	// A window counts if the appends in it came well within a heartbeat
	// gap of each other (a write held up by a busy machine for longer
	// leaves room for a heartbeat that is due).
	var hbGot, appendsGot int
	for deadline := time.Now().Add(30 * time.Second); ; {
		hbBefore, appendsBefore := l.node.paced.heartbeatsSent(id), l.node.paced.paceOf(id).sent
		seen, seenAt, widest := appendsBefore, time.Now(), time.Duration(0)
		for end := time.Now().Add(3 * every); time.Now().Before(end); {
			mustApply(t, l.node, state.UpdateBagOp(rel, "app", map[string]string{"n": time.Now().String()}))
			if leader, _ := nv.node.Leader(); leader != l.node.ID() {
				t.Fatalf("the non-voter knows the leader as %q under the stream, want %s", leader, l.node.ID())
			}
			if sent := l.node.paced.paceOf(id).sent; sent != seen {
				widest = max(widest, time.Since(seenAt))
				seen, seenAt = sent, time.Now()
			}
		}
		widest = max(widest, time.Since(seenAt))
		hbGot, appendsGot = l.node.paced.heartbeatsSent(id)-hbBefore, l.node.paced.paceOf(id).sent-appendsBefore
		t.Logf("%s of writes: %d appends (at most %s apart) and %d heartbeats to the non-voter (heartbeats every %s, appends every %s)", 3*every, appendsGot, widest.Round(time.Millisecond), hbGot, every, appendEvery)
		if widest < every/2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no window of %s in which the appends came less than %s apart", 3*every, every/2)
		}
	}
	if appendsGot < 6 {
		t.Fatalf("the non-voter got %d appends in %s of writes: too few to tell", appendsGot, 3*every)
	}
	// Raft's heartbeat goroutine asks for a turn and then waits for it:
	// one turn may be counted that has not gone out.
	if hbGot > 1 {
		t.Errorf("the non-voter got %d heartbeats in %s of appends every %s, want none (one waiting)", hbGot, 3*every, appendEvery)
	}

	// Idle again: the heartbeats come back.
	hbBefore := l.node.paced.heartbeatsSent(id)
	eventually(t, 10*time.Second, "heartbeats to the non-voter once the writes stop", func() error {
		if got := l.node.paced.heartbeatsSent(id) - hbBefore; got < 3 {
			return fmt.Errorf("%d heartbeats", got)
		}
		return nil
	})
	if leader, _ := nv.node.Leader(); leader != l.node.ID() {
		t.Fatalf("the idle non-voter knows the leader as %q, want %s", leader, l.node.ID())
	}
}

// TestTheLeaderRunsRaftWithItsOwnHeartbeatTimeout: the leader's raft runs
// with leaderHeartbeatTimeout (raft's heartbeats come less often), the
// followers' with the group's (or the longer silence a voter allows a
// leader that was slow to speak); the group keeps its leader at that pace (no
// new term: the leader hears a quorum within every lease); when
// leadership moves, each member takes the timeouts of its new role.
func TestTheLeaderRunsRaftWithItsOwnHeartbeatTimeout(t *testing.T) {
	// Five times the test clusters' timeouts: the leader must hear a
	// quorum within every lease, and a busy machine running the tests with
	// -race delays a heartbeat's answer by more than the 150 ms lease of
	// the others (seen in CI).
	c, l, a, _ := threeVoters(t, func(cfg *Config) {
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = time.Second, time.Second, 750*time.Millisecond
	})
	hb, election := l.node.cfg.HeartbeatTimeout, l.node.cfg.ElectionTimeout
	lhb := leaderHeartbeatTimeout(hb, l.node.cfg.LeaderLeaseTimeout)
	if lhb <= hb {
		t.Fatalf("leader's heartbeat timeout %s, want longer than the group's %s", lhb, hb)
	}
	// A voting follower runs with the silence it allows its leader
	// (silence.go): the group's heartbeat timeout, or longer (up to
	// maxSilenceFactor times) after gaps between its leader's words, as a
	// busy test machine makes.
	timeouts := func(leader *testNode) error {
		for _, n := range c.running() {
			wantHB := time.Duration(n.node.silenceGiven.Load())
			if wantHB < hb || wantHB > maxSilenceFactor*hb {
				return fmt.Errorf("%s allows its leader %s of silence, want %s to %s", n.pod, wantHB, hb, maxSilenceFactor*hb)
			}
			if n == leader {
				wantHB = lhb
			}
			wantElection := max(wantHB, election)
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

// TestIdleAppendsToANonVoterAreHeldUntilTheLeaderWrites: in an idle group
// raft sends each follower an append every commit timeout or two that
// tells it nothing new; to a non-voter those come idleAppendHold times
// less often, to a voter as before. A write releases the held append: it
// reaches the non-voter at once, not after the hold.
func TestIdleAppendsToANonVoterAreHeldUntilTheLeaderWrites(t *testing.T) {
	const commit = 500 * time.Millisecond
	hold := idleAppendHold * commit
	opts := func(cfg *Config) {
		cfg.Voters = 3
		cfg.CommitTimeout = commit
	}
	l, voter, nv := votersAndANonVoter(t, opts)
	rel := mustApply(t, l.node, state.EnsureRelationOp("peers", "p", true, "", "")).GetOps()[0].GetRelationId()
	eventually(t, 10*time.Second, "the non-voter to apply the relation", func() error {
		if got, want := nv.node.StateIndex(), l.node.StateIndex(); got < want {
			return fmt.Errorf("applied %d of %d", got, want)
		}
		return nil
	})

	// Idle: raft's pace is one append per commit timeout to two.
	const window = 10 * time.Second
	id, vid := nv.node.ID(), voter.node.ID()
	nvBefore, vBefore, idleBefore := l.node.paced.paceOf(id).sent, l.node.paced.paceOf(vid).sent, l.node.paced.paceOf(id).idle
	<-time.After(window)
	nvGot, vGot, idleGot := l.node.paced.paceOf(id).sent-nvBefore, l.node.paced.paceOf(vid).sent-vBefore, l.node.paced.paceOf(id).idle-idleBefore
	t.Logf("idle for %s: %d appends to the voter, %d to the non-voter (%d of them idle)", window, vGot, nvGot, idleGot)
	if most := int(window/(commit+hold)) + 2; nvGot > most {
		t.Errorf("the non-voter got %d appends in %s idle, want at most %d (one per commit timeout and hold)", nvGot, window, most)
	}
	if least := int(window/(2*commit)) - 1; vGot < least {
		t.Errorf("the voter got %d appends in %s idle, want raft's pace: at least %d", vGot, window, least)
	}
	if idleGot == 0 {
		t.Error("no append to the non-voter counted as idle")
	}

	// A write releases the held append.
	for range 3 {
		// Once an idle append has gone out, its return is held.
		idles := l.node.paced.paceOf(id).idle
		eventually(t, 10*time.Second, "the next idle append to the non-voter", func() error {
			if l.node.paced.paceOf(id).idle == idles {
				return errors.New("none yet")
			}
			return nil
		})
		t0 := time.Now()
		idx := mustApply(t, l.node, state.UpdateBagOp(rel, "app", map[string]string{"at": t0.String()})).GetIndex()
		eventually(t, 10*time.Second, "the non-voter to apply the write", func() error {
			if got := nv.node.StateIndex(); got < idx {
				return fmt.Errorf("applied %d, want %d", got, idx)
			}
			return nil
		})
		if took := time.Since(t0); took >= hold/2 {
			t.Fatalf("a write took %s to reach the non-voter: it waited for a held idle append (hold %s)", took, hold)
		}
	}
}

// TestWhatAnIdleAppendIs: an append that tells a member nothing new is
// held (see pacedTransport.AppendEntries); one that carries entries, a
// later commit index or another last entry is not, and neither is any
// append while the member holds entries it was not told are committed
// (their commit comes without a new entry, so nothing would end the hold).
func TestWhatAnIdleAppendIs(t *testing.T) {
	settled := told{ok: true, prev: 10, commit: 10}
	cases := []struct {
		what string
		told told
		args raft.AppendEntriesRequest
		idle bool
	}{
		{"nothing new", settled, raft.AppendEntriesRequest{PrevLogEntry: 10, LeaderCommitIndex: 10}, true},
		{"entries", settled, raft.AppendEntriesRequest{PrevLogEntry: 10, LeaderCommitIndex: 10, Entries: []*raft.Log{{Index: 11}}}, false},
		{"a later commit index", settled, raft.AppendEntriesRequest{PrevLogEntry: 10, LeaderCommitIndex: 11}, false},
		{"another last entry", settled, raft.AppendEntriesRequest{PrevLogEntry: 9, LeaderCommitIndex: 10}, false},
		{"the last append failed", told{prev: 10, commit: 10}, raft.AppendEntriesRequest{PrevLogEntry: 10, LeaderCommitIndex: 10}, false},
		{"entries not told committed", told{ok: true, prev: 10, commit: 9}, raft.AppendEntriesRequest{PrevLogEntry: 10, LeaderCommitIndex: 9}, false},
	}
	for _, c := range cases {
		if got := c.told.idle(&c.args); got != c.idle {
			t.Errorf("%s: idle = %v, want %v", c.what, got, c.idle)
		}
	}
}

// TestANonVotersOwnWriteIsNotHeldInTheBatch: under a stream of writes the
// appends to a non-voter are held an interval (above), but a write the
// non-voter made itself, which it waits to apply (read-your-writes), is
// not: the leader releases the member's held append once it committed the
// write, so the write takes round trips, not the rest of the interval.
func TestANonVotersOwnWriteIsNotHeldInTheBatch(t *testing.T) {
	const interval = batchInterval
	l, _, nv := votersAndANonVoter(t, batching)
	rel := mustApply(t, l.node, state.EnsureRelationOp("peers", "p", true, "", "")).GetOps()[0].GetRelationId()

	// A stream of writes on the leader, so that the non-voter's appends
	// are held.
	ctx, stop := context.WithCancel(t.Context())
	streamed := make(chan int)
	go func() {
		n := 0
		var failed error
		for ctx.Err() == nil {
			if _, err := l.node.Apply(ctx, state.NewCommand(state.UpdateBagOp(rel, "app", map[string]string{"stream": fmt.Sprint(n)}))); err == nil {
				n++
			} else if failed == nil && ctx.Err() == nil {
				failed = err
			}
		}
		if failed != nil {
			t.Logf("a write of the stream failed: %v", failed)
		}
		streamed <- n
	}()
	defer func() {
		stop()
		t.Logf("%d writes in the stream", <-streamed)
	}()
	eventually(t, 10*time.Second, "the stream to reach the non-voter in batches", func() error {
		// Past the first half interval of the burst, appends are held.
		if p := l.node.paced.paceOf(nv.node.ID()); p.burst.IsZero() || time.Since(p.burst) < interval {
			return fmt.Errorf("the burst began %s ago", time.Since(p.burst))
		}
		return nil
	})
	before := l.node.paced.paceOf(nv.node.ID()).released
	var slowest time.Duration
	for i := range 5 {
		t0 := time.Now()
		mustApply(t, nv.node, state.UpdateBagOp(rel, "app", map[string]string{"own": fmt.Sprint(i)}))
		slowest = max(slowest, time.Since(t0))
	}
	t.Logf("the non-voter's own writes took at most %s (interval %s)", slowest, interval)
	if slowest >= interval/3 {
		t.Fatalf("a write of the non-voter's own took %s under a stream, want well under the interval %s: it waited for the batch", slowest, interval)
	}
	if got := l.node.paced.paceOf(nv.node.ID()).released - before; got < 5 {
		t.Fatalf("the leader released the non-voter's appends %d times for its 5 writes", got)
	}

	// A read that sees every committed write waits until the non-voter
	// applied the leader's commit index, which the stream keeps ahead of
	// its batches: the leader releases its appends for that too.
	before = l.node.paced.paceOf(nv.node.ID()).released
	slowest = 0
	for range 5 {
		t0 := time.Now()
		if _, err := nv.node.Read(t.Context()); err != nil {
			t.Fatalf("read on the non-voter: %v", err)
		}
		slowest = max(slowest, time.Since(t0))
	}
	t.Logf("the non-voter's reads took at most %s (interval %s)", slowest, interval)
	if slowest >= interval/3 {
		t.Fatalf("a read on the non-voter took %s under a stream, want well under the interval %s: it waited for the batch", slowest, interval)
	}
	if got := l.node.paced.paceOf(nv.node.ID()).released - before; got < 5 {
		t.Fatalf("the leader released the non-voter's appends %d times for its 5 reads", got)
	}
}

// TestAHeldHeartbeatGoesOutWhenTheMemberBecomesAVoter: a heartbeat to a
// non-voter waits for its turn, through changes of the configuration that
// leave the member a non-voter, and goes out at once when the committed
// configuration makes it a voter (which then expects raft's pace).
func TestAHeldHeartbeatGoesOutWhenTheMemberBecomesAVoter(t *testing.T) {
	var voter atomic.Bool
	done := make(chan struct{})
	defer close(done)
	p := newPacedTransport(nil, time.Hour, true, 0, 0, func(raft.ServerID) bool { return !voter.Load() }, func() int { return 1 }, func(uint64) {}, func(raft.ServerID) {}, done)
	if err := p.turn("nv"); err != nil {
		t.Fatalf("first heartbeat: %v", err)
	}
	turned := make(chan error, 1)
	go func() { turned <- p.turn("nv") }()
	// Another member's suffrage changes: the heartbeat goes on waiting.
	heldUntilVoter(t, p, &voter, turned,
		"the second heartbeat to a non-voter went out within the hour", "held heartbeat", "the heartbeat held for a member made a voter did not go out")
	if got := p.heartbeatsSent("nv"); got != 2 {
		t.Fatalf("heartbeats counted: %d, want 2", got)
	}
}

// TestAppendIntervalGrowsWithTheNonVoters: the interval between appends to
// a non-voter under a stream is the configured one for a few non-voters,
// grows by nonVoterAppendShare per non-voter beyond that, stops at the
// most given, and is never shorter than the configured one; 0 stays 0 (no
// batching).
func TestAppendIntervalGrowsWithTheNonVoters(t *testing.T) {
	for _, tc := range []struct {
		base      time.Duration
		nonVoters int
		most      time.Duration
		want      time.Duration
	}{
		{100 * time.Millisecond, 0, time.Second, 100 * time.Millisecond},
		{100 * time.Millisecond, 12, time.Second, 100 * time.Millisecond},
		{100 * time.Millisecond, 25, time.Second, 200 * time.Millisecond},
		{100 * time.Millisecond, 95, time.Second, 760 * time.Millisecond},
		{100 * time.Millisecond, 500, time.Second, time.Second},
		{100 * time.Millisecond, 95, 500 * time.Millisecond, 500 * time.Millisecond},
		{2 * time.Second, 95, time.Second, 2 * time.Second},
		{0, 95, time.Second, 0},
	} {
		if got := appendInterval(tc.base, tc.nonVoters, tc.most); got != tc.want {
			t.Errorf("appendInterval(%s, %d, %s) = %s, want %s", tc.base, tc.nonVoters, tc.most, got, tc.want)
		}
	}
}

// nonVoterPacer is a pacedTransport without a network that takes every
// member for a non-voter, with count non-voters in the group and a least
// heartbeat gap every (fixed, or growing with count).
func nonVoterPacer(every time.Duration, fixed bool, count func() int, done <-chan struct{}) *pacedTransport {
	return newPacedTransport(nil, every, fixed, 0, 0, func(raft.ServerID) bool { return true }, count, func(uint64) {}, func(raft.ServerID) {}, done)
}

// TestHeartbeatGapGrowsWithTheNonVoters: by default the gap between two
// heartbeats to a non-voter is the configured one up to 50 non-voters and
// grows by 25 ms for each beyond, up to 5 s (never below the configured
// one); a gap that was set stays as set.
func TestHeartbeatGapGrowsWithTheNonVoters(t *testing.T) {
	const base = 1250 * time.Millisecond
	for _, tc := range []struct {
		base      time.Duration
		fixed     bool
		nonVoters int
		want      time.Duration
	}{
		{base, false, 0, base},
		{base, false, 2, base},
		{base, false, 50, base},
		{base, false, 60, 1500 * time.Millisecond},
		{base, false, 95, 2375 * time.Millisecond},
		{base, false, 200, 5 * time.Second},
		{base, false, 1000, 5 * time.Second},
		{8 * time.Second, false, 1000, 8 * time.Second},
		{base, true, 95, base},
		{5 * time.Second, true, 2, 5 * time.Second},
	} {
		if got := heartbeatGap(tc.base, tc.fixed, tc.nonVoters); got != tc.want {
			t.Errorf("heartbeatGap(%s, fixed %v, %d) = %s, want %s", tc.base, tc.fixed, tc.nonVoters, got, tc.want)
		}
	}
}

// TestANonVoterAllowsForALeaderThatCountsMore: the leader's gap follows the
// non-voters of the configuration it committed, which its non-voters apply
// later; a non-voter picks its timeouts for a count a quarter (and four)
// above its own, so that it still allows the leader's gap 2.5 times while
// the leader counts up to that many more. Its gap then follows the count.
func TestANonVoterAllowsForALeaderThatCountsMore(t *testing.T) {
	var count atomic.Int64
	done := make(chan struct{})
	defer close(done)
	p := nonVoterPacer(1250*time.Millisecond, false, func() int { return int(count.Load()) }, done)
	for n := 1; n <= 300; n++ {
		count.Store(int64(n))
		allowed := p.heartbeatEveryAllowed()
		if got := p.heartbeatEvery(); allowed < got {
			t.Fatalf("%d non-voters: the non-voter allows a gap of %s, its own count gives %s", n, allowed, got)
		}
		for ahead := 0; ahead <= n/4+4; ahead++ {
			if leader := heartbeatGap(p.every, false, n+ahead); nonVoterSilence(allowed) < 5*leader/2 {
				t.Fatalf("%d non-voters, the leader counting %d more: the non-voter forgets its leader after %s of silence, the leader's gap is %s", n, ahead, nonVoterSilence(allowed), leader)
			}
		}
	}
	count.Store(95)
	hb, _ := nonVoterTimeouts(500*time.Millisecond, 500*time.Millisecond, p.heartbeatEveryAllowed())
	if want := nonVoterSilence(heartbeatGap(p.every, false, 95+95/4+4)); hb != want {
		t.Fatalf("heartbeat timeout of a non-voter of 95: %s, want %s", hb, want)
	}
}

// TestTheNextHeartbeatWaitsTheGrownGap: a heartbeat to a non-voter puts the
// next one the gap for the group's non-voters later — the configured gap
// in a small group, a longer one in a large group, the configured one
// again when it was set.
func TestTheNextHeartbeatWaitsTheGrownGap(t *testing.T) {
	const base = 50 * time.Millisecond
	for _, tc := range []struct {
		fixed     bool
		nonVoters int
		want      time.Duration
	}{
		{false, 1, base},
		{false, 120, 3 * time.Second},
		{true, 120, base},
	} {
		done := make(chan struct{})
		p := nonVoterPacer(base, tc.fixed, func() int { return tc.nonVoters }, done)
		before := time.Now()
		if err := p.turn("nv"); err != nil {
			t.Fatal(err)
		}
		after := time.Now()
		p.mu.Lock()
		next := p.next["nv"]
		p.mu.Unlock()
		close(done)
		if next.Before(before.Add(tc.want)) || next.After(after.Add(tc.want)) {
			t.Errorf("fixed %v, %d non-voters: next heartbeat %s after the turn, want %s", tc.fixed, tc.nonVoters, next.Sub(before), tc.want)
		}
	}

	// A configuration that leaves fewer non-voters shortens the wait of a
	// heartbeat held for the longer gap.
	var count atomic.Int64
	count.Store(120)
	done := make(chan struct{})
	defer close(done)
	p := nonVoterPacer(base, false, func() int { return int(count.Load()) }, done)
	if err := p.turn("nv"); err != nil {
		t.Fatal(err)
	}
	turned := make(chan error, 1)
	go func() { turned <- p.turn("nv") }()
	eventually(t, 5*time.Second, "the second heartbeat held", func() error {
		if p.heartbeatsSent("nv") != 2 {
			return errors.New("not yet asked for")
		}
		return nil
	})
	count.Store(1)
	p.suffragesChanged()
	select {
	case err := <-turned:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the held heartbeat still waits for the gap of 120 non-voters (3s) after the group shrank to one")
	}
}

// TestAppendSlotsSpreadTheNonVoters: a held append returns at its member's
// next slot, between half an interval and an interval and a half after it
// started; an append that starts at a slot returns at the next one, an
// interval later; and the slots of a hundred members that start together
// are spread over the interval rather than falling together.
func TestAppendSlotsSpreadTheNonVoters(t *testing.T) {
	const every = 760 * time.Millisecond
	start := time.Unix(1_800_000_000, 123_456_789)
	var offsets []time.Duration
	for i := range 100 {
		id := raft.ServerID(fmt.Sprintf("app-%d-%08x", i, i*7919))
		slot := appendSlot(id, start, every)
		if d := slot.Sub(start); d < every/2 || d >= every/2+every {
			t.Fatalf("%s: slot %s after the start, want within [%s, %s)", id, d, every/2, every/2+every)
		}
		if next := appendSlot(id, slot, every); next.Sub(slot) != every {
			t.Fatalf("%s: an append that starts at its slot returns %s later, want %s", id, next.Sub(slot), every)
		}
		offsets = append(offsets, time.Duration(slot.UnixNano()%int64(every)))
	}
	slices.Sort(offsets)
	gap := offsets[0] + every - offsets[len(offsets)-1]
	for i := 1; i < len(offsets); i++ {
		gap = max(gap, offsets[i]-offsets[i-1])
	}
	// A hundred offsets at random leave no gap near a quarter of the
	// interval (the largest is about 5 % of it).
	if gap > every/4 {
		t.Fatalf("the slots of 100 members leave %s of the %s interval without an append", gap, every)
	}
	if got := appendSlot("x", start, 0); !got.Equal(start) {
		t.Fatalf("no interval: slot %s, want the start", got)
	}
}

// TestAHeldAppendReturnsWhenTheMemberBecomesAVoter: the return of an
// append to a non-voter, held for the batch, is not cut short by a change
// of the configuration that leaves the member a non-voter, and is at once
// when the committed configuration makes it a voter: it counts for commit
// now.
func TestAHeldAppendReturnsWhenTheMemberBecomesAVoter(t *testing.T) {
	serve := func(addr string) *raft.NetworkTransport {
		tr, err := raft.NewTCPTransport(addr, nil, 2, 10*time.Second, io.Discard)
		if err != nil {
			t.Fatalf("transport: %v", err)
		}
		t.Cleanup(func() { tr.Close() })
		return tr
	}
	target := serve("127.0.0.1:0")
	stopServing, served := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(served)
		for {
			select {
			case rpc := <-target.Consumer():
				rpc.Respond(&raft.AppendEntriesResponse{Success: true, LastLog: 2}, nil)
			case <-stopServing:
				return
			}
		}
	}()
	defer func() { close(stopServing); <-served }()
	var voter atomic.Bool
	done := make(chan struct{})
	defer close(done)
	p := newPacedTransport(serve("127.0.0.1:0"), time.Hour, true, time.Hour, 0, func(raft.ServerID) bool { return !voter.Load() }, func() int { return 1 }, func(uint64) {}, func(raft.ServerID) {}, done)
	// Under a stream: the burst began long ago and the last append
	// returned just now.
	p.appends["nv"] = &appendPace{burst: time.Now().Add(-24 * time.Hour), last: time.Now()}
	returned := make(chan error, 1)
	go func() {
		req := &raft.AppendEntriesRequest{Term: 1, PrevLogEntry: 1, PrevLogTerm: 1, LeaderCommitIndex: 1,
			Entries: []*raft.Log{{Index: 2, Term: 1, Type: raft.LogCommand, Data: []byte("x")}}}
		returned <- p.AppendEntries("nv", target.LocalAddr(), req, &raft.AppendEntriesResponse{})
	}()
	eventually(t, 10*time.Second, "the append to reach the member", func() error {
		if p.paceOf("nv").told.prev != 2 {
			return errors.New("not yet answered")
		}
		return nil
	})
	heldUntilVoter(t, p, &voter, returned,
		"an append to a non-voter under a stream returned within the hour's interval", "held append", "the append held for a member made a voter did not return")
}

// heldUntilVoter checks that what returns on held (a heartbeat's turn, an
// append) is still held 50 ms after a change of the configuration that
// leaves the member a non-voter, and returns without an error within 10 s
// of the one that makes it a voter (voter set, then suffragesChanged).
func heldUntilVoter(t *testing.T, p *pacedTransport, voter *atomic.Bool, held <-chan error, early, failed, never string) {
	t.Helper()
	p.suffragesChanged()
	select {
	case err := <-held:
		t.Fatalf("%s (err %v)", early, err)
	case <-time.After(50 * time.Millisecond):
	}
	voter.Store(true)
	p.suffragesChanged()
	select {
	case err := <-held:
		if err != nil {
			t.Fatalf("%s: %v", failed, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal(never)
	}
}
