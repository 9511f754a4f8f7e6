package state_test

import (
	"testing"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/state/statetest"
)

// TestBagsChangedAtFollowsAnOwnersBags: the index moves with a command
// that changes, creates or deletes one of the owner's bags, and with
// nothing else — not a write that changes nothing, not another owner's
// bag; a restored state has each owner's latest change its bags show.
// RelationsVersion moves with the relations only.
func TestBagsChangedAtFollowsAnOwnersBags(t *testing.T) {
	s := statetest.New(t, "app")
	s.Must(state.ClaimUnitOp("app-0/x", "app-0", 0, 0), state.ClaimUnitOp("app-1/x", "app-1", 1, 0))
	res := s.Must(state.EnsureRelationOp("peers", "app-peers", true, "", ""))
	rel := res.GetOps()[0].GetRelationId()
	relations := s.State().RelationsVersion()
	if got := s.State().BagsChangedAt("app/0"); got != 0 {
		t.Fatalf("no bag written yet: BagsChangedAt = %d", got)
	}

	first := s.Must(state.UpdateBagOp(rel, "app/0", map[string]string{"a": "1"})).GetIndex()
	st := s.State()
	if got := st.BagsChangedAt("app/0"); got != first {
		t.Fatalf("after a write to app/0's bag at %d: %d", first, got)
	}
	if st.BagsChangedAt("app/1") != 0 || st.RelationsVersion() != relations {
		t.Fatalf("a write to app/0's bag moved app/1 (%d) or the relations", st.BagsChangedAt("app/1"))
	}

	s.Must(state.UpdateBagOp(rel, "app/0", map[string]string{"a": "1"})) // the same data
	s.Must(state.UpdateBagOp(rel, "app", map[string]string{"b": "2"}))   // another owner
	if got := s.State().BagsChangedAt("app/0"); got != first {
		t.Fatalf("a write that changed nothing of app/0's, or another owner's, moved it: %d, want %d", got, first)
	}

	other := s.Must(state.EnsureRelationOp("db", "", false, "pg", "db")).GetOps()[0].GetRelationId()
	if s.State().RelationsVersion() == relations {
		t.Fatal("a new relation did not move RelationsVersion")
	}
	second := s.Must(state.UpdateBagOp(other, "app/0", map[string]string{"c": "3"})).GetIndex()
	if got := s.State().BagsChangedAt("app/0"); got != second {
		t.Fatalf("a new bag of app/0 at %d: %d", second, got)
	}

	restored := reloaded(t, s.State())
	if got := restored.BagsChangedAt("app/0"); got != second {
		t.Fatalf("restored: %d, want %d", got, second)
	}

	// A removed unit keeps its bags until it comes back, with none.
	s.Must(state.RemoveUnitOp("app/0", 0, "test"))
	if got := s.State().BagsChangedAt("app/0"); got != second {
		t.Fatalf("app/0 removed, its bags kept: %d, want %d", got, second)
	}
	back := s.Must(state.ClaimUnitOp("app-0/y", "app-0", 0, 0)).GetIndex()
	if _, ok := s.State().Bag(other, "app/0"); ok {
		t.Fatal("app/0 came back with its old bag")
	}
	if got := s.State().BagsChangedAt("app/0"); got != back {
		t.Fatalf("app/0 back without its bags at %d: %d", back, got)
	}
}
