package raftstore

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
)

// Identity is who a data directory belongs to. It is created together with
// the data directory and never changes: a member that loses its disk comes
// back with a new incarnation, hence a new raft ServerID, so it can never
// vote with a memory it no longer has.
type Identity struct {
	App         string    `json:"app"`
	Pod         string    `json:"pod"`
	Incarnation string    `json:"incarnation"`
	Created     time.Time `json:"created"`
	// JoinOnly: this incarnation was made when a recovery set the member's
	// state aside; it may only join the recovered group, never bootstrap.
	JoinOnly bool `json:"join_only,omitempty"`
}

// ServerID is the raft id: "<pod>/<incarnation>".
func (i Identity) ServerID() raft.ServerID {
	return raft.ServerID(i.Pod + "/" + i.Incarnation)
}

// PodOf returns the pod part of a ServerID.
func PodOf(id raft.ServerID) string {
	s := string(id)
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		return s[:i]
	}
	return s
}

const (
	identityFile = "identity.json"
	raftDir      = "raft"
	lockFile     = "LOCK"
)

// DataDir is an opened, locked data directory.
type DataDir struct {
	Path     string
	Identity Identity
	// Fresh is true when the directory held no identity and one was just
	// created.
	Fresh bool
	lock  *os.File
}

// RaftPath returns the directory of the raft log and snapshots.
func (d *DataDir) RaftPath() string { return filepath.Join(d.Path, raftDir) }

// Close releases the directory lock.
func (d *DataDir) Close() error {
	if d.lock == nil {
		return nil
	}
	err := d.lock.Close()
	d.lock = nil
	return err
}

// OpenDataDir opens (creating it if needed) the data directory of a member
// of app running in pod. It refuses a directory that another process uses,
// one that belongs to another application, and one that holds raft state
// without an identity (it cannot tell whose votes that state carries).
func OpenDataDir(path, app, pod string) (*DataDir, error) {
	if err := os.MkdirAll(path, 0o750); err != nil {
		return nil, fmt.Errorf("data dir %s cannot be created: %w", path, err)
	}
	lock, err := os.OpenFile(filepath.Join(path, lockFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data dir %s is not writable: %w", path, err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("data dir %s is in use by another bagkeeper process", path)
	}
	d := &DataDir{Path: path, lock: lock}
	ok := false
	defer func() {
		if !ok {
			d.Close()
		}
	}()
	joinOnly, err := setAsideForRecovery(path)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(path, identityFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if entries, _ := os.ReadDir(filepath.Join(path, raftDir)); len(entries) > 0 {
			return nil, fmt.Errorf("data dir %s holds raft state but no %s: it was not written by bagkeeper or is damaged; move it away to let this member rejoin with an empty disk", path, identityFile)
		}
		d.Identity = Identity{App: app, Pod: pod, Incarnation: newIncarnation(), Created: time.Now().UTC(), JoinOnly: joinOnly}
		d.Fresh = true
		if err := writeFileAtomic(filepath.Join(path, identityFile), d.Identity); err != nil {
			return nil, fmt.Errorf("data dir %s: writing identity: %w", path, err)
		}
	case err != nil:
		return nil, fmt.Errorf("data dir %s: reading identity: %w", path, err)
	default:
		if err := json.Unmarshal(b, &d.Identity); err != nil || d.Identity.Incarnation == "" || d.Identity.Pod == "" {
			return nil, fmt.Errorf("data dir %s: %s is damaged; move the data dir away to let this member rejoin with an empty disk", path, identityFile)
		}
		if d.Identity.App != app {
			return nil, fmt.Errorf("data dir %s belongs to application %q, not %q", path, d.Identity.App, app)
		}
	}
	if err := os.MkdirAll(d.RaftPath(), 0o750); err != nil {
		return nil, fmt.Errorf("data dir %s: %w", path, err)
	}
	ok = true
	return d, nil
}

// newIncarnation returns 10 random lower-case base32 characters.
func newIncarnation() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz234567"
	var b [10]byte
	_, _ = rand.Read(b[:])
	for i := range b {
		b[i] = alphabet[b[i]&31]
	}
	return string(b[:])
}

func writeFileAtomic(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer dir.Close()
	return dir.Sync()
}

// setAsideForRecovery carries out a recovery plan that makes this member
// rejoin: its identity and raft state move to before-recovery-<plan>/ in
// the data dir (kept, not deleted), and it starts as a new incarnation
// that may only join. It reports whether it did so.
func setAsideForRecovery(path string) (bool, error) {
	p, err := readStagedPlan(path)
	if err != nil || p == nil || p.Role != RoleRejoin {
		return false, err
	}
	aside := filepath.Join(path, "before-recovery-"+p.Plan)
	if err := os.MkdirAll(aside, 0o750); err != nil {
		return false, fmt.Errorf("setting the state aside for recovery plan %s: %w", p.Plan, err)
	}
	for _, name := range []string{identityFile, raftDir, groupMarkFile} {
		if err := os.Rename(filepath.Join(path, name), filepath.Join(aside, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("setting the state aside for recovery plan %s: %w", p.Plan, err)
		}
	}
	planPath := filepath.Join(path, RecoveryPlanFile)
	if err := os.Rename(planPath, filepath.Join(aside, RecoveryPlanFile+".applied")); err != nil {
		return false, err
	}
	return true, nil
}
