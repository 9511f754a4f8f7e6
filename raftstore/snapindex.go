package raftstore

import (
	"strconv"
	"sync"

	"github.com/hashicorp/raft"
)

// snapshotIndex keeps raft's last snapshot index, which hashicorp/raft
// tells only through Stats (a map of some twenty formatted values, built
// at each call) while StateIndex wants it after every applied entry (the
// agent's readiness check). It reads Stats once, and again only after a
// snapshot was written (taken or installed: the snapshot store's sink
// closed) until raft reports that snapshot as its last. A stale value is
// an older snapshot's, lower: StateIndex then falls back on the state
// machine's own index, never past what the state machine holds.
type snapshotIndex struct {
	mu      sync.Mutex
	read    bool   // index was read from raft at least once
	index   uint64 // raft's last snapshot index when read
	written uint64 // the newest snapshot written to the store
	stats   func() map[string]string
}

// get returns raft's last snapshot index.
func (s *snapshotIndex) get() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.read || s.written > s.index {
		s.index, _ = strconv.ParseUint(s.stats()["last_snapshot_index"], 10, 64)
		s.read = true
	}
	return s.index
}

// wrote records that a snapshot of index was written to the store.
func (s *snapshotIndex) wrote(index uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.written = max(s.written, index)
}

// watchedSnapshots is the snapshot store raft uses, telling idx of every
// snapshot written to it, and pace of every snapshot begun and of its size.
type watchedSnapshots struct {
	raft.SnapshotStore
	idx  *snapshotIndex
	pace *snapshotPace
}

func (w watchedSnapshots) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration, configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := w.SnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	w.pace.begun()
	return &watchedSink{SnapshotSink: sink, index: index, idx: w.idx, pace: w.pace}, nil
}

type watchedSink struct {
	raft.SnapshotSink
	index uint64
	idx   *snapshotIndex
	pace  *snapshotPace
	size  int64
}

func (s *watchedSink) Write(p []byte) (int, error) {
	n, err := s.SnapshotSink.Write(p)
	s.size += int64(n)
	return n, err
}

func (s *watchedSink) Close() error {
	err := s.SnapshotSink.Close()
	if err == nil {
		s.idx.wrote(s.index)
		s.pace.wrote(s.size)
	}
	return err
}
