package raftstore

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/bagkeeper/bagkeeper/raftstore/peerpb"
	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

func TestFindDivergenceNamesTheOddMemberOut(t *testing.T) {
	cfg := raft.Configuration{Servers: []raft.Server{{ID: "a"}, {ID: "b"}, {ID: "c"}}}
	h := func(pairs ...any) []*peerpb.StateHash {
		var out []*peerpb.StateHash
		for i := 0; i < len(pairs); i += 2 {
			out = append(out, &peerpb.StateHash{Index: uint64(pairs[i].(int)), Hash: []byte(pairs[i+1].(string))})
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		reports map[raft.ServerID][]*peerpb.StateHash
		want    string
	}{
		{"all agree", map[raft.ServerID][]*peerpb.StateHash{"a": h(10, "x"), "b": h(10, "x"), "c": h(10, "x")}, "[]"},
		{"one differs", map[raft.ServerID][]*peerpb.StateHash{"a": h(10, "x"), "b": h(10, "y"), "c": h(10, "x")}, "[b@10]"},
		{"the leader differs", map[raft.ServerID][]*peerpb.StateHash{"a": h(10, "z"), "b": h(10, "x"), "c": h(10, "x")}, "[a@10]"},
		{"no majority among two", map[raft.ServerID][]*peerpb.StateHash{"a": h(10, "x"), "b": h(10, "y")}, "[]"},
		{"different indexes are not compared", map[raft.ServerID][]*peerpb.StateHash{"a": h(10, "x"), "b": h(11, "y"), "c": h(12, "z")}, "[]"},
		{"older points count too", map[raft.ServerID][]*peerpb.StateHash{"a": h(5, "p", 10, "x"), "b": h(5, "q", 10, "x"), "c": h(5, "p")}, "[b@5]"},
		{"a member not in the configuration is not counted", map[raft.ServerID][]*peerpb.StateHash{"a": h(10, "x"), "b": h(10, "y"), "gone": h(10, "y")}, "[]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, d := range findDivergence(cfg, tc.reports) {
				got = append(got, fmt.Sprintf("%s@%d", d.member, d.index))
			}
			if fmt.Sprint(got) != tc.want && !(len(got) == 0 && tc.want == "[]") {
				t.Fatalf("diverged %v, want %s", got, tc.want)
			}
		})
	}
}

// TestDivergedMemberIsFoundAndServesNothing changes one follower's state
// behind raft's back (as a state machine that applied an entry differently
// would have) and checks that the leader's hash comparison finds exactly
// that member, records it for every member to see, and that the member
// then serves no reads and no writes.
func TestDivergedMemberIsFoundAndServesNothing(t *testing.T) {
	c := newTestCluster(t, "app")
	every := func(cfg *Config) { cfg.StateCheckInterval = 200 * time.Millisecond }
	for _, p := range []string{"app-0", "app-1", "app-2"} {
		c.start(p, withExpect(3), every)
	}
	l := c.leader(10 * time.Second)
	rel := mustApply(t, l.node, state.EnsureRelationOp("peers", "p", true, "", "")).GetOps()[0].GetRelationId()
	mustApply(t, l.node, state.UpdateBagOp(rel, "app", map[string]string{"k": "v"}))
	f := c.follower(l)
	// Let the members agree on a few hash points first: nobody diverged.
	eventually(t, 10*time.Second, "hash points on every member", func() error {
		for _, n := range c.running() {
			if len(n.node.hashes.list()) < 2 {
				return fmt.Errorf("%s has %d hash points", n.pod, len(n.node.hashes.list()))
			}
		}
		return nil
	})
	if ds := l.node.State().Divergences(); len(ds) != 0 {
		t.Fatalf("divergence found where there is none: %+v", ds[0])
	}
	// The follower's state machine now holds another value for k at the
	// same index, as if it had applied an entry differently.
	cur := f.node.fsm.State()
	m := state.NewMachine()
	m.Restore(cur)
	data, _ := state.EncodeEntry(&storepb.Command{Version: state.CommandVersion, TimeUnixNano: time.Now().UnixNano(), Ops: []*storepb.Op{state.UpdateBagOp(rel, "app", map[string]string{"k": "other"})}})
	if _, err := m.Apply(cur.Index(), data); err != nil {
		t.Fatal(err)
	}
	f.node.fsm.m.Restore(m.State())

	eventually(t, 20*time.Second, "the leader to record the follower as diverged", func() error {
		ds := l.node.State().Divergences()
		if len(ds) != 1 || ds[0].Member != string(f.node.ID()) {
			return fmt.Errorf("divergences %v", ds)
		}
		return nil
	})
	var why string
	eventually(t, 10*time.Second, "the diverged follower to know it", func() error {
		var ok bool
		if why, ok = f.node.Diverged(); !ok {
			return errors.New("not yet")
		}
		return nil
	})
	if st := f.node.Status(); st.Diverged != why {
		t.Fatalf("status says %q", st.Diverged)
	}
	for _, n := range c.running() {
		if n != f {
			if _, ok := n.node.Diverged(); ok {
				t.Fatalf("%s is said to have diverged", n.pod)
			}
		}
	}
	if _, err := f.node.Read(applyCtx(t)); !errors.Is(err, ErrDiverged) {
		t.Fatalf("a read through the diverged member: %v", err)
	}
	if _, err := f.node.Apply(applyCtx(t), state.NewCommand(state.UpdateBagOp(rel, "app", map[string]string{"x": "y"}))); !errors.Is(err, ErrDiverged) {
		t.Fatalf("a write through the diverged member: %v", err)
	}
}
