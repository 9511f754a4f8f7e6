package raftstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"
)

// A graceful stop's leave rides out a moment when the leader judges too
// few voters healthy (a voter that answers late, as right after the
// leaving member handed leadership over): it waits and tries again, and
// leaves once enough voters answer, instead of giving up at once and
// staying a voter until autopilot finds it dead (a Deployment's rolled
// pod did).
func TestLeavingWaitsForEnoughHealthyVoters(t *testing.T) {
	c := newTestCluster(t, "app")
	logs := map[string]*syncBuffer{}
	opts := func(pod string) []nodeOpt {
		if logs[pod] == nil {
			logs[pod] = &syncBuffer{}
		}
		return []nodeOpt{withExpect(3), func(cfg *Config) {
			cfg.Autopilot.DeadVoterAfter, cfg.Autopilot.DeadNonvoterAfter = time.Minute, time.Minute
			cfg.LeaveTimeout = 30 * time.Second
			cfg.Logger = slog.New(slog.NewTextHandler(logs[pod], &slog.HandlerOptions{Level: slog.LevelInfo}))
		}}
	}
	for _, p := range []string{"app-0", "app-1", "app-2"} {
		c.start(p, opts(p)...)
	}
	l := c.leader(10 * time.Second)
	leaving := c.follower(l)
	var other *testNode
	for _, n := range c.running() {
		if n != l && n != leaving {
			other = n
		}
	}
	// The other follower goes away: removing the leaving voter now would
	// leave one healthy voter of two.
	c.crash(other.pod)
	eventually(t, 10*time.Second, "the leader sees "+other.pod+" unhealthy", func() error {
		for _, m := range l.node.MemberHealth() {
			if m.ID == other.node.ID() && m.Healthy {
				return errors.New("still healthy")
			}
		}
		return nil
	})
	done := make(chan error, 1)
	go func() { done <- leaving.node.leave(context.Background()) }()
	eventually(t, 10*time.Second, leaving.pod+" waiting to leave", func() error {
		select {
		case err := <-done:
			t.Fatalf("leave returned while too few voters were healthy: %v", err)
		default:
		}
		if !strings.Contains(logs[leaving.pod].String(), `msg="leaving waits until enough healthy voters remain"`) {
			return errors.New("no refusal yet")
		}
		return nil
	})
	// The other follower comes back: the leave goes through.
	c.start(other.pod, opts(other.pod)...)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("leave: %v", err)
		}
	case <-time.After(25 * time.Second):
		t.Fatal("leave did not end after the other voter came back")
	}
	eventually(t, 10*time.Second, leaving.pod+" out of the configuration", func() error {
		voters, nonvoters := c.voters(l)
		if slices.Contains(voters, string(leaving.node.ID())) || slices.Contains(nonvoters, string(leaving.node.ID())) {
			return fmt.Errorf("voters %v, non-voters %v", voters, nonvoters)
		}
		return nil
	})
}
