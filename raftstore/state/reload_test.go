package state_test

import (
	"bytes"
	"testing"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
)

// reloaded returns st written to a snapshot and read back, as a member
// that installs the snapshot has it.
func reloaded(t testing.TB, st *state.State) *state.State {
	t.Helper()
	var buf bytes.Buffer
	if err := state.WriteSnapshot(&buf, st); err != nil {
		t.Fatal(err)
	}
	got, err := state.ReadSnapshot(&buf)
	if err != nil {
		t.Fatal(err)
	}
	return got
}
