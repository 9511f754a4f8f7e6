package state_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
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

// TestRelationBagsVersionMovesWithTheRelationsBags applies random bag
// writes and deletions, across relations and owners, relations made and
// removed, and after each command checks, for every relation, that an
// unchanged RelationBagsVersion means unchanged bags; and that the version
// of a relation not written to does stay the same, most of the time (it is
// of no use otherwise). UnitsVersion moves with the units only.
func TestRelationBagsVersionMovesWithTheRelationsBags(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	s := statetest.New(t, "app")
	s.Must(state.ClaimUnitOp("app-0/x", "app-0", 0, 0), state.ClaimUnitOp("app-1/x", "app-1", 1, 0))
	var rels []int64
	newRelation := func(i int) {
		rels = append(rels, s.Must(state.EnsureRelationOp(fmt.Sprintf("db%d", i), "", false, fmt.Sprintf("remote%d", i), "db")).GetOps()[0].GetRelationId())
	}
	for i := range 6 {
		newRelation(i)
	}
	owner := func(id int64) string {
		r, _ := s.State().Relation(id)
		return []string{"app", "app/0", "app/1", r.RemoteApp + "/0", r.RemoteApp + "/3"}[rng.IntN(5)]
	}
	describe := func(st *state.State, id int64) string {
		var b strings.Builder
		st.EachBag(id, func(bag *state.Bag) bool {
			fmt.Fprintf(&b, "%s@%d:%v;", bag.Owner, bag.Revision, bag.Data)
			return true
		})
		return b.String()
	}
	stayed, moved := 0, 0
	for step := range 600 {
		before := s.State()
		units := before.UnitsVersion()
		target := rels[rng.IntN(len(rels))]
		switch rng.IntN(10) {
		case 0:
			s.Must(state.RemoveRelationOp(target))
			rels = slices.DeleteFunc(rels, func(id int64) bool { return id == target })
			newRelation(100 + step)
		case 1, 2:
			s.Must(state.UpdateBagOp(target, owner(target), nil, "k0", "k1", "k2"))
		default:
			s.Must(state.UpdateBagOp(target, owner(target), map[string]string{fmt.Sprintf("k%d", rng.IntN(3)): fmt.Sprint(rng.IntN(2))}))
		}
		after := s.State()
		if after.UnitsVersion() != units {
			t.Fatalf("step %d: a bag or relation write moved UnitsVersion", step)
		}
		for _, id := range rels {
			if before.RelationBagsVersion(id) != after.RelationBagsVersion(id) {
				continue
			}
			if b, a := describe(before, id), describe(after, id); b != a {
				t.Fatalf("step %d: relation %d's bags went from %s to %s, its version stayed", step, id, b, a)
			}
			if id != target {
				stayed++
			}
		}
		for _, id := range rels {
			if id != target && before.RelationBagsVersion(id) != after.RelationBagsVersion(id) {
				moved++
			}
		}
	}
	if stayed < 4*moved {
		t.Fatalf("the versions of relations not written to stayed %d times and moved %d times", stayed, moved)
	}
	if v := s.State().UnitsVersion(); v != s.State().UnitsVersion() {
		t.Fatal("UnitsVersion differs for one state")
	}
	units := s.State().UnitsVersion()
	s.Must(state.ClaimUnitOp("app-2/x", "app-2", 2, 0))
	if s.State().UnitsVersion() == units {
		t.Fatal("a new unit did not move UnitsVersion")
	}
}
