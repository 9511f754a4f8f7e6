package raftstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"

	"github.com/bagkeeper/bagkeeper/raftstore/peerpb"
	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/transport"
)

// Config configures a Node. Zero durations take the documented defaults.
type Config struct {
	// App is the application the group serves. Required.
	App string
	// Pod is this pod's name. Required; it becomes part of the raft id.
	Pod string
	// DataDir holds the identity, the raft log and snapshots.
	DataDir string
	// Advertise is the host:port other members dial to reach this one. It
	// may be a DNS name; it is resolved on every dial.
	Advertise string

	// RaftLayer carries raft's RPCs; GRPCListener accepts peer API
	// connections; Dial opens a peer API connection to another member. The
	// Node closes the RaftLayer on shutdown but not what lies under it.
	RaftLayer    raft.StreamLayer
	GRPCListener net.Listener
	Dial         func(ctx context.Context, addr string) (net.Conn, error)

	// BootstrapExpect is how many empty members must find each other before
	// they bootstrap a new cluster together. 0 means this member never
	// bootstraps; it only joins.
	BootstrapExpect int
	// NoBootstrap keeps this member from ever bootstrapping, whatever
	// BootstrapExpect says (a StatefulSet pod whose ordinal is at or beyond
	// bootstrap-expect: it was not among the first pods).
	NoBootstrap bool
	// Voters is the number of voters the leader keeps (odd, 1–7; default 3).
	Voters int
	// Discover returns addresses where peers may be. DiscoverChanged, if
	// not nil, signals that Discover may return something new. Discovery
	// only ever feeds bootstrap and join attempts.
	Discover        func(ctx context.Context) ([]string, error)
	DiscoverChanged <-chan struct{}
	// JoinInterval is the pause between bootstrap/join attempts (default 1s).
	JoinInterval time.Duration
	// LeaveTimeout bounds how long a graceful stop tries to leave the
	// configuration (default 5s).
	LeaveTimeout time.Duration

	// Raft timing (defaults: heartbeat 500ms, election 500ms, leader lease
	// 400ms, commit 1s).
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	// NonvoterAppendInterval is the least time between the starts of two
	// appends the leader sends one non-voter (default 100ms, or a fifth
	// of HeartbeatTimeout when that is shorter; negative: as
	// often as raft sends them). Under a stream of writes a non-voter then
	// gets them in batches, one append per interval; a write after a quiet
	// spell goes out at once. See pacedTransport.AppendEntries.
	NonvoterAppendInterval time.Duration
	// NonvoterHeartbeatInterval is the least time between two heartbeats
	// the leader sends one non-voter. A non-voter forgets its leader after
	// 2.5 of these without a word, and the leader counts it unhealthy after
	// as long (or Autopilot.UnhealthyAfter, if longer). Unset (0), it is
	// 2.5 × HeartbeatTimeout, but at most half of Autopilot.UnhealthyAfter
	// (1.25s), and grows with the number of non-voters beyond 50 (25ms
	// each, up to 5s); set, it is fixed. See nonVoterHeartbeatEvery and
	// heartbeatGap.
	NonvoterHeartbeatInterval time.Duration
	// nonvoterHeartbeatFixed records that NonvoterHeartbeatInterval was
	// set, not defaulted (setDefaults).
	nonvoterHeartbeatFixed bool
	// Snapshotting (defaults: threshold 2048 entries, 2048 trailing logs,
	// checked every 2 seconds). The log is only cut after a snapshot; raft
	// takes one at its check once the threshold is reached, and the member
	// takes one whenever the log written since the last outgrows half the
	// state (see snapshotPace), so the log holds the trailing logs and at
	// most about half the state besides. Fewer trailing logs mean a member
	// with an empty disk replays less after installing the snapshot.
	SnapshotThreshold uint64
	TrailingLogs      uint64
	SnapshotInterval  time.Duration
	// LogStore is the store a new data dir keeps the raft log in (default
	// DefaultLogStore). A data dir keeps the store it was created with.
	LogStore LogStore

	Autopilot AutopilotConfig

	// StateCheckInterval is how often the leader has every member hash its
	// state at the same index, to find a member whose state diverged
	// (default 10 minutes; negative: never).
	StateCheckInterval time.Duration

	Logger  *slog.Logger
	Version string
	// Now is the clock (default time.Now).
	Now func() time.Time

	// wrapLogStore, if set, wraps the raft log store (tests inject faults).
	wrapLogStore func(raft.LogStore) raft.LogStore
	// freeSpace, if set, replaces statfs for the bytes free in the raft
	// directory's file system (tests fake a full disk).
	freeSpace func(dir string) (uint64, error)
	// afterAppend, if set, sees every append this member sends and may
	// change its answer, or lose it by returning an error (tests inject
	// faults).
	afterAppend func(id raft.ServerID, req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error
	// walSegmentSize, if set, is raft-wal's or seglog's segment size
	// (tests make small ones, to have several segments after a few
	// entries).
	walSegmentSize int
	// snapshotLogFloor, if set, replaces snapshotLogFloor (tests write
	// less).
	snapshotLogFloor int64
}

// AutopilotConfig tunes how the leader maintains the membership.
type AutopilotConfig struct {
	// Interval between health checks and membership decisions (default 1s).
	Interval time.Duration
	// Stabilization is how long a non-voter must have been healthy and
	// caught up before it is promoted (default 5s).
	Stabilization time.Duration
	// MaxLag is how many entries a member may be behind the leader's commit
	// index and still count as caught up (default 256).
	MaxLag uint64
	// UnhealthyAfter is how long a member may go without answering the
	// leader before it counts as unhealthy (default 3 × Interval, at least 2s).
	UnhealthyAfter time.Duration
	// DeadVoterAfter is how long a voter must be unhealthy before a healthy
	// non-voter replaces it (default 5m).
	DeadVoterAfter time.Duration
	// DeadNonvoterAfter is how long a non-voter must be unhealthy before it
	// is removed (default 15m).
	DeadNonvoterAfter time.Duration
}

func (c *Config) setDefaults() error {
	if !state.ValidAppName(c.App) {
		return fmt.Errorf("invalid application name %q: use lower-case letters, digits and hyphens, starting with a letter", c.App)
	}
	if c.Pod == "" {
		return errors.New("pod name is required")
	}
	if c.DataDir == "" {
		return errors.New("data dir is required")
	}
	if _, _, err := net.SplitHostPort(c.Advertise); err != nil {
		return fmt.Errorf("advertise address %q is not host:port: %w", c.Advertise, err)
	}
	if c.RaftLayer == nil || c.GRPCListener == nil || c.Dial == nil {
		return errors.New("raft layer, gRPC listener and dialer are required")
	}
	if c.Voters == 0 {
		c.Voters = 3
	}
	if c.Voters < 1 || c.Voters > 7 || c.Voters%2 == 0 {
		return fmt.Errorf("voters must be odd and between 1 and 7, got %d", c.Voters)
	}
	if c.BootstrapExpect < 0 || c.BootstrapExpect > 7 {
		return fmt.Errorf("bootstrap-expect must be between 0 and 7, got %d", c.BootstrapExpect)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.JoinInterval, time.Second)
	def(&c.LeaveTimeout, 5*time.Second)
	def(&c.HeartbeatTimeout, 500*time.Millisecond)
	def(&c.ElectionTimeout, 500*time.Millisecond)
	def(&c.LeaderLeaseTimeout, 400*time.Millisecond)
	def(&c.CommitTimeout, time.Second)
	def(&c.NonvoterAppendInterval, DefaultNonvoterAppendIntervalFor(c.HeartbeatTimeout))
	if c.NonvoterAppendInterval >= c.HeartbeatTimeout {
		return fmt.Errorf("the non-voter append interval (%s) must be shorter than the heartbeat timeout (%s)", c.NonvoterAppendInterval, c.HeartbeatTimeout)
	}
	def(&c.SnapshotInterval, 2*time.Second)
	def(&c.StateCheckInterval, 10*time.Minute)
	if c.LogStore == "" {
		c.LogStore = DefaultLogStore
	}
	if _, err := ParseLogStore(string(c.LogStore)); err != nil {
		return err
	}
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = 2048
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = 2048
	}
	a := &c.Autopilot
	def(&a.Interval, time.Second)
	def(&a.Stabilization, 5*time.Second)
	def(&a.UnhealthyAfter, max(3*a.Interval, 2*time.Second))
	def(&a.DeadVoterAfter, 5*time.Minute)
	def(&a.DeadNonvoterAfter, 15*time.Minute)
	if c.NonvoterHeartbeatInterval < 0 {
		return fmt.Errorf("the non-voter heartbeat interval (%s) must not be negative", c.NonvoterHeartbeatInterval)
	}
	if c.NonvoterHeartbeatInterval > 0 {
		c.nonvoterHeartbeatFixed = true
	}
	def(&c.NonvoterHeartbeatInterval, nonVoterHeartbeatEvery(c.HeartbeatTimeout, a.UnhealthyAfter))
	if a.MaxLag == 0 {
		a.MaxLag = 256
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

// Node is one member of the application's raft group: the raft instance,
// its stores, the peer API server and the loops that keep the membership
// healthy.
type Node struct {
	cfg   Config
	dir   *DataDir
	id    raft.ServerID
	log   *slog.Logger
	fsm   *FSM
	raft  *raft.Raft
	trans *raft.NetworkTransport
	// paced is trans as raft uses it: heartbeats to non-voters paced (see
	// heartbeat.go), by the suffrages of the committed configuration.
	paced     *pacedTransport
	installs  installMark   // the snapshot raft is installing (see install.go)
	snapIndex snapshotIndex // raft's last snapshot index, read from Stats when it changed
	snapPace  *snapshotPace // snapshots for the log's size
	// reloadMu serializes changes to raft's reloadable configuration
	// (followRole, standForElection).
	reloadMu sync.Mutex
	// leaderCommitDue wakes trackLeaderCommit: leaderCommitStale after the
	// leader last said its commit index.
	leaderCommitDue *time.Timer
	// leaderCommitWakes counts trackLeaderCommit's wake-ups (tests).
	leaderCommitWakes atomic.Int64
	// silence wakes watchSilence: a heartbeat timeout after the last word
	// from a leader (leaderWord).
	silence *time.Timer
	// silenceBound is the silence this member allows its leader before it
	// counts it gone (silence.go); silenceGiven the one raft was last
	// given as a voter's heartbeat timeout (followRole).
	silenceBound silenceBound
	silenceGiven atomic.Int64
	// silenceWatchOff stops watchSilence from acting (tests).
	silenceWatchOff atomic.Bool
	// standNotBefore (Unix ns) is when watchSilence may stand next: an
	// election timeout after this member granted another's pre-vote.
	standNotBefore atomic.Int64
	suffrage       suffrages
	// roleChange is signalled when this member's suffrage or raft state
	// may have changed (followRole).
	roleChange chan struct{}
	// stores are raft's log and stable stores.
	stores *raftStores
	logs   raft.LogStore
	book   *addressBook
	peers  *peerClients
	grpc   *grpc.Server

	nudgeCh chan struct{}
	// The leader's pending nudge after its own writes (nudgeUnlessFollowed).
	settleMu    sync.Mutex
	settleLast  uint64
	settleTimer *time.Timer
	settleArmed bool
	// membership serializes the leader's membership decisions (autopilot,
	// joins, leaves), each of which reads the configuration and changes it.
	membership sync.Mutex
	stopping   atomic.Bool // set when Shutdown starts: no more membership decisions
	// left holds, on a leader, the members that left the group through it
	// (Leave) and when: a join from one of them soon after is a request
	// its shutdown sent before it knew it was leaving, not a new start,
	// and is refused (see leftRecently). Guarded by membership.
	left       map[raft.ServerID]time.Time
	proposal   atomic.Pointer[[]*peerpb.Server]
	registered atomic.Bool
	// probeRound counts the settled cluster loop's rounds (probedThisRound).
	probeRound atomic.Uint64
	health     *healthTracker

	throttleMu sync.Mutex
	throttle   map[string]time.Time
	// waitingSince is when this member started waiting for peers to
	// bootstrap or join with (guarded by throttleMu); lastProbe what it
	// found last time it looked.
	waitingSince time.Time
	lastProbe    atomic.Pointer[probeReport]

	fatalOnce sync.Once
	fatalCh   chan error

	// process is new at each start of this member's process (see
	// peerpb.JoinRequest.process); processes is the latest process each
	// member joined from, as this member heard it (see newProcess).
	process     string
	processesMu sync.Mutex
	processes   map[raft.ServerID]string

	// leaders signals leadership changes (see onLeader); session numbers
	// this member's commands; damage, once set, says why this member must
	// not serve (its log or state is damaged).
	leaders  *leaderWatch
	observer *raft.Observer
	session  *clientSession
	damage   atomic.Pointer[Damage]
	// writeFailure is set while appending to the raft log fails; writeMu
	// orders the appends' reports of it (logWrite).
	writeFailure atomic.Pointer[WriteFailure]
	writeMu      sync.Mutex
	// leaderCommit is the leader's commit index as it last said it (a
	// follower's own commit index never passes what it could store).
	leaderCommit atomic.Uint64
	// leaderCommitHeard is when the leader last sent leaderCommit itself.
	leaderCommitHeard atomic.Pointer[leaderCommitNote]
	// hashes are this member's state hashes at recent hash points;
	// lastHashPoint is when this member, as leader, last proposed one (read
	// and written by the leader loop only).
	hashes        *stateHashes
	lastHashPoint time.Time
	// recovery is the recovery plan this member applied at start as its
	// leader (nil otherwise); outdated, once set, says this member's state
	// is from before a recovery of its group.
	recovery *stagedPlan
	outdated atomic.Pointer[string]
	// brought is the group this member's state was of when it started.
	brought groupMark
	// barrierTerm is the term in which this member, as leader, last saw a
	// barrier through: its commit index is complete from then on.
	barrierTerm atomic.Uint64

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	shutdownOnce sync.Once
	shutdownErr  error
}

// Open opens the data directory, starts raft and the peer API, and starts
// looking for a cluster to bootstrap or join.
func Open(cfg Config) (*Node, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	dir, err := OpenDataDir(cfg.DataDir, cfg.App, cfg.Pod)
	if err != nil {
		return nil, err
	}
	if dir.Identity.JoinOnly {
		// Made anew by a recovery: it joins the recovered group, and never
		// takes part in bootstrapping another.
		cfg.NoBootstrap = true
	}
	n := &Node{cfg: cfg, dir: dir, id: dir.Identity.ServerID(), book: newAddressBook(), fatalCh: make(chan error, 1), throttle: map[string]time.Time{}, nudgeCh: make(chan struct{}, 1),
		leaders: newLeaderWatch(), session: newClientSession(), hashes: newStateHashes(),
		process: newIncarnation(), processes: map[raft.ServerID]string{}}
	n.log = cfg.Logger.With("member", string(n.id))
	n.book.left = func(id raft.ServerID, from raft.ServerAddress) {
		n.abandonRaft(id, from, time.Now(), "the member left that address")
	}
	n.fsm = NewFSM(n.fail)
	n.fsm.onCorrupt = n.markDamaged
	n.fsm.m.OnHashPoint = n.hashes.point
	n.roleChange = make(chan struct{}, 1)
	n.fsm.covered = n.snapshotCovered
	n.fsm.onConfiguration = func(c raft.Configuration) {
		n.book.mergeConfiguration(c)
		n.suffrage.set(c)
		n.roleChanged()
	}
	if l, ok := cfg.RaftLayer.(interface{ SetLocalID(string) }); ok {
		l.SetLocalID(string(n.id))
	}
	n.health = newHealthTracker()
	ok := false
	defer func() {
		if !ok {
			n.closeStores()
		}
	}()

	// A command entry whose checksum does not match is not a reason to
	// refuse to start: the member starts, says it is damaged and serves
	// nothing (see markDamaged). An entry this build cannot read is.
	verify := func(l *raft.Log) error {
		if l.Type != raft.LogCommand {
			return nil
		}
		err := state.VerifyEntry(l.Data)
		if errors.Is(err, state.ErrCorrupt) {
			n.markDamaged(l.Index, err)
			return nil
		}
		return err
	}
	kind, why, err := chooseLogStore(dir.RaftPath(), cfg.LogStore)
	if err != nil {
		return nil, err
	}
	n.log.Info("raft log store chosen", "log_store", string(kind), "why", why)
	if _, err := (storeCheck{dir: dir.RaftPath(), kind: kind, log: n.log, verifyEntry: verify}).run(); err != nil {
		return nil, err
	}
	hl := newHCLogAdapter(n.log)
	n.stores, err = openStores(dir.RaftPath(), kind, cfg.walSegmentSize, hl)
	if err != nil {
		return nil, err
	}
	fileSnaps, err := raft.NewFileSnapshotStoreWithLogger(dir.RaftPath(), snapshotsRetained, hl)
	if err != nil {
		return nil, fmt.Errorf("snapshot store in %s: %w", dir.RaftPath(), err)
	}
	n.snapIndex.stats = func() map[string]string { return n.raft.Stats() }
	n.snapPace = newSnapshotPace(cmp.Or(cfg.snapshotLogFloor, snapshotLogFloor))
	if metas, err := fileSnaps.List(); err == nil && len(metas) > 0 {
		n.snapPace.wrote(metas[0].Size)
	}
	snaps := watchedSnapshots{SnapshotStore: fileSnaps, idx: &n.snapIndex, pace: n.snapPace}
	logStore := n.stores.logs
	if cfg.wrapLogStore != nil {
		logStore = cfg.wrapLogStore(logStore)
	}
	logs, err := raft.NewLogCache(512, &checkedLogStore{LogStore: logStore, monotonic: kind == LogStoreWAL || kind == LogStoreSegments, onDamage: n.markDamaged, onWrite: n.logWrite, onStored: n.snapPace.stored,
		installing: n.installs.get, onStale: n.staleLog})
	if err != nil {
		return nil, err
	}
	n.logs = logs
	if err := n.applyStagedRestore(logs, snaps); err != nil {
		return nil, err
	}
	hasState, err := raft.HasExistingState(logs, n.stores.stable, snaps)
	if err != nil {
		return nil, damaged(n.stores.path, err)
	}
	n.registered.Store(false)

	n.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		ServerAddressProvider: n.book,
		Logger:                hl,
		Stream:                cfg.RaftLayer,
		MaxPool:               3,
		Timeout:               10 * time.Second,
		// No pipelined replication: with it, a follower refusing one
		// append (a full disk, a log that does not match) can stop the
		// leader's replication to it for good, while heartbeats go on (a
		// deadlock in hashicorp/raft between the goroutine that sends and
		// the one that reads the answers; see
		// TestAFollowerThatRefusedOneAppendStillGetsTheNextOnes). Its
		// default allows two requests in flight; one loses little, as
		// the leader batches whatever accumulated meanwhile.
		MaxRPCsInFlight: 1,
	})
	rc := raftConfig(&cfg, n.id, hl)
	if err := raft.ValidateConfig(rc); err != nil {
		return nil, fmt.Errorf("raft timing: %w", err)
	}
	if err := n.applyStagedRecovery(rc, logs, snaps); err != nil {
		return nil, err
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.silence = time.NewTimer(cfg.HeartbeatTimeout)
	n.silenceBound.base = cfg.HeartbeatTimeout
	n.silenceGiven.Store(int64(cfg.HeartbeatTimeout))
	n.leaderCommitDue = time.NewTimer(cfg.Autopilot.Interval)
	n.paced = newPacedTransport(n.trans, cfg.NonvoterHeartbeatInterval, cfg.nonvoterHeartbeatFixed, max(0, cfg.NonvoterAppendInterval), idleAppendHold*cfg.CommitTimeout, n.suffrage.nonVoter, n.suffrage.nonVoters, n.leaderWord,
		func(id raft.ServerID) { n.health.answered(id, n.cfg.Now(), n.unhealthyAfter(n.suffrage.nonVoter(id))) }, n.ctx.Done())
	n.paced.afterAppend = cfg.afterAppend
	n.paced.installs = &n.installs
	n.raft, err = raft.NewRaft(rc, n.fsm, logs, n.stores.stable, snaps, n.paced)
	if err != nil {
		return nil, fmt.Errorf("starting raft: %w", err)
	}
	if c, err := n.Configuration(); err == nil {
		n.book.mergeConfiguration(c)
		if _, known := n.suffrage.of(n.id); !known {
			n.suffrage.set(c)
		}
	}
	n.brought = readGroupMark(dir.Path)
	n.log.Info("raft started", "address", cfg.Advertise, "existing_state", hasState, "fresh_data_dir", dir.Fresh)

	n.peers = newPeerClients(cfg.Dial)
	n.grpc = grpc.NewServer(append(peerWindowServe, grpc.MaxRecvMsgSize(maxPeerMessage), grpc.MaxSendMsgSize(maxPeerMessage), grpc.NumStreamWorkers(peerStreamWorkers))...)
	peerpb.RegisterPeerServer(n.grpc, &peerServer{n: n})
	obs := make(chan raft.Observation, 64)
	n.observer = raft.NewObserver(obs, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.LeaderObservation, raft.RaftState:
			return true
		}
		return false
	})
	n.raft.RegisterObserver(n.observer)
	n.wg.Add(12)
	go func() { defer n.wg.Done(); n.paced.relayVotes(n.ctx, n.voteJudge()) }()
	go func() { defer n.wg.Done(); n.watchSilence(n.ctx) }()
	go func() { defer n.wg.Done(); n.markGroup(n.ctx) }()
	go func() { defer n.wg.Done(); n.followRole(n.ctx, n.roleChange) }()
	go func() { defer n.wg.Done(); n.trackLeaderCommit(n.ctx) }()
	go func() { defer n.wg.Done(); n.hashes.run(n.ctx, n.log.Debug) }()
	go func() { defer n.wg.Done(); n.watchLeader(n.ctx, obs) }()
	go func() { defer n.wg.Done(); n.runNudger(n.ctx) }()
	go func() {
		defer n.wg.Done()
		n.snapPace.run(n.ctx, func() error { return n.raft.Snapshot().Error() }, cfg.SnapshotInterval, n.log.Warn)
	}()
	go func() {
		defer n.wg.Done()
		if err := n.grpc.Serve(cfg.GRPCListener); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			n.log.Debug("peer API stopped", "err", err)
		}
	}()
	go func() { defer n.wg.Done(); n.runCluster(n.ctx) }()
	go func() { defer n.wg.Done(); n.runLeader(n.ctx) }()
	ok = true
	return n, nil
}

// DefaultNonvoterAppendInterval is Config.NonvoterAppendInterval's
// default, chosen by measurement in groups of 30 and 60 members (see
// BENCHMARKS.md): writes less than an interval apart are a stream and are
// batched. With 20 ms a group whose writes came 20–50 ms apart, as they
// do once every member's cost of an append is paid per write, was never
// batched, and stayed that slow.
const DefaultNonvoterAppendInterval = 100 * time.Millisecond

// DefaultNonvoterAppendIntervalFor is the default interval for a group
// whose heartbeat timeout is hb: DefaultNonvoterAppendInterval, or a fifth
// of hb when that is shorter (the interval must be shorter than hb).
func DefaultNonvoterAppendIntervalFor(hb time.Duration) time.Duration {
	return min(DefaultNonvoterAppendInterval, hb/5)
}

// maxAppendEntries is the most entries raft sends in one append.
const maxAppendEntries = 256

// raftConfig is the raft configuration every member runs with.
func raftConfig(cfg *Config, id raft.ServerID, logger hclog.Logger) *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = id
	rc.Logger = logger
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.CommitTimeout = cfg.CommitTimeout
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.TrailingLogs = cfg.TrailingLogs
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.MaxAppendEntries = maxAppendEntries
	rc.BatchApplyCh = true
	// A member removed while it was away must not stop: it notices and
	// asks to join again (see the cluster loop).
	rc.ShutdownOnRemove = false
	// Metrics per peer as a label, not in the metric's name: every new
	// incarnation of a pod would add metric names.
	rc.NoLegacyTelemetry = true
	return rc
}

// ID is this member's raft ServerID.
func (n *Node) ID() raft.ServerID { return n.id }

// Identity is this member's data-dir identity.
func (n *Node) Identity() Identity { return n.dir.Identity }

// FreshDataDir reports whether the data directory was created by this start.
func (n *Node) FreshDataDir() bool { return n.dir.Fresh }

// Advertise is the address other members reach this one at.
func (n *Node) Advertise() string { return n.cfg.Advertise }

// State returns the newest applied state. It never blocks.
func (n *Node) State() *state.State { return n.fsm.State() }

// Changed returns a channel closed when a newer state is published.
func (n *Node) Changed() <-chan struct{} { return n.fsm.Changed() }

// WaitIndex waits until the local state has applied index.
func (n *Node) WaitIndex(ctx context.Context, index uint64) (*state.State, error) {
	return n.fsm.WaitIndex(ctx, index)
}

// Fatal delivers an error after which this node cannot go on (for example a
// log entry written by a newer bagkeeper). The process should exit.
func (n *Node) Fatal() <-chan error { return n.fatalCh }

func (n *Node) fail(err error) {
	n.fatalOnce.Do(func() {
		n.log.Error("fatal", "err", err)
		n.fatalCh <- err
	})
}

// maxCatchUpScan bounds the log entries CaughtUp reads.
const maxCatchUpScan = 1024

// CaughtUp reports whether the local state machine has applied every log
// entry up to index that changes it. raft's AppliedIndex is not that: it
// counts entries handed to the state machine, which may still be queued
// (thousands of them while a restarted member replays its log).
//
// Entries the state machine never sees (a new leader's no-op, barriers)
// do not hold it back: when the state machine is behind index, the entries
// in between are read from the log, and only commands and configurations
// count.
func (n *Node) CaughtUp(index uint64) bool {
	applied := n.StateIndex()
	if applied >= index {
		return true
	}
	if index-applied > maxCatchUpScan {
		return false
	}
	var l raft.Log
	for i := applied + 1; i <= index; i++ {
		if err := n.logs.GetLog(i, &l); err != nil {
			return false // compacted into a snapshot not yet restored, or unreadable
		}
		if l.Type == raft.LogCommand || l.Type == raft.LogConfiguration {
			return false
		}
	}
	return true
}

// StateIndex returns the index up to which the local state machine has
// applied the log: the newest command or configuration it was given, or the
// index of the newest snapshot if that is later. A snapshot's state is in
// the state machine before raft records it as the last snapshot (it was
// taken from it, or restored into it), and raft never hands the entries it
// covers to the state machine again.
func (n *Node) StateIndex() uint64 {
	return max(n.fsm.appliedIndex(), n.lastSnapshotIndex())
}

// snapshotCovered reports whether the snapshot raft is installing holds
// nothing a state machine that applied the log up to applied lacks: its
// log holds the snapshot's last entry, of the snapshot's term, so every
// entry up to there is the snapshot's (raft's log matching), and it
// applied that entry or later ones, all committed, so the group's.
func (n *Node) snapshotCovered(applied uint64) bool {
	index, term, ok := n.installs.get()
	if !ok || applied < index {
		return false
	}
	return holdsEntry(n.logs, index, term)
}

// lastSnapshotIndex returns the index of the newest snapshot raft has
// taken or installed, 0 if none.
func (n *Node) lastSnapshotIndex() uint64 { return n.snapIndex.get() }

// IsLeader reports whether this member is the raft leader now.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// Leader returns the current leader's id and address, if one is known.
func (n *Node) Leader() (raft.ServerID, raft.ServerAddress) {
	addr, id := n.raft.LeaderWithID()
	// Raft learns the leader's address from message headers, which carry
	// the member-tagged form the address book gives out.
	plain, _ := transport.SplitMemberAddress(addr)
	return id, raft.ServerAddress(plain)
}

// Configuration returns the latest raft configuration.
func (n *Node) Configuration() (raft.Configuration, error) {
	c, _, err := n.latestConfiguration()
	return c, err
}

// latestConfiguration returns the latest raft configuration and its index.
// Raft answers it before GetConfiguration returns (it keeps the latest
// configuration at hand): waiting on it through await would cost a
// goroutine and a wake-up on every health poll and autopilot round.
func (n *Node) latestConfiguration() (raft.Configuration, uint64, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return raft.Configuration{}, 0, err
	}
	return f.Configuration(), f.Index(), nil
}

// hasState reports whether this member holds any raft state.
func (n *Node) hasState() bool {
	return n.raft.LastIndex() > 0
}

// Shutdown stops the node. If it leads, it first hands leadership to
// another voter so writes resume without waiting for an election. With
// leave, it then asks the leader to remove it from the configuration
// (used by pods whose disk does not outlive them).
func (n *Node) Shutdown(ctx context.Context, leave bool) error {
	n.shutdownOnce.Do(func() {
		start := n.cfg.Now()
		n.stopping.Store(true)
		if n.IsLeader() && leave && n.otherVoters() == 0 {
			// The only voter is leaving: make a caught-up non-voter a voter
			// first, so there is someone to hand over to.
			n.membership.Lock()
			id, err := n.promoteReplacement(ctx, n.id)
			n.membership.Unlock()
			if err != nil {
				n.log.Warn("no non-voter could be promoted before the last voter leaves", "err", err)
			} else {
				n.log.Info("promoted a replacement before leaving", "promoted", string(id))
			}
		}
		if n.IsLeader() && n.otherVoters() > 0 {
			if err := n.await(n.raft.LeadershipTransfer()); err != nil {
				n.log.Warn("leadership transfer before shutdown failed", "err", err)
			} else {
				n.log.Info("leadership transferred before shutdown", "took", n.cfg.Now().Sub(start))
			}
		}
		if leave {
			if err := n.leave(ctx); err != nil {
				n.log.Warn("leaving the cluster failed; the leader removes this member once it is found dead", "err", err)
			}
		}
		n.raft.DeregisterObserver(n.observer)
		n.cancel()
		if n.fsm.halted.Load() {
			// The state machine is stopped on an entry it cannot apply:
			// release it, or raft's shutdown would wait for it forever.
			n.fsm.Halt()
		}
		n.shutdownErr = n.raft.Shutdown().Error()
		stopped := make(chan struct{})
		go func() { n.grpc.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(time.Second):
			n.grpc.Stop()
		}
		n.wg.Wait()
		n.fsm.Halt()
		n.peers.close()
		n.closeStores()
		n.log.Info("stopped", "took", n.cfg.Now().Sub(start))
	})
	return n.shutdownErr
}

func (n *Node) closeStores() {
	if n.trans != nil {
		n.trans.Close()
	}
	if n.stores != nil {
		n.stores.Close()
	}
	n.dir.Close()
}

func (n *Node) otherVoters() int {
	cfg, err := n.Configuration()
	if err != nil {
		return 0
	}
	c := 0
	for _, s := range cfg.Servers {
		if s.ID != n.id && s.Suffrage == raft.Voter {
			c++
		}
	}
	return c
}

// ErrDamaged is wrapped by the error of a call on a member whose log or
// state is damaged.
var ErrDamaged = errors.New("this member's raft store is damaged")

// Damage says why a member must not serve: part of its raft log or state
// does not match its checksum.
type Damage struct {
	// Index is the raft index of the damaged entry.
	Index uint64
	Cause string
	Since time.Time
}

func (d Damage) String() string {
	return fmt.Sprintf("raft log entry %d is damaged (%s) since %s: this member serves nothing; move its data dir away and restart it to rejoin as a new member", d.Index, d.Cause, d.Since.UTC().Format(time.RFC3339))
}

// Damaged reports whether this member found its log or state damaged.
func (n *Node) Damaged() (Damage, bool) {
	if d := n.damage.Load(); d != nil {
		return *d, true
	}
	return Damage{}, false
}

// markDamaged records that the entry at index is damaged: the member stops
// serving (it is never ready again), and a leader hands leadership over.
func (n *Node) markDamaged(index uint64, err error) {
	d := &Damage{Index: index, Cause: err.Error(), Since: n.cfg.Now()}
	if !n.damage.CompareAndSwap(nil, d) {
		return
	}
	n.log.Error("damaged raft log entry: this member stops serving", "index", index, "err", err)
	if n.raft != nil && n.IsLeader() {
		go func() {
			if err := n.await(n.raft.LeadershipTransfer()); err != nil {
				n.log.Warn("handing leadership over from a damaged member", "err", err)
			}
		}()
	}
}

// staleLog stops a member whose raft log ran past a snapshot it was sent
// and disagrees with it (see checkedLogStore.IsMonotonic): raft cannot
// forget those entries while it runs; restarted, the member starts from
// the snapshot.
func (n *Node) staleLog(snapshot, last uint64) {
	n.fail(fmt.Errorf("this member's raft log ran to entry %d past the snapshot of entry %d it was sent, without that entry of the snapshot's term "+
		"(its entries after the snapshot may not be the group's, and raft cannot forget them while it runs); the log is removed and the member must be restarted (Kubernetes restarts the container) to start from the snapshot", last, snapshot))
}

// WriteFailure says why a member cannot append to its raft log.
type WriteFailure struct {
	Err   string
	Since time.Time
	// need is, when an append failed for want of space, the most bytes
	// such an append held (see logWrite).
	need uint64
}

func (w WriteFailure) String() string {
	return fmt.Sprintf("cannot write its raft log since %s: %s; it keeps trying, and is ready again once it can write and has caught up", w.Since.UTC().Format(time.RFC3339), w.Err)
}

// ErrCannotWrite is wrapped by the error of a call on a member that cannot
// append to its raft log.
var ErrCannotWrite = errors.New("this member cannot write its raft log")

// WriteFailed reports whether appending to the raft log fails now.
func (n *Node) WriteFailed() (WriteFailure, bool) {
	if w := n.writeFailure.Load(); w != nil {
		return *w, true
	}
	return WriteFailure{}, false
}

// logWrite records how an append of size bytes to the raft log went.
//
// An append that succeeds ends a failure, except one smaller than an
// append that failed for want of space while the file system still has
// less room than that one needed: a full disk takes a small append into
// what is left of a file's last block (a new leader's first entry, a
// config change), and the member would call itself writable, and flap,
// while every append of the size that failed still fails.
func (n *Node) logWrite(err error, size uint64) {
	if err == nil {
		if n.paced != nil {
			n.paced.wrote()
		}
		if n.writeFailure.Load() == nil {
			return
		}
	}
	n.writeMu.Lock()
	defer n.writeMu.Unlock()
	old := n.writeFailure.Load()
	switch {
	case err == nil:
		if old == nil || size < old.need && !n.roomFor(old.need) {
			return
		}
		n.writeFailure.Store(nil)
		n.log.Info("the raft log can be written again", "failing_since", old.Since.UTC().Format(time.RFC3339))
	case old != nil:
		// Failing still: remember the largest append that wanted room.
		if noSpace(err) && size > old.need {
			more := *old
			more.need = size
			n.writeFailure.Store(&more)
		}
	default:
		w := &WriteFailure{Err: err.Error(), Since: n.cfg.Now()}
		if noSpace(err) {
			w.need = size
		}
		n.writeFailure.Store(w)
		// A leader that cannot append steps down by itself (raft does it);
		// a follower keeps refusing appends, and the leader keeps retrying.
		n.log.Error("appending to the raft log failed: this member is not ready until it can write again", "err", err)
	}
}

// noSpace reports whether err is a file system out of space (or of quota).
func noSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || strings.Contains(err.Error(), syscall.ENOSPC.Error())
}

// roomFor reports whether the raft directory's file system has need bytes
// free; when it cannot tell, it says yes.
func (n *Node) roomFor(need uint64) bool {
	free := n.cfg.freeSpace
	if free == nil {
		free = statfsFree
	}
	avail, err := free(n.dir.RaftPath())
	return err != nil || avail >= need
}

// statfsFree is the bytes an unprivileged writer may still use in dir's
// file system.
func statfsFree(dir string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// trackLeaderCommit asks the leader for its commit index when the leader
// has not said it lately, so that a follower knows how far behind it is
// even when it cannot store what the leader sends (see
// Status.LeaderCommitIndex). The leader says it in every health poll (see
// noteLeaderCommit), which puts n.leaderCommitDue leaderCommitStale ahead,
// so on a healthy group this neither asks nor wakes: each request costs both
// members a wake-up, and idle members should sleep.
func (n *Node) trackLeaderCommit(ctx context.Context) {
	every := n.cfg.Autopilot.Interval
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.leaderCommitDue.C:
		}
		n.leaderCommitWakes.Add(1)
		id, addr := n.Leader()
		if id == n.id {
			// The leader knows its own commit index; it looks again a
			// stale period later, in case it has stopped leading by then
			// and no new leader has polled it.
			n.leaderCommitDue.Reset(leaderCommitStale(every))
			continue
		}
		n.leaderCommitDue.Reset(every)
		if addr == "" {
			continue
		}
		if heard := n.leaderCommitHeard.Load(); heard != nil && heard.leader == id && n.cfg.Now().Sub(heard.at) < leaderCommitStale(every) {
			continue
		}
		info, err := n.infoOf(ctx, n.addressOf(id, addr), every)
		if err != nil || info.GetServerId() != string(id) {
			continue
		}
		n.raiseLeaderCommit(info.GetCommitIndex())
	}
}

// leaderCommitNote is when the leader last said its commit index.
type leaderCommitNote struct {
	leader raft.ServerID
	at     time.Time
}

// noteLeaderCommit takes the commit index the leader sent with its health
// poll, if it comes from the member this one knows as the leader.
func (n *Node) noteLeaderCommit(from raft.ServerID, index uint64) {
	if from == "" || index == 0 {
		return
	}
	if id, _ := n.Leader(); id != from {
		return
	}
	n.raiseLeaderCommit(index)
	n.leaderCommitHeard.Store(&leaderCommitNote{leader: from, at: n.cfg.Now()})
	n.leaderCommitDue.Reset(leaderCommitStale(n.cfg.Autopilot.Interval))
}

// leaderCommitStale is how long after the leader last said its commit
// index a follower asks for it, for an autopilot interval of every: one
// interval after a settled member's next poll (see settledPollFactor).
func leaderCommitStale(every time.Duration) time.Duration {
	return (settledPollFactor + 1) * every
}

func (n *Node) raiseLeaderCommit(index uint64) {
	for {
		cur := n.leaderCommit.Load()
		if index <= cur || n.leaderCommit.CompareAndSwap(cur, index) {
			return
		}
	}
}

// groupMark records, in the data dir, which group and generation the
// member's state is of: what it brings when it starts again.
type groupMark struct {
	ClusterID  string `json:"cluster_id"`
	Generation uint64 `json:"generation"`
}

const groupMarkFile = "group.json"

func readGroupMark(dir string) groupMark {
	var g groupMark
	if b, err := os.ReadFile(filepath.Join(dir, groupMarkFile)); err == nil {
		_ = json.Unmarshal(b, &g)
	}
	return g
}

// markGroup keeps the group mark current as the state changes.
func (n *Node) markGroup(ctx context.Context) {
	cur := n.brought
	for {
		ch := n.fsm.Changed()
		st := n.fsm.State()
		g := groupMark{ClusterID: st.ClusterID()}
		g.Generation, _, _ = st.Generation()
		if g.ClusterID != "" && g != cur {
			if err := writeFileAtomic(filepath.Join(n.dir.Path, groupMarkFile), g); err != nil {
				n.log.Warn("recording which group this member's state is of", "err", err)
			} else {
				cur = g
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
	}
}
