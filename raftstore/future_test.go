package raftstore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
)

// TestShutdownDoesNotWaitForAFutureRaftDropped: raft drops the committed
// entries still queued for its state machine when it shuts down, and never
// answers their futures. Here a goroutine of the node waits on a barrier
// queued behind a write the state machine is busy with (as the nudger
// waits on the barrier it sends after the leader's own writes); raft's
// state machine goroutine, once free, picks the queue or the shutdown at
// random, so each round drops the barrier with even odds. Shutdown, which
// waits for the node's goroutines, used to wait for that one forever.
func TestShutdownDoesNotWaitForAFutureRaftDropped(t *testing.T) {
	for round := range 8 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			c := newTestCluster(t, "app")
			tn := c.start("app-0", withExpect(1))
			n := c.leader(10 * time.Second).node
			rel := mustApply(t, n, state.EnsureRelationOp("peers", "p", true, "", "")).GetOps()[0].GetRelationId()

			// Hold the state machine on the next write until raft is
			// shutting down.
			held := make(chan struct{})
			var once sync.Once
			hold := func(*raft.Log) {
				first := false
				once.Do(func() { close(held); first = true })
				if !first {
					return
				}
				deadline := time.Now().Add(20 * time.Second)
				for n.raft.State() != raft.Shutdown && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
			}
			n.fsm.beforeApply.Store(&hold)
			wrote := make(chan error, 1)
			go func() {
				_, err := n.Apply(context.Background(), state.NewCommand(state.UpdateBagOp(rel, "app", map[string]string{"k": "v"})))
				wrote <- err
			}()
			<-held
			// Committed after the held write, so queued behind it.
			n.wg.Add(1)
			go func() { defer n.wg.Done(); _ = n.await(n.raft.Barrier(5 * time.Second)) }()
			eventually(t, 10*time.Second, "the barrier queued for the held state machine", func() error {
				if p := n.raft.Stats()["fsm_pending"]; p == "0" {
					return fmt.Errorf("fsm_pending %s", p)
				}
				return nil
			})

			stopped := make(chan error, 1)
			go func() { stopped <- n.Shutdown(context.Background(), false) }()
			select {
			case <-stopped:
			case <-time.After(30 * time.Second):
				t.Fatal("Shutdown did not return in 30 s: it waits for a future raft dropped")
			}
			select {
			case <-wrote:
			case <-time.After(10 * time.Second):
				t.Fatal("the write held in the state machine got no answer after the shutdown")
			}
			tn.ln.Close()
		})
	}
}
