package raftstore

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
)

// fullDisk is a log store whose appends fail with ENOSPC while full is
// set; with once, only the next append fails, and full is cleared. Appends
// of up to room bytes still fit (what a full file system takes into the
// last block of a file).
type fullDisk struct {
	raft.LogStore
	full *atomic.Bool
	once bool
	room uint64
}

func (d fullDisk) StoreLog(l *raft.Log) error { return d.StoreLogs([]*raft.Log{l}) }

func (d fullDisk) StoreLogs(logs []*raft.Log) error {
	if appendSize(logs) > d.room && ((d.once && d.full.CompareAndSwap(true, false)) || (!d.once && d.full.Load())) {
		return fmt.Errorf("append to the raft log: %w", syscall.ENOSPC)
	}
	return d.LogStore.StoreLogs(logs)
}

// TestMemberThatCannotWriteIsNotReadyAndRecovers fills the disk of a
// follower, then of the leader (appends fail with ENOSPC), and checks that
// each says so, serves no writes naming the cause, that the leader steps
// down, that the follower's lag shows against the leader's commit index
// (its own stops where it could store), and that both recover on their own
// once appends work again. It runs with either log store.
func TestMemberThatCannotWriteIsNotReadyAndRecovers(t *testing.T) {
	for _, kind := range []LogStore{LogStoreBoltDB, LogStoreWAL, LogStoreSegments} {
		t.Run(string(kind), func(t *testing.T) { testMemberThatCannotWrite(t, kind) })
	}
}

func testMemberThatCannotWrite(t *testing.T, kind LogStore) {
	c := newTestCluster(t, "app")
	full := map[string]*atomic.Bool{}
	for _, p := range []string{"app-0", "app-1", "app-2"} {
		full[p] = &atomic.Bool{}
		flag := full[p]
		c.start(p, withExpect(3), withLogStore(kind), func(cfg *Config) {
			cfg.wrapLogStore = func(s raft.LogStore) raft.LogStore { return fullDisk{LogStore: s, full: flag} }
		})
	}
	l := c.leader(10 * time.Second)
	rel := mustApply(t, l.node, state.EnsureRelationOp("peers", "p", true, "", "")).GetOps()[0].GetRelationId()
	f := c.follower(l)

	full[f.pod].Store(true)
	for i := range 5 {
		mustApply(t, l.node, state.UpdateBagOp(rel, "app", map[string]string{"n": fmt.Sprint(i)}))
	}
	eventually(t, 10*time.Second, f.pod+" to report that it cannot write", func() error {
		st := f.node.Status()
		if st.WriteFailure == nil || !strings.Contains(st.WriteFailure.Err, "no space left on device") {
			return fmt.Errorf("status %+v", st.WriteFailure)
		}
		if f.node.CaughtUp(st.LeaderCommitIndex) {
			return fmt.Errorf("caught up with the leader's commit index %d, though it stored nothing since", st.LeaderCommitIndex)
		}
		return nil
	})
	_, err := f.node.Apply(applyCtx(t), state.NewCommand(state.UpdateBagOp(rel, "app", map[string]string{"via": "full follower"})))
	if !errors.Is(err, ErrCannotWrite) || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("a write through the full follower: %v", err)
	}
	full[f.pod].Store(false)
	eventually(t, 10*time.Second, f.pod+" to write and catch up again", func() error {
		// The leader's commit index as the follower last heard it may be
		// a moment old: the bag says whether it caught up.
		st := f.node.Status()
		var n string
		if b, ok := f.node.State().Bag(rel, "app"); ok {
			n = b.Data.Value("n")
		}
		if st.WriteFailure != nil || !f.node.CaughtUp(st.LeaderCommitIndex) || n != "4" {
			return fmt.Errorf("write failure %v, applied %d of %d, n=%q", st.WriteFailure, st.StateIndex, st.LeaderCommitIndex, n)
		}
		return nil
	})

	// The leader's disk fills: it steps down, and another member leads.
	full[l.pod].Store(true)
	_, _ = l.node.Apply(applyCtx(t), state.NewCommand(state.UpdateBagOp(rel, "app", map[string]string{"n": "on a full leader"})))
	eventually(t, 10*time.Second, "another member to lead", func() error {
		if l.node.IsLeader() {
			return errors.New("the full leader still leads")
		}
		for _, n := range c.running() {
			if n != l && n.node.IsLeader() {
				return nil
			}
		}
		return errors.New("no leader")
	})
	if _, ok := l.node.WriteFailed(); !ok {
		t.Fatal("the full leader does not report that it cannot write")
	}
	full[l.pod].Store(false)
	nl := c.leader(10 * time.Second)
	mustApply(t, nl.node, state.UpdateBagOp(rel, "app", map[string]string{"n": "after"}))
	eventually(t, 10*time.Second, "the old leader to write and catch up again", func() error {
		st := l.node.Status()
		if st.WriteFailure != nil || !l.node.CaughtUp(st.LeaderCommitIndex) {
			return fmt.Errorf("write failure %v, applied %d of %d", st.WriteFailure, st.StateIndex, st.LeaderCommitIndex)
		}
		if b, _ := l.node.State().Bag(rel, "app"); b.Data.Value("n") != "after" {
			return fmt.Errorf("bag %v", b.Data)
		}
		return nil
	})
}

// TestFollowersLearnTheLeaderCommitFromItsHealthPoll checks that the
// leader's health poll tells each follower the leader's commit index (so
// that an idle follower need not ask for it), and that a commit index said
// by a member other than the leader is ignored.
func TestFollowersLearnTheLeaderCommitFromItsHealthPoll(t *testing.T) {
	c := newTestCluster(t, "app")
	for _, p := range []string{"app-0", "app-1", "app-2"} {
		c.start(p, withExpect(3))
	}
	l := c.leader(10 * time.Second)
	rel := mustApply(t, l.node, state.EnsureRelationOp("peers", "p", true, "", "")).GetOps()[0].GetRelationId()
	mustApply(t, l.node, state.UpdateBagOp(rel, "app", map[string]string{"n": "1"}))
	f := c.follower(l)
	want := l.node.raft.CommitIndex()
	eventually(t, 10*time.Second, f.pod+" to hear the leader's commit index from the leader", func() error {
		heard := f.node.leaderCommitHeard.Load()
		if heard == nil || heard.leader != l.node.ID() {
			return fmt.Errorf("heard %+v", heard)
		}
		if got := f.node.leaderCommit.Load(); got < want {
			return fmt.Errorf("leader commit %d, want at least %d", got, want)
		}
		return nil
	})
	before := f.node.leaderCommit.Load()
	f.node.noteLeaderCommit(raft.ServerID("someone-else"), before+1000)
	if got := f.node.leaderCommit.Load(); got != before {
		t.Fatalf("a commit index from a member that does not lead was taken: %d, was %d", got, before)
	}
}

// TestAnIdleLeaderDoesNotWakeToAskForItsOwnCommitIndex checks that the
// leader's commit tracker sleeps a stale period at a time instead of
// waking every autopilot interval to find that it leads.
func TestAnIdleLeaderDoesNotWakeToAskForItsOwnCommitIndex(t *testing.T) {
	c := newTestCluster(t, "app")
	for _, p := range []string{"app-0", "app-1", "app-2"} {
		c.start(p, withExpect(3))
	}
	// Once it has looked as the leader, its next look is a stale period
	// away: watch it for half of that. A window in which leadership moved
	// (a busy machine) is watched again on the new leader.
	for attempt := 1; ; attempt++ {
		l := c.leader(10 * time.Second)
		every := l.node.cfg.Autopilot.Interval
		eventually(t, 10*time.Second, l.pod+"'s commit tracker to look as the leader", func() error {
			if l.node.leaderCommitWakes.Load() == 0 {
				return fmt.Errorf("no look yet")
			}
			return nil
		})
		before := l.node.leaderCommitWakes.Load()
		window := leaderCommitStale(every) / 2
		stable := true
		for deadline := time.Now().Add(window); stable && time.Now().Before(deadline); time.Sleep(every) {
			id, _ := l.node.Leader()
			stable = id == l.node.ID()
		}
		if !stable && attempt < 3 {
			t.Logf("leadership moved away from %s during the window; watching again", l.pod)
			continue
		}
		if !stable {
			t.Fatal("leadership moved during three windows in a row on an idle group")
		}
		if woke := l.node.leaderCommitWakes.Load() - before; woke > 1 {
			t.Fatalf("the leader's commit tracker woke %d times in %s (an interval is %s)", woke, window, every)
		}
		return
	}
}

// TestFollowersApplyTheLeadersOwnWriteWithoutWaitingForAnAppend checks
// that a write made on the leader reaches the followers' state machines
// promptly even on an idle group whose next append would come only a long
// commit timeout later: the leader appends a barrier when nothing followed
// its write.
func TestFollowersApplyTheLeadersOwnWriteWithoutWaitingForAnAppend(t *testing.T) {
	c := newTestCluster(t, "app")
	for _, p := range []string{"app-0", "app-1", "app-2"} {
		c.start(p, withExpect(3), func(cfg *Config) { cfg.CommitTimeout = 20 * time.Second })
	}
	l := c.leader(10 * time.Second)
	rel := mustApply(t, l.node, state.EnsureRelationOp("peers", "p", true, "", "")).GetOps()[0].GetRelationId()
	for i := range 3 {
		idx := mustApply(t, l.node, state.UpdateBagOp(rel, "app", map[string]string{"n": fmt.Sprint(i)})).GetIndex()
		for _, f := range c.running() {
			if f == l {
				continue
			}
			eventually(t, 5*time.Second, fmt.Sprintf("%s to apply the leader's write %d (index %d)", f.pod, i, idx), func() error {
				if got := f.node.StateIndex(); got < idx {
					return fmt.Errorf("applied %d", got)
				}
				return nil
			})
		}
	}
}

// TestASmallAppendOnAFullDiskDoesNotEndTheWriteFailure fills the leader's
// disk but for a little room: its append of a large bag fails and it steps
// down; the new leader's first entries are small and fit. The old leader
// must still say it cannot write (and refuse calls), as its file system has
// no room for what failed, until space returns.
func TestASmallAppendOnAFullDiskDoesNotEndTheWriteFailure(t *testing.T) {
	c := newTestCluster(t, "app")
	full := map[string]*atomic.Bool{}
	for _, p := range []string{"app-0", "app-1", "app-2"} {
		full[p] = &atomic.Bool{}
		flag := full[p]
		c.start(p, withExpect(3), func(cfg *Config) {
			cfg.wrapLogStore = func(s raft.LogStore) raft.LogStore {
				return fullDisk{LogStore: s, full: flag, room: 1 << 10}
			}
			cfg.freeSpace = func(string) (uint64, error) {
				if flag.Load() {
					return 512, nil
				}
				return 1 << 30, nil
			}
		})
	}
	l := c.leader(10 * time.Second)
	rel := mustApply(t, l.node, state.EnsureRelationOp("peers", "p", true, "", "")).GetOps()[0].GetRelationId()
	mustApply(t, l.node, state.UpdateBagOp(rel, "app", map[string]string{"n": "small"}))

	full[l.pod].Store(true)
	big := strings.Repeat("x", 8<<10)
	if _, err := l.node.Apply(applyCtx(t), state.NewCommand(state.UpdateBagOp(rel, "app", map[string]string{"n": big}))); err == nil {
		t.Fatal("a large write on the full leader succeeded")
	}
	var nl *testNode
	otherLeader := func() error {
		for _, n := range c.running() {
			if n != l && n.node.IsLeader() {
				nl = n
				return nil
			}
		}
		return errors.New("no member but the full one leads")
	}
	eventually(t, 10*time.Second, "another member to lead", otherLeader)
	// The new leader's first entry (and a small write) reach the old one.
	mustApply(t, nl.node, state.UpdateBagOp(rel, "app", map[string]string{"n": "small again"}))
	last := nl.node.raft.LastIndex()
	eventually(t, 10*time.Second, l.pod+" to store the new leader's small entries", func() error {
		if got := l.node.raft.LastIndex(); got < last {
			return fmt.Errorf("last index %d of %d", got, last)
		}
		return nil
	})
	if _, ok := l.node.WriteFailed(); !ok {
		t.Fatal("a small append that fitted on the full disk ended the write failure")
	}
	_, err := l.node.Apply(applyCtx(t), state.NewCommand(state.UpdateBagOp(rel, "app", map[string]string{"via": "full member"})))
	if !errors.Is(err, ErrCannotWrite) || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("a write through the full member: %v", err)
	}

	// Made to lead again (its own timer may fire first after it stepped
	// down), the full member's small first entry fits: it hands
	// leadership over rather than lead a group whose every call it
	// refuses.
	if err := nl.node.transferOnLeader(l.node.ID(), ""); err != nil {
		t.Fatalf("handing leadership to the full member: %v", err)
	}
	eventually(t, 10*time.Second, "the full member to hand leadership over", otherLeader)
	mustApply(t, nl.node, state.UpdateBagOp(rel, "app", map[string]string{"n": "led by another"}))
	if _, ok := l.node.WriteFailed(); !ok {
		t.Fatal("the full member's write failure ended while its disk was full")
	}

	full[l.pod].Store(false)
	mustApply(t, nl.node, state.UpdateBagOp(rel, "app", map[string]string{"n": "after"}))
	eventually(t, 10*time.Second, l.pod+" to write and catch up again", func() error {
		st := l.node.Status()
		if st.WriteFailure != nil || !l.node.CaughtUp(st.LeaderCommitIndex) {
			return fmt.Errorf("write failure %v, applied %d of %d", st.WriteFailure, st.StateIndex, st.LeaderCommitIndex)
		}
		return nil
	})
}
