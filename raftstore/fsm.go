package raftstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

// FSM adapts the state machine (state.Machine) to raft: it hands it raft's
// command entries, snapshots and restores it, and learns the committed
// configurations. It satisfies raft.FSM and raft.ConfigurationStore.
type FSM struct {
	m *state.Machine

	// fatal is called once if the log holds a command this build cannot
	// apply. Apply then blocks until halt is closed, so the node never
	// applies past an entry it does not understand (which would make its
	// state diverge from newer members).
	fatal    func(error)
	halt     chan struct{}
	haltOnce sync.Once
	halted   atomic.Bool

	// onCorrupt, if set, is told of a command entry whose checksum does not
	// match (it is then not applied, and nothing after it is).
	onCorrupt func(index uint64, err error)

	// onConfiguration, if set, is told every committed raft configuration.
	onConfiguration func(raft.Configuration)
	// configIndex is the index of the newest configuration entry raft has
	// handed to the state machine.
	configIndex atomic.Uint64

	// beforeApply, if set, is called with each command entry before it is
	// applied (tests use it to hold the state machine back).
	beforeApply atomic.Pointer[func(*raft.Log)]

	// covered, if set, reports whether the snapshot raft is about to
	// restore holds nothing this state machine, which has applied the log
	// up to applied, lacks (see Restore).
	covered func(applied uint64) bool
}

// NewFSM returns an empty state machine. fatal (may be nil) is told when
// the log holds a command this build cannot apply.
func NewFSM(fatal func(error)) *FSM {
	return &FSM{m: state.NewMachine(), fatal: fatal, halt: make(chan struct{})}
}

// State returns the newest applied State.
func (f *FSM) State() *state.State { return f.m.State() }

// Changed returns a channel that is closed when a State newer than the
// current one is published.
func (f *FSM) Changed() <-chan struct{} { return f.m.Changed() }

// WaitIndex blocks until the applied state has reached index, or ctx ends.
func (f *FSM) WaitIndex(ctx context.Context, index uint64) (*state.State, error) {
	return f.m.WaitIndex(ctx, index)
}

// Halt releases an Apply blocked on a command it could not understand; used
// when the node shuts down. A halted state machine applies nothing more.
func (f *FSM) Halt() { f.haltOnce.Do(func() { close(f.halt) }) }

// StoreConfiguration implements raft.ConfigurationStore: raft calls it for
// every committed configuration entry. One it was given before (see
// Restore) is not passed on: the membership it tells of is not the newest.
func (f *FSM) StoreConfiguration(index uint64, cfg raft.Configuration) {
	if index <= f.configIndex.Load() {
		return
	}
	if f.onConfiguration != nil {
		f.onConfiguration(cfg)
	}
	f.configIndex.Store(max(f.configIndex.Load(), index))
}

// appliedIndex returns the index of the newest log entry that the state
// machine has processed: a command, or a configuration.
func (f *FSM) appliedIndex() uint64 {
	return max(f.State().Index(), f.configIndex.Load())
}

// Apply implements raft.FSM. It returns a *storepb.Result.
func (f *FSM) Apply(l *raft.Log) any {
	if f.halted.Load() {
		return &storepb.Result{ErrorCode: storepb.ErrorCode_UNSUPPORTED, ErrorMessage: "state machine halted", Index: l.Index}
	}
	if l.Type != raft.LogCommand {
		return nil
	}
	if l.Index <= f.State().Index() {
		// Applied before a restore this state machine skipped (see
		// Restore); raft hands on the entries after the snapshot again.
		// Only a follower gets here: no caller waits for the result.
		return &storepb.Result{ErrorCode: storepb.ErrorCode_STALE_RETRY, ErrorMessage: "entry applied before", Index: l.Index}
	}
	if hook := f.beforeApply.Load(); hook != nil {
		(*hook)(l)
	}
	res, err := f.m.Apply(l.Index, l.Data)
	switch {
	case errors.Is(err, state.ErrCorrupt):
		// Applying a damaged entry would serve a wrong value, and hand it
		// on in snapshots: stop here, and let the member say why it does
		// not serve.
		f.halted.Store(true)
		if f.onCorrupt != nil {
			f.onCorrupt(l.Index, err)
		}
		<-f.halt
		return &storepb.Result{ErrorCode: storepb.ErrorCode_INVALID, ErrorMessage: "damaged log entry", Index: l.Index}
	case err != nil:
		f.halted.Store(true)
		if f.fatal != nil {
			f.fatal(fmt.Errorf("%w: this member cannot apply it; run the same bagkeeper version on every member (see the upgrade note in docs/operations.md)", err))
		}
		<-f.halt
		return &storepb.Result{ErrorCode: storepb.ErrorCode_UNSUPPORTED, ErrorMessage: "command needs a newer bagkeeper", Index: l.Index}
	}
	return res
}

// Snapshot implements raft.FSM. It only captures the current immutable
// State; the encoding happens in Persist, concurrently with Apply.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	return &fsmSnapshot{state: f.State()}, nil
}

// Restore implements raft.FSM: it replaces all state with the snapshot's,
// unless covered says the state machine already holds all of it. That is
// a follower sent a snapshot while its log held the snapshot's last entry
// and it had applied entries past it (see checkedLogStore.IsMonotonic):
// restored, its state would go back to the snapshot's until raft applies
// those entries again, at the leader's next commit — a quiet group's
// reads (and the hooks they start) on that member would see older data
// than they saw before. Skipped, raft still hands on the entries after the
// snapshot, and Apply and StoreConfiguration pass over the ones they had.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	if f.covered != nil && f.covered(f.appliedIndex()) {
		return nil
	}
	s, err := state.ReadSnapshot(rc)
	if err != nil {
		return fmt.Errorf("restoring snapshot: %w", err)
	}
	f.m.Restore(s)
	return nil
}

type fsmSnapshot struct{ state *state.State }

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := state.WriteSnapshot(sink, s.state); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("writing snapshot: %w", err)
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}
