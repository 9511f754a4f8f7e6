package raftstore

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/bagkeeper/bagkeeper/raftstore/peerpb"
	"github.com/bagkeeper/bagkeeper/raftstore/transport"
)

// abandons records what a member's raft layer was asked to abandon.
type abandons struct {
	mu    sync.Mutex
	calls []abandonCall
}

type abandonCall struct {
	address raft.ServerAddress
	since   time.Time
}

// recordingLayer passes Abandon on to the real layer and records it.
type recordingLayer struct {
	raft.StreamLayer
	rec *abandons
}

func (l recordingLayer) Abandon(address raft.ServerAddress, since time.Time) int {
	l.rec.mu.Lock()
	l.rec.calls = append(l.rec.calls, abandonCall{address, since})
	l.rec.mu.Unlock()
	return l.StreamLayer.(interface {
		Abandon(raft.ServerAddress, time.Time) int
	}).Abandon(address, since)
}

func (l recordingLayer) SetLocalID(id string) {
	l.StreamLayer.(interface{ SetLocalID(string) }).SetLocalID(id)
}

func recordAbandons(rec *abandons) nodeOpt {
	return func(c *Config) { c.RaftLayer = recordingLayer{c.RaftLayer, rec} }
}

// TestAMemberBackUnderItsNameHasWhatWasDialedToItBeforeAbandoned: a member
// whose process is replaced under the same address (a Kubernetes pod's DNS
// name, on a new IP behind it) joins again; the leader then abandons what
// raft dialed to that member before the join — connections to the old
// process, which may be gone with its IP — but not when the join comes
// from a process it heard join already. A member that moves to a new
// address has its old one abandoned.
func TestAMemberBackUnderItsNameHasWhatWasDialedToItBeforeAbandoned(t *testing.T) {
	c := newTestCluster(t, "app")
	recs := map[string]*abandons{}
	for _, p := range []string{"app-0", "app-1", "app-2"} {
		recs[p] = &abandons{}
		c.start(p, withExpect(3), recordAbandons(recs[p]))
	}
	l := c.leader(10 * time.Second)
	f := c.follower(l)
	id, addr := f.node.ID(), f.ln.Advertise()
	tagged := transport.MemberAddress(addr, string(id))
	rec := recs[l.pod]
	abandoned := func(address raft.ServerAddress, after time.Time) error {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if slices.ContainsFunc(rec.calls, func(a abandonCall) bool { return a.address == address && a.since.After(after) }) {
			return nil
		}
		return fmt.Errorf("the leader abandoned %v, not %s since after %s", rec.calls, address, after.Format(time.StampMicro))
	}
	restarted := time.Now()
	c.crash(f.pod)
	r := c.start(f.pod, atAddr(addr), recordAbandons(recs[f.pod]))
	eventually(t, 10*time.Second, "the leader to abandon what it dialed to the member's former process", func() error {
		return abandoned(tagged, restarted)
	})

	// A join again from the same process (a retry, or one sent before the
	// member had its state) abandons nothing: the append under way to it
	// would fail and its answer be lost. One from another process does.
	join := func(process string) {
		t.Helper()
		pc, err := r.node.peers.get(l.ln.Advertise())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pc.Join(applyCtx(t), &peerpb.JoinRequest{ServerId: string(id), Address: addr, App: c.app, Pod: f.pod, Process: process}); err != nil {
			t.Fatal(err)
		}
	}
	again := time.Now()
	join(r.node.process)
	if abandoned(tagged, again) == nil {
		t.Fatal("a join again from the member's same process abandoned the connections to it")
	}
	join("another process")
	if err := abandoned(tagged, again); err != nil {
		t.Fatalf("a join from another process: %v", err)
	}

	moved := time.Now()
	c.crash(f.pod)
	back := c.start(f.pod, recordAbandons(recs[f.pod]))
	if back.ln.Advertise() == addr {
		t.Fatal("the member came back at its old address")
	}
	eventually(t, 10*time.Second, "the leader to abandon the member's old address", func() error {
		return abandoned(tagged, moved)
	})
}
