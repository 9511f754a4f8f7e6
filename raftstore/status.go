package raftstore

import (
	"time"

	"github.com/hashicorp/raft"
)

// Status is what a member can say of itself at one moment, without asking
// anyone: the one view of the raft member that leaves this package.
// Readiness, metrics and the admin API read it instead of raft itself.
type Status struct {
	ID string
	// Role is raft's: Leader, Follower, Candidate or Shutdown.
	Role string
	Term uint64
	// LeaderID and LeaderAddress are empty while no leader is known.
	LeaderID      string
	LeaderAddress string
	// CommitIndex is the newest entry this member knows committed (on a
	// follower: as the leader last told it). AppliedIndex is the newest
	// entry raft has handed to the state machine, which may still be
	// queued there; StateIndex is the newest the state machine has applied.
	CommitIndex  uint64
	AppliedIndex uint64
	StateIndex   uint64
	LastIndex    uint64
	// LastContact is when a follower last heard from the leader (zero if
	// never, or on the leader).
	LastContact time.Time
	// Voters and Nonvoters count the members of the configuration.
	Voters, Nonvoters int
	// Damage is set when the member found its log or state damaged.
	Damage *Damage
	// Diverged says why the member's state was found unlike the others',
	// empty if it was not.
	Diverged string
	// Outdated says why the group refused this member: its state is from
	// before a recovery of the group. Empty otherwise.
	Outdated string
	// Generation is the group's generation in this member's state.
	Generation uint64
	// WriteFailure is set while the member cannot append to its raft log.
	WriteFailure *WriteFailure
	// LeaderCommitIndex is the leader's commit index as the leader last
	// said it (the member's own on the leader). A follower that cannot
	// store what it is sent never raises its own commit index past what
	// it stored, so only the leader's says how far behind it is.
	LeaderCommitIndex uint64
	// LogStore is the store the member keeps its raft log in.
	LogStore LogStore
}

// IsLeader reports whether the member led the group at that moment.
func (s Status) IsLeader() bool { return s.Role == raft.Leader.String() }

// Status returns this member's status now.
func (n *Node) Status() Status {
	id, addr := n.Leader()
	s := Status{
		ID:            string(n.id),
		Role:          n.raft.State().String(),
		Term:          n.raft.CurrentTerm(),
		LeaderID:      string(id),
		LeaderAddress: string(addr),
		CommitIndex:   n.raft.CommitIndex(),
		AppliedIndex:  n.raft.AppliedIndex(),
		StateIndex:    n.StateIndex(),
		LastIndex:     n.raft.LastIndex(),
		LogStore:      n.stores.kind,
	}
	if !s.IsLeader() {
		s.LastContact = n.raft.LastContact()
	}
	if cfg, err := n.Configuration(); err == nil {
		for _, sv := range cfg.Servers {
			if sv.Suffrage == raft.Voter {
				s.Voters++
			} else {
				s.Nonvoters++
			}
		}
	}
	if d, ok := n.Damaged(); ok {
		s.Damage = &d
	}
	s.Diverged, _ = n.Diverged()
	s.Outdated, _ = n.Outdated()
	s.Generation, _, _ = n.fsm.State().Generation()
	if w, ok := n.WriteFailed(); ok {
		s.WriteFailure = &w
	}
	s.LeaderCommitIndex = max(s.CommitIndex, n.leaderCommit.Load())
	if s.IsLeader() {
		s.LeaderCommitIndex = s.CommitIndex
	}
	return s
}
