package state

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

// CommandVersion is the Command encoding version this build writes and the
// newest it applies.
const CommandVersion = 2

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

	// OnHashPoint, if set, is called with the state right after a
	// HashState command was applied, before the next entry is. It must not
	// block (hash elsewhere; the State never changes).
	OnHashPoint func(*State)

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

// Apply applies the log entry at index (an envelope sealed by EncodeEntry)
// and returns the command's result. An error means this member must not
// apply the entry, nor anything after it: the entry is damaged (its
// checksum does not match; wrapping ErrCorrupt) or needs a newer bagkeeper
// (wrapping ErrUnsupported). Applying past it would make this member's
// state differ from the others'.
func (m *Machine) Apply(index uint64, data []byte) (*storepb.Result, error) {
	cur := m.State()
	cmd, err := DecodeEntry(data)
	switch {
	case errors.Is(err, ErrCorrupt), errors.Is(err, ErrUnsupported):
		return nil, fmt.Errorf("raft log entry %d: %w", index, err)
	case err != nil:
		// A sealed body that is no command: every member decodes the same
		// bytes the same way, so refusing the entry keeps them in step.
		m.publish(cur.withIndex(index))
		return &storepb.Result{ErrorCode: storepb.ErrorCode_INVALID, ErrorMessage: err.Error(), Index: index}, nil
	}
	if err := CheckVersion(cmd); err != nil {
		return nil, fmt.Errorf("raft log entry %d: %w", index, err)
	}
	next, res := apply(cur, index, cmd)
	m.publish(next)
	if m.OnHashPoint != nil && res.GetErrorCode() == storepb.ErrorCode_OK && isHashPoint(cmd) {
		m.OnHashPoint(next)
	}
	return res, nil
}

func isHashPoint(cmd *storepb.Command) bool {
	for _, op := range cmd.GetOps() {
		if op.GetHashState() != nil {
			return true
		}
	}
	return false
}

// HashState returns a SHA-256 of everything s holds: the same state gives
// the same hash on every member (the snapshot encoding is deterministic).
func HashState(s *State) ([]byte, error) {
	h := sha256.New()
	if err := WriteSnapshot(h, s); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}

// CheckVersion reports whether this build knows cmd's version and every one
// of its operations.
func CheckVersion(cmd *storepb.Command) error {
	if cmd.GetVersion() != CommandVersion {
		return fmt.Errorf("command version %d is unknown to this bagkeeper (it applies version %d): %w", cmd.GetVersion(), CommandVersion, ErrUnsupported)
	}
	for _, op := range cmd.GetOps() {
		if op.GetOp() == nil {
			return fmt.Errorf("the command holds an operation this bagkeeper does not know: %w", ErrUnsupported)
		}
	}
	return nil
}

// apply computes the State after cmd and the command's result: a retry is
// answered from its client's session; otherwise the fence is checked and
// the operations applied, all or none.
func apply(cur *State, index uint64, cmd *storepb.Command) (*State, *storepb.Result) {
	now := time.Unix(0, cmd.GetTimeUnixNano()).UTC()
	req := cmd.GetClient()
	var sess *session
	if req.GetClientId() != "" {
		var ok bool
		if sess, ok = cur.sessions.Get([]byte(req.GetClientId())); ok {
			if res, ok := sess.answered(req); ok {
				return cur.withIndex(index), res
			}
			if req.GetSequence() < sess.lowestPending {
				return cur.withIndex(index), &storepb.Result{Index: index, ErrorCode: storepb.ErrorCode_STALE_RETRY,
					ErrorMessage: fmt.Sprintf("command %d of client %s arrived after its client stopped waiting for it; not applied", req.GetSequence(), req.GetClientId())}
			}
		} else {
			sess = &session{}
		}
	}
	t := newTxn(cur, index, now)
	res := &storepb.Result{Index: index}
	if f := cmd.GetFence(); f != nil {
		if err := t.checkFence(f); err != nil {
			res = &storepb.Result{Index: index, ErrorCode: err.Code, ErrorMessage: err.Msg, FailedOp: -1}
		}
	}
	if res.GetErrorCode() == storepb.ErrorCode_OK {
		for i, op := range cmd.GetOps() {
			r, err := t.applyOp(op)
			if err != nil {
				res = &storepb.Result{Index: index, ErrorCode: err.Code, ErrorMessage: err.Msg, FailedOp: int32(i)}
				break
			}
			res.Ops = append(res.Ops, r)
		}
	}
	next := cur.withIndex(index)
	if res.GetErrorCode() == storepb.ErrorCode_OK {
		next = t.commit()
	}
	if sess != nil {
		next.sessions = withSession(next.sessions, req.GetClientId(), sess.record(req, now, res))
	}
	return sweepSessions(next, now), res
}

func (s *State) withIndex(index uint64) *State {
	c := *s
	c.index = index
	return &c
}
