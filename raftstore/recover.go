package raftstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

// Recovery from the loss of a majority. Raft cannot commit anything once
// most voters are gone for good, and no automatic path may guess which
// survivors to trust (invariant 4: no automatic wipe-and-rebootstrap). The
// operator decides: they list the surviving members, and every survivor's
// configuration is forced to that list. Entries that were in a survivor's
// log but not known committed become committed — the price of recovery.
//
// A recovery can be applied to a stopped member's data dir at once
// (Recover), or staged in a running member's data dir and applied by the
// next start (StageRecovery), which suits a pod whose sidecar cannot be
// stopped without the pod.

// RecoveryFile is the name of a staged recovery in the data dir. It holds a
// JSON list of {"id", "address", "non_voter"} objects, as raft's peers.json.
const RecoveryFile = "recover-peers.json"

// ReadRecoveryConfig reads and checks a recovery configuration file.
func ReadRecoveryConfig(path string) (raft.Configuration, error) {
	cfg, err := raft.ReadConfigJSON(path)
	if err != nil {
		return raft.Configuration{}, fmt.Errorf("recovery peers %s: %w", path, err)
	}
	if len(cfg.Servers) == 0 {
		return raft.Configuration{}, fmt.Errorf("recovery peers %s lists no members", path)
	}
	ids, addrs, voters := map[raft.ServerID]bool{}, map[raft.ServerAddress]bool{}, 0
	for _, s := range cfg.Servers {
		if s.ID == "" || s.Address == "" {
			return raft.Configuration{}, fmt.Errorf("recovery peers %s: every member needs an id and an address", path)
		}
		if ids[s.ID] || addrs[s.Address] {
			return raft.Configuration{}, fmt.Errorf("recovery peers %s: member %s or address %s is listed twice", path, s.ID, s.Address)
		}
		ids[s.ID], addrs[s.Address] = true, true
		if s.Suffrage == raft.Voter {
			voters++
		}
	}
	if voters == 0 {
		return raft.Configuration{}, fmt.Errorf("recovery peers %s lists no voter", path)
	}
	return cfg, nil
}

// Inspection is what a stopped member's data dir holds.
type Inspection struct {
	Identity      Identity
	LastIndex     uint64
	Configuration raft.Configuration
}

// Inspect reads a stopped member's data dir without changing it.
func Inspect(dataDir, app string) (*Inspection, error) {
	var out *Inspection
	err := withStores(dataDir, app, func(d *DataDir, rc *raft.Config, logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore) error {
		last, err := logs.LastIndex()
		if err != nil {
			return err
		}
		if snapsList, err := snaps.List(); err == nil && len(snapsList) > 0 && snapsList[0].Index > last {
			last = snapsList[0].Index
		}
		_, trans := raft.NewInmemTransport("")
		cfg, err := raft.GetConfiguration(rc, NewFSM(nil), logs, stable, snaps, trans)
		if err != nil {
			return err
		}
		out = &Inspection{Identity: d.Identity, LastIndex: last, Configuration: cfg}
		return nil
	})
	return out, err
}

// Recover forces the configuration of a stopped member's data dir.
func Recover(dataDir, app string, cfg raft.Configuration, logger *slog.Logger) error {
	return withStores(dataDir, app, func(d *DataDir, rc *raft.Config, logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore) error {
		return recoverStores(d, rc, logs, stable, snaps, cfg, logger)
	})
}

func recoverStores(d *DataDir, rc *raft.Config, logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore, cfg raft.Configuration, logger *slog.Logger) error {
	has, err := raft.HasExistingState(logs, stable, snaps)
	if err != nil {
		return err
	}
	if !has {
		return fmt.Errorf("data dir %s holds no raft state: there is nothing to recover from here", d.Path)
	}
	inCfg := false
	for _, s := range cfg.Servers {
		inCfg = inCfg || s.ID == d.Identity.ServerID()
	}
	if !inCfg {
		return fmt.Errorf("this member (%s) is not in the recovery configuration; list every survivor, this one included", d.Identity.ServerID())
	}
	_, trans := raft.NewInmemTransport("")
	if err := raft.RecoverCluster(rc, NewFSM(nil), logs, stable, snaps, trans, cfg); err != nil {
		return fmt.Errorf("recovering %s: %w", d.Path, err)
	}
	logger.Warn("raft configuration forced by recovery", "member", string(d.Identity.ServerID()), "servers", len(cfg.Servers))
	return nil
}

// StageRecovery writes cfg into the data dir; the member applies it when it
// next starts. It works while the member runs. It refuses a configuration
// that does not list the member itself, which the next start would refuse.
func StageRecovery(dataDir, app string, cfg raft.Configuration) error {
	b, err := os.ReadFile(filepath.Join(dataDir, identityFile))
	if err != nil {
		return fmt.Errorf("%s is not a bagkeeper data dir (no %s): %w", dataDir, identityFile, err)
	}
	var id Identity
	if err := json.Unmarshal(b, &id); err != nil {
		return fmt.Errorf("data dir %s: %s is damaged: %w", dataDir, identityFile, err)
	}
	if id.App != app {
		return fmt.Errorf("data dir %s belongs to application %q, not %q", dataDir, id.App, app)
	}
	listed := false
	for _, s := range cfg.Servers {
		listed = listed || s.ID == id.ServerID()
	}
	if !listed {
		return fmt.Errorf("this member (%s) is not in the recovery configuration; list every survivor, this one included", id.ServerID())
	}
	type peer struct {
		ID       string `json:"id"`
		Address  string `json:"address"`
		NonVoter bool   `json:"non_voter"`
	}
	var peers []peer
	for _, s := range cfg.Servers {
		peers = append(peers, peer{ID: string(s.ID), Address: string(s.Address), NonVoter: s.Suffrage != raft.Voter})
	}
	return writeFileAtomic(filepath.Join(dataDir, RecoveryFile), peers)
}

// applyStagedRecovery applies a recovery staged in the data dir, then
// renames the file so it is applied once.
func (n *Node) applyStagedRecovery(rc *raft.Config, logs raft.LogStore, snaps raft.SnapshotStore) error {
	path := filepath.Join(n.dir.Path, RecoveryFile)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	cfg, err := ReadRecoveryConfig(path)
	if err != nil {
		return err
	}
	if err := recoverStores(n.dir, rc, logs, n.bolt, snaps, cfg, n.log); err != nil {
		return err
	}
	return os.Rename(path, path+".applied")
}

// withStores opens a stopped member's stores for an offline operation.
func withStores(dataDir, app string, fn func(*DataDir, *raft.Config, raft.LogStore, raft.StableStore, raft.SnapshotStore) error) error {
	if _, err := os.Stat(filepath.Join(dataDir, identityFile)); err != nil {
		return fmt.Errorf("%s is not a bagkeeper data dir (no %s): %w", dataDir, identityFile, err)
	}
	d, err := OpenDataDir(dataDir, app, "")
	if err != nil {
		return err
	}
	defer d.Close()
	path := filepath.Join(d.RaftPath(), "raft.db")
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: &bbolt.Options{Timeout: time.Second}})
	if err != nil {
		return fmt.Errorf("raft store %s: %w", path, err)
	}
	defer bolt.Close()
	logger := newHCLogAdapter(slog.Default())
	snaps, err := raft.NewFileSnapshotStoreWithLogger(d.RaftPath(), 2, logger)
	if err != nil {
		return err
	}
	cfg := Config{}
	cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout, cfg.CommitTimeout = time.Second, time.Second, 500*time.Millisecond, 50*time.Millisecond
	cfg.SnapshotThreshold, cfg.TrailingLogs, cfg.SnapshotInterval = 8192, 10240, 2*time.Minute
	return fn(d, raftConfig(&cfg, d.Identity.ServerID(), logger), bolt, bolt, snaps)
}
