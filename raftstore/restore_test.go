package raftstore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bagkeeper/bagkeeper/raftstore/backup"
	"github.com/bagkeeper/bagkeeper/raftstore/peerpb"
	"github.com/bagkeeper/bagkeeper/raftstore/state"
)

// TestRestoreStartsANewGroupFromASnapshot: the state of a three-member
// group, read linearizably and written as a snapshot file, staged into a
// new data dir, starts a group of one under a new cluster id, at an index
// past the snapshot's; an empty member joins it and gets every bag; a
// member of the old group is refused when it asks to join.
func TestRestoreStartsANewGroupFromASnapshot(t *testing.T) {
	for _, kind := range []LogStore{LogStoreBoltDB, LogStoreWAL, LogStoreSegments} {
		t.Run(string(kind), func(t *testing.T) { testRestoreStartsANewGroupFromASnapshot(t, kind) })
	}
}

func testRestoreStartsANewGroupFromASnapshot(t *testing.T, kind LogStore) {
	c := newTestCluster(t, "app")
	c.logStore = kind
	for _, p := range []string{"app-0", "app-1", "app-2"} {
		c.start(p, withExpect(3))
	}
	l := c.leader(10 * time.Second)
	rel := mustApply(t, l.node, state.EnsureRelationOp("peers", "p", true, "", "")).GetOps()[0].GetRelationId()
	mustApply(t, l.node, state.UpdateBagOp(rel, "app", map[string]string{"k": "v"}))
	mustApply(t, l.node, state.ClaimUnitOp("app-1/old", "app-1", 1, 3))
	mustApply(t, l.node, state.UpdateCharmStateOp("app/1", map[string]string{"token": "t"}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.follower(l).node.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	oldID := st.ClusterID()
	snap, err := backup.New(backup.Header{Term: l.node.raft.CurrentTerm()}, st)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "backup.snap")
	if _, err := backup.WriteFile(file, snap, false); err != nil {
		t.Fatal(err)
	}
	old := c.node("app-2")
	oldInfo := old.node.info()
	c.stopAll()

	hdr, saved, _, err := backup.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := StageRestore(filepath.Join(c.root, "app-0"), "app", hdr, saved, time.Now()); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("staging into a used data dir: %v", err)
	}
	if _, err := StageRestore(filepath.Join(c.root, "new-0"), "other", hdr, saved, time.Now()); err == nil || !strings.Contains(err.Error(), `not "other"`) {
		t.Fatalf("staging for another application: %v", err)
	}
	staged, err := StageRestore(filepath.Join(c.root, "new-0"), "app", hdr, saved, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if staged.ClusterID == oldID || staged.ClusterID == "" || staged.RestoredFrom != oldID || staged.Index != st.Index() {
		t.Fatalf("staged header %+v (old cluster %s)", staged, oldID)
	}

	n0 := c.start("new-0")
	eventually(t, 10*time.Second, "the restored member to lead", func() error {
		if !n0.node.IsLeader() {
			return fmt.Errorf("not leading")
		}
		return nil
	})
	if _, err := os.Stat(filepath.Join(n0.dir, RestoreFile+".applied")); err != nil {
		t.Fatalf("the staged restore is not marked applied: %v", err)
	}
	// A write commits after the snapshot's index.
	res := mustApply(t, n0.node, state.UpdateBagOp(rel, "app", map[string]string{"after": "restore"}))
	if res.GetIndex() <= st.Index() {
		t.Fatalf("a write after the restore committed at %d, not after the snapshot's index %d", res.GetIndex(), st.Index())
	}
	s := n0.node.State()
	if s.ClusterID() != staged.ClusterID {
		t.Fatalf("cluster id %s, want %s", s.ClusterID(), staged.ClusterID)
	}
	if u, ok := s.Unit("app/1"); !ok || u.Member != "app-1/old" || s.CharmState("app/1").Value("token") != "t" {
		t.Fatalf("unit %+v, charm state %v", u, s.CharmState("app/1"))
	}

	n1 := c.start("new-1", withExpect(3))
	eventually(t, 10*time.Second, "the empty member to get every bag", func() error {
		b, ok := n1.node.State().Bag(rel, "app")
		if !ok || b.Data.Value("k") != "v" || b.Data.Value("after") != "restore" {
			return fmt.Errorf("bag %v", b)
		}
		return nil
	})
	// Restarted, the restored member does not restore again.
	c.stop("new-0")
	n0 = c.start("new-0")
	eventually(t, 10*time.Second, "the restarted member to keep the write made after the restore", func() error {
		if b, ok := n0.node.State().Bag(rel, "app"); !ok || b.Data.Value("after") != "restore" {
			return fmt.Errorf("bag %v", b)
		}
		return nil
	})
	// A member of the old group is refused.
	err = n0.node.checkGeneration(&peerpb.JoinRequest{ServerId: oldInfo.GetServerId(), ClusterId: oldInfo.GetClusterId()})
	if err == nil || !strings.Contains(err.Error(), "another group") {
		t.Fatalf("a member of the old group asking to join: %v", err)
	}
}
