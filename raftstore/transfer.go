package raftstore

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bagkeeper/bagkeeper/raftstore/peerpb"
)

// TransferLeadership hands raft leadership to the voter target, or to the
// most up-to-date voter when target is empty, through whichever member
// leads; it returns once the leader has handed over. The group's
// application leader (a unit's lease) does not move with it.
func (n *Node) TransferLeadership(ctx context.Context, target raft.ServerID) error {
	from, _ := n.Leader()
	return n.onLeader(ctx, n.transferCall(target, string(from), 0))
}

// transferCall is a transfer on the leader. It is idempotent across its
// attempts: a retry on the target itself, or (for any target) on a leader
// other than the one asked to hand over, finds the transfer done.
func (n *Node) transferCall(target raft.ServerID, from string, hops uint32) leaderCall {
	return leaderCall{
		what: "leadership transfer",
		local: func(ctx context.Context) error {
			return n.transferOnLeader(target, from)
		},
		remote: func(ctx context.Context, c peerpb.PeerClient) error {
			_, err := c.TransferLeadership(ctx, &peerpb.TransferLeadershipRequest{ServerId: string(target), From: from, Hops: hops})
			return err
		},
	}
}

func (n *Node) transferOnLeader(target raft.ServerID, from string) error {
	if target == n.id || target == "" && from != "" && raft.ServerID(from) != n.id {
		return nil // done already
	}
	var fut raft.Future
	if target == "" {
		fut = n.raft.LeadershipTransfer()
	} else {
		cfg, err := n.Configuration()
		if err != nil {
			return raftStatus(err)
		}
		var to *raft.Server
		for i, s := range cfg.Servers {
			if s.ID == target {
				to = &cfg.Servers[i]
			}
		}
		switch {
		case to == nil:
			return status.Errorf(codes.NotFound, "%s is not a member", target)
		case to.Suffrage != raft.Voter:
			return status.Errorf(codes.FailedPrecondition, "%s is a non-voter: only a voter can lead", target)
		}
		fut = n.raft.LeadershipTransferToServer(to.ID, to.Address)
	}
	start := time.Now()
	if err := n.await(fut); err != nil {
		return status.Errorf(codes.Unavailable, "handing leadership over%s: %v (after %s)", towards(target), err, time.Since(start).Round(time.Millisecond))
	}
	n.log.Info("leadership handed over on request", "to", string(target))
	return nil
}

func towards(target raft.ServerID) string {
	if target == "" {
		return ""
	}
	return fmt.Sprintf(" to %s", target)
}

func (s *peerServer) TransferLeadership(ctx context.Context, req *peerpb.TransferLeadershipRequest) (*peerpb.TransferLeadershipResponse, error) {
	if err := s.relay(ctx, req.GetHops(), s.n.transferCall(raft.ServerID(req.GetServerId()), req.GetFrom(), req.GetHops()+1)); err != nil {
		return nil, asStatus(err)
	}
	return &peerpb.TransferLeadershipResponse{}, nil
}
