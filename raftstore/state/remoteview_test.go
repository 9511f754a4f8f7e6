package state_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/state/statetest"
	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

// remoteRelation returns a store of application "app" with a relation to
// "pg" and the relation's id.
func remoteRelation(t *testing.T) (*statetest.Store, int64) {
	m := statetest.New(t, "app")
	rel := m.Must(state.EnsureRelationOp("db", "pgsql", false, "pg", "database")).GetOps()[0].GetRelationId()
	return m, rel
}

// view applies a view of pg from source "pg-cluster" and returns the op's
// result.
func view(t *testing.T, m *statetest.Store, rel int64, revision uint64, app map[string]string, units map[string]map[string]string) *storepb.OpResult {
	t.Helper()
	return m.Must(state.SetRemoteViewOp(rel, "pg", "pg-cluster", revision, app, units)).GetOps()[0]
}

// revisions renders the bags of a relation as "owner@revision" strings.
func revisions(s *state.State, rel int64) string {
	var out []string
	for _, b := range s.Bags(rel) {
		out = append(out, b.Owner+"@"+strconv.FormatUint(b.Revision, 10))
	}
	return strings.Join(out, " ")
}

func TestRemoteViewCreatesABagForEveryUnitEvenEmpty(t *testing.T) {
	m, rel := remoteRelation(t)
	res := view(t, m, rel, 1, nil, map[string]map[string]string{"pg/0": nil, "pg/1": {"host": "h1"}})
	if res.GetStale() || res.GetRelationId() != rel {
		t.Fatalf("result %v", res)
	}
	s := m.State()
	if got := revisions(s, rel); got != "pg/0@1 pg/1@1" {
		t.Fatalf("bags %s, want pg/0@1 pg/1@1 (and no application bag)", got)
	}
	b, ok := s.Bag(rel, "pg/0")
	if !ok || b.Data.Len() != 0 || b.ModifiedIndex != s.Index() {
		t.Fatalf("empty remote unit bag: %+v %v", b, ok)
	}
	if b, _ := s.Bag(rel, "pg/1"); state.KV(b.Data) != `{"host"="h1"}` {
		t.Fatalf("pg/1 bag %s", state.KV(b.Data))
	}
	r, _ := s.Relation(rel)
	if r.RemoteSource != "pg-cluster" || r.RemoteRevision != 1 {
		t.Fatalf("relation remembers %q@%d", r.RemoteSource, r.RemoteRevision)
	}
}

func TestIdenticalRemoteViewKeepsEveryRevision(t *testing.T) {
	m, rel := remoteRelation(t)
	units := map[string]map[string]string{"pg/0": nil, "pg/1": {"host": "h1"}}
	view(t, m, rel, 1, map[string]string{"db": "x"}, units)
	before := m.State()
	view(t, m, rel, 2, map[string]string{"db": "x"}, map[string]map[string]string{"pg/0": {}, "pg/1": {"host": "h1"}})
	after := m.State()
	if revisions(after, rel) != revisions(before, rel) || revisions(after, rel) != "pg@1 pg/0@1 pg/1@1" {
		t.Fatalf("an identical view moved revisions: %s -> %s", revisions(before, rel), revisions(after, rel))
	}
	for _, b := range after.Bags(rel) {
		if old, _ := before.Bag(rel, b.Owner); old != b {
			t.Fatalf("an identical view rewrote the bag of %s", b.Owner)
		}
	}
	if r, _ := after.Relation(rel); r.RemoteRevision != 2 {
		t.Fatalf("relation at view revision %d, want 2", r.RemoteRevision)
	}
}

func TestChangedRemoteUnitBumpsOnlyItsOwnRevision(t *testing.T) {
	m, rel := remoteRelation(t)
	view(t, m, rel, 1, map[string]string{"db": "x"}, map[string]map[string]string{"pg/0": {"a": "1"}, "pg/1": {"b": "1"}})
	view(t, m, rel, 2, map[string]string{"db": "x"}, map[string]map[string]string{"pg/0": {"a": "1"}, "pg/1": {"b": "2", "c": "3"}})
	s := m.State()
	if got := revisions(s, rel); got != "pg@1 pg/0@1 pg/1@2" {
		t.Fatalf("bags %s, want pg@1 pg/0@1 pg/1@2", got)
	}
	if b, _ := s.Bag(rel, "pg/1"); state.KV(b.Data) != `{"b"="2","c"="3"}` || b.ModifiedIndex != s.Index() {
		t.Fatalf("pg/1 bag %+v", b)
	}
	// Emptying a unit's data is a change too; its bag stays.
	view(t, m, rel, 3, map[string]string{"db": "x"}, map[string]map[string]string{"pg/0": {"a": "1"}, "pg/1": nil})
	if got := revisions(m.State(), rel); got != "pg@1 pg/0@1 pg/1@3" {
		t.Fatalf("bags %s after emptying pg/1, want pg@1 pg/0@1 pg/1@3", got)
	}
}

func TestRemoteUnitMissingFromTheViewDeparts(t *testing.T) {
	m, rel := remoteRelation(t)
	view(t, m, rel, 1, nil, map[string]map[string]string{"pg/0": {"a": "1"}, "pg/1": nil, "pg/2": nil})
	view(t, m, rel, 2, nil, map[string]map[string]string{"pg/1": nil})
	if got := revisions(m.State(), rel); got != "pg/1@1" {
		t.Fatalf("bags %s, want only pg/1@1", got)
	}
	// A view with no unit at all: every remote unit departed.
	view(t, m, rel, 3, nil, nil)
	if got := revisions(m.State(), rel); got != "" {
		t.Fatalf("bags %s, want none", got)
	}
	// A unit that comes back starts again from revision 1.
	view(t, m, rel, 4, nil, map[string]map[string]string{"pg/0": {"a": "2"}})
	if got := revisions(m.State(), rel); got != "pg/0@1" {
		t.Fatalf("bags %s, want pg/0@1", got)
	}
}

func TestRemoteAppBagFollowsTheView(t *testing.T) {
	m, rel := remoteRelation(t)
	units := map[string]map[string]string{"pg/0": nil}
	// No data and no bag: no bag is created.
	view(t, m, rel, 1, map[string]string{}, units)
	if _, ok := m.State().Bag(rel, "pg"); ok {
		t.Fatal("an empty application view created the application bag")
	}
	view(t, m, rel, 2, map[string]string{"db": "x"}, units)
	if b, ok := m.State().Bag(rel, "pg"); !ok || b.Revision != 1 || state.KV(b.Data) != `{"db"="x"}` {
		t.Fatalf("created application bag %+v", b)
	}
	view(t, m, rel, 3, map[string]string{"db": "x"}, units)
	if b, _ := m.State().Bag(rel, "pg"); b.Revision != 1 {
		t.Fatalf("unchanged application bag at revision %d, want 1", b.Revision)
	}
	view(t, m, rel, 4, map[string]string{"db": "y", "user": "u"}, units)
	if b, _ := m.State().Bag(rel, "pg"); b.Revision != 2 || state.KV(b.Data) != `{"db"="y","user"="u"}` {
		t.Fatalf("updated application bag %+v", b)
	}
	// Emptied, the bag stays, at the next revision.
	view(t, m, rel, 5, nil, units)
	if b, ok := m.State().Bag(rel, "pg"); !ok || b.Revision != 3 || b.Data.Len() != 0 {
		t.Fatalf("emptied application bag %+v %v", b, ok)
	}
	view(t, m, rel, 6, nil, units)
	if b, _ := m.State().Bag(rel, "pg"); b.Revision != 3 {
		t.Fatalf("still empty application bag at revision %d, want 3", b.Revision)
	}
}

func TestStaleRemoteViewChangesNothing(t *testing.T) {
	m, rel := remoteRelation(t)
	view(t, m, rel, 5, map[string]string{"db": "x"}, map[string]map[string]string{"pg/0": {"a": "1"}})
	before := state.Dump(m.State())
	for _, rev := range []uint64{5, 4, 0} {
		res := view(t, m, rel, rev, map[string]string{"db": "old"}, map[string]map[string]string{"pg/1": nil})
		if !res.GetStale() {
			t.Fatalf("view at revision %d after 5 not reported stale: %v", rev, res)
		}
		if after := state.Dump(m.State()); strip(after) != strip(before) {
			t.Fatalf("a stale view at revision %d changed the state:\n%s\nwant:\n%s", rev, after, before)
		}
	}
	if res := view(t, m, rel, 6, map[string]string{"db": "x"}, map[string]map[string]string{"pg/0": {"a": "1"}}); res.GetStale() {
		t.Fatal("a newer view reported stale")
	}
	// A fresh relation starts at the empty source and revision 0.
	res := m.Must(state.SetRemoteViewOp(rel, "pg", "", 0, nil, nil)).GetOps()[0]
	if res.GetStale() {
		t.Fatal("a view from another source reported stale")
	}
	res = m.Must(state.SetRemoteViewOp(rel, "pg", "", 0, nil, map[string]map[string]string{"pg/3": nil})).GetOps()[0]
	if !res.GetStale() {
		t.Fatal("a second view at revision 0 of the empty source applied")
	}
}

func TestRemoteViewFromANewSourceIsAppliedAtAnyRevision(t *testing.T) {
	m, rel := remoteRelation(t)
	view(t, m, rel, 40, map[string]string{"db": "x"}, map[string]map[string]string{"pg/0": {"a": "1"}, "pg/1": nil})
	// The remote group was rebuilt: its revisions start again.
	res := m.Must(state.SetRemoteViewOp(rel, "pg", "pg-cluster-2", 1, map[string]string{"db": "y"}, map[string]map[string]string{"pg/0": {"a": "1"}})).GetOps()[0]
	if res.GetStale() {
		t.Fatal("a view from a new source reported stale")
	}
	s := m.State()
	if got := revisions(s, rel); got != "pg@2 pg/0@1" {
		t.Fatalf("bags %s, want pg@2 pg/0@1", got)
	}
	if r, _ := s.Relation(rel); r.RemoteSource != "pg-cluster-2" || r.RemoteRevision != 1 {
		t.Fatalf("relation remembers %q@%d", r.RemoteSource, r.RemoteRevision)
	}
	// And from then on, the new source's revisions count.
	if res := m.Must(state.SetRemoteViewOp(rel, "pg", "pg-cluster-2", 1, nil, nil)).GetOps()[0]; !res.GetStale() {
		t.Fatal("a repeated view of the new source applied")
	}
}

func TestBadRemoteViewIsRefusedAndChangesNothing(t *testing.T) {
	m, rel := remoteRelation(t)
	peer := m.Relation("peers", "iface")
	u := m.Claim("m1", "app-0", 0)
	view(t, m, rel, 1, map[string]string{"db": "x"}, map[string]map[string]string{"pg/0": {"a": "1"}})
	big := strings.Repeat("x", state.MaxBagSize)
	dup := state.SetRemoteViewOp(rel, "pg", "pg-cluster", 2, nil, map[string]map[string]string{"pg/0": nil})
	dup.GetSetRemoteView().Units = append(dup.GetSetRemoteView().Units, &storepb.RemoteUnitView{Unit: "pg/0", Data: map[string]string{"a": "2"}})
	units := func(names ...string) map[string]map[string]string {
		out := map[string]map[string]string{}
		for _, n := range names {
			out[n] = nil
		}
		return out
	}
	cases := []struct {
		name string
		op   *storepb.Op
		want error
	}{
		{"unknown relation", state.SetRemoteViewOp(99, "pg", "pg-cluster", 2, nil, nil), state.ErrNotFound},
		{"peer relation", state.SetRemoteViewOp(peer, "", "pg-cluster", 2, nil, nil), state.ErrInvalid},
		{"peer relation named after the app", state.SetRemoteViewOp(peer, "app", "pg-cluster", 2, nil, units(u)), state.ErrInvalid},
		{"wrong remote app", state.SetRemoteViewOp(rel, "mysql", "pg-cluster", 2, nil, units("mysql/0")), state.ErrInvalid},
		{"unit of another app", state.SetRemoteViewOp(rel, "pg", "pg-cluster", 2, nil, units("pg/1", "mysql/0")), state.ErrInvalid},
		{"unit of this app", state.SetRemoteViewOp(rel, "pg", "pg-cluster", 2, nil, units(u)), state.ErrInvalid},
		{"application as a unit", state.SetRemoteViewOp(rel, "pg", "pg-cluster", 2, nil, units("pg")), state.ErrInvalid},
		{"garbage unit name", state.SetRemoteViewOp(rel, "pg", "pg-cluster", 2, nil, units("pg/01")), state.ErrInvalid},
		{"duplicate unit", dup, state.ErrInvalid},
		{"empty key", state.SetRemoteViewOp(rel, "pg", "pg-cluster", 2, nil, map[string]map[string]string{"pg/1": {"": "v"}}), state.ErrInvalid},
		{"oversize unit bag", state.SetRemoteViewOp(rel, "pg", "pg-cluster", 2, nil, map[string]map[string]string{"pg/1": {"k": big}}), state.ErrTooLarge},
		{"oversize application bag", state.SetRemoteViewOp(rel, "pg", "pg-cluster", 2, map[string]string{"k": big}, units("pg/1")), state.ErrTooLarge},
		// A bad view is refused even at a stale revision.
		{"stale and bad", state.SetRemoteViewOp(rel, "pg", "pg-cluster", 1, nil, units("nope")), state.ErrInvalid},
	}
	before := state.Dump(m.State())
	for _, c := range cases {
		err := m.Do(c.op)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
		if after := state.Dump(m.State()); strip(after) != strip(before) {
			t.Fatalf("%s: the refused view changed the state:\n%s\nwant:\n%s", c.name, after, before)
		}
	}
	// A good view in a command that fails later is not applied either.
	err := m.Do(state.SetRemoteViewOp(rel, "pg", "pg-cluster", 2, nil, units("pg/5")), state.UpdateBagOp(99, "pg", map[string]string{"k": "v"}))
	if !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("failing command: %v", err)
	}
	if after := state.Dump(m.State()); strip(after) != strip(before) {
		t.Fatalf("a failed command applied its view:\n%s\nwant:\n%s", after, before)
	}
}

func TestRemoteViewNeverTouchesThisApplicationsBags(t *testing.T) {
	m, rel := remoteRelation(t)
	u := m.Claim("m1", "app-0", 0)
	m.Must(state.UpdateBagOp(rel, u, map[string]string{"mine": "1"}), state.UpdateBagOp(rel, "app", map[string]string{"ours": "1"}))
	view(t, m, rel, 1, map[string]string{"db": "x"}, map[string]map[string]string{"pg/0": nil})
	view(t, m, rel, 2, nil, nil)
	s := m.State()
	if got := revisions(s, rel); got != "app@1 app/0@1 pg@2" {
		t.Fatalf("bags %s, want app@1 app/0@1 pg@2", got)
	}
	if b, _ := s.Bag(rel, u); state.KV(b.Data) != `{"mine"="1"}` {
		t.Fatalf("own unit bag %s", state.KV(b.Data))
	}
	if b, _ := s.Bag(rel, "app"); state.KV(b.Data) != `{"ours"="1"}` {
		t.Fatalf("own application bag %s", state.KV(b.Data))
	}
}

func TestOfferedFlagIsPartOfTheRelation(t *testing.T) {
	m := statetest.New(t, "app")
	offered := m.Must(state.OfferedRelationOp("db", "pgsql", "wp", "database")).GetOps()[0].GetRelationId()
	if r, _ := m.State().Relation(offered); !r.Offered || r.Peer {
		t.Fatalf("offered relation %+v", *r)
	}
	if again := m.Must(state.OfferedRelationOp("db", "pgsql", "wp", "database")).GetOps()[0].GetRelationId(); again != offered {
		t.Fatalf("offering again gave relation %d, want %d", again, offered)
	}
	if err := m.Do(state.EnsureRelationOp("db", "pgsql", false, "wp", "database")); !errors.Is(err, state.ErrConflict) {
		t.Fatalf("consuming an offered relation's key: %v", err)
	}
	consumed := m.Must(state.EnsureRelationOp("cache", "redis", false, "redis", "cache")).GetOps()[0].GetRelationId()
	if r, _ := m.State().Relation(consumed); r.Offered {
		t.Fatal("EnsureRelationOp made an offered relation")
	}
	if err := m.Do(state.OfferedRelationOp("cache", "redis", "redis", "cache")); !errors.Is(err, state.ErrConflict) {
		t.Fatalf("offering a consumed relation's key: %v", err)
	}
	peer := &storepb.Op{Op: &storepb.Op_EnsureRelation{EnsureRelation: &storepb.EnsureRelation{Endpoint: "peers", Interface: "p", Peer: true, Offered: true}}}
	if err := m.Do(peer); !errors.Is(err, state.ErrInvalid) {
		t.Fatalf("offered peer relation: %v", err)
	}
	// Views apply on either side of an offer.
	m.Must(state.SetRemoteViewOp(offered, "wp", "wp-cluster", 1, nil, map[string]map[string]string{"wp/0": nil}))
	if _, ok := m.State().Bag(offered, "wp/0"); !ok {
		t.Fatal("view of the consumer not applied")
	}
}

func TestSnapshotKeepsRemoteViewsAndEmptyBags(t *testing.T) {
	m, rel := remoteRelation(t)
	offered := m.Must(state.OfferedRelationOp("api", "http", "web", "backend")).GetOps()[0].GetRelationId()
	view(t, m, rel, 7, map[string]string{"db": "x"}, map[string]map[string]string{"pg/0": nil, "pg/1": {"a": "1"}})
	m.Must(state.SetRemoteViewOp(offered, "web", "web-cluster", 3, nil, map[string]map[string]string{"web/2": {}}))
	got := reloaded(t, m.State())
	if state.Dump(got) != state.Dump(m.State()) {
		t.Fatalf("restored state differs:\n%s\nwant:\n%s", state.Dump(got), state.Dump(m.State()))
	}
	r, _ := got.Relation(rel)
	o, _ := got.Relation(offered)
	if r.Offered || r.RemoteSource != "pg-cluster" || r.RemoteRevision != 7 || !o.Offered || o.RemoteSource != "web-cluster" || o.RemoteRevision != 3 {
		t.Fatalf("restored relations %+v %+v", *r, *o)
	}
	for _, c := range []struct {
		rel   int64
		owner string
	}{{rel, "pg/0"}, {offered, "web/2"}} {
		if b, ok := got.Bag(c.rel, c.owner); !ok || b.Data.Len() != 0 || b.Revision != 1 {
			t.Fatalf("empty bag of %s after restore: %+v %v", c.owner, b, ok)
		}
	}
	// The restored state goes on the same way: the same view is stale.
	m2 := statetest.New(t, "app")
	m2.Restore(got)
	if res := view(t, m2, rel, 7, nil, nil); !res.GetStale() {
		t.Fatal("the restored relation forgot its view's revision")
	}
}

func TestStateHashCoversTheRemoteView(t *testing.T) {
	hash := func(offer bool, source string, revision uint64) string {
		m := statetest.New(t, "app")
		op := state.EnsureRelationOp("db", "pgsql", false, "pg", "database")
		if offer {
			op = state.OfferedRelationOp("db", "pgsql", "pg", "database")
		}
		rel := m.Must(op).GetOps()[0].GetRelationId()
		m.Must(state.SetRemoteViewOp(rel, "pg", source, revision, nil, map[string]map[string]string{"pg/0": nil}))
		h, err := state.HashState(m.State())
		if err != nil {
			t.Fatal(err)
		}
		return string(h)
	}
	base := hash(false, "a", 1)
	if base != hash(false, "a", 1) {
		t.Fatal("the same state hashed differently")
	}
	for name, h := range map[string]string{"offered": hash(true, "a", 1), "source": hash(false, "b", 1), "revision": hash(false, "a", 2)} {
		if h == base {
			t.Errorf("states differing only in their relation's %s hash the same", name)
		}
	}
}

func TestRemoteViewCarriesTheRemoteModel(t *testing.T) {
	m, rel := remoteRelation(t)
	op := state.SetRemoteViewOp(rel, "pg", "pg-cluster", 1, nil, map[string]map[string]string{"pg/0": nil})
	op.GetSetRemoteView().RemoteModel = "model-of-pg"
	m.Must(op)
	if r, _ := m.State().Relation(rel); r.RemoteModel != "model-of-pg" {
		t.Fatalf("remote model %q", r.RemoteModel)
	}
	// A view that says no model leaves the one held.
	view(t, m, rel, 2, nil, map[string]map[string]string{"pg/0": nil})
	if r, _ := m.State().Relation(rel); r.RemoteModel != "model-of-pg" {
		t.Fatalf("remote model %q after a view without one", r.RemoteModel)
	}
	got := reloaded(t, m.State())
	if r, _ := got.Relation(rel); r.RemoteModel != "model-of-pg" {
		t.Fatalf("remote model %q after a snapshot", r.RemoteModel)
	}
}

// TestEachUnitBagVisitsOnlyThatApplicationsUnits: the bags of one
// application's units, in owner order, and neither the application bags
// nor the other application's units, nor an application whose name the
// asked one begins.
func TestEachUnitBagVisitsOnlyThatApplicationsUnits(t *testing.T) {
	m, rel := remoteRelation(t)
	view(t, m, rel, 1, map[string]string{"a": "1"}, map[string]map[string]string{"pg/0": {"k": "v"}, "pg/1": nil, "pg/10": {"k": "w"}})
	m.Must(state.ClaimUnitOp("app-0/x", "app-0", 0, 0))
	m.Must(state.UpdateBagOp(rel, "app/0", map[string]string{"mine": "1"}), state.UpdateBagOp(rel, "app", map[string]string{"ours": "1"}))
	if got := revisions(m.State(), rel); strings.Count(got, "@") != 6 {
		t.Fatalf("the relation's bags: %s, want 6 (pg, pg/0, pg/1, pg/10, app, app/0)", got)
	}
	each := func(app string, most int) string {
		var out []string
		m.State().EachUnitBag(rel, app, func(b *state.Bag) bool {
			out = append(out, b.Owner)
			return len(out) < most
		})
		return strings.Join(out, " ")
	}
	for _, c := range []struct {
		app  string
		most int
		want string
	}{
		{"pg", 10, "pg/0 pg/1 pg/10"},
		{"pg", 2, "pg/0 pg/1"},
		{"app", 10, "app/0"},
		{"ap", 10, ""},
		{"p", 10, ""},
		{"nobody", 10, ""},
	} {
		if got := each(c.app, c.most); got != c.want {
			t.Errorf("EachUnitBag(%q) stopping after %d: %q, want %q", c.app, c.most, got, c.want)
		}
	}
}
