package state

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	iradix "github.com/hashicorp/go-immutable-radix/v2"
	"google.golang.org/protobuf/proto"

	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

// CommandVersion is the Command encoding version this build writes and the
// newest it applies.
const CommandVersion = 1

// Machine is bagkeeper's replicated state machine, without raft: it applies
// encoded commands, one log index at a time, and publishes each resulting
// State. raftstore's FSM feeds it raft's log; tests feed it directly.
//
// Apply is deterministic: its outcome depends only on the current State and
// the entry (the command carries the leader's clock). Each applied entry
// publishes a new immutable State; State returns the newest one without
// locking, and Changed lets readers wait for the next. Apply and Restore
// must not be called concurrently with each other.
type Machine struct {
	state atomic.Pointer[State]

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every publish
}

// NewMachine returns a machine holding the empty State.
func NewMachine() *Machine {
	m := &Machine{changed: make(chan struct{})}
	m.state.Store(newState())
	return m
}

// State returns the newest applied State.
func (m *Machine) State() *State { return m.state.Load() }

// Changed returns a channel that is closed when a State newer than the
// current one is published.
func (m *Machine) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

// WaitIndex blocks until the applied state has reached index, or ctx ends.
func (m *Machine) WaitIndex(ctx context.Context, index uint64) (*State, error) {
	for {
		ch := m.Changed()
		if s := m.State(); s.index >= index {
			return s, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the local state to reach index %d (at %d): %w", index, m.State().index, ctx.Err())
		}
	}
}

func (m *Machine) publish(s *State) {
	m.state.Store(s)
	m.mu.Lock()
	close(m.changed)
	m.changed = make(chan struct{})
	m.mu.Unlock()
}

// Restore replaces the whole state (a snapshot was installed).
func (m *Machine) Restore(s *State) { m.publish(s) }

// Apply applies the command entry at index and returns its result. An error
// means this build cannot apply the entry (a newer command version or an
// operation it does not know): the caller must not apply anything after it,
// or its state would diverge from the members that can.
func (m *Machine) Apply(index uint64, data []byte) (*storepb.Result, error) {
	cur := m.State()
	var cmd storepb.Command
	if err := proto.Unmarshal(data, &cmd); err != nil {
		// Every member decodes the same bytes the same way, so refusing the
		// entry keeps them in step.
		m.publish(cur.withIndex(index))
		return &storepb.Result{ErrorCode: storepb.ErrorCode_INVALID, ErrorMessage: "undecodable command: " + err.Error(), Index: index}, nil
	}
	if err := CheckVersion(&cmd); err != nil {
		return nil, fmt.Errorf("raft log entry %d: %w", index, err)
	}
	next, res := apply(cur, index, &cmd)
	m.publish(next)
	return res, nil
}

// CheckVersion reports whether this build knows cmd's version and every one
// of its operations.
func CheckVersion(cmd *storepb.Command) error {
	if cmd.GetVersion() == 0 || cmd.GetVersion() > CommandVersion {
		return fmt.Errorf("command version %d is unknown to this bagkeeper (it applies up to %d): %w", cmd.GetVersion(), CommandVersion, ErrUnsupported)
	}
	for _, op := range cmd.GetOps() {
		if op.GetOp() == nil {
			return fmt.Errorf("the command holds an operation this bagkeeper does not know: %w", ErrUnsupported)
		}
	}
	return nil
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
