package raftstore

import (
	"bytes"
	"errors"
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
