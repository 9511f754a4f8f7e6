package raftstore

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/hashicorp/raft"
)

// Elections after a silent leader.
//
// A hashicorp/raft follower stands for election when its heartbeat timer
// fires and it has not heard from the leader for a heartbeat timeout. The
// timer runs in periods of one to two heartbeat timeouts (drawn at random)
// that are not aligned with the leader's last word, so a follower notices
// a silent leader one to three heartbeat timeouts after it. Until it does,
// it refuses every vote and pre-vote, because it still names a leader.
// When a leader stops (frozen, or its host gone), the group waits for the
// slowest of these timers, and a candidate refused by a member that has not
// noticed yet waits out its election timeout before it tries again.
//
// Two changes bring that down to about one heartbeat timeout:
//
//   - watchSilence: a voter stands for election when its leader has been
//     silent for a heartbeat timeout plus a random part of up to half of
//     one (drawn anew after each word from the leader, so two followers
//     rarely stand at once and split the vote), unless it has just granted
//     another voter's pre-vote (it then gives that one an election timeout
//     to win). It makes raft look at once
//     by lowering its heartbeat timeout to the silence so far, the one
//     way raft lets its timer be brought forward, and then puts it back.
//   - the vote rule (the Raft thesis, §4.2.3): a voter refuses a vote only
//     within a heartbeat timeout of hearing from its leader. For a
//     follower whose raft still names a leader it has not heard from for
//     longer, a pre-vote from a voter of its latest configuration is
//     answered here as raft would answer it without a leader (granted
//     when the candidate's term is current and its log at least as new; a
//     pre-vote changes nothing on either side, it only lets the candidate
//     go on to a real election), and a vote reaches raft marked as a
//     leadership transfer's, the one mark under which raft votes while it
//     names a leader. Raft then checks the term, the log and whether it
//     already voted in that term, as for any vote, and records the vote
//     before it grants it.
//
// Everything else, and every request while the leader is heard, goes to
// raft untouched: a member that still hears its leader refuses, so a
// member cut off from the group cannot unseat a working one.

// voteJudge is what the vote rule needs to know of this member.
type voteJudge struct {
	id raft.ServerID
	// allowed is the silence this member allows its leader (silence.go):
	// the group's heartbeat timeout, or longer while the leader's words
	// have been arriving late.
	allowed func() time.Duration
	now     func() time.Time
	// raft's view: state, leader, last contact with it, current term.
	state       func() raft.RaftState
	leader      func() raft.ServerAddress
	lastContact func() time.Time
	term        func() uint64
	// lastEntry returns the index and term of the newest log entry, ok
	// false when they are not known here (then raft decides).
	lastEntry func() (index, term uint64, ok bool)
	voter     func(raft.ServerID) bool
	header    func() raft.RPCHeader
	logf      func(msg string, args ...any)
	// granted, if set, is told of each pre-vote granted here.
	granted func()
}

// silentLeader reports whether this member is a follower whose raft names
// a leader other than candidate that it has not heard from for longer than
// it allows (allowed), candidate being a voter.
func (j *voteJudge) silentLeader(candidate raft.ServerID, candidateAddr raft.ServerAddress) (silent, allowed time.Duration, ok bool) {
	if j.state() != raft.Follower || !j.voter(candidate) || candidate == j.id {
		return 0, 0, false
	}
	if l := j.leader(); l == "" || l == candidateAddr {
		return 0, 0, false // raft's own rules apply
	}
	silent, allowed = j.now().Sub(j.lastContact()), j.allowed()
	return silent, allowed, silent > allowed
}

// judge handles rpc if the vote rule has something to say: it answers a
// pre-vote itself (and returns true), or marks a vote for raft.
func (j *voteJudge) judge(rpc raft.RPC, decodePeer func([]byte) raft.ServerAddress) bool {
	switch req := rpc.Command.(type) {
	case *raft.RequestPreVoteRequest:
		candidate := raft.ServerID(req.ID)
		silent, allowed, ok := j.silentLeader(candidate, decodePeer(req.Addr))
		if !ok {
			return false
		}
		current := j.term()
		lastIndex, lastTerm, known := j.lastEntry()
		if !known || req.Term < current {
			return false
		}
		resp := &raft.RequestPreVoteResponse{RPCHeader: j.header(), Term: max(req.Term, current)}
		resp.Granted = req.LastLogTerm > lastTerm || (req.LastLogTerm == lastTerm && req.LastLogIndex >= lastIndex)
		j.logf("answering a pre-vote: the leader has been silent for longer than this member allows",
			"candidate", string(candidate), "term", req.Term, "granted", resp.Granted, "leader_silent_for", silent.Round(time.Millisecond), "allowed", allowed.Round(time.Millisecond),
			"candidate_last_index", req.LastLogIndex, "candidate_last_term", req.LastLogTerm, "last_index", lastIndex, "last_term", lastTerm)
		if resp.Granted && j.granted != nil {
			j.granted()
		}
		rpc.Respond(resp, nil)
		return true
	case *raft.RequestVoteRequest:
		candidate := raft.ServerID(req.ID)
		silent, allowed, ok := j.silentLeader(candidate, decodePeer(req.Addr))
		if !ok || req.LeadershipTransfer {
			return false
		}
		req.LeadershipTransfer = true
		j.logf("passing a vote request on to raft as if no leader were known: the leader has been silent for longer than this member allows",
			"candidate", string(candidate), "term", req.Term, "leader_silent_for", silent.Round(time.Millisecond), "allowed", allowed.Round(time.Millisecond))
	}
	return false
}

// Consumer implements raft.Transport: raft reads the requests that reach
// this member from relayVotes, not from the network transport.
func (t *pacedTransport) Consumer() <-chan raft.RPC { return t.rpcs }

// relayVotes hands raft every request the network transport receives,
// applying the vote rule (judge) on the way.
func (t *pacedTransport) relayVotes(ctx context.Context, judge *voteJudge) {
	in := t.NetworkTransport.Consumer()
	for {
		select {
		case <-ctx.Done():
			return
		case rpc := <-in:
			if req, ok := rpc.Command.(*raft.AppendEntriesRequest); ok {
				t.heard(req.Term)
			}
			if judge.judge(rpc, t.DecodePeer) {
				continue
			}
			if req, ok := rpc.Command.(*raft.InstallSnapshotRequest); ok {
				if !t.relayInstall(ctx, rpc, req) {
					return
				}
				continue
			}
			select {
			case t.rpcs <- rpc:
			case <-ctx.Done():
				return
			}
		}
	}
}

// voteJudge returns the vote rule's view of this member.
func (n *Node) voteJudge() *voteJudge {
	return &voteJudge{
		id:          n.id,
		allowed:     func() time.Duration { return n.silenceBound.bound(time.Now()) },
		now:         time.Now,
		state:       n.raft.State,
		leader:      n.raft.Leader,
		lastContact: n.raft.LastContact,
		term:        n.raft.CurrentTerm,
		lastEntry: func() (uint64, uint64, bool) {
			last := n.raft.LastIndex()
			stored, err := n.logs.LastIndex()
			if err != nil || stored != last || last == 0 {
				return 0, 0, false // the newest entry is a snapshot's, or unknown
			}
			var l raft.Log
			if err := n.logs.GetLog(last, &l); err != nil {
				return 0, 0, false
			}
			return l.Index, l.Term, true
		},
		// Whether the candidate votes in the latest configuration this
		// member holds, committed or not, as raft's own vote rules ask: a
		// member of a new group may not have learned that the group's
		// first configuration is committed when its first leader dies.
		voter: n.isVoter,
		header: func() raft.RPCHeader {
			return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(n.id), Addr: n.trans.EncodePeer(n.id, raft.ServerAddress(n.cfg.Advertise))}
		},
		logf: n.log.Info,
		// Another voter stands: let it, rather than stand too and split
		// the vote.
		granted: func() { n.standNotBefore.Store(time.Now().Add(n.cfg.ElectionTimeout).UnixNano()) },
	}
}

// watchSilence has this member, while it is a voting follower, stand for
// election once its leader has been silent for a heartbeat timeout and a
// random part of up to half of one (see above). It sleeps on n.silence,
// which each word from a leader (heartbeat or append, see leaderWord) puts
// a heartbeat timeout ahead: on a group whose leader speaks, it never
// wakes. When it does, it decides by raft's own last contact with the
// leader; while it has no part to play (a leader, a non-voter, no leader
// known) it waits for the next word.
func (n *Node) watchSilence(ctx context.Context) {
	var heard time.Time    // the leader's last word the deadline counts from
	var deadline time.Time // when to stand if nothing is heard meanwhile
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.silence.C:
		}
		last := n.raft.LastContact()
		if !n.silenceWatched() || last.IsZero() {
			continue
		}
		if !last.Equal(heard) {
			heard = last
			allowed := n.silenceBound.bound(time.Now())
			deadline = last.Add(allowed + rand.N(allowed/2+1))
		}
		now := time.Now()
		if notBefore := time.Unix(0, n.standNotBefore.Load()); deadline.Before(notBefore) {
			deadline = notBefore
		}
		if now.Before(deadline) {
			n.silence.Reset(deadline.Sub(now))
			continue
		}
		n.standForElection(now.Sub(last))
		heard = time.Time{}
		n.silence.Reset(n.cfg.HeartbeatTimeout)
	}
}

// leaderWord is told of each heartbeat and append this member receives,
// with the sender's term: it records the gap since the last word
// (silence.go) and puts the silence watch a heartbeat timeout ahead. When
// the silence this member allows its leader has moved by an eighth of a
// heartbeat timeout or more since raft was given it, followRole gives it
// to raft again.
func (n *Node) leaderWord(term uint64) {
	voter := n.suffrage.voter(n.id)
	allowed := n.silenceBound.heard(term, time.Now(), voter)
	n.silence.Reset(n.cfg.HeartbeatTimeout)
	// A non-voter's raft does not run with the allowance (roleTimeouts).
	if d := allowed - time.Duration(n.silenceGiven.Load()); voter && (d >= n.cfg.HeartbeatTimeout/8 || -d >= n.cfg.HeartbeatTimeout/8) {
		n.roleChanged()
	}
}

// silenceWatched reports whether watchSilence acts: on a voting follower
// that names a leader.
func (n *Node) silenceWatched() bool {
	return !n.silenceWatchOff.Load() && n.raft.State() == raft.Follower &&
		n.suffrage.voter(n.id) && n.raft.Leader() != ""
}

// standForElection has raft check its leader's silence now: it lowers
// raft's heartbeat timeout to the silence so far (raft then looks at once,
// finds the leader silent for that long, and stands), then puts it back if
// raft did not stand.
//
// The election timeout is lowered to the group's too: a candidacy that
// does not win (the other voters heard the leader a little later, and
// refuse a pre-vote until it has been silent for a heartbeat timeout to
// them too) is tried again after the election timeout raft drew when it
// stood, which should be the group's, not a longer one raft may have been
// running with. Once raft stands, followRole gives it its role's timeouts
// (nothing is put back here: raft reads its election timeout a moment
// after it stands, and must not find the old one).
func (n *Node) standForElection(silent time.Duration) {
	n.reloadMu.Lock()
	defer n.reloadMu.Unlock()
	was := n.raft.ReloadableConfig()
	rc := was
	rc.HeartbeatTimeout = min(was.HeartbeatTimeout, silent) - time.Millisecond
	if rc.HeartbeatTimeout < n.cfg.LeaderLeaseTimeout {
		return // raft refuses a heartbeat timeout shorter than the lease
	}
	rc.ElectionTimeout = max(rc.HeartbeatTimeout, min(was.ElectionTimeout, n.cfg.ElectionTimeout))
	if err := n.raft.ReloadConfig(rc); err != nil {
		n.log.Warn("could not have raft notice its silent leader", "err", err)
		return
	}
	n.log.Info("standing for election: the leader has been silent for longer than this member allows", "leader_silent_for", silent.Round(time.Millisecond), "allowed", n.silenceBound.bound(time.Now()).Round(time.Millisecond))
	// Raft reads its timeout when it looks, a moment after the change:
	// put the old one back only once it has heard from its leader, or had
	// a tenth of the timeout to look.
	last, until := n.raft.LastContact(), time.Now().Add(was.HeartbeatTimeout/10)
	for n.raft.State() == raft.Follower && n.raft.LastContact().Equal(last) && time.Now().Before(until) {
		time.Sleep(time.Millisecond)
	}
	if n.raft.State() != raft.Follower {
		n.roleChanged()
		return
	}
	if err := n.raft.ReloadConfig(was); err != nil {
		n.log.Warn("could not put raft's heartbeat timeout back", "heartbeat_timeout", was.HeartbeatTimeout, "err", err)
	}
}
