package raftstore

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// snapshotsRetained is how many snapshots the store keeps. One: while the
// next is written there are two, and the store check refuses a data dir
// with a damaged snapshot anyway (the member rejoins as a new one), so an
// older copy would never be read.
const snapshotsRetained = 1

// snapshotLogFloor is the least log, in bytes of entries, a member writes
// between two snapshots it takes for the log's size (see snapshotPace).
const snapshotLogFloor = 4 << 20

// snapshotPace has a member take a snapshot when the log it has stored
// since its newest snapshot outgrows half of that snapshot (the state), or
// snapshotLogFloor for a small state.
//
// raft takes a snapshot only when it finds, at a check every
// SnapshotInterval to 2×SnapshotInterval, that SnapshotThreshold entries
// were appended since the last one; the log then holds the trailing
// entries, the threshold and whatever was written between two checks —
// a size that grows with the write rate and the value size. Counted in
// bytes against the state, the log beyond the trailing entries stays
// under half the state, whatever the rate: the data dir holds at most the
// snapshot, the one being written, and that log. The price is the
// snapshot's write: under sustained writes the member writes two bytes of
// snapshot for each byte of log.
//
// raft's own check still runs: for small values it comes first.
type snapshotPace struct {
	// since is the bytes of entries stored since the newest snapshot was
	// begun (taken or installed).
	since atomic.Int64
	// state is the size of the newest snapshot written.
	state atomic.Int64
	floor int64
	kick  chan struct{}
}

func newSnapshotPace(floor int64) *snapshotPace {
	return &snapshotPace{floor: floor, kick: make(chan struct{}, 1)}
}

// limit is how much log may be stored since the newest snapshot.
func (p *snapshotPace) limit() int64 { return max(p.state.Load()/2, p.floor) }

// due reports whether the log has outgrown the limit.
func (p *snapshotPace) due() bool { return p.since.Load() >= p.limit() }

// stored counts entries appended to the log.
func (p *snapshotPace) stored(logs []*raft.Log) {
	var n int64
	for _, l := range logs {
		n += int64(len(l.Data))
	}
	if p.since.Add(n) >= p.limit() {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
}

// begun records that a snapshot is being written: the entries it holds
// need not be counted any more (those stored meanwhile are, a little early).
func (p *snapshotPace) begun() { p.since.Store(0) }

// wrote records the size of a snapshot written.
func (p *snapshotPace) wrote(size int64) { p.state.Store(size) }

// run takes a snapshot whenever the log has outgrown the limit. After a
// snapshot that failed (a full disk) it waits retry before the next try.
func (p *snapshotPace) run(ctx context.Context, snapshot func() error, retry time.Duration, logf func(msg string, args ...any)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
		}
		if !p.due() { // a kick from before the last snapshot
			continue
		}
		err := snapshot()
		if err == nil || errors.Is(err, raft.ErrNothingNewToSnapshot) {
			continue
		}
		if ctx.Err() != nil {
			return
		}
		logf("a snapshot for the log's size failed", "err", err, "log_bytes", p.since.Load(), "limit", p.limit())
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry):
		}
	}
}
