package raftstore

import (
	"context"
	"fmt"
	"time"

	"github.com/bagkeeper/bagkeeper/raftstore/peerpb"
	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Reads that see every committed write (linearizable reads), as the Raft
// thesis describes them (section 6.4) and etcd's ReadIndex does them: the
// leader notes its commit index, confirms with a quorum that it still
// leads, and hands the index out; the member that answers the read waits
// until its own state machine has applied that index. No log entry is
// written. A leader's commit index is only complete once an entry of its
// own term has committed, so a new leader first waits for a barrier.

// Read returns a state that reflects every write committed before Read was
// called, from whichever member this is.
func (n *Node) Read(ctx context.Context) (*state.State, error) {
	if err := n.servable(); err != nil {
		return nil, err
	}
	index, err := n.ReadIndex(ctx)
	if err != nil {
		return nil, err
	}
	return n.waitCaughtUp(ctx, index)
}

// waitCaughtUp waits until the state machine has applied every entry up to
// index that changes it, and returns its state. The index may be that of an
// entry the state machine never sees (a new leader's no-op, a barrier), so
// waiting for the state's own index to reach it could take forever.
func (n *Node) waitCaughtUp(ctx context.Context, index uint64) (*state.State, error) {
	for {
		ch := n.fsm.Changed()
		if n.CaughtUp(index) {
			// Read after the check: a newer state is as good.
			return n.fsm.State(), nil
		}
		select {
		case <-ch:
		case <-time.After(2 * time.Millisecond):
			// Configuration entries are applied without a new state.
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for this member to apply index %d (at %d): %w", index, n.StateIndex(), ctx.Err())
		}
	}
}

// ReadIndex returns the leader's confirmed commit index (see Read).
func (n *Node) ReadIndex(ctx context.Context) (uint64, error) {
	var index uint64
	err := n.onLeader(ctx, leaderCall{
		what: "read index",
		local: func(ctx context.Context) error {
			i, err := n.readIndexLocal(ctx)
			index = i
			return err
		},
		remote: func(ctx context.Context, c peerpb.PeerClient) error {
			r, err := c.ReadIndex(ctx, &peerpb.ReadIndexRequest{From: string(n.id)})
			index = r.GetIndex()
			return err
		},
	})
	return index, err
}

// readIndexLocal returns this leader's commit index once it has confirmed
// that it leads.
func (n *Node) readIndexLocal(ctx context.Context) (uint64, error) {
	term := n.raft.CurrentTerm()
	if n.barrierTerm.Load() != term {
		timeout := n.attemptTimeout(0)
		if dl, ok := ctx.Deadline(); ok {
			timeout = min(timeout, max(0, time.Until(dl)))
		}
		if err := n.await(n.raft.Barrier(timeout)); err != nil {
			return 0, err
		}
		n.barrierTerm.Store(term)
	}
	index := n.raft.CommitIndex()
	if err := n.await(n.raft.VerifyLeader()); err != nil {
		return 0, err
	}
	if n.raft.CurrentTerm() != term {
		return 0, errLeaderMoved
	}
	return index, nil
}

func (s *peerServer) ReadIndex(ctx context.Context, req *peerpb.ReadIndexRequest) (*peerpb.ReadIndexResponse, error) {
	var index uint64
	err := s.relay(ctx, req.GetHops(), leaderCall{
		what: "read index",
		local: func(ctx context.Context) error {
			if err := s.n.servable(); err != nil {
				return status.Error(codes.Unavailable, err.Error())
			}
			i, err := s.n.readIndexLocal(ctx)
			index = i
			return err
		},
		remote: func(ctx context.Context, c peerpb.PeerClient) error {
			r, err := c.ReadIndex(ctx, &peerpb.ReadIndexRequest{Hops: req.GetHops() + 1, From: req.GetFrom()})
			index = r.GetIndex()
			return err
		},
	})
	if err != nil {
		return nil, asStatus(err)
	}
	if from := req.GetFrom(); from != "" {
		// The reader waits until it applied the index: a non-voter's
		// batch would hold it up to an append interval.
		s.n.paced.release(raft.ServerID(from))
	}
	return &peerpb.ReadIndexResponse{Index: index}, nil
}

// servable refuses calls on a member that must not serve: its store is
// damaged, or its state diverged.
func (n *Node) servable() error {
	if d, ok := n.Damaged(); ok {
		return fmt.Errorf("%w: %s", ErrDamaged, d)
	}
	if why, ok := n.Diverged(); ok {
		return fmt.Errorf("%w: %s", ErrDiverged, why)
	}
	if w, ok := n.WriteFailed(); ok {
		return fmt.Errorf("%w: %s", ErrCannotWrite, w)
	}
	if why, ok := n.Outdated(); ok {
		return fmt.Errorf("%w: %s", ErrOutdated, why)
	}
	return nil
}
