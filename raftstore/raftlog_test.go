package raftstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/types"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
)

func TestADataDirKeepsTheLogStoreItWasCreatedWith(t *testing.T) {
	touch := func(t *testing.T, dir string, names ...string) {
		for _, n := range names {
			p := filepath.Join(dir, n)
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	walMeta := filepath.Join(walDir, walMetaFile)
	for _, tc := range []struct {
		name  string
		files []string
		want  LogStore
		asked LogStore
		err   string
	}{
		{name: "new dir, wal asked", asked: LogStoreWAL, want: LogStoreWAL},
		{name: "new dir, boltdb asked", asked: LogStoreBoltDB, want: LogStoreBoltDB},
		{name: "new dir, nothing asked", want: DefaultLogStore},
		{name: "only snapshots", files: []string{"snapshots/1-2-3/meta.json"}, asked: LogStoreBoltDB, want: LogStoreBoltDB},
		{name: "raft.db, wal asked", files: []string{raftDBFile}, asked: LogStoreWAL, want: LogStoreBoltDB},
		{name: "raft.db, boltdb asked", files: []string{raftDBFile}, asked: LogStoreBoltDB, want: LogStoreBoltDB},
		{name: "wal, boltdb asked", files: []string{walMeta}, asked: LogStoreBoltDB, want: LogStoreWAL},
		{name: "wal, wal asked", files: []string{walMeta}, asked: LogStoreWAL, want: LogStoreWAL},
		{name: "an empty wal directory", files: []string{walDir + "/x"}, asked: LogStoreBoltDB, want: LogStoreBoltDB},
		{name: "both", files: []string{raftDBFile, walMeta}, asked: LogStoreWAL, err: "which holds this member's log is not known"},
		{name: "new dir, segments asked", asked: LogStoreSegments, want: LogStoreSegments},
		{name: "raft.db, segments asked", files: []string{raftDBFile}, asked: LogStoreSegments, want: LogStoreBoltDB},
		{name: "segments, boltdb asked", files: []string{segmentsDir + "/stable"}, asked: LogStoreBoltDB, want: LogStoreSegments},
		{name: "segments, wal asked", files: []string{segmentsDir + "/00000000000000000001.seg"}, asked: LogStoreWAL, want: LogStoreSegments},
		{name: "segments, segments asked", files: []string{segmentsDir + "/stable"}, asked: LogStoreSegments, want: LogStoreSegments},
		{name: "raft.db and segments", files: []string{raftDBFile, segmentsDir + "/stable"}, asked: LogStoreSegments, err: "which holds this member's log is not known"},
		{name: "wal and segments", files: []string{walMeta, segmentsDir + "/stable"}, asked: LogStoreBoltDB, err: "which holds this member's log is not known"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			touch(t, dir, tc.files...)
			got, why, err := chooseLogStore(dir, tc.asked)
			if tc.err != "" {
				var de *DamagedStoreError
				if !errors.As(err, &de) || de.Path != dir || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %q, %v; want a damaged store error saying %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want || why == "" {
				t.Fatalf("got %q (%q), %v; want %q", got, why, err, tc.want)
			}
		})
	}
}

// TestABoltDBDataDirStaysBoltDBAfterAnUpgrade: a member whose data dir was
// created with raft-boltdb, restarted by a version whose default (or flag)
// is wal, goes on with raft.db and its data, and says so.
func TestABoltDBDataDirStaysBoltDBAfterAnUpgrade(t *testing.T) {
	c := newTestCluster(t, "app")
	n := c.start("app-0", withExpect(1), withLogStore(LogStoreBoltDB))
	l := c.leader(10 * time.Second)
	rel := mustApply(t, l.node, state.EnsureRelationOp("peers", "p", true, "", "")).GetOps()[0].GetRelationId()
	mustApply(t, l.node, state.UpdateBagOp(rel, "app", map[string]string{"k": "before the upgrade"}))
	if got := n.node.Status().LogStore; got != LogStoreBoltDB {
		t.Fatalf("log store %q, want boltdb", got)
	}
	c.stop(n.pod)

	n = c.start("app-0", withExpect(1), withLogStore(LogStoreWAL))
	if got, peer := n.node.Status().LogStore, n.node.info().GetLogStore(); got != LogStoreBoltDB || peer != "boltdb" {
		t.Fatalf("after the restart asking for wal: log store %q (%q to peers), want boltdb", got, peer)
	}
	if _, err := os.Stat(filepath.Join(n.dir, raftDir, walDir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a wal directory was made beside raft.db: %v", err)
	}
	eventually(t, 10*time.Second, "the data written before the upgrade", func() error {
		if b, _ := n.node.State().Bag(rel, "app"); b == nil || b.Data.Value("k") != "before the upgrade" {
			return errors.New("not there")
		}
		return nil
	})
	mustApply(t, c.leader(10*time.Second).node, state.UpdateBagOp(rel, "app", map[string]string{"k": "after the upgrade"}))
}

// TestATornLastAppendIsDroppedAndTheMemberCatchesUp tears the last append
// of a stopped follower's log (its final bytes cut, then garbage where a
// torn write could have left them): the follower opens, having lost that
// append and nothing before it, and gets it back from the leader. On wal
// the torn part is the append's commit frame, on segments its last record.
func TestATornLastAppendIsDroppedAndTheMemberCatchesUp(t *testing.T) {
	tailOf := map[LogStore]func(t *testing.T, raftPath string) (path string, size int64){
		LogStoreWAL: func(t *testing.T, raftPath string) (string, int64) {
			segs := walSegments(t, filepath.Join(raftPath, walDir))
			tail := filepath.Join(raftPath, walDir, segs[len(segs)-1])
			return tail, walUsed(t, tail) // the commit frame is the last 8 bytes written
		},
		LogStoreSegments: func(t *testing.T, raftPath string) (string, int64) {
			dir := filepath.Join(raftPath, segmentsDir)
			segs := segFiles(t, dir)
			tail := filepath.Join(dir, segs[len(segs)-1])
			fi, err := os.Stat(tail)
			if err != nil {
				t.Fatal(err)
			}
			return tail, fi.Size()
		},
	}
	for _, kind := range []LogStore{LogStoreWAL, LogStoreSegments} {
		t.Run(string(kind), func(t *testing.T) {
			c := newTestCluster(t, "app")
			for _, p := range []string{"app-0", "app-1", "app-2"} {
				c.start(p, withExpect(3), withLogStore(kind))
			}
			l := c.leader(10 * time.Second)
			rel := mustApply(t, l.node, state.EnsureRelationOp("peers", "p", true, "", "")).GetOps()[0].GetRelationId()
			for i := range 20 {
				mustApply(t, l.node, state.UpdateBagOp(rel, "app", map[string]string{"n": fmt.Sprint(i)}))
			}
			f := c.follower(l)
			eventually(t, 10*time.Second, f.pod+" to have every entry", func() error {
				if f.node.raft.LastIndex() != l.node.raft.LastIndex() {
					return fmt.Errorf("last index %d, the leader's %d", f.node.raft.LastIndex(), l.node.raft.LastIndex())
				}
				return nil
			})
			c.stop(f.pod)
			raftPath := filepath.Join(f.dir, raftDir)
			before, err := storeCheck{dir: raftPath, kind: kind}.run()
			if err != nil {
				t.Fatal(err)
			}
			tail, used := tailOf[kind](t, raftPath)
			if err := os.Truncate(tail, used-3); err != nil {
				t.Fatal(err)
			}
			f2, err := os.OpenFile(tail, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f2.Write([]byte("torn\xff\xfe\xfd")); err != nil {
				t.Fatal(err)
			}
			f2.Close()
			after, err := storeCheck{dir: raftPath, kind: kind}.run()
			if err != nil {
				t.Fatalf("a torn last append: %v", err)
			}
			lost := before.lastIndex - after.lastIndex
			if after.lastIndex >= before.lastIndex || after.firstIndex != before.firstIndex || lost > 256 || kind == LogStoreSegments && lost != 1 {
				t.Fatalf("entries %d–%d after tearing the last append, %d–%d before", after.firstIndex, after.lastIndex, before.firstIndex, before.lastIndex)
			}

			f = c.start(f.pod, withExpect(3), withLogStore(kind))
			mustApply(t, c.leader(10*time.Second).node, state.UpdateBagOp(rel, "app", map[string]string{"n": "after"}))
			eventually(t, 10*time.Second, f.pod+" to catch up", func() error {
				if b, _ := f.node.State().Bag(rel, "app"); b == nil || b.Data.Value("n") != "after" {
					return errors.New("not yet")
				}
				st := f.node.Status()
				if st.LogStore != kind || st.Damage != nil || st.WriteFailure != nil {
					return fmt.Errorf("status %+v", st)
				}
				return nil
			})
		})
	}
}

// failingMeta is raft-wal's meta store whose commits fail while fail is set.
type failingMeta struct {
	*metadb.BoltMetaDB
	fail *atomic.Bool
}

func (m failingMeta) CommitState(s types.PersistentState) error {
	if m.fail.Load() {
		return syscall.ENOSPC
	}
	return m.BoltMetaDB.CommitState(s)
}

// TestAWALWhoseRotationDidNotFinishIsRefused: raft-wal seals its segment
// with an append, then records the seal in its meta file; when that fails
// (here: ENOSPC), it refuses every later append, and reopened it refuses
// them still. The store check says so, naming the segment, instead of a
// member that starts and can never write.
func TestAWALWhoseRotationDidNotFinishIsRefused(t *testing.T) {
	raftPath := t.TempDir()
	dir := filepath.Join(raftPath, walDir)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	fail := &atomic.Bool{}
	meta := &metadb.BoltMetaDB{}
	w, err := wal.Open(dir, wal.WithMetaStore(failingMeta{meta, fail}), wal.WithSegmentSize(1024))
	if err != nil {
		t.Fatal(err)
	}
	fail.Store(true)
	var stored error
	for i := uint64(1); i < 100 && stored == nil; i++ {
		stored = w.StoreLogs([]*raft.Log{{Index: i, Term: 1, Type: raft.LogNoop}})
	}
	w.Close()
	meta.Close()
	if !errors.Is(stored, types.ErrSealed) {
		t.Fatalf("appends after the failed rotation: %v; want raft-wal's sealed segment error", stored)
	}
	segs := walSegments(t, dir)
	_, err = storeCheck{dir: raftPath, kind: LogStoreWAL}.run()
	wantDamaged(t, err, filepath.Join(dir, segs[len(segs)-1]), "rotation that did not finish")
}

// cutTailAndAppend stores no-op entries 1 to last in term 1, cuts the log
// from entry 8 to the end, as raft does with entries that conflict with a
// new leader's, and stores entries 8 to 12 in term 2.
func cutTailAndAppend(t *testing.T, logs raft.LogStore, last uint64) {
	t.Helper()
	store := func(from, to, term uint64) {
		for i := from; i <= to; i++ {
			if err := logs.StoreLog(&raft.Log{Index: i, Term: term, Type: raft.LogNoop}); err != nil {
				t.Fatal(err)
			}
		}
	}
	store(1, last, 1)
	if err := logs.DeleteRange(8, last); err != nil {
		t.Fatal(err)
	}
	store(8, 12, 2)
}

// TestAWALWhoseTailWasCutIsRefused: when raft cuts the end of a follower's
// log (entries that conflict with a new leader's), raft-wal v0.4.0 seals
// the segment without its index; reopened, it cannot read its entries, and
// raft panics at start reading one. The store check says so instead.
func TestAWALWhoseTailWasCutIsRefused(t *testing.T) {
	raftPath := t.TempDir()
	st, err := openStores(raftPath, LogStoreWAL, 0, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	cutTailAndAppend(t, st.logs, 10)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if st, err = openStores(raftPath, LogStoreWAL, 0, hclog.NewNullLogger()); err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	readErr := st.logs.GetLog(5, &l)
	st.Close()
	if readErr == nil {
		t.Fatal("raft-wal reads a segment sealed by a cut tail: hashicorp/raft-wal#31 is fixed here, and the check should accept it")
	}
	segs := walSegments(t, filepath.Join(raftPath, walDir))
	_, err = storeCheck{dir: raftPath, kind: LogStoreWAL}.run()
	wantDamaged(t, err, filepath.Join(raftPath, walDir, segs[0]), "sealed segment without an index")
}

// TestASegmentsStoreWhoseTailWasCutReopens: the case raft-wal v0.4.0
// cannot reopen (TestAWALWhoseTailWasCutIsRefused) works with seglog, and
// the store check accepts it.
func TestASegmentsStoreWhoseTailWasCutReopens(t *testing.T) {
	raftPath := t.TempDir()
	st, err := openStores(raftPath, LogStoreSegments, 256, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	cutTailAndAppend(t, st.logs, 30)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	res, err := storeCheck{dir: raftPath, kind: LogStoreSegments}.run()
	if err != nil || res.firstIndex != 1 || res.lastIndex != 12 {
		t.Fatalf("store check: entries %d to %d, %v", res.firstIndex, res.lastIndex, err)
	}
	if st, err = openStores(raftPath, LogStoreSegments, 256, hclog.NewNullLogger()); err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for i := uint64(1); i <= 12; i++ {
		var l raft.Log
		if err := st.logs.GetLog(i, &l); err != nil || l.Index != i || (l.Term == 2) != (i >= 8) {
			t.Fatalf("entry %d: %+v, %v", i, l, err)
		}
	}
}
