package raftstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/bagkeeper/bagkeeper/raftstore/peerpb"
	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

// errNoLeader is returned (and retried) while no leader is known.
var errNoLeader = errors.New("no raft leader is known")

// Apply commits cmd through raft and returns its result once the LOCAL
// state machine has applied it, so a read right after Apply sees the write
// (read-your-writes) on any member. A follower forwards the command to the
// leader over the peer API.
//
// When the outcome is uncertain (leadership lost, leader unreachable) the
// command is retried with the same request id until ctx ends; the state
// machine applies a request id once, so a retry never applies twice.
// A command the state machine refused returns its result together with a
// *CommandError; other errors mean the outcome is unknown.
func (n *Node) Apply(ctx context.Context, cmd *storepb.Command) (*storepb.Result, error) {
	if cmd.GetVersion() == 0 {
		cmd.Version = state.CommandVersion
	}
	if cmd.GetRequestId() == "" {
		cmd.RequestId = state.NewRequestID()
	}
	backoff := 5 * time.Millisecond
	for {
		res, err := n.applyOnce(ctx, cmd)
		if err == nil {
			if _, werr := n.fsm.WaitIndex(ctx, res.GetIndex()); werr != nil {
				return nil, werr
			}
			return res, state.ResultError(res)
		}
		if !retryable(err) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("command not confirmed: %w (last attempt: %v)", ctx.Err(), err)
		case <-n.ctx.Done():
			return nil, raft.ErrRaftShutdown
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

func (n *Node) applyOnce(ctx context.Context, cmd *storepb.Command) (*storepb.Result, error) {
	if n.IsLeader() {
		return n.applyLocal(ctx, cmd)
	}
	c, err := n.leaderClient()
	if err != nil {
		return nil, err
	}
	b, err := proto.Marshal(cmd)
	if err != nil {
		return nil, err
	}
	resp, err := c.Apply(ctx, &peerpb.ApplyRequest{Command: b})
	if err != nil {
		return nil, err
	}
	var res storepb.Result
	if err := proto.Unmarshal(resp.GetResult(), &res); err != nil {
		return nil, fmt.Errorf("the leader sent an undecodable result: %w", err)
	}
	return &res, nil
}

// applyLocal proposes cmd on this member, which must be the leader. The
// leader's clock is stamped into the command: it is the only time the
// state machine ever reads.
func (n *Node) applyLocal(ctx context.Context, cmd *storepb.Command) (*storepb.Result, error) {
	if err := state.CheckVersion(cmd); err != nil {
		return nil, err
	}
	cmd.TimeUnixNano = n.cfg.Now().UnixNano()
	b, err := proto.Marshal(cmd)
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
	if err := f.Error(); err != nil {
		return nil, err
	}
	res, ok := f.Response().(*storepb.Result)
	if !ok {
		return nil, fmt.Errorf("state machine returned %T", f.Response())
	}
	return res, nil
}

// retryable reports whether an Apply attempt failed in a way that leaves
// the outcome to a retry with the same request id.
func retryable(err error) bool {
	switch {
	case errors.Is(err, errNoLeader),
		errors.Is(err, raft.ErrNotLeader),
		errors.Is(err, raft.ErrLeadershipLost),
		errors.Is(err, raft.ErrLeadershipTransferInProgress),
		errors.Is(err, raft.ErrAbortedByRestore):
		return true
	}
	if s, ok := status.FromError(err); ok {
		switch s.Code() {
		case codes.Unavailable, codes.Aborted:
			return true
		}
	}
	return false
}

// raftStatus maps a raft error to the gRPC status a forwarding member sees.
func raftStatus(err error) error {
	if retryable(err) {
		return status.Error(codes.Unavailable, err.Error())
	}
	if errors.Is(err, raft.ErrRaftShutdown) {
		return status.Error(codes.Unavailable, "member is shutting down")
	}
	return status.Error(codes.Internal, err.Error())
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

func (n *Node) runNudger(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.nudgeCh:
		}
		if n.IsLeader() {
			_ = n.raft.Barrier(time.Second).Error()
		}
	}
}
