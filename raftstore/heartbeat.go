package raftstore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Heartbeats beyond the voters.
//
// hashicorp/raft's leader sends each follower a heartbeat every tenth to
// fifth of the heartbeat timeout, voter or not, and a follower that hears
// nothing for a heartbeat timeout forgets its leader. A voter needs that
// pace: it is how quickly the group notices a dead leader. A non-voter
// never stands for election; it only needs to go on knowing the leader,
// and in a large application most members are non-voters, so the leader's
// idle cost is mostly their heartbeats. So:
//
//   - a non-voter waits nonVoterTimeoutFactor × the heartbeat timeout
//     before it forgets its leader (its raft configuration is reloaded
//     whenever the committed configuration changes its suffrage);
//   - the leader's transport sends a non-voter at most one heartbeat per
//     fifth of that (pacedTransport): a few a second instead of 10 to 20.
//
// Nothing is answered for a non-voter: a paced heartbeat is sent later,
// not skipped, so what raft counts (contact, leader verification) is what
// the member really answered.
const nonVoterTimeoutFactor = 4

// nonVoterHeartbeatEvery is the least time between two heartbeats to one
// non-voter, for a group whose heartbeat timeout is hb.
func nonVoterHeartbeatEvery(hb time.Duration) time.Duration {
	return nonVoterTimeoutFactor * hb / 5
}

// suffrages is the suffrage of each member in the newest committed
// configuration.
type suffrages struct {
	m atomic.Pointer[map[raft.ServerID]raft.ServerSuffrage]
}

func (s *suffrages) set(cfg raft.Configuration) {
	m := make(map[raft.ServerID]raft.ServerSuffrage, len(cfg.Servers))
	for _, srv := range cfg.Servers {
		m[srv.ID] = srv.Suffrage
	}
	s.m.Store(&m)
}

// of returns id's suffrage and whether id is a member.
func (s *suffrages) of(id raft.ServerID) (raft.ServerSuffrage, bool) {
	m := s.m.Load()
	if m == nil {
		return 0, false
	}
	v, ok := (*m)[id]
	return v, ok
}

// nonVoter reports whether id is a non-voter of the committed
// configuration (a member being promoted, Staging, is not one).
func (s *suffrages) nonVoter(id raft.ServerID) bool {
	v, ok := s.of(id)
	return ok && v == raft.Nonvoter
}

// voter reports whether id is a voter of the committed configuration.
func (s *suffrages) voter(id raft.ServerID) bool {
	v, ok := s.of(id)
	return ok && v == raft.Voter
}

// pacedTransport is the raft transport with heartbeats to non-voters
// paced: one at most every every per non-voter. Everything else passes
// through unchanged.
type pacedTransport struct {
	*raft.NetworkTransport
	every    time.Duration
	nonVoter func(raft.ServerID) bool
	done     <-chan struct{} // closed when the member stops

	mu   sync.Mutex
	next map[raft.ServerID]time.Time // the earliest a heartbeat may go out
	sent map[raft.ServerID]int       // heartbeats sent to each member (tests)

	// rpcs is what raft consumes: the requests received, passed on by
	// relayVotes (see votes.go).
	rpcs chan raft.RPC
}

func newPacedTransport(t *raft.NetworkTransport, every time.Duration, nonVoter func(raft.ServerID) bool, done <-chan struct{}) *pacedTransport {
	return &pacedTransport{NetworkTransport: t, every: every, nonVoter: nonVoter, done: done,
		next: map[raft.ServerID]time.Time{}, sent: map[raft.ServerID]int{}, rpcs: make(chan raft.RPC)}
}

// isHeartbeat reports whether req is one of raft's heartbeats: an append
// that carries no entries and no log position (what the network
// transport's receiving side treats as one too).
func isHeartbeat(req *raft.AppendEntriesRequest) bool {
	return len(req.Entries) == 0 && req.PrevLogEntry == 0 && req.PrevLogTerm == 0 && req.LeaderCommitIndex == 0
}

// AppendEntries holds a heartbeat to a non-voter until its turn.
func (t *pacedTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if isHeartbeat(args) {
		if err := t.turn(id); err != nil {
			return err
		}
	}
	return t.NetworkTransport.AppendEntries(id, target, args, resp)
}

// turn waits until a heartbeat to id may go out and counts it.
func (t *pacedTransport) turn(id raft.ServerID) error {
	paced := t.nonVoter(id)
	t.mu.Lock()
	t.sent[id]++
	var at time.Time
	if paced {
		now := time.Now()
		at = t.next[id]
		if at.Before(now) {
			at = now
		}
		t.next[id] = at.Add(t.every)
	} else {
		delete(t.next, id)
	}
	t.mu.Unlock()
	d := time.Until(at)
	if !paced || d <= 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-t.done:
		return raft.ErrTransportShutdown
	}
}

// forget drops what is kept for the members keep refuses (members no
// longer in the configuration).
func (t *pacedTransport) forget(keep func(raft.ServerID) bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id := range t.sent {
		if !keep(id) {
			delete(t.sent, id)
			delete(t.next, id)
		}
	}
}

// heartbeatsSent returns how many heartbeats went to id (for tests).
func (t *pacedTransport) heartbeatsSent(id raft.ServerID) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sent[id]
}

// followSuffrage gives this member's raft the timeouts of its suffrage:
// the group's as a voter (or not yet a member); as a non-voter, which
// never stands for election, nonVoterTimeoutFactor times longer ones (raft
// wants the election timeout no shorter than the heartbeat timeout). It
// runs until ctx ends, acting on each committed configuration (changed is
// signalled after suffrage is updated).
func (n *Node) followSuffrage(ctx context.Context, changed <-chan struct{}) {
	for {
		hb, election := n.cfg.HeartbeatTimeout, n.cfg.ElectionTimeout
		nonVoter := n.suffrage.nonVoter(n.id)
		if nonVoter {
			hb, election = nonVoterTimeoutFactor*hb, nonVoterTimeoutFactor*election
		}
		n.reloadMu.Lock()
		rc := n.raft.ReloadableConfig()
		if rc.HeartbeatTimeout != hb || rc.ElectionTimeout != election {
			rc.HeartbeatTimeout, rc.ElectionTimeout = hb, election
			if err := n.raft.ReloadConfig(rc); err != nil {
				n.log.Warn("could not change the raft timeouts for this member's suffrage", "heartbeat_timeout", hb, "election_timeout", election, "err", err)
			} else {
				n.log.Debug("raft timeouts set for this member's suffrage", "nonvoter", nonVoter, "heartbeat_timeout", hb, "election_timeout", election)
			}
		}
		n.reloadMu.Unlock()
		n.paced.forget(func(id raft.ServerID) bool { _, ok := n.suffrage.of(id); return ok })
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}
