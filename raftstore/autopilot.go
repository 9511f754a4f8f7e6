package raftstore

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/bagkeeper/bagkeeper/raftstore/peerpb"
	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/hashicorp/raft"
)

// The leader keeps the membership healthy, autopilot-style: it checks every
// member's health through the peer API, promotes caught-up non-voters up to
// the voter target, replaces voters that stayed dead, and removes non-voters
// that stayed dead. At most one configuration change is made per round, and
// never one that would leave fewer healthy voters than a quorum needs.
//
// The decisions are made by plan, a pure function of the configuration, the
// health records and the clock; runLeader does the I/O.

// MemberHealth is what the leader knows of a member's health.
type MemberHealth struct {
	ID      raft.ServerID
	Address raft.ServerAddress
	Voter   bool
	// Healthy is true if the member answered within UnhealthyAfter (for
	// a non-voter, within nonVoterUnhealthyAfter).
	Healthy bool
	// Since is when the member became healthy (if Healthy) or when it was
	// last heard from — or when this leader started watching, if never —
	// (if not).
	Since time.Time
	// LastContact is when the member last answered a health poll or the
	// leader's raft heartbeats and appends (zero if never, under this
	// leader).
	LastContact time.Time
	// AppliedIndex is the member's applied index at its last health poll.
	AppliedIndex uint64
}

type healthRecord struct {
	lastOK       time.Time // its last answer, to a health poll or to raft
	polled       time.Time // its last answer to a health poll
	healthySince time.Time
	applied      uint64 // its applied index at polled
	commit       uint64 // the leader's commit index when it was polled
	hashes       []*peerpb.StateHash
}

// Health polls of settled members.
//
// The leader polls each member's Info every autopilot interval, for its
// applied index and state hashes and as a sign of life. On an idle group
// those polls were a third of the leader's wake-ups and a fifth of a
// follower's, and in a large application the leader polls every member.
// But the leader's raft hears from every member several times a second
// anyway (heartbeats, appends), and that is sign of life enough. So a
// settled member — it answered raft within the last interval, had applied
// the leader's commit index at its last poll, and either nothing was
// committed since or the latest append it answered says that it stored
// what it was sent, at least up to that commit index; and it is a voter or
// a non-voter that is not needed as a voter — is polled only every
// settledPollFactor intervals; every other member every interval. A
// member whose latest append failed (it cannot store what it is sent, or
// its log does not match) is polled at the next tick, as it was after any
// write before: it learns from the poll how far behind it is. Under a
// stream of writes in a group of a hundred, polling every member after
// every write was a poll per member a second, as much as the appends. Its
// health counts from whichever answer came last.
const settledPollFactor = 10

// healthTracker holds the leader's health records. They are reset each time
// this member becomes leader, so every timeout starts counting afresh under
// a new leader.
type healthTracker struct {
	mu          sync.Mutex
	leaderSince time.Time
	records     map[raft.ServerID]*healthRecord
}

func newHealthTracker() *healthTracker {
	return &healthTracker{records: map[raft.ServerID]*healthRecord{}}
}

func (h *healthTracker) reset(now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.leaderSince = now
	h.records = map[raft.ServerID]*healthRecord{}
}

// ok records a member's answer to a health poll made when the leader's
// commit index was commit.
func (h *healthTracker) ok(id raft.ServerID, now time.Time, applied, commit uint64, hashes []*peerpb.StateHash, unhealthyAfter time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.alive(id, now, unhealthyAfter)
	r.polled = now
	r.applied, r.commit = applied, commit
	r.hashes = hashes
}

// answered records a member's answer to the leader's raft.
func (h *healthTracker) answered(id raft.ServerID, now time.Time, unhealthyAfter time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.alive(id, now, unhealthyAfter)
}

// alive records that id answered at now and returns its record; h.mu is
// held.
func (h *healthTracker) alive(id raft.ServerID, now time.Time, unhealthyAfter time.Duration) *healthRecord {
	r := h.records[id]
	if r == nil {
		r = &healthRecord{}
		h.records[id] = r
	}
	if r.lastOK.IsZero() || now.Sub(r.lastOK) > unhealthyAfter {
		r.healthySince = now
	}
	r.lastOK = now
	return r
}

// pollDue reports whether id is to be polled at now, the leader's commit
// index being commit, with polls every every, settled members every
// settledPollFactor × every (see above); a settled member answered raft
// within quiet; stored is the last index of its log as the latest append
// it answered left it (0: unknown, or that append failed); mayRest is
// false for a member that must not count as settled.
func (h *healthTracker) pollDue(id raft.ServerID, now time.Time, every, quiet time.Duration, commit, stored uint64, mayRest bool) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.records[id]
	if r == nil || r.polled.IsZero() {
		return true
	}
	settled := mayRest && now.Sub(r.lastOK) <= quiet && r.applied >= r.commit &&
		(r.commit == commit || stored > 0 && stored >= r.commit)
	if !settled {
		return true
	}
	// Ticks come every interval, give or take: due half an interval early.
	return now.Sub(r.polled) >= settledPollFactor*every-every/2
}

// stateHashes returns the state hashes each member reported last.
func (h *healthTracker) stateHashes() map[raft.ServerID][]*peerpb.StateHash {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[raft.ServerID][]*peerpb.StateHash, len(h.records))
	for id, r := range h.records {
		out[id] = r.hashes
	}
	return out
}

// view returns the health of every server in cfg at time now; a member
// that has not answered for unhealthyAfter(whether it is a non-voter) is
// unhealthy.
func (h *healthTracker) view(cfg raft.Configuration, self raft.ServerID, selfApplied uint64, now time.Time, unhealthyAfter func(nonVoter bool) time.Duration) []MemberHealth {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]MemberHealth, 0, len(cfg.Servers))
	for _, s := range cfg.Servers {
		m := MemberHealth{ID: s.ID, Address: s.Address, Voter: s.Suffrage == raft.Voter}
		r := h.records[s.ID]
		switch {
		case s.ID == self:
			m.Healthy, m.Since, m.LastContact, m.AppliedIndex = true, h.leaderSince, now, selfApplied
		case r != nil && now.Sub(r.lastOK) <= unhealthyAfter(s.Suffrage == raft.Nonvoter):
			m.Healthy, m.Since, m.LastContact, m.AppliedIndex = true, r.healthySince, r.lastOK, r.applied
		case r != nil:
			m.Since, m.LastContact, m.AppliedIndex = r.lastOK, r.lastOK, r.applied
		default:
			m.Since = h.leaderSince
		}
		out = append(out, m)
	}
	return out
}

// MemberHealth returns the leader's view of every member's health. On a
// member that is not the leader it returns nil.
func (n *Node) MemberHealth() []MemberHealth {
	if !n.IsLeader() {
		return nil
	}
	cfg, err := n.Configuration()
	if err != nil {
		return nil
	}
	return n.health.view(cfg, n.id, n.raft.AppliedIndex(), n.cfg.Now(), n.unhealthyAfter)
}

// LeaderSince returns when this member last became leader (zero if it is
// not the leader).
func (n *Node) LeaderSince() time.Time {
	if !n.IsLeader() {
		return time.Time{}
	}
	n.health.mu.Lock()
	defer n.health.mu.Unlock()
	return n.health.leaderSince
}

type actionKind int

const (
	actPromote actionKind = iota + 1
	actDemote
	actRemove
)

func (k actionKind) String() string {
	return [...]string{"", "promote", "demote", "remove"}[k]
}

// action is one membership change decided by plan.
type action struct {
	kind   actionKind
	id     raft.ServerID
	addr   raft.ServerAddress
	reason string
}

type planPolicy struct {
	voters            int
	stabilization     time.Duration
	maxLag            uint64
	deadVoterAfter    time.Duration
	deadNonvoterAfter time.Duration
}

// plan decides the next membership change, if any. members must include
// the leader (self). commit is the leader's commit index.
func plan(members []MemberHealth, self raft.ServerID, commit uint64, now time.Time, p planPolicy) (action, bool) {
	ms := append([]MemberHealth(nil), members...)
	sort.Slice(ms, func(i, j int) bool { return ms[i].ID < ms[j].ID })
	voters, healthyVoters := 0, 0
	for _, m := range ms {
		if m.Voter {
			voters++
			if m.Healthy {
				healthyVoters++
			}
		}
	}
	// safeToDrop reports whether removing or demoting voter m leaves enough
	// healthy voters for a quorum of the smaller voter set.
	safeToDrop := func(m MemberHealth) bool {
		if !m.Voter {
			return true
		}
		after := healthyVoters
		if m.Healthy {
			after--
		}
		return after >= (voters-1)/2+1
	}

	// 1. A member superseded by a healthy newer incarnation of its pod.
	for _, m := range ms {
		if m.Healthy || m.ID == self {
			continue
		}
		for _, o := range ms {
			if o.ID != m.ID && o.Healthy && PodOf(o.ID) == PodOf(m.ID) && safeToDrop(m) {
				return action{actRemove, m.ID, m.Address, "superseded by " + string(o.ID)}, true
			}
		}
	}

	promotable := func(m MemberHealth) bool {
		return !m.Voter && m.Healthy && now.Sub(m.Since) >= p.stabilization && m.AppliedIndex+p.maxLag >= commit
	}
	var candidate *MemberHealth
	for i := range ms {
		m := &ms[i]
		if promotable(*m) && (candidate == nil || m.Since.Before(candidate.Since)) {
			candidate = m
		}
	}

	// 2. Fewer voters than the target.
	if voters < p.voters && candidate != nil {
		return action{actPromote, candidate.ID, candidate.Address, fmt.Sprintf("voters %d below target %d", voters, p.voters)}, true
	}

	// 3. More voters than the target: demote a dead voter first.
	if voters > p.voters {
		var pick *MemberHealth
		for i := range ms {
			m := &ms[i]
			if !m.Voter || m.ID == self || !safeToDrop(*m) {
				continue
			}
			if pick == nil || (pick.Healthy && !m.Healthy) || (pick.Healthy == m.Healthy && m.ID > pick.ID) {
				pick = m
			}
		}
		if pick != nil {
			return action{actDemote, pick.ID, pick.Address, fmt.Sprintf("voters %d above target %d", voters, p.voters)}, true
		}
	}

	// 4. A voter dead for long enough is replaced by a healthy non-voter
	// (promote now; step 3 demotes the dead one next round).
	if candidate != nil {
		for _, m := range ms {
			if m.Voter && !m.Healthy && m.ID != self && now.Sub(m.Since) >= p.deadVoterAfter {
				return action{actPromote, candidate.ID, candidate.Address, "replacing voter " + string(m.ID) + " unreachable since " + m.Since.Format(time.RFC3339)}, true
			}
		}
	}

	// 5. Non-voters dead for long enough are removed.
	for _, m := range ms {
		if !m.Voter && !m.Healthy && m.ID != self && now.Sub(m.Since) >= p.deadNonvoterAfter {
			return action{actRemove, m.ID, m.Address, "non-voter unreachable since " + m.Since.Format(time.RFC3339)}, true
		}
	}
	return action{}, false
}

// runLeader runs the leader's duties while this member leads.
func (n *Node) runLeader(ctx context.Context) {
	obs := make(chan raft.Observation, 16)
	observer := raft.NewObserver(obs, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.LeaderObservation, raft.RaftState:
			return true
		}
		return false
	})
	n.raft.RegisterObserver(observer)
	defer n.raft.DeregisterObserver(observer)
	tick := time.NewTicker(n.cfg.Autopilot.Interval)
	defer tick.Stop()
	wasLeader := false
	for {
		// Only a leader has work on the tick; another member waits for
		// raft to say the leader changed.
		var ticks <-chan time.Time
		if n.IsLeader() {
			ticks = tick.C
		}
		select {
		case <-ctx.Done():
			return
		case <-obs:
		case <-ticks:
		}
		if !n.IsLeader() || n.stopping.Load() {
			wasLeader = false
			continue
		}
		if n.handOverUnfitLeadership() {
			wasLeader = false
			continue
		}
		if !wasLeader {
			wasLeader = true
			n.health.reset(n.cfg.Now())
			n.log.Info("became leader", "term", n.raft.CurrentTerm())
			if err := n.initCluster(ctx); err != nil {
				n.log.Warn("initialising the cluster", "err", err)
				wasLeader = false
				continue
			}
		}
		n.reconcile(ctx)
		n.checkStates(ctx)
	}
}

// handOverUnfitLeadership hands leadership to another voter when this
// member leads but must not: its raft log cannot be written (a full disk)
// or is damaged. Raft makes a leader whose append fails step down, but it
// may win the next election (its own timer can fire first), and then it
// refuses every call while its small first entry fits on the full disk.
// It reports whether it tried.
func (n *Node) handOverUnfitLeadership() bool {
	var why string
	if d, ok := n.Damaged(); ok {
		why = d.String()
	} else if w, ok := n.WriteFailed(); ok {
		why = w.String()
	} else {
		return false
	}
	if n.otherVoters() == 0 {
		return false
	}
	n.log.Warn("this member leads but must not: handing leadership over", "why", why)
	if err := n.await(n.raft.LeadershipTransfer()); err != nil {
		n.log.Warn("handing leadership over", "err", err)
	}
	return true
}

// initCluster makes sure the cluster's first command has been applied.
func (n *Node) initCluster(ctx context.Context) error {
	if err := n.await(n.raft.Barrier(10 * time.Second)); err != nil {
		return err
	}
	s := n.fsm.State()
	if p := n.recovery; p != nil && s.App() == n.cfg.App {
		if gen, _, _ := s.Generation(); gen < p.Generation {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if _, err := n.Apply(ctx, state.NewCommand(state.StartGenerationOp(p.Generation, p.Plan))); err != nil {
				return fmt.Errorf("recording generation %d of recovery plan %s: %w", p.Generation, p.Plan, err)
			}
			n.log.Warn("the recovered group starts a new generation", "generation", p.Generation, "plan", p.Plan)
		}
	}
	switch {
	case s.App() == n.cfg.App:
		return nil
	case s.App() != "":
		n.fail(fmt.Errorf("the raft state in this data dir serves application %q, not %q", s.App(), n.cfg.App))
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := n.Apply(ctx, state.NewCommand(state.InitClusterOp(n.cfg.App, state.NewID())))
	if err == nil {
		n.log.Info("cluster initialised", "app", n.cfg.App)
	}
	return err
}

// pollHealth asks every other member of cfg for its Info, concurrently, and
// records who answered.
func (n *Node) pollHealth(ctx context.Context, cfg raft.Configuration, timeout time.Duration) {
	// The followers learn the leader's commit index from the poll.
	commit := n.raft.CommitIndex()
	req := &peerpb.InfoRequest{LeaderId: string(n.id), LeaderCommitIndex: commit}
	a := n.cfg.Autopilot
	voters := 0
	for _, s := range cfg.Servers {
		if s.Suffrage == raft.Voter {
			voters++
		}
	}
	now := n.cfg.Now()
	var wg sync.WaitGroup
	for _, s := range cfg.Servers {
		// A non-voter rests only while no voter is wanted: otherwise its
		// applied index decides a promotion.
		mayRest := s.Suffrage == raft.Voter || voters >= n.cfg.Voters
		quiet := a.Interval
		if s.Suffrage == raft.Nonvoter {
			quiet += n.paced.heartbeatEvery()
		}
		if s.ID == n.id || !n.health.pollDue(s.ID, now, a.Interval, quiet, commit, n.paced.stored(s.ID), mayRest) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			info, err := n.infoWith(ctx, n.addressOf(s.ID, s.Address), timeout, req)
			if err != nil || info.GetServerId() != string(s.ID) {
				return
			}
			n.health.ok(s.ID, n.cfg.Now(), info.GetAppliedIndex(), commit, info.GetStateHashes(), n.unhealthyAfter(s.Suffrage == raft.Nonvoter))
		}()
	}
	wg.Wait()
}

// reconcile checks health and makes at most one membership change.
func (n *Node) reconcile(ctx context.Context) {
	cfg, _, err := n.latestConfiguration()
	if err != nil {
		return
	}
	a := n.cfg.Autopilot
	n.pollHealth(ctx, cfg, min(a.Interval, time.Second))
	n.membership.Lock()
	defer n.membership.Unlock()
	// Decide on the configuration as it is now: a join or leave may have
	// changed it while health was polled.
	cfg, cfgIndex, err := n.latestConfiguration()
	if err != nil || !n.IsLeader() {
		return
	}
	now := n.cfg.Now()
	members := n.health.view(cfg, n.id, n.raft.AppliedIndex(), now, n.unhealthyAfter)
	commit := n.raft.CommitIndex()
	act, ok := plan(members, n.id, commit, now, planPolicy{
		voters: n.cfg.Voters, stabilization: a.Stabilization, maxLag: a.MaxLag,
		deadVoterAfter: a.DeadVoterAfter, deadNonvoterAfter: a.DeadNonvoterAfter,
	})
	if !ok {
		return
	}
	var f raft.IndexFuture
	switch act.kind {
	case actPromote:
		f = n.raft.AddVoter(act.id, act.addr, cfgIndex, 10*time.Second)
	case actDemote:
		f = n.raft.DemoteVoter(act.id, cfgIndex, 10*time.Second)
	case actRemove:
		f = n.raft.RemoveServer(act.id, cfgIndex, 10*time.Second)
	}
	if err := n.await(f); err != nil {
		n.log.Warn("membership change failed", "action", act.kind.String(), "peer", string(act.id), "err", err)
		return
	}
	n.log.Info("membership changed", "action", act.kind.String(), "peer", string(act.id), "reason", act.reason)
}
