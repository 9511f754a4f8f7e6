package raftstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

func TestRoutineRaftErrorsAreWarningsAndRateLimited(t *testing.T) {
	var buf bytes.Buffer
	a := newHCLogAdapter(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))).(*hclogAdapter)
	now := time.Unix(1000, 0)
	a.routine.now = func() time.Time { return now }
	lines := func() []map[string]any {
		var out []map[string]any
		for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			if l == "" {
				continue
			}
			m := map[string]any{}
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatal(err)
			}
			out = append(out, m)
		}
		buf.Reset()
		return out
	}
	// A member down: the leader fails to reach it every few milliseconds.
	l := a.Named("replication").With("member", "web-0/a")
	for i := 0; i < 100; i++ {
		l.Error("failed to heartbeat to", "peer", "web-1:7400", "backoff time", "10ms", "error", errors.New("dial tcp: connection refused"))
		l.Error("failed to heartbeat to", "peer", "web-2:7400", "error", io.ErrUnexpectedEOF)
	}
	got := lines()
	if len(got) != 2 || got[0]["level"] != "WARN" || got[0]["peer"] != "web-1:7400" || got[1]["peer"] != "web-2:7400" {
		t.Fatalf("100 heartbeat failures to each of two peers logged as %v", got)
	}
	now = now.Add(routineEvery)
	l.Error("failed to heartbeat to", "peer", "web-1:7400", "error", errors.New("dial tcp: connection refused"))
	got = lines()
	if len(got) != 1 || got[0]["repeated"] != float64(99) || got[0]["over"] != "30s" {
		t.Fatalf("after %s: %v", routineEvery, got)
	}

	// A connection a stopping peer closed: debug, not an error.
	a.Error("failed to decode incoming command", "error", io.EOF)
	if got := lines(); len(got) != 0 {
		t.Fatalf("a closed connection logged %v", got)
	}
	// What is not routine stays as raft says.
	a.Error("failed to decode incoming command", "error", errors.New("msgpack decode error: bad"))
	a.Warn("failed to contact quorum of nodes, stepping down")
	a.Warn("failed to contact quorum of nodes, stepping down")
	a.Error("failed to append to logs", "error", errors.New("no space left on device"))
	got = lines()
	if len(got) != 4 || got[0]["level"] != "ERROR" || got[1]["level"] != "WARN" || got[2]["msg"] != "failed to contact quorum of nodes, stepping down" || got[3]["level"] != "ERROR" {
		t.Fatalf("non-routine messages: %v", got)
	}
	// A new member catching up: bookkeeping, not a warning.
	a.Warn("appendEntries rejected, sending older logs", "peer", "web-2:7400", "next", 3)
	a.Warn("failed to get previous log", "previous-index", 115, "last-index", 0, "error", "log not found")
	a.Warn("no known peers, aborting election")
	if got := lines(); len(got) != 0 {
		t.Fatalf("a member catching up logged %v", got)
	}
	if lv, _ := classify(hclog.Info, "failed to heartbeat to", nil); lv != hclog.Info {
		t.Fatalf("an info message was reclassified as %v", lv)
	}
}
