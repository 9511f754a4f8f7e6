package state_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/state/statetest"
	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

var t0 = statetest.T0

func TestClusterIsInitialisedOnceForOneApplication(t *testing.T) {
	m := statetest.New(t, "wordpress")
	if err := m.Do(state.InitClusterOp("wordpress", "cid")); err != nil {
		t.Fatalf("re-initialising with the same app must be a no-op: %v", err)
	}
	if err := m.Do(state.InitClusterOp("mysql", "other")); !errors.Is(err, state.ErrConflict) {
		t.Fatalf("initialising for another app: got %v, want state.ErrConflict", err)
	}
	fresh := statetest.NewUninitialised(t)
	if err := fresh.Do(state.EnsureRelationOp("peers", "p", true, "", "")); !errors.Is(err, state.ErrInvalid) {
		t.Fatalf("command before init: got %v, want state.ErrInvalid", err)
	}
	if err := fresh.Do(state.InitClusterOp("Bad_Name", "")); !errors.Is(err, state.ErrInvalid) {
		t.Fatalf("bad app name: got %v", err)
	}
}

func TestBatchAppliesAllOrNothing(t *testing.T) {
	m := statetest.New(t, "app")
	rel := m.Relation("peers", "iface")
	u := m.Claim("m1", "app-0", 0)
	before := state.Dump(m.State())
	err := m.Do(
		state.UpdateBagOp(rel, u, map[string]string{"a": "1"}),
		state.UpdateCharmStateOp(u, map[string]string{"s": "1"}),
		state.SetCursorOp(u, []byte("c1")),
		state.UpdateBagOp(99, u, map[string]string{"b": "2"}), // no such relation
	)
	if !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("got %v, want state.ErrNotFound", err)
	}
	var ce *state.CommandError
	if !errors.As(err, &ce) || ce.Op != 3 {
		t.Fatalf("failed op index: %+v", ce)
	}
	after := state.Dump(m.State())
	// Only the index moves.
	if strip(before) != strip(after) {
		t.Fatalf("a failed batch changed state:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	m.Must(state.UpdateBagOp(rel, u, map[string]string{"a": "1"}), state.SetCursorOp(u, []byte("c1")))
	if b, _ := m.State().Bag(rel, u); b.Data.Value("a") != "1" || string(m.State().Cursor(u)) != "c1" {
		t.Fatalf("successful batch not applied: %v %q", b, m.State().Cursor(u))
	}
}

func strip(d string) string { return d[strings.Index(d, " "):] }

func TestRetriedCommandIsAppliedOnce(t *testing.T) {
	m := statetest.New(t, "app")
	r1 := cmd(m, req("c1", 1, 1), state.ClaimUnitOp("m1", "web-abc", -1, 0))
	r2 := cmd(m, req("c1", 1, 1), state.ClaimUnitOp("m1", "web-abc", -1, 0))
	r3 := cmd(m, req("c2", 1, 1), state.ClaimUnitOp("m2", "web-def", -1, 0))
	if !proto.Equal(r1, r2) {
		t.Fatalf("retry returned a different result: %v vs %v", r1, r2)
	}
	if got := len(m.State().Units()); got != 2 {
		t.Fatalf("units = %d, want 2", got)
	}
	if r3.GetOps()[0].GetUnit() != "app/1" {
		t.Fatalf("second claim got %s", r3.GetOps()[0].GetUnit())
	}
	// A failed command is remembered as failed too, and commands of one
	// client in flight together are each answered with their own result.
	f1 := cmd(m, req("c1", 2, 2), state.RemoveRelationOp(42))
	rel := cmd(m, req("c1", 3, 2), state.EnsureRelationOp("peers", "iface", true, "", "")).GetOps()[0].GetRelationId()
	f2 := cmd(m, req("c1", 2, 2), state.RemoveRelationOp(rel)) // a retry of 2: not applied, even though it could be now
	if !proto.Equal(f1, f2) || !errors.Is(state.ResultError(f2), state.ErrNotFound) {
		t.Fatalf("failed command's retry: %v vs %v", f1, f2)
	}
	if _, ok := m.State().Relation(rel); !ok {
		t.Fatal("a retry was applied again")
	}
	// Once the client says it has the answers below 4, a late duplicate of
	// 2 is refused without being applied.
	cmd(m, req("c1", 4, 4), state.UpdateBagOp(rel, "app", map[string]string{"k": "v"}))
	late := cmd(m, req("c1", 2, 2), state.RemoveRelationOp(rel))
	if !errors.Is(state.ResultError(late), state.ErrStaleRetry) {
		t.Fatalf("late duplicate: %v", late)
	}
	if _, ok := m.State().Relation(rel); !ok {
		t.Fatal("a late duplicate was applied")
	}
}

func TestSessionsKeepOnlyWhatClientsMayStillAskFor(t *testing.T) {
	m := statetest.New(t, "app")
	rel := m.Relation("peers", "iface")
	for i := uint64(1); i <= 1000; i++ {
		// One command in flight at a time: the session keeps one result.
		cmd(m, req("busy", i, i), state.UpdateBagOp(rel, "app", map[string]string{"n": fmt.Sprint(i)}))
	}
	if got := state.SessionResults(m.State(), "busy"); got != 1 {
		t.Fatalf("session of a client that received every answer keeps %d results, want 1", got)
	}
	cmd(m, req("idle", 1, 1), state.UpdateBagOp(rel, "app", map[string]string{"idle": "1"}))
	m.Advance(state.SessionTTL / 2)
	cmd(m, req("busy", 1001, 1001), state.UpdateBagOp(rel, "app", map[string]string{"n": "x"}))
	m.Advance(state.SessionTTL/2 + time.Minute)
	cmd(m, req("busy", 1002, 1002), state.UpdateBagOp(rel, "app", map[string]string{"n": "y"}))
	if got := m.State().Sessions(); got != 1 {
		t.Fatalf("sessions = %d after the idle one expired, want 1", got)
	}
	// The idle client's old command, retried after its session expired, is
	// applied again: the documented price of forgetting.
	cmd(m, req("idle", 1, 1), state.UpdateBagOp(rel, "app", map[string]string{"idle": "2"}))
	if b, _ := m.State().Bag(rel, "app"); b.Data.Value("idle") != "2" {
		t.Fatalf("retry after expiry: %v", b.Data)
	}
}

func TestBagRevisionGrowsOnlyOnRealChange(t *testing.T) {
	m := statetest.New(t, "app")
	rel := m.Relation("peers", "iface")
	u := m.Claim("m1", "app-0", 0)
	m.Must(state.UpdateBagOp(rel, u, map[string]string{"a": "1", "b": "2"}))
	m.Must(state.UpdateBagOp(rel, u, map[string]string{"a": "1"}))
	m.Must(state.UpdateBagOp(rel, u, nil, "missing"))
	b, _ := m.State().Bag(rel, u)
	if b.Revision != 1 {
		t.Fatalf("revision %d after no-op writes, want 1", b.Revision)
	}
	m.Must(state.UpdateBagOp(rel, u, nil, "b"))
	b, _ = m.State().Bag(rel, u)
	if b.Revision != 2 || b.ModifiedIndex != m.State().Index() || state.KV(b.Data) != `{"a"="1"}` {
		t.Fatalf("after delete: %+v (index %d)", b, m.State().Index())
	}
	if err := m.Do(state.UpdateBagOp(rel, u, map[string]string{"x": "1"}, "x")); !errors.Is(err, state.ErrInvalid) {
		t.Fatalf("set and delete of one key: %v", err)
	}
	if err := m.Do(state.UpdateBagOp(rel, u, map[string]string{"": "1"})); !errors.Is(err, state.ErrInvalid) {
		t.Fatalf("empty key: %v", err)
	}
}

func TestBagSizeIsLimited(t *testing.T) {
	m := statetest.New(t, "app")
	rel := m.Relation("peers", "iface")
	u := m.Claim("m1", "app-0", 0)
	big := strings.Repeat("x", state.MaxBagSize/2)
	m.Must(state.UpdateBagOp(rel, u, map[string]string{"a": big}))
	err := m.Do(state.UpdateBagOp(rel, u, map[string]string{"b": big}))
	if !errors.Is(err, state.ErrTooLarge) {
		t.Fatalf("got %v, want state.ErrTooLarge", err)
	}
	if b, _ := m.State().Bag(rel, u); b.Data.Len() != 1 {
		t.Fatal("oversized write was partly applied")
	}
}

func TestBagOwnersFollowTheRelation(t *testing.T) {
	m := statetest.New(t, "app")
	peer := m.Relation("peers", "iface")
	db := m.Must(state.EnsureRelationOp("db", "mysql", false, "mysql", "server")).GetOps()[0].GetRelationId()
	u := m.Claim("m1", "app-0", 0)
	cases := []struct {
		name  string
		rel   int64
		owner string
		want  error
	}{
		{"own unit in peer relation", peer, u, nil},
		{"own app in peer relation", peer, "app", nil},
		{"remote app in peer relation", peer, "mysql", state.ErrInvalid},
		{"remote unit in db relation", db, "mysql/3", nil},
		{"remote app in db relation", db, "mysql", nil},
		{"unrelated app", db, "redis", state.ErrInvalid},
		{"unrelated unit", db, "redis/0", state.ErrInvalid},
		{"unknown own unit", peer, "app/7", state.ErrNotFound},
		{"garbage owner", peer, "App/x", state.ErrInvalid},
	}
	for _, c := range cases {
		err := m.Do(state.UpdateBagOp(c.rel, c.owner, map[string]string{"k": "v"}))
		if (c.want == nil) != (err == nil) || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
}

func TestEnsureRelationIsIdempotent(t *testing.T) {
	m := statetest.New(t, "app")
	a := m.Relation("peers", "iface")
	b := m.Relation("peers", "iface")
	c := m.Must(state.EnsureRelationOp("db", "mysql", false, "mysql", "server")).GetOps()[0].GetRelationId()
	if a != b || a == c {
		t.Fatalf("ids a=%d b=%d c=%d", a, b, c)
	}
	for _, op := range []*storepb.Op{
		state.EnsureRelationOp("db", "other", false, "mysql", "server"),
		state.EnsureRelationOp("Bad", "x", true, "", ""),
		state.EnsureRelationOp("p", "x", true, "mysql", ""),
		state.EnsureRelationOp("db", "x", false, "app", "db"),
	} {
		if err := m.Do(op); err == nil {
			t.Errorf("op %v accepted", op)
		}
	}
	if err := m.Do(state.RemoveRelationOp(99)); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("remove unknown relation: %v", err)
	}
}

func TestOrdinalPodsGetTheirOwnUnit(t *testing.T) {
	m := statetest.New(t, "app")
	if u := m.Claim("app-2/inc1", "app-2", 2); u != "app/2" {
		t.Fatalf("got %s", u)
	}
	// The same pod with an empty disk (new incarnation) takes its unit over.
	rel := m.Relation("peers", "iface")
	m.Must(state.UpdateBagOp(rel, "app/2", map[string]string{"k": "v"}))
	if u := m.Claim("app-2/inc2", "app-2", 2); u != "app/2" {
		t.Fatalf("got %s", u)
	}
	u, _ := m.State().Unit("app/2")
	if u.Member != "app-2/inc2" || u.State != state.UnitActive || !u.Created.Equal(t0) {
		t.Fatalf("unit after takeover: %+v", u)
	}
	if b, ok := m.State().Bag(rel, "app/2"); !ok || b.Data.Value("k") != "v" {
		t.Fatal("takeover lost the unit's bag")
	}
	// Numbering continues after the highest ordinal.
	if u := m.Claim("web-x/1", "web-x", -1); u != "app/3" {
		t.Fatalf("next allocated unit is %s, want app/3", u)
	}
}

func TestPodsWithoutOrdinalClaimInOrder(t *testing.T) {
	m := statetest.New(t, "app")
	a := m.Claim("pa/1", "pa", -1)
	b := m.Claim("pb/1", "pb", -1)
	c := m.Claim("pc/1", "pc", -1)
	if a != "app/0" || b != "app/1" || c != "app/2" {
		t.Fatalf("allocated %s %s %s", a, b, c)
	}
	if again := m.Claim("pb/1", "pb", -1); again != b {
		t.Fatalf("a member re-claiming got %s, want its own %s", again, b)
	}
	m.Advance(time.Minute)
	m.Must(state.ReleaseUnitOp(c, "pc/1", "terminated"))
	m.Advance(time.Minute)
	m.Must(state.ReleaseUnitOp(a, "pa/1", "terminated"))
	// The unit released longest ago goes first.
	if got := m.Claim("pd/1", "pd", -1); got != c {
		t.Fatalf("first claim after releases got %s, want %s", got, c)
	}
	// A pod restarted with an empty disk finds the unit its pod held.
	if got := m.Claim("pb/2", "pb", -1); got != b {
		t.Fatalf("same pod, new incarnation got %s, want %s", got, b)
	}
	if got := m.Claim("pe/1", "pe", -1); got != a {
		t.Fatalf("got %s, want %s", got, a)
	}
	if got := m.Claim("pf/1", "pf", -1); got != "app/3" {
		t.Fatalf("got %s, want app/3", got)
	}
	if err := m.Do(state.ClaimUnitOp("", "x", -1, 0)); !errors.Is(err, state.ErrInvalid) {
		t.Fatalf("claim without member: %v", err)
	}
}

func TestReleaseIsACompareAndSet(t *testing.T) {
	m := statetest.New(t, "app")
	u := m.Claim("m1", "p1", -1)
	if err := m.Do(state.ReleaseUnitOp(u, "m2", "unreachable")); !errors.Is(err, state.ErrConflict) {
		t.Fatalf("release with the wrong holder: %v", err)
	}
	m.Must(state.ReleaseUnitOp(u, "m1", "unreachable"))
	m.Must(state.ReleaseUnitOp(u, "", "again")) // idempotent
	got, _ := m.State().Unit(u)
	if got.State != state.UnitReleased || got.Reason != "unreachable" || !got.Released.Equal(t0) {
		t.Fatalf("released unit: %+v", got)
	}
	if err := m.Do(state.ReleaseUnitOp("app/9", "", "")); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("release unknown: %v", err)
	}
}

func TestReleasedUnitRemovalIsACompareAndSet(t *testing.T) {
	m := statetest.New(t, "app")
	rel := m.Relation("peers", "iface")
	u := m.Claim("m1", "p1", -1)
	m.Must(state.UpdateBagOp(rel, u, map[string]string{"k": "v"}), state.UpdateCharmStateOp(u, map[string]string{"s": "1"}), state.ClaimLeaseOp(u, "m1", int64(time.Minute)))
	// Active units are not garbage.
	if err := m.Do(state.RemoveUnitOp(u, m.Now().UnixNano(), "gc")); !errors.Is(err, state.ErrConflict) {
		t.Fatalf("gc of an active unit: %v", err)
	}
	releasedAt := m.Now()
	m.Must(state.ReleaseUnitOp(u, "m1", "stopped"))
	// Claimed again, then released later: an old gc decision must not apply.
	m.Advance(time.Minute)
	m.Claim("m2", "p2", -1)
	m.Must(state.ReleaseUnitOp(u, "m2", "stopped"))
	if err := m.Do(state.RemoveUnitOp(u, releasedAt.UnixNano(), "gc")); !errors.Is(err, state.ErrConflict) {
		t.Fatalf("stale gc: %v", err)
	}
	m.Must(state.RemoveUnitOp(u, m.Now().UnixNano(), "gc"))
	got, _ := m.State().Unit(u)
	if got.State != state.UnitRemoved || m.State().CharmState(u).Len() != 0 || m.State().Lease().Unit != "" {
		t.Fatalf("removed unit: %+v charm=%v lease=%+v", got, m.State().CharmState(u), m.State().Lease())
	}
	if _, ok := m.State().Bag(rel, u); !ok {
		t.Fatal("a removed unit's bag must stay readable while the relation exists")
	}
	if err := m.Do(state.UpdateBagOp(rel, u, map[string]string{"k": "w"})); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("write to a removed unit's bag: %v", err)
	}
	// Numbers are never reused without an ordinal.
	if next := m.Claim("m3", "p3", -1); next != "app/1" {
		t.Fatalf("got %s", next)
	}
	// With an ordinal the unit comes back, without its old data.
	if back := m.Claim("m4", "app-0", 0); back != u {
		t.Fatalf("got %s", back)
	}
	if _, ok := m.State().Bag(rel, u); ok {
		t.Fatal("a unit brought back by its ordinal kept the old bag")
	}
	m.Must(state.RemoveRelationOp(rel))
	if len(m.State().Bags(rel)) != 0 {
		t.Fatal("relation removal kept bags")
	}
}

func TestLeaseIsExclusiveUntilExpiry(t *testing.T) {
	m := statetest.New(t, "app")
	a := m.Claim("m1", "p1", -1)
	b := m.Claim("m2", "p2", -1)
	d := int64(30 * time.Second)
	m.Must(state.ClaimLeaseOp(a, "m1", d))
	if err := m.Do(state.ClaimLeaseOp(b, "m2", d)); !errors.Is(err, state.ErrNotLeader) {
		t.Fatalf("second claimant: %v", err)
	}
	if err := m.Do(state.CheckLeaseOp(b), state.UpdateLeaderSettingsOp(map[string]string{"x": "1"})); !errors.Is(err, state.ErrNotLeader) {
		t.Fatalf("non-leader write: %v", err)
	}
	m.Must(state.CheckLeaseOp(a), state.UpdateLeaderSettingsOp(map[string]string{"x": "1"}))
	m.Advance(20 * time.Second)
	m.Must(state.ClaimLeaseOp(a, "m1", d)) // renew
	l := m.State().Lease()
	if l.Epoch != 1 || !l.Acquired.Equal(t0) || !l.Expires.Equal(m.Now().Add(30*time.Second)) {
		t.Fatalf("renewed lease: %+v", l)
	}
	m.Advance(30 * time.Second) // expired exactly now
	if err := m.Do(state.CheckLeaseOp(a)); !errors.Is(err, state.ErrNotLeader) {
		t.Fatalf("expired lease still valid: %v", err)
	}
	m.Must(state.ClaimLeaseOp(b, "m2", d))
	if l := m.State().Lease(); l.Unit != b || l.Epoch != 2 {
		t.Fatalf("lease after takeover: %+v", l)
	}
	settings, rev := m.State().LeaderSettings()
	if settings.Value("x") != "1" || rev != 1 {
		t.Fatalf("leader settings %v rev %d", settings, rev)
	}
}

func TestCharmStateLimits(t *testing.T) {
	m := statetest.New(t, "app")
	u := m.Claim("m1", "p1", -1)
	if err := m.Do(state.UpdateCharmStateOp(u, map[string]string{strings.Repeat("k", state.MaxCharmStateKey+1): "v"})); !errors.Is(err, state.ErrTooLarge) {
		t.Fatalf("long key: %v", err)
	}
	if err := m.Do(state.UpdateCharmStateOp(u, map[string]string{"k": strings.Repeat("v", state.MaxCharmStateValue+1)})); !errors.Is(err, state.ErrTooLarge) {
		t.Fatalf("long value: %v", err)
	}
	val := strings.Repeat("v", state.MaxCharmStateValue)
	set := map[string]string{}
	for i := 0; state.SettingsOf(set).Size() <= state.MaxCharmStateSize-len(val)-3; i++ {
		set[fmt.Sprintf("k%02d", i)] = val
	}
	m.Must(state.UpdateCharmStateOp(u, set))
	if err := m.Do(state.UpdateCharmStateOp(u, map[string]string{"zz": val})); !errors.Is(err, state.ErrTooLarge) {
		t.Fatalf("total over limit: %v", err)
	}
	m.Must(state.UpdateCharmStateOp(u, nil, "k00"))
	if _, ok := m.State().CharmState(u).Get("k00"); ok {
		t.Fatal("state-delete did not delete")
	}
}

func TestPublishedStatesNeverChange(t *testing.T) {
	m := statetest.New(t, "app")
	rel := m.Relation("peers", "iface")
	u := m.Claim("m1", "p1", -1)
	m.Must(state.UpdateBagOp(rel, u, map[string]string{"a": "1"}))
	old := m.State()
	oldDump := state.Dump(old)
	m.Must(state.UpdateBagOp(rel, u, map[string]string{"a": "2", "b": "3"}), state.UpdateCharmStateOp(u, map[string]string{"c": "1"}))
	m.Must(state.ReleaseUnitOp(u, "", ""), state.RemoveRelationOp(rel))
	if state.Dump(old) != oldDump {
		t.Fatalf("an earlier state.State changed:\n%s\nvs\n%s", oldDump, state.Dump(old))
	}
}

func TestSnapshotRoundTripPreservesEverything(t *testing.T) {
	m := statetest.New(t, "app")
	rel := m.Relation("peers", "iface")
	db := m.Must(state.EnsureRelationOp("db", "mysql", false, "mysql", "server")).GetOps()[0].GetRelationId()
	a := m.Claim("m1", "p1", -1)
	b := m.Claim("m2", "p2", -1)
	cmd(m, req("r", 1, 1), state.UpdateBagOp(rel, a, map[string]string{"x": "1", "y": ""}), state.UpdateBagOp(db, "mysql/0", map[string]string{"db": "wp"}))
	m.Must(state.UpdateBagOp(rel, "app", map[string]string{"secret": "s"}), state.UpdateCharmStateOp(b, map[string]string{"k": "v"}))
	m.Must(state.SetCursorOp(a, []byte{0, 1, 2}), state.ClaimLeaseOp(a, "m1", int64(time.Minute)), state.UpdateLeaderSettingsOp(map[string]string{"l": "1"}))
	m.Must(state.SetStatusOp(a, "active", "ready", []byte(`{"k":1}`)), state.SetStatusOp("app", "waiting", "", nil), state.SetHookErrorOp(b, "install", "exit 1"))
	m.Must(state.SetWorkloadVersionOp(a, "1.2"), state.UpdatePortsOp(a, []state.Port{{From: 80, To: 80, Protocol: "tcp"}, {Endpoint: "db", Protocol: "icmp"}}, nil))
	m.Must(state.ReleaseUnitOp(b, "", "stop"))
	var buf bytes.Buffer
	if err := state.WriteSnapshot(&buf, m.State()); err != nil {
		t.Fatal(err)
	}
	got, err := state.ReadSnapshot(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if state.Dump(got) != state.Dump(m.State()) {
		t.Fatalf("restored state differs:\n%s\nwant:\n%s", state.Dump(got), state.Dump(m.State()))
	}
	// A restored state keeps behaving the same: the remembered request id
	// still deduplicates.
	m2 := statetest.New(t, "app")
	m2.Restore(got)
	m2.SetNow(m.Now())
	r := cmd(m2, req("r", 1, 1), state.UpdateBagOp(rel, a, map[string]string{"x": "changed"}))
	if state.ResultError(r) != nil {
		t.Fatal(r)
	}
	if bag, _ := m2.State().Bag(rel, a); bag.Data.Value("x") != "1" {
		t.Fatal("request id dedup lost in snapshot")
	}
	// Truncated snapshots are refused, never half-restored.
	for _, cut := range []int{0, 1, buf.Len() / 2, buf.Len() - 1} {
		if _, err := state.ReadSnapshot(bytes.NewReader(buf.Bytes()[:cut])); err == nil {
			t.Errorf("snapshot cut at %d bytes was accepted", cut)
		}
	}
}

func FuzzApplyCommand(f *testing.F) {
	seed := func(ops ...*storepb.Op) {
		b, _ := state.EncodeEntry(&storepb.Command{Version: state.CommandVersion, Client: req("x", 1, 1), Ops: ops})
		f.Add(b)
	}
	seed(state.ClaimUnitOp("m", "p", -1, 0))
	seed(state.EnsureRelationOp("peers", "x", true, "", ""), state.UpdateBagOp(0, "app/0", map[string]string{"a": "b"}, "c"))
	seed(state.ClaimLeaseOp("app/0", "m", 10), state.CheckLeaseOp("app/0"), state.RemoveUnitOp("app/0", 0, ""))
	big := bigCursor(-1, "")
	seed(state.SetCursorOp("app/0", big), state.AdvanceCursorOp("app/0", big, bigCursor(3, "x")))
	f.Fuzz(func(t *testing.T, data []byte) {
		m := statetest.New(t, "app")
		m.Relation("peers", "iface")
		m.Claim("m", "p", -1)
		before := m.State()
		index := before.Index() + 1
		res, err := m.Machine().Apply(index, data)
		after := m.State()
		if err != nil {
			// Refused as unknown: nothing may have changed, not even the index.
			if after != before {
				t.Fatalf("a command this build cannot apply changed the state: %v", err)
			}
			return
		}
		if res.GetIndex() != index || after.Index() != index {
			t.Fatalf("result index %d, state index %d, want %d", res.GetIndex(), after.Index(), index)
		}
		c, derr := state.DecodeEntry(data)
		retried := derr == nil && c.GetClient() != nil
		if state.ResultError(res) != nil && !retried && strip(state.Dump(after)) != strip(state.Dump(before)) {
			t.Fatalf("failed command changed state: %v", state.ResultError(res))
		}
	})
}

func FuzzReadSnapshot(f *testing.F) {
	m := statetest.New(f, "app")
	m.Relation("peers", "iface")
	m.Claim("m", "p", -1)
	var buf bytes.Buffer
	_ = state.WriteSnapshot(&buf, m.State())
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = state.ReadSnapshot(bytes.NewReader(data))
	})
}

func TestStatusesVersionsPortsAndHookErrors(t *testing.T) {
	m := statetest.New(t, "app")
	u := m.Claim("m1", "p1", -1)
	m.Must(state.SetStatusOp(u, "active", "all good", []byte(`{"x":"y"}`)))
	if st, ok := m.State().Status(u); !ok || st.Status != "active" || st.Message != "all good" || string(st.DataJSON) != `{"x":"y"}` || !st.Since.Equal(t0) {
		t.Fatalf("status %+v", st)
	}
	for _, bad := range []*storepb.Op{
		state.SetStatusOp(u, "error", "", nil),
		state.SetStatusOp(u, "active", "", []byte(`[1]`)),
		state.SetStatusOp(u, "active", "", []byte(`{`)),
		state.SetStatusOp("app/9", "active", "", nil),
		state.SetStatusOp("other", "active", "", nil),
		state.UpdatePortsOp(u, []state.Port{{From: 20, To: 10, Protocol: "tcp"}}, nil),
		state.UpdatePortsOp(u, []state.Port{{From: 1, To: 1, Protocol: "icmp"}}, nil),
		state.UpdatePortsOp(u, []state.Port{{From: 1, To: 1, Protocol: "sctp"}}, nil),
	} {
		if err := m.Do(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	m.Must(state.UpdatePortsOp(u, []state.Port{{From: 80, To: 80, Protocol: "tcp"}, {From: 53, To: 55, Protocol: "udp"}, {Endpoint: "db", From: 5432, To: 5432, Protocol: "tcp"}}, nil))
	m.Must(state.UpdatePortsOp(u, []state.Port{{Protocol: "icmp"}}, []state.Port{{From: 53, To: 55, Protocol: "udp"}, {From: 9, To: 9, Protocol: "tcp"}}))
	if got := fmt.Sprint(m.State().UnitExtra(u).Ports); got != "[icmp 80/tcp 5432/tcp]" {
		t.Fatalf("ports %s", got)
	}
	m.Must(state.SetHookErrorOp(u, "config-changed", "exit status 1"), state.SetWorkloadVersionOp(u, "14.2"))
	if e := m.State().UnitExtra(u); e.HookError != "config-changed" || e.WorkloadVersion != "14.2" || len(e.Ports) != 3 {
		t.Fatalf("extra %+v", e)
	}
	m.Must(state.SetHookErrorOp(u, "", ""))
	if e := m.State().UnitExtra(u); e.HookError != "" || !e.HookErrorSince.IsZero() {
		t.Fatalf("cleared hook error %+v", e)
	}
	m.Must(state.ClaimLeaseOp(u, "m1", int64(time.Minute)))
	m.Must(state.ReleaseLeaseOp("app/7"))
	if m.State().Lease().Unit != u {
		t.Fatal("releasing another unit's lease took it away")
	}
	m.Must(state.ReleaseLeaseOp(u))
	if l := m.State().Lease(); l.Unit != "" || l.Epoch != 1 {
		t.Fatalf("released lease %+v", l)
	}
	m.Must(state.ReleaseUnitOp(u, "", ""))
	m.Must(state.RemoveUnitOp(u, 0, "gone"))
	if _, ok := m.State().Status(u); ok || m.State().UnitExtra(u).WorkloadVersion != "" {
		t.Fatal("a removed unit kept its status or extras")
	}
}

func TestCursorCompareAndSet(t *testing.T) {
	m := statetest.New(t, "app")
	u := m.Claim("m1", "p1", -1)
	m.Must(state.AdvanceCursorOp(u, nil, []byte("c1")))
	if err := m.Do(state.AdvanceCursorOp(u, nil, []byte("c2"))); !errors.Is(err, state.ErrConflict) {
		t.Fatalf("advance from a stale cursor: %v", err)
	}
	m.Must(state.AdvanceCursorOp(u, []byte("c1"), []byte("c2")))
	if string(m.State().Cursor(u)) != "c2" {
		t.Fatalf("cursor %q", m.State().Cursor(u))
	}
}

func TestUnitsRememberWhetherTheyWereClaimedByOrdinal(t *testing.T) {
	m := statetest.New(t, "app")
	m.Claim("m1", "web-0", 0)
	m.Claim("m2", "p2", -1)
	a, _ := m.State().Unit("app/0")
	b, _ := m.State().Unit("app/1")
	if !a.ByOrdinal || b.ByOrdinal {
		t.Fatalf("by ordinal: %v %v", a.ByOrdinal, b.ByOrdinal)
	}
}

// req identifies command seq of client id, whose lowest unanswered command
// is lowest.
func req(id string, seq, lowest uint64) *storepb.ClientRequest {
	return &storepb.ClientRequest{ClientId: id, Sequence: seq, LowestPending: lowest}
}

// cmd applies ops as one command of client request r.
func cmd(m *statetest.Store, r *storepb.ClientRequest, ops ...*storepb.Op) *storepb.Result {
	res, err := m.Apply(context.Background(), &storepb.Command{Client: r, Ops: ops})
	var ce *state.CommandError
	if err != nil && !errors.As(err, &ce) {
		m.Machine() // keep the store referenced in the failure
		panic(err)
	}
	return res
}

// FuzzApplySealedCommand feeds the command decoder arbitrary bodies in a
// correct envelope, so that mutations get past the checksum: whatever the
// bytes, applying is deterministic (two machines agree), never panics, and
// a refused command changes nothing but the index.
func FuzzApplySealedCommand(f *testing.F) {
	seed := func(ops ...*storepb.Op) {
		b, _ := proto.Marshal(&storepb.Command{Version: state.CommandVersion, Client: req("x", 1, 1), Fence: &storepb.Fence{Unit: "app/0", MemberId: "m", Epoch: 1}, Ops: ops})
		f.Add(b)
	}
	seed(state.ClaimUnitOp("m", "p", -1, 3))
	seed(state.EnsureRelationOp("peers", "x", true, "", ""), state.UpdateBagOp(0, "app/0", map[string]string{"a": "b"}, "c"))
	seed(state.ClaimLeaseOp("app/0", "m", 10), state.CheckLeaseOp("app/0"), state.RemoveUnitOp("app/0", 0, ""))
	seed(state.HashStateOp(), state.ReportDivergenceOp("m", 3, []byte{1}, []byte{2}), state.ForgetClaimantOp("m"))
	seed(state.OfferedRelationOp("db", "pgsql", "pg", "database"), state.SetRemoteViewOp(1, "pg", "src", 1, map[string]string{"a": "b"}, map[string]map[string]string{"pg/0": nil, "pg/1": {"c": "d"}}))
	f.Fuzz(func(t *testing.T, body []byte) {
		entry := statetest.Seal(body)
		var results []string
		var states []string
		for range 2 {
			m := statetest.New(t, "app")
			m.Relation("peers", "iface")
			m.Claim("m", "p", -1)
			before := state.Dump(m.State())
			res, err := m.Machine().Apply(m.State().Index()+1, entry)
			after := state.Dump(m.State())
			if err == nil && state.ResultError(res) != nil && strip(after) != strip(before) && !strings.Contains(after, "session ") {
				t.Fatalf("a refused command changed the state: %v", state.ResultError(res))
			}
			results = append(results, fmt.Sprint(res, err))
			states = append(states, after)
		}
		if results[0] != results[1] || states[0] != states[1] {
			t.Fatalf("two machines applied the same entry differently:\n%s\n%s", results[0], results[1])
		}
	})
}
