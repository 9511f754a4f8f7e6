package raftstore

import (
	"strconv"
	"testing"
)

// TestSnapshotIndexAsksRaftOnlyAfterASnapshotWasWritten: raft's Stats is
// read once, then only while a snapshot written to the store is newer than
// what raft reported (raft records it after the state machine has it).
func TestSnapshotIndexAsksRaftOnlyAfterASnapshotWasWritten(t *testing.T) {
	raftSays, calls := uint64(0), 0
	s := snapshotIndex{stats: func() map[string]string {
		calls++
		return map[string]string{"last_snapshot_index": strconv.FormatUint(raftSays, 10)}
	}}
	get := func(want uint64, wantCalls int) {
		t.Helper()
		if got := s.get(); got != want || calls != wantCalls {
			t.Fatalf("get() = %d after %d Stats calls, want %d after %d", got, calls, want, wantCalls)
		}
	}
	get(0, 1)
	get(0, 1) // cached
	raftSays = 7
	get(0, 1) // nothing written since: still cached (raft cannot have a newer one)
	s.wrote(12)
	get(7, 2) // written, not yet recorded by raft: asked again...
	get(7, 3) // ...at every call until it is
	raftSays = 12
	get(12, 4)
	get(12, 4)
	s.wrote(5) // an older one (never happens, but must not matter)
	get(12, 4)
}
