package raftstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/bagkeeper/bagkeeper/raftstore/peerpb"
	"github.com/hashicorp/raft"
)

// Recovery from the loss of a majority. Raft cannot commit anything once
// most voters are gone for good, and no automatic path may guess which
// survivors to trust (invariant 4: no automatic wipe-and-rebootstrap). The
// operator lists the members that still run; bagkeeper then refuses
// anything that could split the group:
//
//   - recovery is refused while any member answers with a leader, or heard
//     from one recently, or while the members that answer are a majority of
//     the voters (they can elect a leader themselves);
//   - every member that answers must be listed, and every listed survivor
//     must answer, with state of the same group;
//   - the plan names the survivor with the most up-to-date log (last log
//     term, then last index) as the only one that recovers: its
//     configuration is forced to itself, and it leads the recovered group;
//     every other survivor sets its raft state aside at its next start and
//     joins the recovered group as a new member (it could not rejoin with
//     a log that may hold entries the leader's does not). One member
//     recovering and the others joining it is what keeps the group one;
//   - the plan has a digest over all of this; each survivor stages its part
//     only when the plan made again at that moment has the same digest, so
//     all of them follow one plan;
//   - the recovered group starts a new generation, recorded in its state:
//     a member of the group from before the recovery (a lost member whose
//     disk comes back) is refused when it asks to join, and says so.
//
// Entries in the leader's log that were not known committed become
// committed: the price of recovery.

// ErrOutdated is wrapped by the error of a call on a member whose state is
// from before a recovery of its group.
var ErrOutdated = errors.New("this member's state is from before a recovery of its group")

// RecoveryPlanFile is the name of a staged recovery in the data dir.
const RecoveryPlanFile = "recovery-plan.json"

// Roles in a recovery plan.
const (
	RoleLead   = "lead"
	RoleRejoin = "rejoin"
)

// RecoveryPlan is what the survivors of a group that lost its majority do.
type RecoveryPlan struct {
	ClusterID string `json:"cluster_id"`
	// Generation is the generation the recovered group will have.
	Generation uint64          `json:"generation"`
	Leader     raft.ServerID   `json:"leader"`
	Survivors  []PlannedMember `json:"survivors"`
	// Digest is a SHA-256 of everything above, in hex.
	Digest string `json:"-"`
}

// PlannedMember is one survivor in a plan.
type PlannedMember struct {
	ID          raft.ServerID      `json:"id"`
	Address     raft.ServerAddress `json:"address"`
	LastLogTerm uint64             `json:"last_log_term"`
	LastIndex   uint64             `json:"last_index"`
	Role        string             `json:"role"`
}

// ID is a short name of the plan: the start of its digest.
func (p *RecoveryPlan) ID() string { return p.Digest[:min(len(p.Digest), 12)] }

func (p *RecoveryPlan) seal() {
	b, _ := json.Marshal(p)
	sum := sha256.Sum256(b)
	p.Digest = hex.EncodeToString(sum[:])
}

// stagedPlan is what a survivor stages for its next start.
type stagedPlan struct {
	Plan       string        `json:"plan"`
	Digest     string        `json:"digest"`
	Role       string        `json:"role"`
	Generation uint64        `json:"generation"`
	Leader     raft.ServerID `json:"leader"`
}

// RefusedError is a recovery that bagkeeper refuses: it could split the
// group, or lose what it holds.
type RefusedError struct{ Reason string }

func (e *RefusedError) Error() string { return "recovery refused: " + e.Reason }

func refuse(format string, args ...any) error {
	return &RefusedError{Reason: fmt.Sprintf(format, args...)}
}

// ReadSurvivors reads a survivors file: a JSON list of {"id", "address"}
// objects, as raft's peers.json.
func ReadSurvivors(path string) ([]raft.Server, error) {
	cfg, err := raft.ReadConfigJSON(path)
	if err != nil {
		return nil, fmt.Errorf("survivors file %s: %w", path, err)
	}
	if err := CheckSurvivors(cfg.Servers); err != nil {
		return nil, fmt.Errorf("survivors file %s: %w", path, err)
	}
	return cfg.Servers, nil
}

// CheckSurvivors checks a list of survivors as an operator wrote it.
func CheckSurvivors(survivors []raft.Server) error {
	if len(survivors) == 0 {
		return errors.New("the list of survivors is empty")
	}
	ids, addrs := map[raft.ServerID]bool{}, map[raft.ServerAddress]bool{}
	for _, s := range survivors {
		if s.ID == "" || s.Address == "" {
			return errors.New("every survivor needs an id and an address")
		}
		host, port, err := net.SplitHostPort(string(s.Address))
		if err != nil || host == "" {
			return fmt.Errorf("survivor %s: address %q is not host:port", s.ID, s.Address)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return fmt.Errorf("survivor %s: address %q has no valid port", s.ID, s.Address)
		}
		if ids[s.ID] || addrs[s.Address] {
			return fmt.Errorf("survivor %s or address %s is listed twice", s.ID, s.Address)
		}
		ids[s.ID], addrs[s.Address] = true, true
	}
	return nil
}

// recentContact is how recently a member must have heard from a leader
// for the group to count as having one.
func (n *Node) recentContact() time.Duration {
	return max(4*n.cfg.ElectionTimeout, 2*time.Second)
}

// PlanRecovery checks, on a running member, that a recovery with the given
// survivors cannot split the group, and returns the plan.
func (n *Node) PlanRecovery(ctx context.Context, survivors []raft.Server) (*RecoveryPlan, error) {
	if err := CheckSurvivors(survivors); err != nil {
		return nil, err
	}
	listed := map[raft.ServerID]raft.Server{}
	for _, s := range survivors {
		listed[s.ID] = s
	}
	if _, ok := listed[n.id]; !ok {
		return nil, refuse("this member (%s) is not in the list of survivors; list every member that still runs, this one included", n.id)
	}
	if !n.hasState() {
		return nil, refuse("this member has no raft state: there is nothing to recover from here")
	}
	if id, addr := n.Leader(); addr != "" {
		return nil, refuse("this member knows a leader (%s): the group has a majority; recovery is only for a group that lost its majority for good", id)
	}
	if last := n.raft.LastContact(); !last.IsZero() && time.Since(last) < n.recentContact() {
		return nil, refuse("this member heard from a leader %s ago: wait until the group has had no leader for %s", time.Since(last).Round(time.Millisecond), n.recentContact())
	}
	cfg, err := n.Configuration()
	if err != nil {
		return nil, err
	}
	self := n.info()
	infos := map[raft.ServerID]*peerpb.InfoResponse{n.id: self}
	// Ask every member of the configuration and every survivor listed.
	addrs := map[raft.ServerAddress]raft.ServerID{}
	for _, s := range cfg.Servers {
		if s.ID != n.id {
			addrs[raft.ServerAddress(n.addressOf(s.ID, s.Address))] = s.ID
		}
	}
	for _, s := range survivors {
		if s.ID != n.id {
			addrs[s.Address] = s.ID
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for addr, id := range addrs {
		wg.Go(func() {
			info, err := n.infoOf(ctx, string(addr), time.Second)
			if err != nil || info.GetServerId() != string(id) {
				return
			}
			mu.Lock()
			infos[id] = info
			mu.Unlock()
		})
	}
	wg.Wait()
	voters, answering := 0, 0
	for _, s := range cfg.Servers {
		if s.Suffrage == raft.Voter {
			voters++
			if infos[s.ID] != nil {
				answering++
			}
		}
	}
	for id, info := range infos {
		switch {
		case info.GetLeaderId() != "" || info.GetRaftState() == raft.Leader.String():
			return nil, refuse("member %s answers and knows a leader (%s): the group has a majority", id, info.GetLeaderId())
		case id != n.id && info.GetLastContactNanos() >= 0 && time.Duration(info.GetLastContactNanos()) < n.recentContact():
			return nil, refuse("member %s heard from a leader %s ago: wait until the group has had no leader for %s", id, time.Duration(info.GetLastContactNanos()).Round(time.Millisecond), n.recentContact())
		case info.GetClusterId() != self.GetClusterId():
			return nil, refuse("member %s belongs to another group (cluster %q, not %q)", id, info.GetClusterId(), self.GetClusterId())
		}
		if _, ok := listed[id]; !ok {
			return nil, refuse("member %s still runs but is not listed as a survivor: list every member that runs", id)
		}
	}
	if voters > 0 && answering >= voters/2+1 {
		return nil, refuse("%d of the %d voters answer, a majority: they can elect a leader themselves (are they still starting? look at their logs)", answering, voters)
	}
	plan := &RecoveryPlan{ClusterID: self.GetClusterId()}
	for _, s := range survivors {
		info := infos[s.ID]
		if info == nil {
			return nil, refuse("survivor %s does not answer at %s: every survivor must run while the plan is made and staged", s.ID, s.Address)
		}
		if !info.GetHasState() {
			return nil, refuse("survivor %s has no raft state: it is not a survivor of this group", s.ID)
		}
		plan.Generation = max(plan.Generation, info.GetGeneration()+1)
		plan.Survivors = append(plan.Survivors, PlannedMember{ID: s.ID, Address: s.Address, LastLogTerm: info.GetLastLogTerm(), LastIndex: info.GetLastIndex(), Role: RoleRejoin})
	}
	sort.Slice(plan.Survivors, func(i, j int) bool { return plan.Survivors[i].ID < plan.Survivors[j].ID })
	lead := 0
	for i, s := range plan.Survivors {
		l := plan.Survivors[lead]
		if s.LastLogTerm > l.LastLogTerm || s.LastLogTerm == l.LastLogTerm && s.LastIndex > l.LastIndex {
			lead = i
		}
	}
	plan.Survivors[lead].Role = RoleLead
	plan.Leader = plan.Survivors[lead].ID
	plan.seal()
	return plan, nil
}

// StageRecovery makes the plan again and, if its digest is digest, stages
// this member's part for its next start. It returns the plan and the role.
func (n *Node) StageRecovery(ctx context.Context, survivors []raft.Server, digest string) (*RecoveryPlan, string, error) {
	plan, err := n.PlanRecovery(ctx, survivors)
	if err != nil {
		return nil, "", err
	}
	if plan.Digest != digest {
		return plan, "", refuse("the plan is now %s (digest %s), not the one given (%s): make the plan again with --plan, and stage that one on every survivor", plan.ID(), plan.Digest, digest)
	}
	role := RoleRejoin
	if plan.Leader == n.id {
		role = RoleLead
	}
	staged := stagedPlan{Plan: plan.ID(), Digest: plan.Digest, Role: role, Generation: plan.Generation, Leader: plan.Leader}
	if err := writeFileAtomic(filepath.Join(n.dir.Path, RecoveryPlanFile), staged); err != nil {
		return nil, "", fmt.Errorf("staging the recovery: %w", err)
	}
	n.log.Warn("recovery staged for the next start", "plan", plan.ID(), "role", role, "leader", string(plan.Leader), "generation", plan.Generation)
	return plan, role, nil
}

// readStagedPlan reads a staged recovery plan, if there is one.
func readStagedPlan(dataDir string) (*stagedPlan, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, RecoveryPlanFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var p stagedPlan
	if err := json.Unmarshal(b, &p); err != nil || (p.Role != RoleLead && p.Role != RoleRejoin) {
		return nil, fmt.Errorf("staged recovery %s is damaged: stage it again", filepath.Join(dataDir, RecoveryPlanFile))
	}
	return &p, nil
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

// applyStagedRecovery carries out a recovery plan staged for the member
// that leads it: its configuration is forced to itself alone. (A member
// that rejoins set its state aside when its data dir was opened.)
func (n *Node) applyStagedRecovery(rc *raft.Config, logs raft.LogStore, snaps raft.SnapshotStore) error {
	p, err := readStagedPlan(n.dir.Path)
	if err != nil || p == nil {
		return err
	}
	if p.Role != RoleLead {
		return fmt.Errorf("staged recovery plan %s: this member should have set its state aside (role %s)", p.Plan, p.Role)
	}
	cfg := raft.Configuration{Servers: []raft.Server{{ID: n.id, Address: raft.ServerAddress(n.cfg.Advertise), Suffrage: raft.Voter}}}
	has, err := raft.HasExistingState(logs, n.stores.stable, snaps)
	if err != nil {
		return err
	}
	if !has {
		return fmt.Errorf("staged recovery plan %s: this member has no raft state to recover from", p.Plan)
	}
	_, trans := raft.NewInmemTransport("")
	if err := raft.RecoverCluster(rc, NewFSM(nil), logs, n.stores.stable, snaps, trans, cfg); err != nil {
		return fmt.Errorf("recovering with plan %s: %w", p.Plan, err)
	}
	n.recovery = p
	n.log.Warn("raft configuration forced to this member alone by recovery plan; it leads the recovered group", "plan", p.Plan, "generation", p.Generation)
	path := filepath.Join(n.dir.Path, RecoveryPlanFile)
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
	logger := newHCLogAdapter(slog.Default())
	// A stopped member's store is the one its data dir was created with
	// (the default only for a data dir with none).
	kind, _, err := chooseLogStore(d.RaftPath(), DefaultLogStore)
	if err != nil {
		return err
	}
	stores, err := openStores(d.RaftPath(), kind, 0, logger)
	if err != nil {
		return err
	}
	defer stores.Close()
	snaps, err := raft.NewFileSnapshotStoreWithLogger(d.RaftPath(), snapshotsRetained, logger)
	if err != nil {
		return err
	}
	cfg := Config{}
	cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout, cfg.CommitTimeout = time.Second, time.Second, 500*time.Millisecond, 50*time.Millisecond
	cfg.SnapshotThreshold, cfg.TrailingLogs, cfg.SnapshotInterval = 8192, 10240, 2*time.Minute
	return fn(d, raftConfig(&cfg, d.Identity.ServerID(), logger), stores.logs, stores.stable, snaps)
}
