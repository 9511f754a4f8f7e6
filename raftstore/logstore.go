package raftstore

import (
	"errors"
	"fmt"

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
	onWrite   func(err error)
	// onStored, if set, is told the entries of every append that succeeded.
	onStored func(logs []*raft.Log)
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
	for _, l := range logs {
		if l.Type != raft.LogCommand {
			continue
		}
		if err := state.VerifyEntry(l.Data); errors.Is(err, state.ErrCorrupt) {
			return fmt.Errorf("refusing to store raft log entry %d: %w", l.Index, err)
		}
	}
	err := s.LogStore.StoreLogs(logs)
	if s.onWrite != nil {
		s.onWrite(err)
	}
	if err == nil && s.onStored != nil {
		s.onStored(logs)
	}
	return err
}

// IsMonotonic implements raft.MonotonicLogStore.
func (s *checkedLogStore) IsMonotonic() bool { return s.monotonic }
