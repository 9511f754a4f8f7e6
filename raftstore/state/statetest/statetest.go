// Package statetest is the one in-memory store the tests of the state
// machine, the agent and its resolver share: commands are encoded and
// applied to a state.Machine one index at a time, as raft would apply them
// on a one-member cluster, at a clock the test controls.
package statetest

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"sync"
	"testing"
	"time"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

// T0 is the clock's default start.
var T0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// Store is an in-memory replicated store. It satisfies the agent's Store.
type Store struct {
	t testing.TB
	m *state.Machine

	mu     sync.Mutex // serializes Apply, as raft does
	now    time.Time
	leader bool
}

// New returns a store of application app whose cluster is initialised, at
// clock T0, leading.
func New(t testing.TB, app string) *Store {
	s := &Store{t: t, m: state.NewMachine(), now: T0, leader: true}
	s.Must(state.InitClusterOp(app, "cluster-"+app))
	return s
}

// NewUninitialised returns a store whose cluster was never initialised.
func NewUninitialised(t testing.TB) *Store {
	return &Store{t: t, m: state.NewMachine(), now: T0, leader: true}
}

// Restore replaces the store's state (a snapshot was installed).
func (s *Store) Restore(st *state.State) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m.Restore(st)
}

// Machine returns the state machine under the store.
func (s *Store) Machine() *state.Machine { return s.m }

// State returns the newest state.
func (s *Store) State() *state.State { return s.m.State() }

// Changed is closed when a newer state is published.
func (s *Store) Changed() <-chan struct{} { return s.m.Changed() }

// WaitIndex waits until the state has reached index.
func (s *Store) WaitIndex(ctx context.Context, index uint64) (*state.State, error) {
	return s.m.WaitIndex(ctx, index)
}

// IsLeader reports what SetLeader said last (true at first).
func (s *Store) IsLeader() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leader
}

// SetLeader sets what IsLeader reports.
func (s *Store) SetLeader(leader bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leader = leader
}

// Now returns the store's clock: the time stamped into the next command.
func (s *Store) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

// SetNow sets the clock.
func (s *Store) SetNow(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = t
}

// Advance moves the clock on by d.
func (s *Store) Advance(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = s.now.Add(d)
}

// Apply stamps the clock into cmd, encodes it as the leader would and
// applies it at the next index. A command the state machine refused
// returns its result with the error, as raftstore.Node.Apply does.
func (s *Store) Apply(ctx context.Context, cmd *storepb.Command) (*storepb.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cmd.GetVersion() == 0 {
		cmd.Version = state.CommandVersion
	}
	cmd.TimeUnixNano = s.now.UnixNano()
	data, err := state.EncodeEntry(cmd)
	if err != nil {
		return nil, err
	}
	res, err := s.m.Apply(s.m.State().Index()+1, data)
	if err != nil {
		return nil, err
	}
	return res, state.ResultError(res)
}

// Do applies ops as one command and returns the command's error.
func (s *Store) Do(ops ...*storepb.Op) error {
	_, err := s.Apply(context.Background(), state.NewCommand(ops...))
	return err
}

// Must applies ops as one command; the test fails if it is refused.
func (s *Store) Must(ops ...*storepb.Op) *storepb.Result {
	s.t.Helper()
	res, err := s.Apply(context.Background(), state.NewCommand(ops...))
	if err != nil {
		s.t.Fatalf("command failed: %v", err)
	}
	return res
}

// Claim claims a unit for member of pod (ordinal < 0: any) and returns its
// name.
func (s *Store) Claim(member, pod string, ordinal int64) string {
	s.t.Helper()
	return s.Must(state.ClaimUnitOp(member, pod, ordinal, 0)).GetOps()[0].GetUnit()
}

// Relation ensures the peer relation of endpoint and returns its id.
func (s *Store) Relation(endpoint, iface string) int64 {
	s.t.Helper()
	return s.Must(state.EnsureRelationOp(endpoint, iface, true, "", "")).GetOps()[0].GetRelationId()
}

// Seal puts body, whatever it holds, into a log entry envelope with a
// correct checksum, so that it gets past the checksum to the decoder. It
// writes the layout documented in state/entry.go on its own, not through
// state.EncodeEntry, so that the tests also pin the on-disk format.
func Seal(body []byte) []byte {
	out := append([]byte{1, 0, 0, 0, 0}, body...)
	binary.BigEndian.PutUint32(out[1:5], crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
	return out
}
