package main

import (
	"context"
	"time"
)

// Writer is a client of a target's cluster that writes one key at a time.
//
// Put must survive leader changes: when a member fails or is no longer the
// leader it retries on other members (re-discovering the leader or letting
// a member forward the request) until the write is acknowledged as
// committed or ctx is done, using short per-attempt timeouts (see the
// -attempt-timeout flag) so that one dead member does not hold a write for
// long. Put returns nil only once the write has been committed by the
// cluster.
//
// A Writer must be safe for concurrent use: the failover prober issues
// overlapping Puts through one Writer. The load experiment gives every
// worker its own Writer.
type Writer interface {
	Put(ctx context.Context, key string, value []byte) error
	Close() error
}

// Target is one system under test: a 3-member cluster that the harness
// starts, writes to, disturbs and stops. Methods are called from one
// goroutine, except for the Writers they return.
type Target interface {
	// Name identifies the target and its version in the table, e.g.
	// "etcd 3.4.23" or "bagkeeper v0.1.0".
	Name() string

	// Describe returns one line on the target's configuration that matters
	// for the numbers (timeouts, fsync, transport), printed under the
	// table.
	Describe() string

	// Start starts a fresh 3-member cluster with all its state under dir
	// (an empty directory) and returns once the cluster has a leader and
	// accepts writes. Processes it starts should use startProcess so that
	// they are always cleaned up.
	Start(ctx context.Context, dir string) error

	// NewWriter returns a new client of the cluster with its own
	// connections.
	NewWriter(ctx context.Context) (Writer, error)

	// KillLeader sends SIGKILL to the current leader's process and returns
	// once that process has exited. sent is the instant just before the
	// signal was sent (time.Now() immediately before the kill system
	// call): it is the origin of the failover time. The leader must be
	// found before sent is taken, so that finding it is not measured.
	KillLeader(ctx context.Context) (sent time.Time, err error)

	// StopLeader is KillLeader with SIGTERM: the leader stops gracefully,
	// handing leadership over first if the target does that. It returns
	// once the process has exited; if ctx ends first it kills the process
	// and returns an error.
	StopLeader(ctx context.Context) (sent time.Time, err error)

	// Restore restarts every member that KillLeader or StopLeader took
	// down, on its existing data, and returns once all 3 members are
	// running, agree on a leader and have caught up, so the next trial
	// starts from a healthy 3-member cluster.
	Restore(ctx context.Context) error

	// Stop kills every process of the cluster and waits for them to exit.
	// It must be safe to call more than once and after a failed Start. It
	// does not remove the directory given to Start.
	Stop() error
}

// ExtraMeasurer is implemented by targets that measure rows of their own,
// such as the recovery time of a wiped member or idle memory and CPU use.
// The harness calls MeasureExtra after the common experiments (unless
// -experiments leaves out "extra"), with the cluster running and healthy,
// and appends the returned rows to the table. Long measurements should
// report progress through env.Progressf.
type ExtraMeasurer interface {
	MeasureExtra(ctx context.Context, env *Env) ([]Row, error)
}

// Env is what an experiment needs: the run's configuration, the target
// under test, its directory and a progress logger.
type Env struct {
	Config *Config
	Target Target
	// Dir is the directory given to Target.Start; extra measurements may
	// create their own subdirectories in it.
	Dir string
	// Progressf prints a progress message to stderr, prefixed with the
	// target's name.
	Progressf func(format string, args ...any)
}

// targetEntry registers a target under the key used by the -targets flag.
type targetEntry struct {
	key string
	new func(cfg *Config) (Target, error)
}
