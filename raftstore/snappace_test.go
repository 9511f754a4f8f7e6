package raftstore

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
)

// TestTheLogIsSnapshottedForItsSize: with raft's own snapshot check out of
// the way (a threshold it never reaches), a member still takes a snapshot
// whenever the log written since the last one outgrows the floor, or half
// the state once the state is bigger; the log stays that short, and one
// snapshot is kept.
func TestTheLogIsSnapshottedForItsSize(t *testing.T) {
	const floor, value = 64 << 10, 8 << 10
	c := newTestCluster(t, "app")
	n := c.start("app-0", withExpect(1), withLogStore(LogStoreSegments), func(c *Config) {
		c.SnapshotThreshold, c.SnapshotInterval, c.TrailingLogs = 1<<40, time.Hour, 4
		c.snapshotLogFloor = floor
	})
	l := c.leader(10 * time.Second)
	rel := mustApply(t, l.node, state.EnsureRelationOp("peers", "p", true, "", "")).GetOps()[0].GetRelationId()

	// A small state: one key, written over and over (8 entries fill the
	// floor).
	v := strings.Repeat("x", value)
	for i := range 40 {
		mustApply(t, l.node, state.UpdateBagOp(rel, "app", map[string]string{"k": fmt.Sprint(i, v)}))
	}
	snapshotsDir := filepath.Join(n.dir, raftDir, snapshotsDir)
	eventually(t, 10*time.Second, "a snapshot taken for the log's size, the log cut behind it, one snapshot kept", func() error {
		idx, _ := strconv.ParseUint(n.node.raft.Stats()["last_snapshot_index"], 10, 64)
		if idx < 30 {
			return fmt.Errorf("last snapshot at entry %d", idx)
		}
		first, err := n.node.logs.FirstIndex()
		if err != nil {
			return err
		}
		last, err := n.node.logs.LastIndex()
		if err != nil {
			return err
		}
		// The trailing 4, at most 8 since the snapshot, and what the
		// segment holding the first of them starts with (4 KiB segments,
		// one entry each).
		if last-first+1 > 16 {
			return fmt.Errorf("the log holds entries %d to %d", first, last)
		}
		snaps, err := os.ReadDir(snapshotsDir)
		if err != nil {
			return err
		}
		if len(snaps) != 1 {
			return fmt.Errorf("%d snapshots in %s", len(snaps), snapshotsDir)
		}
		return nil
	})

	// A bigger state: 64 keys of 8 KiB. Then the log may grow to half the
	// state between two snapshots.
	for i := range 64 {
		mustApply(t, l.node, state.UpdateBagOp(rel, "app", map[string]string{fmt.Sprint("k", i): v}))
	}
	eventually(t, 10*time.Second, "the limit follows the state", func() error {
		counted := n.node.snapPace.state.Load()
		metas, err := os.ReadDir(snapshotsDir)
		if err != nil || len(metas) != 1 {
			return fmt.Errorf("snapshots: %v %v", metas, err)
		}
		fi, err := os.Stat(filepath.Join(snapshotsDir, metas[0].Name(), snapshotStateFile))
		if err != nil {
			return err
		}
		if counted != fi.Size() || fi.Size() <= 2*floor {
			return fmt.Errorf("the pace counts a state of %d bytes, the newest snapshot has %d", counted, fi.Size())
		}
		if got, want := n.node.snapPace.limit(), fi.Size()/2; got != want {
			return fmt.Errorf("limit %d, want half the state, %d", got, want)
		}
		return nil
	})
}

// TestSnapshotPaceLimit: the log may grow to half the newest snapshot, or
// to the floor for a small one; a kick comes once the limit is reached.
func TestSnapshotPaceLimit(t *testing.T) {
	p := newSnapshotPace(100)
	if got := p.limit(); got != 100 {
		t.Fatalf("limit with no snapshot %d, want the floor", got)
	}
	p.wrote(150)
	if got := p.limit(); got != 100 {
		t.Fatalf("limit for a 150-byte state %d, want the floor", got)
	}
	p.wrote(1000)
	if got := p.limit(); got != 500 {
		t.Fatalf("limit for a 1000-byte state %d, want 500", got)
	}
	kicked := func() bool {
		select {
		case <-p.kick:
			return true
		default:
			return false
		}
	}
	p.stored(logsOf(499))
	if kicked() || p.due() {
		t.Fatal("due before the limit")
	}
	p.stored(logsOf(1))
	if !kicked() || !p.due() {
		t.Fatal("not due at the limit")
	}
	p.begun()
	if p.due() {
		t.Fatal("still due after a snapshot began")
	}
}

func logsOf(size int) []*raft.Log { return []*raft.Log{{Data: make([]byte, size)}} }
