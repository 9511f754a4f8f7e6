package discovery

import (
	"context"
	"fmt"
)

// Source is one way of finding peer addresses.
//
// Implementations must be safe for concurrent use.
type Source interface {
	// Name describes the source for logs and errors, e.g.
	// `dns-srv "_raft._tcp.app.ns.svc"`.
	Name() string

	// Lookup returns the peer addresses (host:port) the source knows now.
	//
	// An empty slice with a nil error means the source answered with
	// nothing; that is normal while peers start and is never evidence that
	// no peers exist. A non-nil error may come with a non-empty slice: the
	// addresses are still valid and should be used, the error describes
	// what could not be read. The sources of this package return sorted,
	// de-duplicated addresses in the canonical form of [ParseAddr].
	//
	// Lookup honours ctx: when ctx ends, it returns an error that wraps
	// ctx.Err().
	Lookup(ctx context.Context) ([]string, error)
}

// Notifier is implemented by sources that can tell when their answer may
// have changed, such as [File].
type Notifier interface {
	// Changes returns a channel that receives a value, without blocking the
	// sender and coalesced with values not yet received, whenever the
	// answer of Lookup may have changed. Spurious values are possible; the
	// receiver simply looks up again. The channel is never closed.
	Changes() <-chan struct{}
}

// SourceError reports that one source of a [Multi] failed. It is found with
// errors.As in the error returned by [Multi.Lookup].
type SourceError struct {
	// Source is the Name of the failing source.
	Source string
	// Err is the error returned by the source's Lookup.
	Err error
}

// Error implements error.
func (e *SourceError) Error() string {
	return fmt.Sprintf("peer discovery source %s: %v", e.Source, e.Err)
}

// Unwrap returns the source's error.
func (e *SourceError) Unwrap() error { return e.Err }
