package raftstore

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
)

// checkedLogStore checks the checksum of every command entry raft reads
// back from the log store — to replicate it to a follower, or to apply it
// after a restart — and of every command entry it is about to store.
//
// A damaged entry read back is reported (the member then stops serving)
// but handed to raft as it is: raft panics on a log store error where it
// applies entries, and the state machine refuses the entry by its checksum
// anyway, without applying anything after it. A damaged entry about to be
// stored (received from a leader whose copy is damaged) is refused, so a
// follower never keeps a damaged copy; the leader, which reported its own
// damage, hands leadership to a member whose copy is intact.
//
// It also tells whether storing works: a failed append (a full disk, an I/O
// error) is reported through onWrite, and so is the next one that succeeds.
type checkedLogStore struct {
	raft.LogStore
	// monotonic is whether the store under it (raft-wal) keeps only
	// consecutive entries: raft then removes the whole log after installing
	// a snapshot. It is said here, not asked of the store, because a test's
	// wrapper in between hides the store's IsMonotonic.
	monotonic bool
	onDamage  func(index uint64, err error)
	onWrite   func(err error, size uint64)
	// onStored, if set, is told the entries of every append that succeeded.
	onStored func(logs []*raft.Log)

	// installing, if set, tells the snapshot raft is installing (see
	// installMark and IsMonotonic); onStale is told when this member's
	// log disagrees with it, and raft's view of the log can no longer be
	// put right without a restart.
	installing func() (index, term uint64, ok bool)
	onStale    func(snapshot, last uint64)

	mu sync.Mutex
	// keep, if not 0, is the last entry of a snapshot installed while the
	// log ran past it: a compaction must not remove it (raft checks the
	// leader's next append against it) until raft appended after it.
	keep uint64
	// anchor, if set, is the last entry of a snapshot installed while the
	// log ended before it, stored before the next append (see
	// IsMonotonic).
	anchor *raft.Log
	// stale is set once raft's view of the log is wrong (IsMonotonic): no
	// entry is stored after that, so the store is never left with a gap
	// after the snapshot, and a restart starts clean from the snapshot.
	stale atomic.Bool
}

func (s *checkedLogStore) GetLog(index uint64, l *raft.Log) error {
	if err := s.LogStore.GetLog(index, l); err != nil {
		return err
	}
	if l.Type == raft.LogCommand {
		if err := state.VerifyEntry(l.Data); errors.Is(err, state.ErrCorrupt) {
			s.onDamage(index, err)
		}
	}
	return nil
}

func (s *checkedLogStore) StoreLog(l *raft.Log) error {
	return s.StoreLogs([]*raft.Log{l})
}

func (s *checkedLogStore) StoreLogs(logs []*raft.Log) error {
	if s.stale.Load() {
		return errStaleLog
	}
	for _, l := range logs {
		if l.Type != raft.LogCommand {
			continue
		}
		if err := state.VerifyEntry(l.Data); errors.Is(err, state.ErrCorrupt) {
			return fmt.Errorf("refusing to store raft log entry %d: %w", l.Index, err)
		}
	}
	err := s.LogStore.StoreLogs(s.withAnchor(logs))
	if err == nil && len(logs) > 0 {
		// Appended after the snapshot: raft no longer needs its last
		// entry kept, nor an anchor (one that was not stored, a full disk,
		// goes with the next append).
		s.mu.Lock()
		s.keep, s.anchor = 0, nil
		s.mu.Unlock()
	}
	if s.onWrite != nil {
		s.onWrite(err, appendSize(logs))
	}
	if err == nil && s.onStored != nil {
		s.onStored(logs)
	}
	return err
}

// appendSize is about the bytes an append of logs writes: each entry's
// data and extensions, and a record header.
func appendSize(logs []*raft.Log) uint64 {
	var n uint64
	for _, l := range logs {
		n += uint64(len(l.Data)+len(l.Extensions)) + 32
	}
	return n
}

// errStaleLog is what an append gets once raft's view of the log is wrong.
var errStaleLog = errors.New("this member's raft log disagrees with the snapshot it was sent; it must restart to start from the snapshot")

// IsMonotonic implements raft.MonotonicLogStore. Raft asks it right after
// installing a snapshot a leader sent (and after an operator's restore),
// to choose between removing the whole log (true: what a store that keeps
// only consecutive entries needs) and removing the entries up to the
// snapshot (false). Both go wrong when the log runs past the snapshot,
// as raft then still believes the log ends where it did (see
// installMark). Here, with the snapshot's last entry at S:
//   - the log ends before S: the whole log goes (true, whatever the
//     store), raft's view (a log ending before the snapshot) is not wrong,
//     and raft goes on from S. The next append (which starts at S+1)
//     stores an entry at S of the snapshot's term first, an anchor: raft
//     checks a leader's append that follows the snapshot against entry S
//     itself unless S is the last entry it has, so without it a member
//     that stored the first append after the snapshot, but whose answer
//     was lost, refuses the leader's retry and is sent the snapshot again
//     (with its log now running past the snapshot without holding S).
//   - the log holds S, of the snapshot's term (an anchor, or an entry
//     appended): every entry up to S is the snapshot's (raft's log
//     matching), so the entries after S stay and raft's view is right:
//     false, and a compaction keeps S itself, which raft checks the
//     leader's next append against. The leader's entries then replace any
//     after S that differ, as in any append.
//   - the log runs past S but lacks S or holds another term's entry
//     there: raft's view of the log can no longer be put right while it
//     runs. The whole log is removed (true), nothing more is stored, and
//     onStale stops the member: restarted, it starts from the snapshot
//     with an empty log.
func (s *checkedLogStore) IsMonotonic() bool {
	if s.installing == nil {
		return s.monotonic
	}
	snap, term, ok := s.installing()
	if !ok {
		return s.monotonic
	}
	if holdsEntry(s.LogStore, snap, term) {
		s.mu.Lock()
		s.keep, s.anchor = snap, nil
		s.mu.Unlock()
		return false
	}
	if last, err := s.LogStore.LastIndex(); err == nil && last < snap {
		s.mu.Lock()
		s.anchor = nil
		if snap > 1 {
			s.anchor = &raft.Log{Index: snap, Term: term, Type: raft.LogNoop}
		}
		s.mu.Unlock()
		return true
	}
	s.stale.Store(true)
	if s.onStale != nil {
		last, _ := s.LogStore.LastIndex()
		s.onStale(snap, last)
	}
	return true
}

// withAnchor returns logs with the anchor IsMonotonic set before them, if
// they start right after it (StoreLogs drops it once an append is stored).
func (s *checkedLogStore) withAnchor(logs []*raft.Log) []*raft.Log {
	s.mu.Lock()
	a := s.anchor
	s.mu.Unlock()
	if a == nil || len(logs) == 0 || logs[0].Index != a.Index+1 {
		return logs
	}
	if last, err := s.LogStore.LastIndex(); err != nil || last >= a.Index {
		return logs
	}
	return append([]*raft.Log{a}, logs...)
}

// holdsEntry reports whether logs holds entry index, of term term.
func holdsEntry(logs raft.LogStore, index, term uint64) bool {
	var l raft.Log
	return logs.GetLog(index, &l) == nil && l.Term == term
}

// DeleteRange removes entries; a compaction (the removal of the first
// entries) keeps the entry IsMonotonic asked to keep, and all after it.
func (s *checkedLogStore) DeleteRange(min, max uint64) error {
	s.mu.Lock()
	keep := s.keep
	s.mu.Unlock()
	if keep > 0 && min <= keep && keep <= max {
		if first, err := s.LogStore.FirstIndex(); err == nil && min <= first {
			if keep-1 < min {
				return nil
			}
			max = keep - 1
		}
	}
	return s.LogStore.DeleteRange(min, max)
}
