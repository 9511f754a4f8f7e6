package raftstore

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bagkeeper/bagkeeper/raftstore/peerpb"
)

// TestACallOutlastsALeaderSlowerThanOneAttempt: a call on the leader that
// takes longer to answer than one attempt's deadline (as a commit does on
// a machine whose CPU is taken) still succeeds: once an attempt to the
// leader and one through another member were not answered in time, the
// next attempts get twice the deadline. Before, every attempt was cut off
// at attemptTimeout and retried as a new one, and the call never
// succeeded.
func TestACallOutlastsALeaderSlowerThanOneAttempt(t *testing.T) {
	_, _, f, _ := threeVoters(t)
	takes := f.node.attemptTimeout(0) * 3 / 2
	var attempts atomic.Int32
	ctx, cancel := context.WithTimeout(context.Background(), 8*takes)
	defer cancel()
	start := time.Now()
	err := f.node.onLeader(ctx, leaderCall{
		what:  "a slow call",
		local: func(context.Context) error { return errors.New("run on the follower itself") },
		remote: func(ctx context.Context, _ peerpb.PeerClient) error {
			attempts.Add(1)
			select {
			case <-time.After(takes):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
	})
	if err != nil {
		t.Fatalf("a call the leader answers after %s (one attempt's deadline is %s) failed after %s and %d attempts: %v", takes, f.node.attemptTimeout(0), time.Since(start).Round(time.Millisecond), attempts.Load(), err)
	}
	// To the leader and through another member with attemptTimeout, then
	// to the leader with twice it: the first long enough.
	if n := attempts.Load(); n != 3 {
		t.Errorf("%d attempts, want 3 (deadlines of 1, 1 and 2 times %s)", n, f.node.attemptTimeout(0))
	}
}
