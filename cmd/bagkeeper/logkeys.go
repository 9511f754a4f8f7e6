package main

import (
	"context"
	"log/slog"
	"maps"
)

// uniqueKeys is a slog handler that writes every key of a line once. Log
// lines are built in layers (the sidecar adds the app and pod, the agent
// the unit, raft its own arguments), and a key two layers add would
// otherwise appear twice in a JSON line. A repeated key with the same value
// is dropped; with another value, or when it is one of the handler's own
// keys (time, level, msg), it is kept under the key with "_" appended.
type uniqueKeys struct {
	h    slog.Handler
	keys map[string]slog.Value // what the handler's attributes already hold
}

var builtinKeys = map[string]bool{slog.TimeKey: true, slog.LevelKey: true, slog.MessageKey: true, slog.SourceKey: true}

func newUniqueKeys(h slog.Handler) slog.Handler {
	return &uniqueKeys{h: h, keys: map[string]slog.Value{}}
}

func (u *uniqueKeys) Enabled(ctx context.Context, l slog.Level) bool { return u.h.Enabled(ctx, l) }

func (u *uniqueKeys) WithAttrs(as []slog.Attr) slog.Handler {
	keys := maps.Clone(u.keys)
	keep := u.unique(keys, as)
	return &uniqueKeys{h: u.h.WithAttrs(keep), keys: keys}
}

// WithGroup starts a new namespace of keys.
func (u *uniqueKeys) WithGroup(name string) slog.Handler {
	return &uniqueKeys{h: u.h.WithGroup(name), keys: map[string]slog.Value{}}
}

func (u *uniqueKeys) Handle(ctx context.Context, r slog.Record) error {
	clash := false
	seen := make(map[string]bool, r.NumAttrs())
	r.Attrs(func(a slog.Attr) bool {
		_, had := u.keys[a.Key]
		clash = had || seen[a.Key] || builtinKeys[a.Key]
		seen[a.Key] = true
		return !clash
	})
	if !clash {
		return u.h.Handle(ctx, r)
	}
	as := make([]slog.Attr, 0, r.NumAttrs())
	r.Attrs(func(a slog.Attr) bool { as = append(as, a); return true })
	nr := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	nr.AddAttrs(u.unique(maps.Clone(u.keys), as)...)
	return u.h.Handle(ctx, nr)
}

// unique returns as without the keys already in keys (renamed when their
// value differs), adding the keys it keeps to keys.
func (u *uniqueKeys) unique(keys map[string]slog.Value, as []slog.Attr) []slog.Attr {
	out := make([]slog.Attr, 0, len(as))
	for _, a := range as {
		for {
			old, had := keys[a.Key]
			if !had && !builtinKeys[a.Key] {
				break
			}
			if had && old.Equal(a.Value) {
				a.Key = ""
				break
			}
			a.Key += "_"
		}
		if a.Key == "" {
			continue
		}
		keys[a.Key] = a.Value
		out = append(out, a)
	}
	return out
}
