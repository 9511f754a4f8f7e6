package raftstore

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/raft"
)

// Every member logs each change of leader once: who leads now, who led
// before, and a lost leader; repeats of the same leader say nothing.
func TestLeaderChangesAreLoggedOnce(t *testing.T) {
	var mu sync.Mutex
	var buf bytes.Buffer
	n := &Node{id: "web-1/b", leaders: newLeaderWatch(),
		log: slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			return buf.Write(p)
		}), nil))}
	obs := make(chan raft.Observation)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { n.watchLeader(ctx, obs); close(done) }()
	for _, l := range []raft.LeaderObservation{
		{LeaderID: "web-0/a", LeaderAddr: "10.0.0.1:7400|web-0/a"},
		{LeaderID: "web-0/a", LeaderAddr: "10.0.0.1:7400|web-0/a"},
		{},
		{LeaderID: "web-1/b", LeaderAddr: "10.0.0.2:7400"},
	} {
		obs <- raft.Observation{Data: l}
	}
	obs <- raft.Observation{Data: raft.Follower}
	cancel()
	<-done
	mu.Lock()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	mu.Unlock()
	want := []string{
		`msg="raft leader changed" leader=web-0/a address=10.0.0.1:7400 previous=""`,
		`msg="raft leader lost; an election follows" previous=web-0/a`,
		`msg="raft leader changed: this member leads" leader=web-1/b previous=""`,
	}
	if len(lines) != len(want) {
		t.Fatalf("logged %q", lines)
	}
	for i, w := range want {
		if !strings.Contains(lines[i], "level=INFO "+w) {
			t.Errorf("line %d: %q, want %q", i, lines[i], w)
		}
	}
}
