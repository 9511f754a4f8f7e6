package raftstore

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func TestTransferLeadership(t *testing.T) {
	c := newTestCluster(t, "app")
	for _, p := range []string{"app-0", "app-1", "app-2"} {
		c.start(p, withExpect(3))
	}
	l := c.leader(10 * time.Second)
	var others []*testNode
	for _, n := range c.running() {
		if n != l {
			others = append(others, n)
		}
	}
	// To a named voter, asked through the other follower.
	target, via := others[0], others[1]
	if err := via.node.TransferLeadership(applyCtx(t), target.node.ID()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the named voter to lead", func() error {
		if !target.node.IsLeader() {
			return fmt.Errorf("%s does not lead", target.pod)
		}
		return nil
	})
	// To the voter that leads already: nothing to do.
	if err := via.node.TransferLeadership(applyCtx(t), target.node.ID()); err != nil || !target.node.IsLeader() {
		t.Fatalf("transfer to the leader itself: %v", err)
	}
	// To any voter.
	if err := target.node.TransferLeadership(applyCtx(t), ""); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "another voter to lead", func() error {
		nl := c.leader(5 * time.Second)
		if nl == target {
			return fmt.Errorf("%s still leads", target.pod)
		}
		return nil
	})
	// Not to a member, nor to a non-voter.
	if err := via.node.TransferLeadership(applyCtx(t), "app-9/none"); err == nil || !strings.Contains(err.Error(), "not a member") {
		t.Fatalf("transfer to a stranger: %v", err)
	}
	nv := c.start("app-3")
	eventually(t, 10*time.Second, "app-3 to join as a non-voter", func() error {
		_, nonvoters := c.voters(c.leader(5 * time.Second))
		for _, id := range nonvoters {
			if raft.ServerID(id) == nv.node.ID() {
				return nil
			}
		}
		return fmt.Errorf("non-voters %v", nonvoters)
	})
	if err := via.node.TransferLeadership(applyCtx(t), nv.node.ID()); err == nil || !strings.Contains(err.Error(), "non-voter") {
		t.Fatalf("transfer to a non-voter: %v", err)
	}
}
