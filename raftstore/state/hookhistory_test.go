package state_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/state/statetest"
	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

func TestFailedHookDetailsAreRecordedAndClearedBySuccess(t *testing.T) {
	m := statetest.New(t, "app")
	u := m.Claim("m1", "app-0", 0)
	next := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	m.Must(state.FailedHookOp(u, "config-changed", "exited with status 3", state.HookFailure{OutputTail: []byte("no such file\n"), ExitCode: 3, Attempt: 1, NextAttempt: next}))
	e := m.State().UnitExtra(u)
	if e.HookError != "config-changed" || e.HookErrorOutputTail != "no such file\n" || e.HookErrorExitCode != 3 || e.HookErrorAttempt != 1 || !e.HookErrorNextAttempt.Equal(next) {
		t.Fatalf("after the first failure: %+v", e)
	}
	since := e.HookErrorSince
	m.Advance(time.Minute)
	m.Must(state.FailedHookOp(u, "config-changed", "exited with status 3", state.HookFailure{OutputTail: []byte("still no file\n"), ExitCode: 3, Attempt: 2, NextAttempt: next.Add(time.Minute)}))
	e = m.State().UnitExtra(u)
	if e.HookErrorAttempt != 2 || e.HookErrorOutputTail != "still no file\n" || !e.HookErrorSince.Equal(since) || !e.HookErrorNextAttempt.Equal(next.Add(time.Minute)) {
		t.Fatalf("after the second failure (since must stay %v): %+v", since, e)
	}
	if err := m.Do(state.FailedHookOp(u, "x", "y", state.HookFailure{OutputTail: bytes.Repeat([]byte("a"), state.MaxHookOutputTail+1)})); !errors.Is(err, state.ErrTooLarge) {
		t.Fatalf("an output tail over the limit: %v", err)
	}
	m.Must(state.SetHookErrorOp(u, "", ""))
	e = m.State().UnitExtra(u)
	if e.HookError != "" || e.HookErrorOutputTail != "" || e.HookErrorExitCode != 0 || e.HookErrorAttempt != 0 || !e.HookErrorNextAttempt.IsZero() {
		t.Fatalf("cleared: %+v", e)
	}
}

func TestHookHistoryKeepsTheLastTwentyInOrder(t *testing.T) {
	m := statetest.New(t, "app")
	u := m.Claim("m1", "app-0", 0)
	t0 := m.Now()
	for i := range 25 {
		m.Must(state.RecordHookOp(u, state.HookRecord{Hook: fmt.Sprintf("hook-%d", i), OK: i%2 == 0, ExitCode: i % 2, Started: t0.Add(time.Duration(i) * time.Second), Duration: time.Millisecond, Member: "m1"}))
		if i == 3 {
			// Earlier versions of the state keep their history as it was.
			before := m.State()
			m.Must(state.RecordHookOp(u, state.HookRecord{Hook: "extra"}))
			if n := len(before.UnitExtra(u).History); n != 4 {
				t.Fatalf("an earlier version's history changed: %d records", n)
			}
		}
	}
	h := m.State().UnitExtra(u).History
	if len(h) != state.MaxHookHistory {
		t.Fatalf("%d records kept, want %d", len(h), state.MaxHookHistory)
	}
	if h[0].Hook != "hook-5" || h[19].Hook != "hook-24" || h[19].OK != true || h[18].ExitCode != 1 || !h[19].Started.Equal(t0.Add(24*time.Second)) || h[19].Member != "m1" {
		t.Fatalf("history %+v ... %+v", h[0], h[19])
	}
	if err := m.Do(state.RecordHookOp("app/7", state.HookRecord{Hook: "install"})); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("a record for a unit that does not exist: %v", err)
	}
	if err := m.Do(state.RecordHookOp(u, state.HookRecord{})); err == nil {
		t.Fatal("a record without a hook name was accepted")
	}
}

func TestHookRetryRequests(t *testing.T) {
	m := statetest.New(t, "app")
	u := m.Claim("m1", "app-0", 0)
	if err := m.Do(state.RequestHookRetryOp(u)); err == nil || !strings.Contains(err.Error(), "no failed hook") {
		t.Fatalf("a retry of a unit with no failed hook: %v", err)
	}
	if err := m.Do(state.RequestHookRetryOp("app/9")); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("a retry of a unit that does not exist: %v", err)
	}
	m.Must(state.FailedHookOp(u, "install", "exited with status 1", state.HookFailure{ExitCode: 1, Attempt: 1}))
	m.Must(state.RequestHookRetryOp(u))
	m.Must(state.RequestHookRetryOp(u))
	if n := m.State().UnitExtra(u).RetryRequests; n != 2 {
		t.Fatalf("retry requests %d, want 2", n)
	}
	m.Must(state.SetHookErrorOp(u, "", ""))
	if n := m.State().UnitExtra(u).RetryRequests; n != 2 {
		t.Fatalf("a success reset the retry counter to %d", n)
	}
}

func TestHookDetailsSurviveSnapshotAndChangeTheHash(t *testing.T) {
	m := statetest.New(t, "app")
	u := m.Claim("m1", "app-0", 0)
	h0, _ := state.HashState(m.State())
	m.Must(state.FailedHookOp(u, "start", "exited with status 2", state.HookFailure{OutputTail: []byte("boom"), ExitCode: 2, Attempt: 4, NextAttempt: m.Now().Add(time.Minute)}),
		state.RecordHookOp(u, state.HookRecord{Hook: "start", ExitCode: 2, Error: "exited with status 2", Started: m.Now(), Duration: time.Second, Member: "m1"}))
	h1, _ := state.HashState(m.State())
	m.Must(state.RequestHookRetryOp(u))
	h2, _ := state.HashState(m.State())
	m.Must(state.RecordHookOp(u, state.HookRecord{Hook: "db-relation-joined", Relation: "db:1", RemoteUnit: "pg/0", OK: true}))
	h3, _ := state.HashState(m.State())
	if bytes.Equal(h0, h1) || bytes.Equal(h1, h2) || bytes.Equal(h2, h3) {
		t.Fatal("a failure, a retry request or a history record does not change the state hash")
	}
	got := reloaded(t, m.State())
	if a, b := state.Dump(m.State()), state.Dump(got); a != b || !strings.Contains(a, `tail="boom" exit=2 attempt=4`) || !strings.Contains(a, "retries=1") || !strings.Contains(a, "RemoteUnit:pg/0") {
		t.Fatalf("snapshot round trip:\n%s\nvs\n%s", a, b)
	}
	if h4, _ := state.HashState(got); !bytes.Equal(h3, h4) {
		t.Fatal("the restored state hashes differently")
	}
}

// An entry written by an older bagkeeper: a SetHookError with its first
// three fields only.
func TestOldHookErrorEntriesStillApply(t *testing.T) {
	m := statetest.New(t, "app")
	u := m.Claim("m1", "app-0", 0)
	var op []byte
	op = protowire.AppendTag(op, 1, protowire.BytesType)
	op = protowire.AppendString(op, u)
	op = protowire.AppendTag(op, 2, protowire.BytesType)
	op = protowire.AppendString(op, "install")
	op = protowire.AppendTag(op, 3, protowire.BytesType)
	op = protowire.AppendString(op, "hook install exited with status 1")
	var wrapped []byte
	wrapped = protowire.AppendTag(wrapped, 15, protowire.BytesType) // Op.set_hook_error
	wrapped = protowire.AppendBytes(wrapped, op)
	var decoded storepb.Op
	if err := proto.Unmarshal(wrapped, &decoded); err != nil {
		t.Fatal(err)
	}
	m.Must(&decoded)
	e := m.State().UnitExtra(u)
	if e.HookError != "install" || e.HookErrorMessage != "hook install exited with status 1" || e.HookErrorAttempt != 0 || e.HookErrorOutputTail != "" || !e.HookErrorNextAttempt.IsZero() {
		t.Fatalf("%+v", e)
	}
	// And an older snapshot's UnitExtraRecord (fields 1-6) restores.
	var rec []byte
	rec = protowire.AppendTag(rec, 1, protowire.BytesType)
	rec = protowire.AppendString(rec, u)
	rec = protowire.AppendTag(rec, 4, protowire.BytesType)
	rec = protowire.AppendString(rec, "install")
	var ur storepb.UnitExtraRecord
	if err := proto.Unmarshal(rec, &ur); err != nil || ur.GetHookError() != "install" || len(ur.GetHistory()) != 0 || ur.GetHookErrorAttempt() != 0 {
		t.Fatalf("%v %v", err, &ur)
	}
}
