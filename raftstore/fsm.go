package raftstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	iradix "github.com/hashicorp/go-immutable-radix/v2"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

// CommandVersion is the Command encoding version this build writes and the
// newest it applies.
const CommandVersion = 1

// FSM is bagkeeper's raft state machine. It satisfies raft.FSM.
//
// Apply is deterministic: its outcome depends only on the current State and
// the log entry (the command carries the leader's clock). Each applied entry
// publishes a new immutable State; State returns the newest one without
// locking, and Changed lets readers wait for the next.
type FSM struct {
	state atomic.Pointer[State]

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every publish

	// fatal is called once if the log holds a command this build cannot
	// apply. Apply then blocks until halt is closed, so the node never
	// applies past an entry it does not understand (which would make its
	// state diverge from newer members).
	fatal    func(error)
	halt     chan struct{}
	haltOnce sync.Once
	halted   atomic.Bool

	// onConfiguration, if set, is told every committed raft configuration.
	onConfiguration func(raft.Configuration)
	// configIndex is the index of the newest configuration entry raft has
	// handed to the state machine.
	configIndex atomic.Uint64

	// beforeApply, if set, is called with each command entry before it is
	// applied (tests use it to hold the state machine back).
	beforeApply atomic.Pointer[func(*raft.Log)]
}

// NewFSM returns an empty state machine. fatal (may be nil) is told when
// the log holds a command this build cannot apply.
func NewFSM(fatal func(error)) *FSM {
	f := &FSM{changed: make(chan struct{}), fatal: fatal, halt: make(chan struct{})}
	f.state.Store(newState())
	return f
}

// State returns the newest applied State.
func (f *FSM) State() *State { return f.state.Load() }

// Changed returns a channel that is closed when a State newer than the
// current one is published.
func (f *FSM) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}

// WaitIndex blocks until the applied state has reached index, or ctx ends.
func (f *FSM) WaitIndex(ctx context.Context, index uint64) (*State, error) {
	for {
		ch := f.Changed()
		if s := f.State(); s.index >= index {
			return s, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the local state to reach index %d (at %d): %w", index, f.State().index, ctx.Err())
		}
	}
}

// Halt releases an Apply blocked on a command it could not understand; used
// when the node shuts down. A halted state machine applies nothing more.
func (f *FSM) Halt() { f.haltOnce.Do(func() { close(f.halt) }) }

// StoreConfiguration implements raft.ConfigurationStore: raft calls it for
// every committed configuration entry.
func (f *FSM) StoreConfiguration(index uint64, cfg raft.Configuration) {
	if f.onConfiguration != nil {
		f.onConfiguration(cfg)
	}
	f.configIndex.Store(max(f.configIndex.Load(), index))
}

// appliedIndex returns the index of the newest log entry that the state
// machine has processed: a command, or a configuration.
func (f *FSM) appliedIndex() uint64 {
	return max(f.State().index, f.configIndex.Load())
}

func (f *FSM) publish(s *State) {
	f.state.Store(s)
	f.mu.Lock()
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
}

// Apply implements raft.FSM. It returns a *storepb.Result.
func (f *FSM) Apply(l *raft.Log) any {
	if f.halted.Load() {
		return &storepb.Result{ErrorCode: storepb.ErrorCode_UNSUPPORTED, ErrorMessage: "state machine halted", Index: l.Index}
	}
	cur := f.State()
	if l.Type != raft.LogCommand {
		return nil
	}
	if hook := f.beforeApply.Load(); hook != nil {
		(*hook)(l)
	}
	var cmd storepb.Command
	if err := proto.Unmarshal(l.Data, &cmd); err != nil {
		// Every member decodes the same bytes the same way, so refusing the
		// entry keeps them in step.
		res := &storepb.Result{ErrorCode: storepb.ErrorCode_INVALID, ErrorMessage: "undecodable command: " + err.Error(), Index: l.Index}
		f.publish(cur.withIndex(l.Index))
		return res
	}
	if cmd.GetVersion() == 0 || cmd.GetVersion() > CommandVersion || hasUnknownOp(&cmd) {
		f.stop(fmt.Errorf("raft log entry %d holds a command of version %d, or an operation this bagkeeper does not know: upgrade this member to the version the rest of the cluster runs", l.Index, cmd.GetVersion()))
		return &storepb.Result{ErrorCode: storepb.ErrorCode_UNSUPPORTED, ErrorMessage: "command needs a newer bagkeeper", Index: l.Index}
	}
	next, res := apply(cur, l.Index, &cmd)
	f.publish(next)
	return res
}

func (f *FSM) stop(err error) {
	f.halted.Store(true)
	if f.fatal != nil {
		f.fatal(err)
	}
	<-f.halt
}

func hasUnknownOp(cmd *storepb.Command) bool {
	for _, op := range cmd.GetOps() {
		if op.GetOp() == nil {
			return true
		}
	}
	return false
}

// apply computes the State after cmd and the command's result.
func apply(cur *State, index uint64, cmd *storepb.Command) (*State, *storepb.Result) {
	now := time.Unix(0, cmd.GetTimeUnixNano()).UTC()
	id := cmd.GetRequestId()
	if id != "" {
		if e, ok := cur.requests.Get([]byte(id)); ok {
			var prev storepb.Result
			if err := proto.Unmarshal(e.result, &prev); err == nil {
				return cur.withIndex(index), &prev
			}
		}
	}
	t := newTxn(cur, index, now)
	res := &storepb.Result{Index: index}
	for i, op := range cmd.GetOps() {
		r, err := t.applyOp(op)
		if err != nil {
			res = &storepb.Result{Index: index, ErrorCode: err.Code, ErrorMessage: err.Msg, FailedOp: int32(i)}
			t = newTxn(cur, index, now)
			break
		}
		res.Ops = append(res.Ops, r)
	}
	next := t.commit()
	next.requests, next.reqByTime = recordRequest(cur, id, now, res)
	return next, res
}

// recordRequest remembers the result of request id and forgets requests
// older than RequestIDTTL.
func recordRequest(cur *State, id string, now time.Time, res *storepb.Result) (*iradix.Tree[*requestEntry], *iradix.Tree[string]) {
	reqs, byTime := cur.requests, cur.reqByTime
	cutoff := now.Add(-RequestIDTTL).UnixNano()
	if byTime.Len() > 0 {
		it := byTime.Root().Iterator()
		var stale [][]byte
		var staleIDs []string
		for k, v, ok := it.Next(); ok; k, v, ok = it.Next() {
			if int64(binary.BigEndian.Uint64(k[:8])) >= cutoff {
				break
			}
			stale = append(stale, k)
			staleIDs = append(staleIDs, v)
		}
		if len(stale) > 0 {
			rt, bt := reqs.Txn(), byTime.Txn()
			for i := range stale {
				bt.Delete(stale[i])
				rt.Delete([]byte(staleIDs[i]))
			}
			reqs, byTime = rt.CommitOnly(), bt.CommitOnly()
		}
	}
	if id == "" {
		return reqs, byTime
	}
	enc, err := proto.Marshal(res)
	if err != nil {
		return reqs, byTime
	}
	ts := now.UnixNano()
	reqs, _, _ = reqs.Insert([]byte(id), &requestEntry{time: ts, result: enc})
	byTime, _, _ = byTime.Insert(append(numKey(ts), id...), id)
	return reqs, byTime
}

func (s *State) withIndex(index uint64) *State {
	c := *s
	c.index = index
	return &c
}

// Snapshot implements raft.FSM. It only captures the current immutable
// State; the encoding happens in Persist, concurrently with Apply.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	return &fsmSnapshot{state: f.State()}, nil
}

// Restore implements raft.FSM: it replaces all state with the snapshot's.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	s, err := ReadSnapshot(rc)
	if err != nil {
		return fmt.Errorf("restoring snapshot: %w", err)
	}
	f.publish(s)
	return nil
}

type fsmSnapshot struct{ state *State }

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := WriteSnapshot(sink, s.state); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("writing snapshot: %w", err)
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}
