package raftstore

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// machine drives apply() directly with a controllable clock.
type machine struct {
	t     testing.TB
	s     *State
	now   time.Time
	index uint64
}

func newMachine(t testing.TB, app string) *machine {
	m := &machine{t: t, s: newState(), now: t0}
	m.must(InitClusterOp(app, "cid"))
	return m
}

func (m *machine) cmd(id string, ops ...*storepb.Op) *storepb.Result {
	m.t.Helper()
	m.index++
	c := &storepb.Command{Version: CommandVersion, RequestId: id, TimeUnixNano: m.now.UnixNano(), Ops: ops}
	// Go through the wire encoding, as raft does.
	b, err := proto.Marshal(c)
	if err != nil {
		m.t.Fatal(err)
	}
	var dec storepb.Command
	if err := proto.Unmarshal(b, &dec); err != nil {
		m.t.Fatal(err)
	}
	var res *storepb.Result
	m.s, res = apply(m.s, m.index, &dec)
	return res
}

func (m *machine) do(ops ...*storepb.Op) error {
	m.t.Helper()
	return resultError(m.cmd("", ops...))
}

func (m *machine) must(ops ...*storepb.Op) *storepb.Result {
	m.t.Helper()
	r := m.cmd("", ops...)
	if err := resultError(r); err != nil {
		m.t.Fatalf("command failed: %v", err)
	}
	return r
}

func (m *machine) claim(member, pod string, ordinal int64) string {
	m.t.Helper()
	return m.must(ClaimUnitOp(member, pod, ordinal)).GetOps()[0].GetUnit()
}

func (m *machine) relation(endpoint string) int64 {
	m.t.Helper()
	return m.must(EnsureRelationOp(endpoint, "iface", true, "", "")).GetOps()[0].GetRelationId()
}

// dump renders a State canonically so two States can be compared.
func dump(s *State) string {
	var b strings.Builder
	m := s.meta
	fmt.Fprintf(&b, "index=%d app=%s cluster=%s nextUnit=%d nextRel=%d leaderRev=%d lease=%+v\n", s.index, m.app, m.clusterID, m.nextUnit, m.nextRelation, m.leaderRev, m.lease)
	fmt.Fprintf(&b, "leader=%s\n", kv(m.leader))
	for _, r := range s.Relations() {
		fmt.Fprintf(&b, "rel %+v\n", *r)
		for _, bag := range s.Bags(r.ID) {
			fmt.Fprintf(&b, "  bag %s rev=%d mod=%d %s\n", bag.Owner, bag.Revision, bag.ModifiedIndex, kv(bag.Data))
		}
	}
	for _, u := range s.Units() {
		fmt.Fprintf(&b, "unit %+v charm=%s cursor=%x\n", *u, kv(s.CharmState(u.Name)), s.Cursor(u.Name))
	}
	walk(s.statuses, func(k []byte, v *Status) bool {
		fmt.Fprintf(&b, "status %s %s %q %s since=%d\n", k, v.Status, v.Message, v.DataJSON, v.Since.UnixNano())
		return true
	})
	walk(s.extras, func(k []byte, v *UnitExtra) bool {
		fmt.Fprintf(&b, "extra %s version=%q ports=%v err=%q %q %d\n", k, v.WorkloadVersion, v.Ports, v.HookError, v.HookErrorMessage, v.HookErrorSince.UnixNano())
		return true
	})
	walk(s.requests, func(k []byte, v *requestEntry) bool {
		fmt.Fprintf(&b, "req %s t=%d %x\n", k, v.time, v.result)
		return true
	})
	walk(s.reqByTime, func(k []byte, v string) bool {
		fmt.Fprintf(&b, "reqt %x %s\n", k, v)
		return true
	})
	return b.String()
}

func kv(m Settings) string {
	var parts []string
	for k, v := range m.All() { // in key order
		parts = append(parts, fmt.Sprintf("%q=%q", k, v))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func TestClusterIsInitialisedOnceForOneApplication(t *testing.T) {
	m := newMachine(t, "wordpress")
	if err := m.do(InitClusterOp("wordpress", "cid")); err != nil {
		t.Fatalf("re-initialising with the same app must be a no-op: %v", err)
	}
	if err := m.do(InitClusterOp("mysql", "other")); !errors.Is(err, ErrConflict) {
		t.Fatalf("initialising for another app: got %v, want ErrConflict", err)
	}
	fresh := &machine{t: t, s: newState(), now: t0}
	if err := fresh.do(EnsureRelationOp("peers", "p", true, "", "")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("command before init: got %v, want ErrInvalid", err)
	}
	if err := fresh.do(InitClusterOp("Bad_Name", "")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad app name: got %v", err)
	}
}

func TestBatchAppliesAllOrNothing(t *testing.T) {
	m := newMachine(t, "app")
	rel := m.relation("peers")
	u := m.claim("m1", "app-0", 0)
	before := dump(m.s)
	err := m.do(
		UpdateBagOp(rel, u, map[string]string{"a": "1"}),
		UpdateCharmStateOp(u, map[string]string{"s": "1"}),
		SetCursorOp(u, []byte("c1")),
		UpdateBagOp(99, u, map[string]string{"b": "2"}), // no such relation
	)
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("got %v, want ErrNotFound", err)
	}
	var ce *CommandError
	if !errors.As(err, &ce) || ce.Op != 3 {
		t.Fatalf("failed op index: %+v", ce)
	}
	after := dump(m.s)
	// Only the index moves.
	if strip(before) != strip(after) {
		t.Fatalf("a failed batch changed state:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	m.must(UpdateBagOp(rel, u, map[string]string{"a": "1"}), SetCursorOp(u, []byte("c1")))
	if b, _ := m.s.Bag(rel, u); b.Data.Value("a") != "1" || string(m.s.Cursor(u)) != "c1" {
		t.Fatalf("successful batch not applied: %v %q", b, m.s.Cursor(u))
	}
}

func strip(d string) string { return d[strings.Index(d, " "):] }

func TestRetriedRequestIsAppliedOnce(t *testing.T) {
	m := newMachine(t, "app")
	r1 := m.cmd("req-1", ClaimUnitOp("m1", "web-abc", -1))
	r2 := m.cmd("req-1", ClaimUnitOp("m1", "web-abc", -1))
	r3 := m.cmd("req-2", ClaimUnitOp("m2", "web-def", -1))
	if !proto.Equal(r1, r2) {
		t.Fatalf("retry returned a different result: %v vs %v", r1, r2)
	}
	if got := len(m.s.Units()); got != 2 {
		t.Fatalf("units = %d, want 2", got)
	}
	if r3.GetOps()[0].GetUnit() != "app/1" {
		t.Fatalf("second claim got %s", r3.GetOps()[0].GetUnit())
	}
	// A failed command is remembered as failed too.
	f1 := m.cmd("req-3", RemoveRelationOp(42))
	m.relation("peers") // would not change req-3's outcome anyway
	f2 := m.cmd("req-3", RemoveRelationOp(42))
	if !proto.Equal(f1, f2) || resultError(f2) == nil {
		t.Fatalf("failed request retry: %v vs %v", f1, f2)
	}
}

func TestRequestIDsAreForgottenAfterTTL(t *testing.T) {
	m := newMachine(t, "app")
	rel := m.relation("peers")
	u := m.claim("m1", "app-0", 0)
	m.cmd("old", UpdateBagOp(rel, u, map[string]string{"n": "1"}))
	m.now = m.now.Add(RequestIDTTL + time.Second)
	m.must(UpdateBagOp(rel, u, map[string]string{"n": "2"}))
	if _, ok := m.s.requests.Get([]byte("old")); ok {
		t.Fatal("request id older than the TTL is still remembered")
	}
	if m.s.reqByTime.Len() != 0 {
		t.Fatalf("time index not pruned: %d", m.s.reqByTime.Len())
	}
	// Now the same id applies again.
	m.cmd("old", UpdateBagOp(rel, u, map[string]string{"n": "1"}))
	if b, _ := m.s.Bag(rel, u); b.Data.Value("n") != "1" {
		t.Fatalf("expired request id was not applied again: %v", b.Data)
	}
}

func TestBagRevisionGrowsOnlyOnRealChange(t *testing.T) {
	m := newMachine(t, "app")
	rel := m.relation("peers")
	u := m.claim("m1", "app-0", 0)
	m.must(UpdateBagOp(rel, u, map[string]string{"a": "1", "b": "2"}))
	m.must(UpdateBagOp(rel, u, map[string]string{"a": "1"}))
	m.must(UpdateBagOp(rel, u, nil, "missing"))
	b, _ := m.s.Bag(rel, u)
	if b.Revision != 1 {
		t.Fatalf("revision %d after no-op writes, want 1", b.Revision)
	}
	m.must(UpdateBagOp(rel, u, nil, "b"))
	b, _ = m.s.Bag(rel, u)
	if b.Revision != 2 || b.ModifiedIndex != m.index || kv(b.Data) != `{"a"="1"}` {
		t.Fatalf("after delete: %+v (index %d)", b, m.index)
	}
	if err := m.do(UpdateBagOp(rel, u, map[string]string{"x": "1"}, "x")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("set and delete of one key: %v", err)
	}
	if err := m.do(UpdateBagOp(rel, u, map[string]string{"": "1"})); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty key: %v", err)
	}
}

func TestBagSizeIsLimited(t *testing.T) {
	m := newMachine(t, "app")
	rel := m.relation("peers")
	u := m.claim("m1", "app-0", 0)
	big := strings.Repeat("x", MaxBagSize/2)
	m.must(UpdateBagOp(rel, u, map[string]string{"a": big}))
	err := m.do(UpdateBagOp(rel, u, map[string]string{"b": big}))
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %v, want ErrTooLarge", err)
	}
	if b, _ := m.s.Bag(rel, u); b.Data.Len() != 1 {
		t.Fatal("oversized write was partly applied")
	}
}

func TestBagOwnersFollowTheRelation(t *testing.T) {
	m := newMachine(t, "app")
	peer := m.relation("peers")
	db := m.must(EnsureRelationOp("db", "mysql", false, "mysql", "server")).GetOps()[0].GetRelationId()
	u := m.claim("m1", "app-0", 0)
	cases := []struct {
		name  string
		rel   int64
		owner string
		want  error
	}{
		{"own unit in peer relation", peer, u, nil},
		{"own app in peer relation", peer, "app", nil},
		{"remote app in peer relation", peer, "mysql", ErrInvalid},
		{"remote unit in db relation", db, "mysql/3", nil},
		{"remote app in db relation", db, "mysql", nil},
		{"unrelated app", db, "redis", ErrInvalid},
		{"unrelated unit", db, "redis/0", ErrInvalid},
		{"unknown own unit", peer, "app/7", ErrNotFound},
		{"garbage owner", peer, "App/x", ErrInvalid},
	}
	for _, c := range cases {
		err := m.do(UpdateBagOp(c.rel, c.owner, map[string]string{"k": "v"}))
		if (c.want == nil) != (err == nil) || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
}

func TestEnsureRelationIsIdempotent(t *testing.T) {
	m := newMachine(t, "app")
	a := m.relation("peers")
	b := m.relation("peers")
	c := m.must(EnsureRelationOp("db", "mysql", false, "mysql", "server")).GetOps()[0].GetRelationId()
	if a != b || a == c {
		t.Fatalf("ids a=%d b=%d c=%d", a, b, c)
	}
	for _, op := range []*storepb.Op{
		EnsureRelationOp("db", "other", false, "mysql", "server"),
		EnsureRelationOp("Bad", "x", true, "", ""),
		EnsureRelationOp("p", "x", true, "mysql", ""),
		EnsureRelationOp("db", "x", false, "app", "db"),
	} {
		if err := m.do(op); err == nil {
			t.Errorf("op %v accepted", op)
		}
	}
	if err := m.do(RemoveRelationOp(99)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("remove unknown relation: %v", err)
	}
}

func TestOrdinalPodsGetTheirOwnUnit(t *testing.T) {
	m := newMachine(t, "app")
	if u := m.claim("app-2/inc1", "app-2", 2); u != "app/2" {
		t.Fatalf("got %s", u)
	}
	// The same pod with an empty disk (new incarnation) takes its unit over.
	rel := m.relation("peers")
	m.must(UpdateBagOp(rel, "app/2", map[string]string{"k": "v"}))
	if u := m.claim("app-2/inc2", "app-2", 2); u != "app/2" {
		t.Fatalf("got %s", u)
	}
	u, _ := m.s.Unit("app/2")
	if u.Member != "app-2/inc2" || u.State != UnitActive || !u.Created.Equal(t0) {
		t.Fatalf("unit after takeover: %+v", u)
	}
	if b, ok := m.s.Bag(rel, "app/2"); !ok || b.Data.Value("k") != "v" {
		t.Fatal("takeover lost the unit's bag")
	}
	// Numbering continues after the highest ordinal.
	if u := m.claim("web-x/1", "web-x", -1); u != "app/3" {
		t.Fatalf("next allocated unit is %s, want app/3", u)
	}
}

func TestPodsWithoutOrdinalClaimInOrder(t *testing.T) {
	m := newMachine(t, "app")
	a := m.claim("pa/1", "pa", -1)
	b := m.claim("pb/1", "pb", -1)
	c := m.claim("pc/1", "pc", -1)
	if a != "app/0" || b != "app/1" || c != "app/2" {
		t.Fatalf("allocated %s %s %s", a, b, c)
	}
	if again := m.claim("pb/1", "pb", -1); again != b {
		t.Fatalf("a member re-claiming got %s, want its own %s", again, b)
	}
	m.now = m.now.Add(time.Minute)
	m.must(ReleaseUnitOp(c, "pc/1", "terminated"))
	m.now = m.now.Add(time.Minute)
	m.must(ReleaseUnitOp(a, "pa/1", "terminated"))
	// The unit released longest ago goes first.
	if got := m.claim("pd/1", "pd", -1); got != c {
		t.Fatalf("first claim after releases got %s, want %s", got, c)
	}
	// A pod restarted with an empty disk finds the unit its pod held.
	if got := m.claim("pb/2", "pb", -1); got != b {
		t.Fatalf("same pod, new incarnation got %s, want %s", got, b)
	}
	if got := m.claim("pe/1", "pe", -1); got != a {
		t.Fatalf("got %s, want %s", got, a)
	}
	if got := m.claim("pf/1", "pf", -1); got != "app/3" {
		t.Fatalf("got %s, want app/3", got)
	}
	if err := m.do(ClaimUnitOp("", "x", -1)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("claim without member: %v", err)
	}
}

func TestReleaseIsACompareAndSet(t *testing.T) {
	m := newMachine(t, "app")
	u := m.claim("m1", "p1", -1)
	if err := m.do(ReleaseUnitOp(u, "m2", "unreachable")); !errors.Is(err, ErrConflict) {
		t.Fatalf("release with the wrong holder: %v", err)
	}
	m.must(ReleaseUnitOp(u, "m1", "unreachable"))
	m.must(ReleaseUnitOp(u, "", "again")) // idempotent
	got, _ := m.s.Unit(u)
	if got.State != UnitReleased || got.Reason != "unreachable" || !got.Released.Equal(t0) {
		t.Fatalf("released unit: %+v", got)
	}
	if err := m.do(ReleaseUnitOp("app/9", "", "")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("release unknown: %v", err)
	}
}

func TestReleasedUnitRemovalIsACompareAndSet(t *testing.T) {
	m := newMachine(t, "app")
	rel := m.relation("peers")
	u := m.claim("m1", "p1", -1)
	m.must(UpdateBagOp(rel, u, map[string]string{"k": "v"}), UpdateCharmStateOp(u, map[string]string{"s": "1"}), ClaimLeaseOp(u, "m1", int64(time.Minute)))
	// Active units are not garbage.
	if err := m.do(RemoveUnitOp(u, m.now.UnixNano(), "gc")); !errors.Is(err, ErrConflict) {
		t.Fatalf("gc of an active unit: %v", err)
	}
	releasedAt := m.now
	m.must(ReleaseUnitOp(u, "m1", "stopped"))
	// Claimed again, then released later: an old gc decision must not apply.
	m.now = m.now.Add(time.Minute)
	m.claim("m2", "p2", -1)
	m.must(ReleaseUnitOp(u, "m2", "stopped"))
	if err := m.do(RemoveUnitOp(u, releasedAt.UnixNano(), "gc")); !errors.Is(err, ErrConflict) {
		t.Fatalf("stale gc: %v", err)
	}
	m.must(RemoveUnitOp(u, m.now.UnixNano(), "gc"))
	got, _ := m.s.Unit(u)
	if got.State != UnitRemoved || m.s.CharmState(u).Len() != 0 || m.s.Lease().Unit != "" {
		t.Fatalf("removed unit: %+v charm=%v lease=%+v", got, m.s.CharmState(u), m.s.Lease())
	}
	if _, ok := m.s.Bag(rel, u); !ok {
		t.Fatal("a removed unit's bag must stay readable while the relation exists")
	}
	if err := m.do(UpdateBagOp(rel, u, map[string]string{"k": "w"})); !errors.Is(err, ErrNotFound) {
		t.Fatalf("write to a removed unit's bag: %v", err)
	}
	// Numbers are never reused without an ordinal.
	if next := m.claim("m3", "p3", -1); next != "app/1" {
		t.Fatalf("got %s", next)
	}
	// With an ordinal the unit comes back, without its old data.
	if back := m.claim("m4", "app-0", 0); back != u {
		t.Fatalf("got %s", back)
	}
	if _, ok := m.s.Bag(rel, u); ok {
		t.Fatal("a unit brought back by its ordinal kept the old bag")
	}
	m.must(RemoveRelationOp(rel))
	if len(m.s.Bags(rel)) != 0 {
		t.Fatal("relation removal kept bags")
	}
}

func TestLeaseIsExclusiveUntilExpiry(t *testing.T) {
	m := newMachine(t, "app")
	a := m.claim("m1", "p1", -1)
	b := m.claim("m2", "p2", -1)
	d := int64(30 * time.Second)
	m.must(ClaimLeaseOp(a, "m1", d))
	if err := m.do(ClaimLeaseOp(b, "m2", d)); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("second claimant: %v", err)
	}
	if err := m.do(CheckLeaseOp(b), UpdateLeaderSettingsOp(map[string]string{"x": "1"})); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("non-leader write: %v", err)
	}
	m.must(CheckLeaseOp(a), UpdateLeaderSettingsOp(map[string]string{"x": "1"}))
	m.now = m.now.Add(20 * time.Second)
	m.must(ClaimLeaseOp(a, "m1", d)) // renew
	l := m.s.Lease()
	if l.Epoch != 1 || !l.Acquired.Equal(t0) || !l.Expires.Equal(m.now.Add(30*time.Second)) {
		t.Fatalf("renewed lease: %+v", l)
	}
	m.now = m.now.Add(30 * time.Second) // expired exactly now
	if err := m.do(CheckLeaseOp(a)); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("expired lease still valid: %v", err)
	}
	m.must(ClaimLeaseOp(b, "m2", d))
	if l := m.s.Lease(); l.Unit != b || l.Epoch != 2 {
		t.Fatalf("lease after takeover: %+v", l)
	}
	settings, rev := m.s.LeaderSettings()
	if settings.Value("x") != "1" || rev != 1 {
		t.Fatalf("leader settings %v rev %d", settings, rev)
	}
}

func TestCharmStateLimits(t *testing.T) {
	m := newMachine(t, "app")
	u := m.claim("m1", "p1", -1)
	if err := m.do(UpdateCharmStateOp(u, map[string]string{strings.Repeat("k", MaxCharmStateKey+1): "v"})); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("long key: %v", err)
	}
	if err := m.do(UpdateCharmStateOp(u, map[string]string{"k": strings.Repeat("v", MaxCharmStateValue+1)})); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("long value: %v", err)
	}
	val := strings.Repeat("v", MaxCharmStateValue)
	set := map[string]string{}
	for i := 0; SettingsOf(set).Size() <= MaxCharmStateSize-len(val)-3; i++ {
		set[fmt.Sprintf("k%02d", i)] = val
	}
	m.must(UpdateCharmStateOp(u, set))
	if err := m.do(UpdateCharmStateOp(u, map[string]string{"zz": val})); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("total over limit: %v", err)
	}
	m.must(UpdateCharmStateOp(u, nil, "k00"))
	if _, ok := m.s.CharmState(u).Get("k00"); ok {
		t.Fatal("state-delete did not delete")
	}
}

func TestPublishedStatesNeverChange(t *testing.T) {
	m := newMachine(t, "app")
	rel := m.relation("peers")
	u := m.claim("m1", "p1", -1)
	m.must(UpdateBagOp(rel, u, map[string]string{"a": "1"}))
	old := m.s
	oldDump := dump(old)
	m.must(UpdateBagOp(rel, u, map[string]string{"a": "2", "b": "3"}), UpdateCharmStateOp(u, map[string]string{"c": "1"}))
	m.must(ReleaseUnitOp(u, "", ""), RemoveRelationOp(rel))
	if dump(old) != oldDump {
		t.Fatalf("an earlier State changed:\n%s\nvs\n%s", oldDump, dump(old))
	}
}

func TestUnknownCommandVersionHaltsApply(t *testing.T) {
	var fatal error
	fatalSeen := make(chan struct{})
	f := NewFSM(func(err error) { fatal = err; close(fatalSeen) })
	data, _ := proto.Marshal(&storepb.Command{Version: CommandVersion + 1})
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
	if !errors.Is(resultError(res), ErrInvalid) || f.State().Index() != 7 {
		t.Fatalf("result %v index %d", res, f.State().Index())
	}
}

func TestSnapshotRoundTripPreservesEverything(t *testing.T) {
	m := newMachine(t, "app")
	rel := m.relation("peers")
	db := m.must(EnsureRelationOp("db", "mysql", false, "mysql", "server")).GetOps()[0].GetRelationId()
	a := m.claim("m1", "p1", -1)
	b := m.claim("m2", "p2", -1)
	m.cmd("r1", UpdateBagOp(rel, a, map[string]string{"x": "1", "y": ""}), UpdateBagOp(db, "mysql/0", map[string]string{"db": "wp"}))
	m.must(UpdateBagOp(rel, "app", map[string]string{"secret": "s"}), UpdateCharmStateOp(b, map[string]string{"k": "v"}))
	m.must(SetCursorOp(a, []byte{0, 1, 2}), ClaimLeaseOp(a, "m1", int64(time.Minute)), UpdateLeaderSettingsOp(map[string]string{"l": "1"}))
	m.must(SetStatusOp(a, "active", "ready", []byte(`{"k":1}`)), SetStatusOp("app", "waiting", "", nil), SetHookErrorOp(b, "install", "exit 1"))
	m.must(SetWorkloadVersionOp(a, "1.2"), UpdatePortsOp(a, []Port{{From: 80, To: 80, Protocol: "tcp"}, {Endpoint: "db", Protocol: "icmp"}}, nil))
	m.must(ReleaseUnitOp(b, "", "stop"))
	var buf bytes.Buffer
	if err := WriteSnapshot(&buf, m.s); err != nil {
		t.Fatal(err)
	}
	got, err := ReadSnapshot(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if dump(got) != dump(m.s) {
		t.Fatalf("restored state differs:\n%s\nwant:\n%s", dump(got), dump(m.s))
	}
	// A restored state keeps behaving the same: the remembered request id
	// still deduplicates.
	m2 := &machine{t: t, s: got, now: m.now, index: m.index}
	r := m2.cmd("r1", UpdateBagOp(rel, a, map[string]string{"x": "changed"}))
	if resultError(r) != nil || m2.s.bags == nil {
		t.Fatal(r)
	}
	if bag, _ := m2.s.Bag(rel, a); bag.Data.Value("x") != "1" {
		t.Fatal("request id dedup lost in snapshot")
	}
	// Truncated snapshots are refused, never half-restored.
	for _, cut := range []int{0, 1, buf.Len() / 2, buf.Len() - 1} {
		if _, err := ReadSnapshot(bytes.NewReader(buf.Bytes()[:cut])); err == nil {
			t.Errorf("snapshot cut at %d bytes was accepted", cut)
		}
	}
}

func TestFSMRestoreReplacesAllState(t *testing.T) {
	src := newMachine(t, "app")
	src.relation("peers")
	var buf bytes.Buffer
	if err := WriteSnapshot(&buf, src.s); err != nil {
		t.Fatal(err)
	}
	f := NewFSM(nil)
	other := newMachine(t, "app")
	other.claim("m", "p", -1)
	other.relation("zzz")
	f.publish(other.s)
	ch := f.Changed()
	if err := f.Restore(nopCloser{bytes.NewReader(buf.Bytes())}); err != nil {
		t.Fatal(err)
	}
	<-ch
	if dump(f.State()) != dump(src.s) {
		t.Fatalf("restore kept old state:\n%s", dump(f.State()))
	}
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

func FuzzApplyCommand(f *testing.F) {
	seed := func(ops ...*storepb.Op) {
		b, _ := proto.Marshal(&storepb.Command{Version: 1, RequestId: "x", Ops: ops})
		f.Add(b)
	}
	seed(ClaimUnitOp("m", "p", -1))
	seed(EnsureRelationOp("peers", "x", true, "", ""), UpdateBagOp(0, "app/0", map[string]string{"a": "b"}, "c"))
	seed(ClaimLeaseOp("app/0", "m", 10), CheckLeaseOp("app/0"), RemoveUnitOp("app/0", 0, ""))
	f.Fuzz(func(t *testing.T, data []byte) {
		m := newMachine(t, "app")
		m.relation("peers")
		m.claim("m", "p", -1)
		var cmd storepb.Command
		if proto.Unmarshal(data, &cmd) != nil || hasUnknownOp(&cmd) {
			return
		}
		before := dump(m.s)
		next, res := apply(m.s, m.index+1, &cmd)
		if resultError(res) != nil && strip(dump(next)) != strip(before) && cmd.GetRequestId() == "" {
			t.Fatalf("failed command changed state: %v", resultError(res))
		}
	})
}

func FuzzReadSnapshot(f *testing.F) {
	m := newMachine(f, "app")
	m.relation("peers")
	m.claim("m", "p", -1)
	var buf bytes.Buffer
	_ = WriteSnapshot(&buf, m.s)
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = ReadSnapshot(bytes.NewReader(data))
	})
}

func TestStatusesVersionsPortsAndHookErrors(t *testing.T) {
	m := newMachine(t, "app")
	u := m.claim("m1", "p1", -1)
	m.must(SetStatusOp(u, "active", "all good", []byte(`{"x":"y"}`)))
	if st, ok := m.s.Status(u); !ok || st.Status != "active" || st.Message != "all good" || string(st.DataJSON) != `{"x":"y"}` || !st.Since.Equal(t0) {
		t.Fatalf("status %+v", st)
	}
	for _, bad := range []*storepb.Op{
		SetStatusOp(u, "error", "", nil),
		SetStatusOp(u, "active", "", []byte(`[1]`)),
		SetStatusOp(u, "active", "", []byte(`{`)),
		SetStatusOp("app/9", "active", "", nil),
		SetStatusOp("other", "active", "", nil),
		UpdatePortsOp(u, []Port{{From: 20, To: 10, Protocol: "tcp"}}, nil),
		UpdatePortsOp(u, []Port{{From: 1, To: 1, Protocol: "icmp"}}, nil),
		UpdatePortsOp(u, []Port{{From: 1, To: 1, Protocol: "sctp"}}, nil),
	} {
		if err := m.do(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	m.must(UpdatePortsOp(u, []Port{{From: 80, To: 80, Protocol: "tcp"}, {From: 53, To: 55, Protocol: "udp"}, {Endpoint: "db", From: 5432, To: 5432, Protocol: "tcp"}}, nil))
	m.must(UpdatePortsOp(u, []Port{{Protocol: "icmp"}}, []Port{{From: 53, To: 55, Protocol: "udp"}, {From: 9, To: 9, Protocol: "tcp"}}))
	if got := fmt.Sprint(m.s.UnitExtra(u).Ports); got != "[icmp 80/tcp 5432/tcp]" {
		t.Fatalf("ports %s", got)
	}
	m.must(SetHookErrorOp(u, "config-changed", "exit status 1"), SetWorkloadVersionOp(u, "14.2"))
	if e := m.s.UnitExtra(u); e.HookError != "config-changed" || e.WorkloadVersion != "14.2" || len(e.Ports) != 3 {
		t.Fatalf("extra %+v", e)
	}
	m.must(SetHookErrorOp(u, "", ""))
	if e := m.s.UnitExtra(u); e.HookError != "" || !e.HookErrorSince.IsZero() {
		t.Fatalf("cleared hook error %+v", e)
	}
	m.must(ClaimLeaseOp(u, "m1", int64(time.Minute)))
	m.must(ReleaseLeaseOp("app/7"))
	if m.s.Lease().Unit != u {
		t.Fatal("releasing another unit's lease took it away")
	}
	m.must(ReleaseLeaseOp(u))
	if l := m.s.Lease(); l.Unit != "" || l.Epoch != 1 {
		t.Fatalf("released lease %+v", l)
	}
	m.must(ReleaseUnitOp(u, "", ""))
	m.must(RemoveUnitOp(u, 0, "gone"))
	if _, ok := m.s.Status(u); ok || m.s.UnitExtra(u).WorkloadVersion != "" {
		t.Fatal("a removed unit kept its status or extras")
	}
}

func TestCursorCompareAndSet(t *testing.T) {
	m := newMachine(t, "app")
	u := m.claim("m1", "p1", -1)
	m.must(AdvanceCursorOp(u, nil, []byte("c1")))
	if err := m.do(AdvanceCursorOp(u, nil, []byte("c2"))); !errors.Is(err, ErrConflict) {
		t.Fatalf("advance from a stale cursor: %v", err)
	}
	m.must(AdvanceCursorOp(u, []byte("c1"), []byte("c2")))
	if string(m.s.Cursor(u)) != "c2" {
		t.Fatalf("cursor %q", m.s.Cursor(u))
	}
}

func TestUnitsRememberWhetherTheyWereClaimedByOrdinal(t *testing.T) {
	m := newMachine(t, "app")
	m.claim("m1", "web-0", 0)
	m.claim("m2", "p2", -1)
	a, _ := m.s.Unit("app/0")
	b, _ := m.s.Unit("app/1")
	if !a.ByOrdinal || b.ByOrdinal {
		t.Fatalf("by ordinal: %v %v", a.ByOrdinal, b.ByOrdinal)
	}
}
