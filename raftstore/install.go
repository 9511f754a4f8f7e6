package raftstore

import (
	"context"
	"sync"

	"github.com/hashicorp/raft"
)

// A follower sent a snapshot while its log already runs past the
// snapshot's last entry is where hashicorp/raft goes wrong with a log
// store that keeps only consecutive entries (seglog, raft-wal): after
// restoring the snapshot it removes the whole log but goes on believing
// that its log ends where it ended before. An append that names that
// stale last entry then passes raft's check, the commit index moves past
// entries the store no longer has, and raft panics reading them ("log not
// found") — and again on every restart, as the store now holds entries
// after a gap. Where no append names it, the member refuses every append
// after the snapshot and is sent the snapshot again, for ever. Both were
// seen with 100 members on two cores, where leaders change often.
//
// installMark lets the log store see the install that raft is in the
// middle of: the transport's relay marks each InstallSnapshot request
// before raft gets it and clears the mark once raft answered, and raft
// asks the log store IsMonotonic right after restoring the snapshot,
// before it answers. checkedLogStore.IsMonotonic then decides what raft
// does with the log (see there).
type installMark struct {
	mu          sync.Mutex
	on          bool
	index, term uint64
	count       int // installs begun (tests)
}

func (m *installMark) set(index, term uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.on, m.index, m.term = true, index, term
	m.count++
}

// begun returns how many installs this member was sent (tests).
func (m *installMark) begun() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.count
}

func (m *installMark) clear() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.on = false
}

// get returns the last entry of the snapshot being installed, if one is.
func (m *installMark) get() (index, term uint64, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.index, m.term, m.on
}

// relayInstall hands raft an InstallSnapshot request with the install
// marked until raft answers it. It returns false if ctx ended first.
func (t *pacedTransport) relayInstall(ctx context.Context, rpc raft.RPC, req *raft.InstallSnapshotRequest) bool {
	t.installs.set(req.LastLogIndex, req.LastLogTerm)
	defer t.installs.clear()
	answer := make(chan raft.RPCResponse, 1)
	orig := rpc.RespChan
	rpc.RespChan = answer
	select {
	case t.rpcs <- rpc:
	case <-ctx.Done():
		return false
	}
	select {
	case resp := <-answer:
		orig <- resp
		return true
	case <-ctx.Done():
		return false
	}
}
