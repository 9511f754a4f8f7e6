package raftstore

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// hclogAdapter sends hashicorp/raft's logs (hclog) to log/slog, so the
// whole process writes one structured format.
type hclogAdapter struct {
	l    *slog.Logger
	name string
	args []any
}

func newHCLogAdapter(l *slog.Logger) hclog.Logger {
	return &hclogAdapter{l: l, name: "raft"}
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
	lv := slogLevel(level)
	ctx := context.Background()
	if !a.l.Enabled(ctx, lv) {
		return
	}
	all := make([]any, 0, len(a.args)+len(args)+2)
	all = append(all, "component", a.name)
	all = append(all, a.args...)
	all = append(all, args...)
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
