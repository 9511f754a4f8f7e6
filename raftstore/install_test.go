package raftstore

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
)

// storeWith is an in-memory log store holding entries first..last, entry
// i of term terms(i).
func storeWith(t *testing.T, first, last uint64, terms func(uint64) uint64) *raft.InmemStore {
	t.Helper()
	s := raft.NewInmemStore()
	for i := first; i <= last; i++ {
		if err := s.StoreLog(&raft.Log{Index: i, Term: terms(i), Type: raft.LogNoop}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func indexes(t *testing.T, s raft.LogStore) (first, last uint64) {
	t.Helper()
	first, err := s.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	last, err = s.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	return first, last
}

// What the log store tells raft after a snapshot was installed, in every
// case of the log against the snapshot (see checkedLogStore.IsMonotonic).
func TestTheLogStoreDecidesWhatAnInstalledSnapshotLeavesOfTheLog(t *testing.T) {
	const snap, snapTerm = 20, 3
	termAt := func(i uint64) uint64 { // the group's log: term 3 from entry 11
		if i <= 10 {
			return 2
		}
		return 3
	}
	cases := []struct {
		name        string
		first, last uint64
		terms       func(uint64) uint64
		installing  bool
		monotonic   bool
		want        bool
		stale       bool
	}{
		{name: "no install under way (an operator's restore): the store's own answer", first: 1, last: 30, terms: termAt, monotonic: true, want: true},
		{name: "no install under way, a store with gaps", first: 1, last: 30, terms: termAt, want: false},
		{name: "the log ends before the snapshot", first: 1, last: 15, terms: termAt, installing: true, monotonic: true, want: true},
		{name: "the log ends before the snapshot, a store with gaps", first: 1, last: 15, terms: termAt, installing: true, want: true},
		{name: "an empty log", terms: termAt, installing: true, monotonic: true, want: true},
		{name: "the log runs past the snapshot and holds its last entry", first: 1, last: 30, terms: termAt, installing: true, monotonic: true, want: false},
		{name: "the log ends at the snapshot's last entry", first: 5, last: 20, terms: termAt, installing: true, monotonic: true, want: false},
		{name: "the log runs past the snapshot with another term's entry at its last", first: 1, last: 30,
			terms: func(i uint64) uint64 { return min(termAt(i), 2) }, installing: true, monotonic: true, want: true, stale: true},
		{name: "the same in a store with gaps", first: 1, last: 30,
			terms: func(i uint64) uint64 { return min(termAt(i), 2) }, installing: true, want: true, stale: true},
		{name: "the log starts after the snapshot's last entry", first: 25, last: 40, terms: termAt, installing: true, monotonic: true, want: true, stale: true},
		{name: "the log lacks the snapshot's last entry, and holds what follows it", first: snap + 1, last: 40, terms: termAt, installing: true, monotonic: true, want: true, stale: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var staleAt []uint64
			inner := storeWith(t, tc.first, tc.last, tc.terms)
			if tc.last == 0 {
				inner = raft.NewInmemStore()
			}
			s := &checkedLogStore{LogStore: inner, monotonic: tc.monotonic,
				installing: func() (uint64, uint64, bool) { return snap, snapTerm, tc.installing },
				onStale:    func(snapshot, last uint64) { staleAt = append(staleAt, snapshot, last) },
				onDamage:   func(uint64, error) {},
			}
			got := s.IsMonotonic()
			if got != tc.want {
				t.Fatalf("IsMonotonic = %v, want %v", got, tc.want)
			}
			if tc.stale != (staleAt != nil) {
				t.Fatalf("told stale %v, want stale %v", staleAt, tc.stale)
			}
			next := &raft.Log{Index: tc.last + 1, Term: snapTerm, Type: raft.LogNoop}
			anchored := tc.installing && tc.last < snap
			if got {
				// What raft does then: it removes the whole log.
				if first, last := indexes(t, s); last > 0 {
					if err := s.DeleteRange(first, last); err != nil {
						t.Fatal(err)
					}
				}
			}
			if anchored {
				// Raft appends what follows the snapshot; the store holds
				// the snapshot's last entry before it.
				next.Index = snap + 1
			}
			err := s.StoreLogs([]*raft.Log{next})
			if anchored {
				if err != nil {
					t.Fatal(err)
				}
				var l raft.Log
				if err := s.GetLog(snap, &l); err != nil || l.Term != snapTerm {
					t.Fatalf("after the first append past the snapshot, entry %d: %v, term %d; want the snapshot's term %d", snap, err, l.Term, snapTerm)
				}
				if first, last := indexes(t, s); first != snap || last != snap+1 {
					t.Fatalf("log %d..%d, want %d..%d", first, last, snap, snap+1)
				}
			}
			switch {
			case tc.stale && !errors.Is(err, errStaleLog):
				t.Fatalf("an append after a stale log was stored: %v", err)
			case tc.stale:
				if fmt.Sprint(staleAt) != fmt.Sprint([]uint64{snap, tc.last}) {
					t.Fatalf("told stale at %v, want the snapshot's %d and the log's last %d", staleAt, snap, tc.last)
				}
			case err != nil:
				t.Fatal(err)
			}
		})
	}
}

// failOnce is a log store whose next append fails.
type failOnce struct {
	raft.LogStore
	fail bool
}

func (f *failOnce) StoreLogs(logs []*raft.Log) error {
	if f.fail {
		f.fail = false
		return fmt.Errorf("append to the raft log: %w", syscall.ENOSPC)
	}
	return f.LogStore.StoreLogs(logs)
}

// An anchor whose append failed (a full disk) goes with the next one.
func TestAnAnchorWhoseAppendFailedGoesWithTheNext(t *testing.T) {
	const snap, term = 20, 3
	inner := &failOnce{LogStore: storeWith(t, 1, 10, func(uint64) uint64 { return 2 }), fail: true}
	s := &checkedLogStore{LogStore: inner, monotonic: true,
		installing: func() (uint64, uint64, bool) { return snap, term, true }, onDamage: func(uint64, error) {}}
	if !s.IsMonotonic() {
		t.Fatal("a log ending before the snapshot must be removed whole")
	}
	if err := s.DeleteRange(1, 10); err != nil {
		t.Fatal(err)
	}
	next := []*raft.Log{{Index: snap + 1, Term: term, Type: raft.LogNoop}}
	if err := s.StoreLogs(next); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("the first append: %v, want ENOSPC", err)
	}
	if err := s.StoreLogs(next); err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	if err := s.GetLog(snap, &l); err != nil || l.Term != term {
		t.Fatalf("entry %d after the append that failed and the one that did not: %v, term %d", snap, err, l.Term)
	}
}

// After an install that keeps the log past the snapshot, raft compacts the
// log up to the snapshot (less its trailing logs): the snapshot's last
// entry stays, since raft checks the leader's next append against it,
// until raft appended after it; a removal at the end of the log (raft
// dropping entries that differ from the leader's) is not held back.
func TestACompactionAfterAnInstallKeepsTheSnapshotsLastEntry(t *testing.T) {
	const snap = 20
	s := &checkedLogStore{LogStore: storeWith(t, 1, 30, func(uint64) uint64 { return 3 }),
		installing: func() (uint64, uint64, bool) { return snap, 3, true }, onDamage: func(uint64, error) {}}
	if s.IsMonotonic() {
		t.Fatal("the log holds the snapshot's last entry: raft must keep what follows")
	}
	if err := s.DeleteRange(28, 30); err != nil { // the end of the log
		t.Fatal(err)
	}
	if first, last := indexes(t, s); first != 1 || last != 27 {
		t.Fatalf("log %d..%d after removing its end, want 1..27", first, last)
	}
	if err := s.DeleteRange(1, snap); err != nil { // raft's compaction, trailing logs 0
		t.Fatal(err)
	}
	if first, last := indexes(t, s); first != snap || last != 27 {
		t.Fatalf("log %d..%d after the compaction, want %d..27", first, last, snap)
	}
	if err := s.StoreLogs([]*raft.Log{{Index: 28, Term: 3, Type: raft.LogNoop}}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(snap, 25); err != nil { // a later compaction
		t.Fatal(err)
	}
	if first, _ := indexes(t, s); first != 26 {
		t.Fatalf("log starts at %d after a compaction once raft appended, want 26", first)
	}
}

// TestAFollowerSentASnapshotItsLogRunsPastCatchesUp: a follower whose log
// runs past the snapshot the leader sends it (here: the leader takes one
// of its answers for a refusal naming entry 1, which it no longer has)
// must go on taking the leader's entries, and lead. hashicorp/raft removes
// the whole log of a store like seglog after the install but goes on
// believing that it ends where it did: the leader's next append, checked
// against the snapshot's last entry, is refused, the leader sends the
// snapshot again, and so on for ever (or, when an append names the old
// last entry, raft panics applying entries the store no longer has).
func TestAFollowerSentASnapshotItsLogRunsPastCatchesUp(t *testing.T) {
	c := newTestCluster(t, "app")
	var mu sync.Mutex
	refuseOnce := raft.ServerID("")
	opts := func(cfg *Config) {
		cfg.SnapshotThreshold, cfg.SnapshotInterval, cfg.TrailingLogs = 1<<20, time.Hour, 4
		cfg.afterAppend = func(id raft.ServerID, _ *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
			mu.Lock()
			defer mu.Unlock()
			if id == refuseOnce {
				refuseOnce = ""
				resp.Success, resp.LastLog, resp.NoRetryBackoff = false, 1, true
			}
			return nil
		}
	}
	for _, p := range []string{"app-0", "app-1", "app-2"} {
		c.start(p, withExpect(3), opts)
	}
	l := c.leader(10 * time.Second)
	rel := mustApply(t, l.node, state.EnsureRelationOp("peers", "p", true, "", "")).GetOps()[0].GetRelationId()
	write := func(n *Node, k string, v int) {
		t.Helper()
		mustApply(t, n, state.UpdateBagOp(rel, "app", map[string]string{k: strconv.Itoa(v)}))
	}
	// last is what the writer's state machine applied: raft's applied
	// index counts barriers too (reads and proposals write them), which no
	// state machine sees.
	everyoneHas := func(what string, last uint64) {
		t.Helper()
		eventually(t, 10*time.Second, what, func() error {
			for _, n := range c.running() {
				if got := n.node.fsm.appliedIndex(); got < last {
					st := n.node.raft.Stats()
					return fmt.Errorf("%s applied up to %d of %d (raft: commit %s, applied %s, last log %s, snapshot %s)", n.pod, got, last,
						st["commit_index"], st["applied_index"], st["last_log_index"], st["last_snapshot_index"])
				}
			}
			return nil
		})
	}
	for i := range 20 {
		write(l.node, "before", i)
	}
	everyoneHas("every member to apply the first writes", l.node.fsm.appliedIndex())
	if err := l.node.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	snap, _ := strconv.ParseUint(l.node.raft.Stats()["last_snapshot_index"], 10, 64)
	for i := range 6 {
		write(l.node, "past", i)
	}
	everyoneHas("every member's log to run past the leader's snapshot", l.node.fsm.appliedIndex())

	f := c.follower(l)
	// Its state must not go back to the snapshot's: an entry handed to its
	// state machine a second time is one it had lost.
	var again []uint64
	high := f.node.State().Index()
	hook := func(l *raft.Log) {
		mu.Lock()
		defer mu.Unlock()
		if l.Index <= high {
			again = append(again, l.Index)
		}
		high = max(high, l.Index)
	}
	f.node.fsm.beforeApply.Store(&hook)
	mu.Lock()
	refuseOnce = f.node.id
	mu.Unlock()
	for i := range 5 {
		write(l.node, "after", i)
	}
	eventually(t, 10*time.Second, f.pod+" to be sent the leader's snapshot", func() error {
		if got := f.node.raft.Stats()["last_snapshot_index"]; got != strconv.FormatUint(snap, 10) {
			return fmt.Errorf("its last snapshot is of entry %s, the leader's of %d", got, snap)
		}
		return nil
	})
	everyoneHas("every member, "+f.pod+" too, to apply the writes after the snapshot", l.node.fsm.appliedIndex())
	if b, _ := f.node.State().Bag(rel, "app"); b == nil || b.Data.Value("after") != "4" {
		t.Fatalf("%s lacks after=4 in the application bag", f.pod)
	}
	mu.Lock()
	twice := again
	mu.Unlock()
	if len(twice) > 0 {
		t.Fatalf("%s's state went back to the snapshot's: it applied entries %v again", f.pod, twice)
	}

	// It leads, and what it writes reaches everyone.
	if err := l.node.TransferLeadership(t.Context(), f.node.id); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, f.pod+" to lead", func() error {
		if !f.node.IsLeader() {
			return errors.New("it does not lead")
		}
		return nil
	})
	write(f.node, "led", 1)
	everyoneHas("every member to apply the write of "+f.pod, f.node.fsm.appliedIndex())
	select {
	case err := <-f.node.Fatal():
		t.Fatalf("%s stopped: %v", f.pod, err)
	default:
	}
}

// TestAMemberWhoseAnswerAfterASnapshotIsLostIsNotSentItAgain: a new member
// is sent the leader's snapshot, stores the first append after it, and the
// answer to that append is lost (as when the leader drops its connections
// to the member). The leader sends the same append again, which raft on
// the member checks against the snapshot's last entry, which it never had
// as a log entry: without the anchor stored with the first append (see
// checkedLogStore.IsMonotonic) the member refuses it, is sent the snapshot
// again with its log now running past it, and has to restart. With it, one
// install, and the member takes every later write. For every log store.
func TestAMemberWhoseAnswerAfterASnapshotIsLostIsNotSentItAgain(t *testing.T) {
	for _, kind := range []LogStore{LogStoreSegments, LogStoreWAL, LogStoreBoltDB} {
		t.Run(string(kind), func(t *testing.T) { testAnswerLostAfterASnapshot(t, kind) })
	}
}

func testAnswerLostAfterASnapshot(t *testing.T, kind LogStore) {
	c := newTestCluster(t, "app")
	c.logStore = kind
	var mu sync.Mutex
	var leader raft.ServerID // the member whose appends to app-3 are watched
	var snapshot uint64      // its snapshot: the new member must be sent it
	var lost []uint64        // the entries of the append whose answer was lost
	var retried bool         // an append after it succeeded
	var seen []string        // the appends to app-3 with entries, for the failure
	opts := func(cfg *Config) {
		cfg.SnapshotThreshold, cfg.SnapshotInterval, cfg.TrailingLogs = 1<<20, time.Hour, 4
		cfg.walSegmentSize = testSegmentSize // raft-wal and seglog remove whole segments only
		cfg.afterAppend = func(id raft.ServerID, req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
			mu.Lock()
			defer mu.Unlock()
			if !strings.HasPrefix(string(id), "app-3/") || raft.ServerID(req.ID) != leader || len(req.Entries) == 0 {
				return nil
			}
			seen = append(seen, fmt.Sprintf("%d..%d after %d: %v", req.Entries[0].Index, req.Entries[len(req.Entries)-1].Index, req.PrevLogEntry, resp.Success))
			// Only the first append after the snapshot: the one raft sends
			// again, checked against the snapshot's last entry.
			if lost == nil && resp.Success && req.PrevLogEntry == snapshot {
				lost = []uint64{req.Entries[0].Index, req.Entries[len(req.Entries)-1].Index}
				return errors.New("the answer was lost")
			}
			if lost != nil && resp.Success {
				retried = true
			}
			return nil
		}
	}
	for _, p := range []string{"app-0", "app-1", "app-2"} {
		c.start(p, withExpect(3), opts)
	}
	l := c.leader(10 * time.Second)
	rel := mustApply(t, l.node, state.EnsureRelationOp("peers", "p", true, "", "")).GetOps()[0].GetRelationId()
	write := func(k string, v int) {
		t.Helper()
		mustApply(t, l.node, state.UpdateBagOp(rel, "app", map[string]string{k: strconv.Itoa(v)}))
	}
	// Until the leader's log no longer holds its first entry, which a
	// store that removes whole segments keeps for a while: a new member is
	// then sent the snapshot, not the log from its start.
	i := 0
	eventually(t, 15*time.Second, "the leader to remove the start of its log", func() error {
		for range 10 {
			write("before", i)
			i++
		}
		if err := l.node.raft.Snapshot().Error(); err != nil {
			return err
		}
		// Asked, not FirstIndex: raft-wal answers for the entries of a
		// segment it still holds, below its first index too.
		var first raft.Log
		if err := l.node.logs.GetLog(1, &first); err == nil {
			return errors.New("its log still holds entry 1")
		}
		return nil
	})
	mu.Lock()
	leader = l.node.id
	snapshot, _ = strconv.ParseUint(l.node.raft.Stats()["last_snapshot_index"], 10, 64)
	mu.Unlock()
	write("past", 1)
	n := c.start("app-3", opts)
	for i := range 5 {
		write("after", i)
	}
	// The member applies an append's entries before it answers: the
	// leader's hook may see the answer after the member applied them.
	eventually(t, 15*time.Second, "the new member to apply every write, and the leader to append to it after the lost answer", func() error {
		if got, want := n.node.State().Index(), l.node.State().Index(); got < want {
			return fmt.Errorf("it applied up to %d of %d", got, want)
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case lost == nil:
			return fmt.Errorf("no answer to an append right after the snapshot (entry %d) was lost; the appends to the new member: %v", snapshot, seen)
		case !retried:
			return fmt.Errorf("no append after the one of %d..%d whose answer was lost succeeded; the appends to the new member: %v", lost[0], lost[1], seen)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if got := n.node.installs.begun(); got != 1 {
		t.Fatalf("the member was sent %d snapshots, want 1 (the answer to the append of %d..%d was lost)", got, lost[0], lost[1])
	}
	snap, _ := strconv.ParseUint(n.node.raft.Stats()["last_snapshot_index"], 10, 64)
	snapTerm, _ := strconv.ParseUint(n.node.raft.Stats()["last_snapshot_term"], 10, 64)
	var anchor raft.Log
	if err := n.node.logs.GetLog(snap, &anchor); err != nil || anchor.Term != snapTerm || lost[0] != snap+1 || snap != snapshot {
		t.Fatalf("the member's log at its snapshot's last entry %d (term %d; the leader's snapshot: %d): %v, term %d; the lost append started at %d", snap, snapTerm, snapshot, err, anchor.Term, lost[0])
	}
	if b, _ := n.node.State().Bag(rel, "app"); b == nil || b.Data.Value("after") != "4" {
		t.Fatalf("the new member lacks after=4 in the application bag")
	}
	select {
	case err := <-n.node.Fatal():
		t.Fatalf("the new member stopped: %v", err)
	default:
	}
}
