package transport

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bagkeeper/bagkeeper/test/wait"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitTimeout bounds every wait on a condition; generous for slow CI.
const waitTimeout = 20 * time.Second

// eventually polls cond until it holds or waitTimeout passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	wait.Until(t, waitTimeout, what, wait.True(cond))
}

// logRecorder is a slog.Handler that keeps records for assertions.
type logRecorder struct {
	mu      sync.Mutex
	records []map[string]string // "msg" plus attributes
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *logRecorder) WithGroup(string) slog.Handler            { return r }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	m := map[string]string{"msg": rec.Message, "level": rec.Level.String()}
	rec.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.String()
		return true
	})
	r.mu.Lock()
	r.records = append(r.records, m)
	r.mu.Unlock()
	return nil
}

// find returns the first record whose msg is msg and whose attribute key
// contains substr.
func (r *logRecorder) find(msg, key, substr string) map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.records {
		if m["msg"] == msg && strings.Contains(m[key], substr) {
			return m
		}
	}
	return nil
}

// waitRejection waits for the accepting side's log line for a rejected
// connection whose reason contains substr, and returns it.
func (r *logRecorder) waitRejection(t *testing.T, substr string) map[string]string {
	t.Helper()
	var rec map[string]string
	eventually(t, "rejection log containing "+substr, func() bool {
		rec = r.find("rejected peer connection", "reason", substr)
		return rec != nil
	})
	if rec["remote"] == "" {
		t.Errorf("rejection log has no remote field: %v", rec)
	}
	return rec
}

// testCfg returns a Config for app with a recording logger.
func testCfg(app string, token string) (Config, *logRecorder) {
	rec := &logRecorder{}
	cfg := Config{App: app, DialTimeout: 10 * time.Second, Logger: slog.New(rec)}
	if token != "" {
		cfg.Token = []byte(token)
	}
	return cfg, rec
}

// listen starts a Listener on a loopback port and closes it at cleanup.
func listen(t *testing.T, advertise string, cfg Config) *Listener {
	t.Helper()
	l, err := Listen("127.0.0.1:0", advertise, cfg)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return l
}

// dialKind runs a full client dial of kind with cfg.
func dialKind(t *testing.T, cfg Config, addr string, kind Kind) (net.Conn, error) {
	t.Helper()
	c, err := cfg.withDefaults()
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	conn, _, err := newDialer(c, nil).dial(context.Background(), addr, kind, "")
	return conn, err
}

// drainAccepts accepts and closes connections from ln until it is closed.
func drainAccepts(t *testing.T, ln net.Listener) *sync.WaitGroup {
	t.Helper()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	return &wg
}

func isClosed(err error) bool { return errors.Is(err, net.ErrClosed) }
