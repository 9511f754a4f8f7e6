package state_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/state/statetest"
	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

func enqueue(t *testing.T, m *statetest.Store, unit, name, params string) int64 {
	t.Helper()
	return m.Must(state.EnqueueActionOp(unit, name, []byte(params))).GetOps()[0].GetActionId()
}

func TestActionLifecycle(t *testing.T) {
	m := statetest.New(t, "app")
	u := m.Claim("m1", "app-0", 0)
	id1 := enqueue(t, m, u, "backup", `{"to":"s3"}`)
	id2 := enqueue(t, m, u, "snapshot", ``)
	if id1 != 1 || id2 != 2 {
		t.Fatalf("ids %d %d, want 1 2", id1, id2)
	}
	a, _ := m.State().Action(id2)
	if a.Status != state.ActionPending || string(a.ParamsJSON) != "{}" || !a.Enqueued.Equal(m.Now()) {
		t.Fatalf("%+v", a)
	}
	if next, ok := m.State().NextAction(u); !ok || next.ID != id1 {
		t.Fatalf("next = %+v", next)
	}
	// Only a running action completes or logs.
	if err := m.Do(state.FinishActionOp(id1, state.ActionCompleted, "", nil, nil)); !errors.Is(err, state.ErrConflict) {
		t.Fatalf("complete pending: %v", err)
	}
	if err := m.Do(state.LogActionOp(id1, []state.ActionLogLine{{Time: m.Now(), Message: "x"}})); !errors.Is(err, state.ErrConflict) {
		t.Fatalf("log pending: %v", err)
	}
	m.Advance(time.Second)
	m.Must(state.StartActionOp(id1, "m1", "app-0"))
	if err := m.Do(state.StartActionOp(id1, "m1", "app-0")); !errors.Is(err, state.ErrConflict) {
		t.Fatalf("started twice: %v", err)
	}
	if next, _ := m.State().NextAction(u); next.ID != id1 || next.Status != state.ActionRunning {
		t.Fatalf("a running action comes first: %+v", next)
	}
	m.Must(state.LogActionOp(id1, []state.ActionLogLine{{Time: m.Now(), Message: "one"}}))
	m.Must(state.FinishActionOp(id1, state.ActionCompleted, "", []byte(`{"size":"10G"}`), []state.ActionLogLine{{Time: m.Now(), Message: "two"}}))
	a, _ = m.State().Action(id1)
	if a.Status != state.ActionCompleted || string(a.ResultsJSON) != `{"size":"10G"}` || len(a.Log) != 2 || a.Log[1].Message != "two" || a.Member != "m1" || a.Pod != "app-0" || a.Started.IsZero() || a.Completed.IsZero() {
		t.Fatalf("%+v", a)
	}
	if err := m.Do(state.FinishActionOp(id1, state.ActionFailed, "again", nil, nil)); !errors.Is(err, state.ErrConflict) {
		t.Fatalf("finished twice: %v", err)
	}
	// A pending action is cancelled or failed, never completed.
	m.Must(state.FinishActionOp(id2, state.ActionCancelled, "", nil, nil))
	if _, ok := m.State().NextAction(u); ok {
		t.Fatal("nothing is left to run")
	}
	if len(m.State().Actions()) != 2 {
		t.Fatal("finished actions are kept")
	}
}

func TestActionRefusals(t *testing.T) {
	m := statetest.New(t, "app")
	u := m.Claim("m1", "app-0", 0)
	for _, c := range []struct {
		op   *storepb.Op
		want error
		text string
	}{
		{state.EnqueueActionOp("app/7", "x", nil), state.ErrNotFound, ""},
		{state.EnqueueActionOp(u, "Bad_Name", nil), state.ErrInvalid, `invalid action name "Bad_Name"`},
		{state.EnqueueActionOp(u, "x", []byte(`[1]`)), state.ErrInvalid, "action parameters are not a JSON object"},
		{state.EnqueueActionOp(u, "x", bytes.Repeat([]byte("a"), state.MaxActionParams+1)), state.ErrTooLarge, "over the 65536 byte limit"},
		{state.StartActionOp(42, "m1", "p"), state.ErrNotFound, "action 42 not found"},
	} {
		err := m.Do(c.op)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.text) {
			t.Errorf("%v: got %v, want %v containing %q", c.op, err, c.want, c.text)
		}
	}
	id := enqueue(t, m, u, "x", "")
	m.Must(state.StartActionOp(id, "m1", "p"))
	if err := m.Do(state.FinishActionOp(id, state.ActionCompleted, "", bytes.Repeat([]byte("a"), state.MaxActionResults+1), nil)); !errors.Is(err, state.ErrTooLarge) {
		t.Fatalf("big results: %v", err)
	}
	if err := m.Do(state.FinishActionOp(id, "done", "", nil, nil)); !errors.Is(err, state.ErrInvalid) {
		t.Fatalf("bad status: %v", err)
	}
	lines := make([]state.ActionLogLine, state.MaxActionLogLines+1)
	if err := m.Do(state.LogActionOp(id, lines)); !errors.Is(err, state.ErrTooLarge) {
		t.Fatalf("long log: %v", err)
	}
	// Bounded queue.
	for range state.MaxActionsQueued - 1 {
		enqueue(t, m, u, "x", "")
	}
	if err := m.Do(state.EnqueueActionOp(u, "x", nil)); !errors.Is(err, state.ErrTooLarge) {
		t.Fatalf("queue over its bound: %v", err)
	}
}

func TestActionsKeptAreBoundedAndIdsNeverReused(t *testing.T) {
	m := statetest.New(t, "app")
	u := m.Claim("m1", "app-0", 0)
	var last int64
	for range state.MaxActionsKept + 5 {
		last = enqueue(t, m, u, "x", "")
		m.Must(state.FinishActionOp(last, state.ActionCancelled, "", nil, nil))
	}
	acts := m.State().Actions()
	if len(acts) != state.MaxActionsKept || acts[len(acts)-1].ID != last || acts[0].ID != 6 {
		t.Fatalf("%d kept, first %d, last %d (want %d)", len(acts), acts[0].ID, acts[len(acts)-1].ID, last)
	}
	if id := enqueue(t, m, u, "x", ""); id != last+1 {
		t.Fatalf("id %d after %d", id, last)
	}
}

func TestActionsOfARemovedUnitFail(t *testing.T) {
	m := statetest.New(t, "app")
	u := m.Claim("m1", "app-0", 0)
	id := enqueue(t, m, u, "x", "")
	m.Must(state.RemoveUnitOp(u, 0, "scaled down"))
	a, _ := m.State().Action(id)
	if a.Status != state.ActionFailed || a.Message != "the unit was removed before the action finished" {
		t.Fatalf("%+v", a)
	}
}

func TestActionsSurviveSnapshotAndChangeTheHash(t *testing.T) {
	m := statetest.New(t, "app")
	u := m.Claim("m1", "app-0", 0)
	h0, err := state.HashState(m.State())
	if err != nil {
		t.Fatal(err)
	}
	id := enqueue(t, m, u, "x", `{"a":1}`)
	m.Must(state.StartActionOp(id, "m1", "app-0"))
	m.Must(state.FinishActionOp(id, state.ActionFailed, "boom", []byte(`{"k":"v"}`), []state.ActionLogLine{{Time: m.Now(), Message: "l"}}))
	enqueue(t, m, u, "y", "")
	h1, _ := state.HashState(m.State())
	if bytes.Equal(h0, h1) {
		t.Fatal("actions do not change the state hash")
	}
	got := reloaded(t, m.State())
	if a, b := state.Dump(m.State()), state.Dump(got); a != b || !strings.Contains(a, "action 1 app/0 x failed") {
		t.Fatalf("snapshot round trip:\n%s\nvs\n%s", a, b)
	}
	if h2, _ := state.HashState(got); !bytes.Equal(h1, h2) {
		t.Fatal("restored state hashes differently")
	}
}
