package raftstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
)

// TestAFollowerThatRefusedOneAppendStillGetsTheNextOnes: a follower that
// refuses one append (its disk was full for a moment) while the leader is
// busy must be sent the entries again and catch up. hashicorp/raft's
// pipelined replication deadlocks there with its default of two requests
// in flight: the refusal ends the goroutine that reads the answers while
// the one that sends is handing over the next request, and neither moves
// again. The follower still gets heartbeats, so nothing elects anew: it
// never gets another entry. The node does not pipeline (MaxRPCsInFlight 1).
func TestAFollowerThatRefusedOneAppendStillGetsTheNextOnes(t *testing.T) {
	c := newTestCluster(t, "app")
	refuse := map[string]*atomic.Bool{}
	for _, p := range []string{"app-0", "app-1", "app-2"} {
		flag := &atomic.Bool{}
		refuse[p] = flag
		c.start(p, withExpect(3), func(cfg *Config) {
			cfg.wrapLogStore = func(s raft.LogStore) raft.LogStore { return fullDisk{LogStore: s, full: flag, once: true} }
		})
	}
	l := c.leader(10 * time.Second)
	rel := mustApply(t, l.node, state.EnsureRelationOp("peers", "p", true, "", "")).GetOps()[0].GetRelationId()
	f := c.follower(l)
	for round := range 12 {
		// A burst of writes from several writers, the follower refusing
		// one append in the middle of it.
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		var wg sync.WaitGroup
		for w := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ctx.Err() == nil; i++ {
					_, _ = l.node.Apply(ctx, state.NewCommand(state.UpdateBagOp(rel, "app", map[string]string{fmt.Sprint("w", w): fmt.Sprint(round, "-", i)})))
				}
			}()
		}
		time.AfterFunc(100*time.Millisecond, func() { refuse[f.pod].Store(true) })
		wg.Wait()
		cancel()
		last := l.node.raft.LastIndex()
		eventually(t, 10*time.Second, fmt.Sprintf("round %d: %s to store the leader's entries up to %d", round, f.pod, last), func() error {
			if got := f.node.raft.LastIndex(); got < last {
				return fmt.Errorf("its log ends at %d", got)
			}
			return nil
		})
	}
}
