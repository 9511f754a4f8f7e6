package raftstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"

	"github.com/bagkeeper/bagkeeper/raftstore/backup"
	"github.com/bagkeeper/bagkeeper/raftstore/state"
)

// Restoring a snapshot file (`bagkeeper snapshot save`) into a new group,
// in two steps, as etcd's snapshot restore does it:
//
//  1. StageRestore (`bagkeeper snapshot restore`) checks the file and
//     writes a new data dir holding only RestoreFile: the file's state
//     for a new group (state.ForNewGroup: a new cluster id), in the same
//     file format. No identity is made: the pod that starts from the
//     data dir makes its own, with its own pod name and address.
//  2. The first `bagkeeper run` on that data dir, finding RestoreFile and
//     no raft state, puts the state in its raft snapshot store as a
//     snapshot at the state's index whose configuration is this member
//     alone, a voter. Raft restores it on start: the member elects itself
//     and leads a group of one, whose log goes on after the snapshot's
//     index. Other pods with empty data dirs join it as usual and get
//     every bag from it. RestoreFile is then renamed RestoreFile.applied.
//
// The new cluster id keeps the new group and the old one apart: a member
// of the old group (a pod whose disk survived) is refused when it asks to
// join (checkGeneration), and says why.

// RestoreFile is the name of a staged restore in a data dir.
const RestoreFile = "restore.snap"

// restoreTerm is the raft term of a restored snapshot: the new group's
// history starts at term 1, its first leader is elected in term 2.
const restoreTerm = 1

// StageRestore writes dataDir, which must not exist or be empty (but for a
// file system's lost+found), for a new group of app (when app is not "")
// holding st, read from a snapshot file with header hdr. It returns the
// header of the staged file, whose ClusterID is the new group's.
func StageRestore(dataDir, app string, hdr *backup.Header, st *state.State, now time.Time) (*backup.Header, error) {
	if app != "" && st.App() != app {
		return nil, fmt.Errorf("the snapshot is of application %q, not %q", st.App(), app)
	}
	if !state.ValidAppName(st.App()) {
		return nil, fmt.Errorf("the snapshot holds no initialised application (application %q)", st.App())
	}
	if st.Index() == 0 {
		return nil, errors.New("the snapshot's state is at raft index 0: there is nothing to restore")
	}
	entries, err := os.ReadDir(dataDir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("data dir %s: %w", dataDir, err)
	default:
		for _, e := range entries {
			if e.Name() != "lost+found" {
				return nil, fmt.Errorf("data dir %s is not empty (it holds %s): restore writes a new data dir; give an empty or a new one", dataDir, e.Name())
			}
		}
	}
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		return nil, fmt.Errorf("data dir %s cannot be created: %w", dataDir, err)
	}
	fresh := st.ForNewGroup(state.NewID(), now)
	snap, err := backup.New(backup.Header{Term: hdr.Term, Time: hdr.Time, Member: hdr.Member, Version: hdr.Version, RestoredFrom: st.ClusterID()}, fresh)
	if err != nil {
		return nil, err
	}
	if _, err := backup.WriteFile(filepath.Join(dataDir, RestoreFile), snap, false); err != nil {
		return nil, fmt.Errorf("staging the restore in %s: %w", dataDir, err)
	}
	return &snap.Header, nil
}

// applyStagedRestore carries out a restore staged in the data dir (see
// StageRestore) before raft starts: the state becomes a snapshot of a
// group of this member alone.
func (n *Node) applyStagedRestore(logs raft.LogStore, snaps raft.SnapshotStore) error {
	path := filepath.Join(n.dir.Path, RestoreFile)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	has, err := raft.HasExistingState(logs, n.stores.stable, snaps)
	if err != nil {
		return err
	}
	if !has {
		hdr, st, _, err := backup.ReadFile(path)
		if err != nil {
			return fmt.Errorf("staged restore: %w; stage it again with bagkeeper snapshot restore into an empty data dir", err)
		}
		if st.App() != n.cfg.App {
			return fmt.Errorf("staged restore %s is of application %q, not %q", path, st.App(), n.cfg.App)
		}
		cfg := raft.Configuration{Servers: []raft.Server{{ID: n.id, Address: raft.ServerAddress(n.cfg.Advertise), Suffrage: raft.Voter}}}
		_, trans := raft.NewInmemTransport("")
		sink, err := snaps.Create(raft.SnapshotVersionMax, st.Index(), restoreTerm, cfg, st.Index(), trans)
		if err != nil {
			return fmt.Errorf("staged restore: %w", err)
		}
		if err := state.WriteSnapshot(sink, st); err != nil {
			_ = sink.Cancel()
			return fmt.Errorf("staged restore: %w", err)
		}
		if err := sink.Close(); err != nil {
			return fmt.Errorf("staged restore: %w", err)
		}
		if err := n.stores.stable.SetUint64(keyCurrentTerm, restoreTerm); err != nil {
			return fmt.Errorf("staged restore: %w", err)
		}
		n.log.Warn("a new group starts from a restored snapshot; this member alone is its voter, others join it",
			"cluster_id", st.ClusterID(), "restored_from", hdr.RestoredFrom, "index", st.Index(), "saved", hdr.Time.UTC().Format(time.RFC3339))
	}
	return os.Rename(path, path+".applied")
}
