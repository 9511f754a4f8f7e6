package raftstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
)

// survivorsOf lists nodes as an operator would in a survivors file.
func survivorsOf(nodes ...*testNode) []raft.Server {
	var out []raft.Server
	for _, n := range nodes {
		out = append(out, raft.Server{ID: n.node.ID(), Address: raft.ServerAddress(n.ln.Advertise()), Suffrage: raft.Voter})
	}
	return out
}

func wantRefused(t *testing.T, err error, says string) {
	t.Helper()
	var r *RefusedError
	if !errors.As(err, &r) || !strings.Contains(err.Error(), says) {
		t.Fatalf("got %v, want a refusal saying %q", err, says)
	}
}

// TestRecoveryCannotSplitTheGroup: five voters, three lost for good (two
// wiped, one with its disk kept but down). Recovery is refused while the
// group is healthy, when a survivor lists only itself (each of two
// survivors doing so made two groups with one cluster id), with a stale or
// wrong plan, and for a survivor that is not running. The one plan both
// survivors stage makes one group: the survivor with the most complete log
// leads it with every committed write, the other joins it as a new member,
// the group's generation grows, and the lost member whose disk comes back
// is refused, and knows it.
func TestRecoveryCannotSplitTheGroup(t *testing.T) {
	for _, kind := range []LogStore{LogStoreBoltDB, LogStoreWAL, LogStoreSegments} {
		t.Run(string(kind), func(t *testing.T) { testRecoveryCannotSplitTheGroup(t, kind) })
	}
}

func testRecoveryCannotSplitTheGroup(t *testing.T, kind LogStore) {
	c := newTestCluster(t, "app")
	c.logStore = kind
	pods := []string{"app-0", "app-1", "app-2", "app-3", "app-4"}
	for _, p := range pods {
		c.start(p, withExpect(5), func(cfg *Config) { cfg.Voters = 5 })
	}
	l := c.leader(10 * time.Second)
	rel := mustApply(t, l.node, state.EnsureRelationOp("peers", "p", true, "", "")).GetOps()[0].GetRelationId()
	mustApply(t, l.node, state.UpdateBagOp(rel, "app", map[string]string{"k": "v"}))
	nodes := c.running()
	eventually(t, 10*time.Second, "every member to have the write", func() error {
		for _, n := range nodes {
			if b, ok := n.node.State().Bag(rel, "app"); !ok || b.Data.Value("k") != "v" {
				return fmt.Errorf("%s has not", n.pod)
			}
		}
		return nil
	})
	a, b := nodes[0], nodes[1]
	// A healthy group: refused.
	_, err := a.node.PlanRecovery(applyCtx(t), survivorsOf(a, b))
	wantRefused(t, err, "knows a leader")

	// Three members are lost; one of them keeps its disk.
	kept := nodes[2]
	keptAddr := kept.ln.Advertise()
	for _, n := range nodes[2:] {
		c.crash(n.pod)
		if n != kept {
			c.wipe(n.pod)
		}
	}
	eventually(t, 10*time.Second, "the survivors to have no leader", func() error {
		for _, n := range []*testNode{a, b} {
			if _, addr := n.node.Leader(); addr != "" {
				return fmt.Errorf("%s still knows a leader", n.pod)
			}
		}
		return nil
	})
	// Wait out the time a survivor may have heard from the leader.
	eventually(t, 10*time.Second, "no recent contact with a leader", func() error {
		_, err := a.node.PlanRecovery(applyCtx(t), survivorsOf(a, b))
		if err != nil && strings.Contains(err.Error(), "heard from a leader") {
			return err
		}
		return nil
	})
	// Each survivor listing only itself: refused, the other one runs.
	_, err = a.node.PlanRecovery(applyCtx(t), survivorsOf(a))
	wantRefused(t, err, "still runs but is not listed")
	_, err = b.node.PlanRecovery(applyCtx(t), survivorsOf(b))
	wantRefused(t, err, "still runs but is not listed")
	// Listing a member that does not run: refused.
	withLost := append(survivorsOf(a, b), raft.Server{ID: kept.node.ID(), Address: raft.ServerAddress(keptAddr)})
	_, err = a.node.PlanRecovery(applyCtx(t), withLost)
	wantRefused(t, err, "does not answer")
	// A bad address: refused before anything is asked.
	_, err = a.node.PlanRecovery(applyCtx(t), append(survivorsOf(a, b), raft.Server{ID: "app-9/x", Address: "not-an-address"}))
	if err == nil || !strings.Contains(err.Error(), "not host:port") {
		t.Fatalf("a bad address: %v", err)
	}

	plan, err := a.node.PlanRecovery(applyCtx(t), survivorsOf(a, b))
	if err != nil {
		t.Fatal(err)
	}
	fromB, err := b.node.PlanRecovery(applyCtx(t), survivorsOf(b, a))
	if err != nil || fromB.Digest != plan.Digest {
		t.Fatalf("the plan made on the other survivor differs: %v %+v vs %+v", err, fromB, plan)
	}
	if _, _, err := a.node.StageRecovery(applyCtx(t), survivorsOf(a, b), "0123"); err == nil {
		t.Fatal("a wrong digest was staged")
	}
	roles := map[raft.ServerID]string{}
	for _, n := range []*testNode{a, b} {
		_, role, err := n.node.StageRecovery(applyCtx(t), survivorsOf(a, b), plan.Digest)
		if err != nil {
			t.Fatal(err)
		}
		roles[n.node.ID()] = role
	}
	if roles[plan.Leader] != RoleLead || len(roles) != 2 {
		t.Fatalf("roles %v, leader %s", roles, plan.Leader)
	}
	leadPod, rejoinPod := a, b
	if plan.Leader == b.node.ID() {
		leadPod, rejoinPod = b, a
	}
	oldRejoinID := rejoinPod.node.ID()
	leadAddr, rejoinAddr := leadPod.ln.Advertise(), rejoinPod.ln.Advertise()
	c.stop(leadPod.pod)
	c.stop(rejoinPod.pod)
	lead := c.start(leadPod.pod, atAddr(leadAddr))
	rejoin := c.start(rejoinPod.pod, atAddr(rejoinAddr))
	eventually(t, 15*time.Second, "one group: the planned leader leads, the other survivor joined as a new member", func() error {
		if !lead.node.IsLeader() {
			return errors.New("the planned leader does not lead")
		}
		if rejoin.node.ID() == oldRejoinID {
			return errors.New("the rejoining survivor kept its identity")
		}
		cfg, err := lead.node.Configuration()
		if err != nil {
			return err
		}
		ids := map[raft.ServerID]bool{}
		for _, s := range cfg.Servers {
			ids[s.ID] = true
		}
		if !ids[rejoin.node.ID()] || ids[oldRejoinID] || len(cfg.Servers) != 2 {
			return fmt.Errorf("configuration %v", cfg.Servers)
		}
		if gen, p, _ := rejoin.node.State().Generation(); gen != plan.Generation || p != plan.ID() {
			return fmt.Errorf("the rejoined member's state is at generation %d (%s)", gen, p)
		}
		return nil
	})
	for _, n := range []*testNode{lead, rejoin} {
		if b, ok := n.node.State().Bag(rel, "app"); !ok || b.Data.Value("k") != "v" {
			t.Fatalf("%s lost the committed write: %v", n.pod, b)
		}
	}
	if _, err := os.Stat(filepath.Join(rejoin.dir, "before-recovery-"+plan.ID(), "raft")); err != nil {
		t.Fatalf("the rejoining survivor's old state was not kept aside: %v", err)
	}
	if rejoin.node.dir.Identity.JoinOnly != true {
		t.Fatal("the rejoining survivor's new incarnation may bootstrap")
	}
	mustApply(t, rejoin.node, state.UpdateBagOp(rel, "app", map[string]string{"after": "recovery"}))

	// The lost member whose disk was kept comes back: refused.
	back := c.start(kept.pod, atAddr(keptAddr))
	eventually(t, 15*time.Second, "the returning member of the old generation to be refused", func() error {
		if why, ok := back.node.Outdated(); !ok || !strings.Contains(why, "generation 0") {
			return fmt.Errorf("outdated %q %v", why, ok)
		}
		return nil
	})
	if _, err := back.node.Apply(applyCtx(t), state.NewCommand(state.UpdateBagOp(rel, "app", map[string]string{"old": "gen"}))); !errors.Is(err, ErrOutdated) {
		t.Fatalf("a write through the outdated member: %v", err)
	}
}
