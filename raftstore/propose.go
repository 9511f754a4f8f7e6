package raftstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/bagkeeper/bagkeeper/raftstore/peerpb"
	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

// Apply commits cmd through raft and returns its result once the LOCAL
// state machine has applied it, so a read right after Apply sees the write
// (read-your-writes) on any member. A follower forwards the command to the
// leader (see onLeader).
//
// The command is numbered in this member's client session; every attempt
// carries the same number, so the state machine applies it at most once,
// however many attempts reached a leader. A command the state machine
// refused returns its result together with a *state.CommandError; a
// *NotCommittedError means the outcome is unknown.
func (n *Node) Apply(ctx context.Context, cmd *storepb.Command) (*storepb.Result, error) {
	if cmd.GetVersion() == 0 {
		cmd.Version = state.CommandVersion
	}
	if err := state.CheckVersion(cmd); err != nil {
		return nil, err
	}
	if err := n.servable(); err != nil {
		return nil, err
	}
	size := proto.Size(cmd)
	if size > state.MaxCommandSize {
		return nil, &state.CommandError{Code: storepb.ErrorCode_TOO_LARGE, Op: -1,
			Msg: fmt.Sprintf("the changes are %d bytes, over the %d byte limit of one commit", size, state.MaxCommandSize)}
	}
	seq := n.session.begin()
	defer n.session.end(seq)
	var res *storepb.Result
	call := leaderCall{
		what: "command",
		size: size,
		// Attempts run one after another, so each sets the session fields
		// on cmd itself: a copy would cost a whole command (up to tens of
		// MiB) per attempt.
		local: func(ctx context.Context) error {
			cmd.Client = n.session.request(seq)
			r, err := n.propose(ctx, cmd)
			res = r
			if err == nil {
				n.nudgeUnlessFollowed(n.raft.LastIndex())
			}
			return err
		},
		remote: func(ctx context.Context, pc peerpb.PeerClient) error {
			cmd.Client = n.session.request(seq)
			b, err := proto.Marshal(cmd)
			if err != nil {
				return err
			}
			resp, err := pc.Apply(ctx, &peerpb.ApplyRequest{Command: b, From: string(n.id)})
			if err != nil {
				return err
			}
			var r storepb.Result
			if err := proto.Unmarshal(resp.GetResult(), &r); err != nil {
				return fmt.Errorf("the leader sent an undecodable result: %w", err)
			}
			res = &r
			return nil
		},
	}
	if err := n.onLeader(ctx, call); err != nil {
		return nil, err
	}
	if _, err := n.fsm.WaitIndex(ctx, res.GetIndex()); err != nil {
		return nil, &CommittedError{Index: res.GetIndex(), Err: err}
	}
	return res, state.ResultError(res)
}

// propose proposes cmd on this member, which must be the leader, and waits
// until it is applied here. The leader's clock is stamped into the command:
// it is the only time the state machine ever reads.
func (n *Node) propose(ctx context.Context, cmd *storepb.Command) (*storepb.Result, error) {
	if err := state.CheckVersion(cmd); err != nil {
		return nil, err
	}
	cmd.TimeUnixNano = n.cfg.Now().UnixNano()
	b, err := state.EncodeEntry(cmd)
	if err != nil {
		return nil, err
	}
	timeout := 10 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
		if timeout <= 0 {
			return nil, ctx.Err()
		}
	}
	f := n.raft.Apply(b, timeout)
	if err := n.await(f); err != nil {
		return nil, err
	}
	res, ok := f.Response().(*storepb.Result)
	if !ok {
		return nil, fmt.Errorf("state machine returned %T", f.Response())
	}
	return res, nil
}

// clientSession numbers this member's commands (see state/session.go).
type clientSession struct {
	id      string
	mu      sync.Mutex
	next    uint64
	pending map[uint64]bool
}

func newClientSession() *clientSession {
	return &clientSession{id: state.NewID(), next: 1, pending: map[uint64]bool{}}
}

// begin numbers a new command.
func (s *clientSession) begin() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	seq := s.next
	s.next++
	s.pending[seq] = true
	return seq
}

// end records that the command's caller stopped waiting for it.
func (s *clientSession) end(seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pending, seq)
}

// request identifies command seq, with the lowest number still pending.
func (s *clientSession) request(seq uint64) *storepb.ClientRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	lowest := seq
	for p := range s.pending {
		lowest = min(lowest, p)
	}
	return &storepb.ClientRequest{ClientId: s.id, Sequence: seq, LowestPending: lowest}
}

// nudge asks the leader to tell followers the new commit index now.
//
// A follower that forwarded a write waits until its own state machine has
// applied it (read-your-writes). Raft tells followers that an entry is
// committed only with the next AppendEntries, which, when nothing else is
// written, comes a commit timeout later (tens of milliseconds). A barrier
// appended right after the commit carries the new commit index to every
// follower within one round trip. Requests coalesce: at most one barrier is
// in flight, however many forwarded writes completed meanwhile.
func (n *Node) nudge() {
	select {
	case n.nudgeCh <- struct{}{}:
	default:
	}
}

// settleDelay is how long the leader waits, after one of its own writes
// committed, for another entry that would carry the new commit index to
// the followers anyway before it appends a barrier for that (see
// nudgeUnlessFollowed).
const settleDelay = 5 * time.Millisecond

// nudgeUnlessFollowed nudges the followers settleDelay after a write made
// on the leader committed, unless raft appended anything after it by then
// (last is the leader's last log index once the write was applied).
//
// Followers act on what the leader's own unit commits: its relation-set
// starts relation-changed on every other unit once their members apply it,
// and a follower applies an entry only when it learns that it committed.
// Without this it learns that with the next append, up to two commit
// timeouts later on an idle group; with it, a few milliseconds later. An
// entry appended after the commit carries the commit index itself, so a
// stream of writes gets no barriers: only the last write of a burst does.
func (n *Node) nudgeUnlessFollowed(last uint64) {
	n.settleMu.Lock()
	defer n.settleMu.Unlock()
	if last > n.settleLast {
		n.settleLast = last
	}
	switch {
	case n.settleTimer == nil:
		n.settleTimer = time.AfterFunc(settleDelay, n.settle)
	case !n.settleArmed:
		n.settleTimer.Reset(settleDelay)
	}
	n.settleArmed = true
}

func (n *Node) settle() {
	n.settleMu.Lock()
	last := n.settleLast
	n.settleLast, n.settleArmed = 0, false
	n.settleMu.Unlock()
	if last != 0 && n.raft.LastIndex() == last {
		n.nudge()
	}
}

func (n *Node) runNudger(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.nudgeCh:
		}
		if n.IsLeader() {
			_ = n.await(n.raft.Barrier(time.Second))
		}
	}
}
