package raftstore

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/state/statetest"
	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

// haltedOn applies data at index 1 and checks that the state machine
// stops there: Apply does not return until Halt, and the state does not
// advance. report is what the FSM said, through fatal or onCorrupt.
func haltedOn(t *testing.T, data []byte, corrupt bool) error {
	t.Helper()
	var reported error
	seen := make(chan struct{})
	f := NewFSM(func(err error) { reported = err; close(seen) })
	f.onCorrupt = func(index uint64, err error) {
		if !corrupt || index != 1 {
			t.Errorf("onCorrupt(%d, %v)", index, err)
		}
		reported = err
		close(seen)
	}
	done := make(chan any)
	go func() { done <- f.Apply(&raft.Log{Type: raft.LogCommand, Index: 1, Data: data}) }()
	<-seen
	select {
	case <-done:
		t.Fatal("Apply returned past an entry it must not apply")
	default:
	}
	f.Halt()
	<-done
	if f.State().Index() != 0 {
		t.Fatal("state advanced past the entry")
	}
	return reported
}

func TestUnknownCommandVersionHaltsApply(t *testing.T) {
	data, _ := state.EncodeEntry(&storepb.Command{Version: state.CommandVersion + 1})
	if err := haltedOn(t, data, false); err == nil || !strings.Contains(err.Error(), "upgrade") {
		t.Fatalf("fatal error %v", err)
	}
	// An entry of the format before checksums existed: refused likewise.
	old, _ := proto.Marshal(&storepb.Command{Version: 1})
	if err := haltedOn(t, old, false); !errors.Is(err, state.ErrUnsupported) {
		t.Fatalf("old format: %v", err)
	}
}

func TestDamagedEntryIsNeverApplied(t *testing.T) {
	data, _ := state.EncodeEntry(state.NewCommand(state.InitClusterOp("app", "c")))
	for _, i := range []int{1, 2, 4, 5, len(data) - 1} {
		bad := bytes.Clone(data)
		bad[i] ^= 0x10
		if err := haltedOn(t, bad, true); !errors.Is(err, state.ErrCorrupt) {
			t.Fatalf("byte %d flipped: %v", i, err)
		}
	}
	if err := haltedOn(t, data[:3], true); !errors.Is(err, state.ErrCorrupt) {
		t.Fatalf("truncated envelope: %v", err)
	}
}

func TestUndecodableCommandIsRefusedDeterministically(t *testing.T) {
	f := NewFSM(nil)
	data := statetest.Seal([]byte{0xff, 0xff})
	res := f.Apply(&raft.Log{Type: raft.LogCommand, Index: 7, Data: data}).(*storepb.Result)
	if !errors.Is(state.ResultError(res), state.ErrInvalid) || f.State().Index() != 7 {
		t.Fatalf("result %v index %d", res, f.State().Index())
	}
}

func TestFSMRestoreReplacesAllState(t *testing.T) {
	src := state.NewMachine()
	apply := func(m *state.Machine, ops ...*storepb.Op) {
		t.Helper()
		data, err := state.EncodeEntry(state.NewCommand(ops...))
		if err != nil {
			t.Fatal(err)
		}
		res, err := m.Apply(m.State().Index()+1, data)
		if err != nil || state.ResultError(res) != nil {
			t.Fatalf("apply: %v %v", err, res)
		}
	}
	apply(src, state.InitClusterOp("app", "cid"))
	apply(src, state.EnsureRelationOp("peers", "p", true, "", ""))
	var buf bytes.Buffer
	if err := state.WriteSnapshot(&buf, src.State()); err != nil {
		t.Fatal(err)
	}
	f := NewFSM(nil)
	apply(f.m, state.InitClusterOp("app", "cid"))
	apply(f.m, state.ClaimUnitOp("m", "p", -1, 0))
	apply(f.m, state.EnsureRelationOp("zzz", "p", true, "", ""))
	apply(f.m, state.EnsureRelationOp("other", "p", true, "", ""))
	ch := f.Changed()
	if err := f.Restore(nopCloser{bytes.NewReader(buf.Bytes())}); err != nil {
		t.Fatal(err)
	}
	<-ch
	got := f.State()
	if len(got.Units()) != 0 || len(got.Relations()) != 1 || got.Relations()[0].Endpoint != "peers" || got.Index() != src.State().Index() {
		t.Fatalf("restore kept old state: units %v relations %v index %d", got.Units(), got.Relations(), got.Index())
	}
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

// TestFSMKeepsStateASnapshotCovers: a follower whose log holds the last
// entry of a snapshot it is sent, and which applied past it, keeps its
// state (restored, it would go back until raft applied the later entries
// again); raft then hands on the entries after the snapshot, and the
// state machine passes over the ones it applied, commands and
// configurations alike. When the snapshot is newer, it is restored.
func TestFSMKeepsStateASnapshotCovers(t *testing.T) {
	entry := func(ops ...*storepb.Op) []byte {
		t.Helper()
		data, err := state.EncodeEntry(state.NewCommand(ops...))
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	log := []*raft.Log{
		{Index: 1, Type: raft.LogCommand, Data: entry(state.InitClusterOp("app", "cid"))},
		{Index: 2, Type: raft.LogConfiguration},
		{Index: 3, Type: raft.LogCommand, Data: entry(state.EnsureRelationOp("peers", "p", true, "", ""))},
		{Index: 4, Type: raft.LogCommand, Data: entry(state.ClaimUnitOp("m", "p", -1, 0))},
		{Index: 5, Type: raft.LogConfiguration},
		{Index: 6, Type: raft.LogCommand, Data: entry(state.EnsureRelationOp("other", "p", true, "", ""))},
	}
	// give hands the state machine the entries in, as raft does.
	give := func(f *FSM, entries ...*raft.Log) {
		t.Helper()
		for _, l := range entries {
			if l.Type == raft.LogConfiguration {
				f.StoreConfiguration(l.Index, raft.Configuration{Servers: []raft.Server{{ID: raft.ServerID(strconv.FormatUint(l.Index, 10))}}})
				continue
			}
			if res, ok := f.Apply(l).(*storepb.Result); !ok || state.ResultError(res) != nil {
				t.Fatalf("entry %d: %v", l.Index, res)
			}
		}
	}
	// The snapshot at entry 3.
	src := NewFSM(nil)
	give(src, log[:3]...)
	var snap bytes.Buffer
	if err := state.WriteSnapshot(&snap, src.State()); err != nil {
		t.Fatal(err)
	}

	for _, covered := range []bool{true, false} {
		t.Run(fmt.Sprintf("covered=%v", covered), func(t *testing.T) {
			f := NewFSM(nil)
			var asked []uint64
			f.covered = func(applied uint64) bool { asked = append(asked, applied); return covered }
			var told []string
			f.onConfiguration = func(c raft.Configuration) { told = append(told, string(c.Servers[0].ID)) }
			applied := log
			if !covered {
				applied = log[:1] // behind the snapshot
			}
			give(f, applied...)
			before := f.State()
			if err := f.Restore(nopCloser{bytes.NewReader(snap.Bytes())}); err != nil {
				t.Fatal(err)
			}
			if want := applied[len(applied)-1].Index; len(asked) != 1 || asked[0] != want {
				t.Fatalf("covered was asked %v, want once with %d applied", asked, want)
			}
			if covered != (f.State() == before) {
				t.Fatalf("state at %d after a restore of a snapshot at 3 (before: %d)", f.State().Index(), before.Index())
			}
			// raft goes on from the snapshot.
			told = nil
			for _, l := range log[3:] {
				res := f.Apply(l)
				if l.Type == raft.LogConfiguration {
					f.StoreConfiguration(l.Index, raft.Configuration{Servers: []raft.Server{{ID: raft.ServerID(strconv.FormatUint(l.Index, 10))}}})
					continue
				}
				r, _ := res.(*storepb.Result)
				if again := r.GetErrorCode() == storepb.ErrorCode_STALE_RETRY; again != covered {
					t.Fatalf("entry %d given again: %v", l.Index, r)
				}
			}
			if covered && (f.State() != before || len(told) != 0) {
				t.Fatalf("entries applied before were applied again: state %p (was %p), configurations %v", f.State(), before, told)
			}
			if !covered && (strings.Join(told, ",") != "5" || f.State().Index() != 6) {
				t.Fatalf("after the restore, configurations %v told, state at %d", told, f.State().Index())
			}
			give(f, &raft.Log{Index: 7, Type: raft.LogCommand, Data: entry(state.EnsureRelationOp("new", "p", true, "", ""))})
			if got := f.State(); got.Index() != 7 || len(got.Relations()) != 3 || len(got.Units()) != 1 {
				t.Fatalf("after entry 7: index %d, relations %v, units %v", got.Index(), got.Relations(), got.Units())
			}
		})
	}
}
