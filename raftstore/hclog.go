package raftstore

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// hclogAdapter sends hashicorp/raft's logs (hclog) to log/slog, so the
// whole process writes one structured format.
type hclogAdapter struct {
	l       *slog.Logger
	name    string
	args    []any
	routine *routineLimiter
}

func newHCLogAdapter(l *slog.Logger) hclog.Logger {
	return &hclogAdapter{l: l, name: "raft", routine: &routineLimiter{last: map[string]*routineEntry{}, now: time.Now}}
}

// routineEvery is how often a routine message is logged per peer: one
// member down makes the leader fail to reach it every few milliseconds.
const routineEvery = 30 * time.Second

// routineMessages are what raft logs at ERROR for events that are routine
// in a group of pods (a member restarting or gone, a connection closed by
// a peer that stops): they are logged as warnings, and each at most once
// per routineEvery and peer, with how often it repeated in between.
var routineMessages = []string{
	"failed to heartbeat to",
	"failed to appendEntries to",
	"failed to contact", // not "failed to contact quorum of nodes, stepping down"
	"failed to make requestVote RPC",
	"failed to send snapshot to",
}

// closedConnMessages are what raft logs at ERROR when a peer's connection
// ends as the peer stops: debug when the error says so.
var closedConnMessages = []string{
	"failed to decode incoming command",
	"failed to accept connection",
}

// bookkeepingMessages are what raft logs at WARN while a member joins or
// catches up (a new pod's empty log, a member not yet in a configuration):
// routine in a group whose pods come and go, so debug.
var bookkeepingMessages = []string{
	"appendEntries rejected, sending older logs",
	"failed to get previous log",
	"no known peers, aborting election",
}

type routineEntry struct {
	logged   time.Time
	repeated int
}

// routineLimiter is shared by an adapter and every logger derived from it.
type routineLimiter struct {
	mu   sync.Mutex
	last map[string]*routineEntry
	now  func() time.Time
}

// allow says whether to log key now and how many times it was held back
// since it was last logged.
func (r *routineLimiter) allow(key string) (bool, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	e := r.last[key]
	if e == nil {
		if len(r.last) > 1024 { // peers come and go: forget old ones
			clear(r.last)
		}
		r.last[key] = &routineEntry{logged: now}
		return true, 0
	}
	if now.Sub(e.logged) < routineEvery {
		e.repeated++
		return false, 0
	}
	n := e.repeated
	e.logged, e.repeated = now, 0
	return true, n
}

// classify returns the level msg is logged at and, for a routine message,
// the key it is limited by ("" for none).
func classify(level hclog.Level, msg string, args []any) (hclog.Level, string) {
	if level < hclog.Warn {
		return level, ""
	}
	for _, m := range routineMessages {
		if msg == m {
			return hclog.Warn, m + " " + peerOf(args)
		}
	}
	for _, m := range bookkeepingMessages {
		if msg == m && level == hclog.Warn {
			return hclog.Debug, ""
		}
	}
	for _, m := range closedConnMessages {
		if strings.HasPrefix(msg, m) && closedErr(args) {
			return hclog.Debug, ""
		}
	}
	return level, ""
}

// peerOf finds the peer a raft message is about.
func peerOf(args []any) string {
	for i := 0; i+1 < len(args); i += 2 {
		if k, _ := args[i].(string); k == "peer" || k == "server-id" || k == "target" || k == "id" || k == "address" {
			return fmt.Sprint(args[i+1])
		}
	}
	return ""
}

// closedErr says whether a message's error is a connection that ended.
func closedErr(args []any) bool {
	for i := 0; i+1 < len(args); i += 2 {
		if k, _ := args[i].(string); k != "error" && k != "err" {
			continue
		}
		e := fmt.Sprint(args[i+1])
		return e == "EOF" || strings.Contains(e, "use of closed network connection") ||
			strings.Contains(e, "connection reset by peer") || strings.Contains(e, "unexpected EOF")
	}
	return false
}

func slogLevel(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

func (a *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	level, key := classify(level, msg, args)
	lv := slogLevel(level)
	ctx := context.Background()
	if !a.l.Enabled(ctx, lv) {
		return
	}
	repeated := 0
	if key != "" && a.routine != nil {
		var ok bool
		if ok, repeated = a.routine.allow(key); !ok {
			return
		}
	}
	all := make([]any, 0, len(a.args)+len(args)+4)
	all = append(all, "component", a.name)
	all = append(all, a.args...)
	all = append(all, args...)
	if repeated > 0 {
		all = append(all, "repeated", repeated, "over", routineEvery.String())
	}
	for i, v := range all {
		// hclog.Fmt values are deferred Sprintf calls.
		if f, ok := v.(hclog.Format); ok && len(f) > 0 {
			if format, ok := f[0].(string); ok {
				all[i] = fmt.Sprintf(format, f[1:]...)
			}
		}
	}
	a.l.Log(ctx, lv, msg, all...)
}

func (a *hclogAdapter) Trace(msg string, args ...any) { a.Log(hclog.Trace, msg, args...) }
func (a *hclogAdapter) Debug(msg string, args ...any) { a.Log(hclog.Debug, msg, args...) }
func (a *hclogAdapter) Info(msg string, args ...any)  { a.Log(hclog.Info, msg, args...) }
func (a *hclogAdapter) Warn(msg string, args ...any)  { a.Log(hclog.Warn, msg, args...) }
func (a *hclogAdapter) Error(msg string, args ...any) { a.Log(hclog.Error, msg, args...) }

func (a *hclogAdapter) enabled(level hclog.Level) bool {
	return a.l.Enabled(context.Background(), slogLevel(level))
}

func (a *hclogAdapter) IsTrace() bool { return a.enabled(hclog.Trace) }
func (a *hclogAdapter) IsDebug() bool { return a.enabled(hclog.Debug) }
func (a *hclogAdapter) IsInfo() bool  { return a.enabled(hclog.Info) }
func (a *hclogAdapter) IsWarn() bool  { return a.enabled(hclog.Warn) }
func (a *hclogAdapter) IsError() bool { return a.enabled(hclog.Error) }

func (a *hclogAdapter) ImpliedArgs() []any { return a.args }

func (a *hclogAdapter) With(args ...any) hclog.Logger {
	c := *a
	c.args = append(append([]any(nil), a.args...), args...)
	return &c
}

func (a *hclogAdapter) Name() string { return a.name }

func (a *hclogAdapter) Named(name string) hclog.Logger {
	c := *a
	c.name = a.name + "." + name
	return &c
}

func (a *hclogAdapter) ResetNamed(name string) hclog.Logger {
	c := *a
	c.name = name
	return &c
}

// SetLevel is ignored: the slog handler decides.
func (a *hclogAdapter) SetLevel(hclog.Level) {}

func (a *hclogAdapter) GetLevel() hclog.Level {
	for _, l := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn} {
		if a.enabled(l) {
			return l
		}
	}
	return hclog.Error
}

func (a *hclogAdapter) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return log.New(a.StandardWriter(nil), "", 0)
}

func (a *hclogAdapter) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		a.Info(strings.TrimSpace(string(p)))
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
