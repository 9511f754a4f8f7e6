package raftstore

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

func TestUnknownCommandVersionHaltsApply(t *testing.T) {
	var fatal error
	fatalSeen := make(chan struct{})
	f := NewFSM(func(err error) { fatal = err; close(fatalSeen) })
	data, _ := proto.Marshal(&storepb.Command{Version: state.CommandVersion + 1})
	done := make(chan any)
	go func() { done <- f.Apply(&raft.Log{Type: raft.LogCommand, Index: 1, Data: data}) }()
	<-fatalSeen
	select {
	case <-done:
		t.Fatal("Apply returned past a command it cannot apply")
	default:
	}
	if fatal == nil || !strings.Contains(fatal.Error(), "upgrade") {
		t.Fatalf("fatal error %v", fatal)
	}
	f.Halt()
	<-done
	if f.State().Index() != 0 {
		t.Fatal("state advanced past an unknown command")
	}
}

func TestUndecodableCommandIsRefusedDeterministically(t *testing.T) {
	f := NewFSM(nil)
	res := f.Apply(&raft.Log{Type: raft.LogCommand, Index: 7, Data: []byte{0xff, 0xff}}).(*storepb.Result)
	if !errors.Is(state.ResultError(res), state.ErrInvalid) || f.State().Index() != 7 {
		t.Fatalf("result %v index %d", res, f.State().Index())
	}
}

func TestFSMRestoreReplacesAllState(t *testing.T) {
	src := state.NewMachine()
	apply := func(m *state.Machine, ops ...*storepb.Op) {
		t.Helper()
		data, err := proto.Marshal(state.NewCommand(ops...))
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
	apply(f.m, state.ClaimUnitOp("m", "p", -1))
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
