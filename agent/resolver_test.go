package agent

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/state/statetest"
	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// world is the shared in-memory store, initialised for application "app".
type world struct {
	*statetest.Store
	t *testing.T
}

func newWorld(t *testing.T) *world {
	w := &world{Store: statetest.New(t, "app"), t: t}
	w.SetNow(t0)
	return w
}

func (w *world) do(ops ...*storepb.Op) *storepb.Result {
	w.t.Helper()
	return w.Must(ops...)
}

func (w *world) units(n int) {
	for i := 0; i < n; i++ {
		w.do(state.ClaimUnitOp(fmt.Sprintf("app-%d/x", i), fmt.Sprintf("app-%d", i), int64(i), 0))
	}
}

func (w *world) peers() int64 {
	return w.do(state.EnsureRelationOp("peers", "app-peers", true, "", "")).GetOps()[0].GetRelationId()
}

func (w *world) lead(unit string) {
	w.do(state.ClaimLeaseOp(unit, "m", int64(time.Minute)))
}

// unitAgent plays one unit's agent: it runs the hooks Next returns and
// commits each cursor, as if every hook succeeded.
type unitAgent struct {
	w      *world
	unit   string
	pod    string
	config string
	cur    Cursor
	every  time.Duration
}

func (a *unitAgent) view() View {
	return View{State: a.w.State(), Unit: a.unit, Pod: a.pod, ConfigHash: a.config, Now: a.w.Now(), UpdateStatusEvery: a.every}
}

// drain returns the hooks run until none is due, as "name[:remote]" strings.
func (a *unitAgent) drain() []string {
	a.w.t.Helper()
	var out []string
	for i := 0; ; i++ {
		if i > 100 {
			a.w.t.Fatalf("hooks never settle: %v", out)
		}
		h, ok := Next(a.view(), a.cur)
		if !ok {
			return out
		}
		s := h.Name
		switch {
		case h.DepartingUnit != "":
			s += ":" + h.DepartingUnit
		case h.RemoteUnit != "":
			s += ":" + h.RemoteUnit
		case h.Relation != nil && h.RemoteApp != "" && strings.HasPrefix(h.Name, "relation-changed"):
			s += ":app=" + h.RemoteApp
		}
		out = append(out, s)
		// The stored form is what the next run reads.
		c, err := DecodeCursor(h.Next.Encode())
		if err != nil {
			a.w.t.Fatal(err)
		}
		a.cur = c
	}
}

func expectHooks(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("hooks:\n got  %v\n want %v", got, want)
	}
}

func TestInstallSequenceOfTheLeader(t *testing.T) {
	w := newWorld(t)
	w.units(3)
	w.peers()
	w.lead("app/0")
	a := &unitAgent{w: w, unit: "app/0", pod: "p0", config: "c1"}
	expectHooks(t, a.drain(),
		"install", "relation-created", "leader-elected", "config-changed", "start",
		"relation-joined:app/1", "relation-changed:app/1", "relation-joined:app/2", "relation-changed:app/2")
}

func TestInstallSequenceOfAFollower(t *testing.T) {
	w := newWorld(t)
	w.units(2)
	w.peers()
	w.lead("app/0")
	a := &unitAgent{w: w, unit: "app/1", pod: "p1", config: "c1"}
	expectHooks(t, a.drain(),
		"install", "relation-created", "leader-settings-changed", "config-changed", "start",
		"relation-joined:app/0", "relation-changed:app/0")
}

func TestReplacedPodGetsTheChurnSequenceAndNothingItKnew(t *testing.T) {
	w := newWorld(t)
	w.units(3)
	rel := w.peers()
	w.lead("app/0")
	a := &unitAgent{w: w, unit: "app/1", pod: "pod-a", config: "c1"}
	a.drain()
	// The pod is replaced; meanwhile app/2 changed its bag.
	w.do(state.UpdateBagOp(rel, "app/2", map[string]string{"k": "v"}))
	a.pod = "pod-b"
	expectHooks(t, a.drain(), "upgrade-charm", "config-changed", "leader-settings-changed", "start", "relation-changed:app/2")
	// The leader's churn sequence has no leader-settings-changed.
	l := &unitAgent{w: w, unit: "app/0", pod: "pod-a", config: "c1"}
	l.drain()
	l.pod = "pod-b"
	expectHooks(t, l.drain(), "upgrade-charm", "config-changed", "start")
}

func TestOnlyOtherUnitsWritesFireRelationChanged(t *testing.T) {
	w := newWorld(t)
	w.units(3)
	rel := w.peers()
	w.lead("app/0")
	a := &unitAgent{w: w, unit: "app/1", pod: "p", config: "c"}
	a.drain()
	w.do(state.UpdateBagOp(rel, "app/1", map[string]string{"mine": "1"}))
	expectHooks(t, a.drain())
	w.do(state.UpdateBagOp(rel, "app/0", map[string]string{"theirs": "1"}))
	w.do(state.UpdateBagOp(rel, "app/0", map[string]string{"theirs": "2"}))
	expectHooks(t, a.drain(), "relation-changed:app/0")
	// A write that changes nothing bumps no revision, fires nothing.
	w.do(state.UpdateBagOp(rel, "app/0", map[string]string{"theirs": "2"}))
	expectHooks(t, a.drain())
}

func TestPeerAppBagChangeFiresAppLevelChangedOnFollowersOnly(t *testing.T) {
	w := newWorld(t)
	w.units(2)
	rel := w.peers()
	w.lead("app/0")
	l := &unitAgent{w: w, unit: "app/0", pod: "p", config: "c"}
	f := &unitAgent{w: w, unit: "app/1", pod: "p", config: "c"}
	l.drain()
	f.drain()
	w.do(state.UpdateBagOp(rel, "app", map[string]string{"secret": "s"}))
	expectHooks(t, f.drain(), "relation-changed:app=app")
	expectHooks(t, l.drain())
}

func TestOnlyRemovedUnitsDepart(t *testing.T) {
	w := newWorld(t)
	w.units(3)
	w.peers()
	w.lead("app/0")
	a := &unitAgent{w: w, unit: "app/0", pod: "p", config: "c"}
	a.drain()
	// A released unit (its pod stopped) has not departed.
	w.do(state.ReleaseUnitOp("app/2", "", "pod stopped"))
	expectHooks(t, a.drain())
	// Claimed again by a new pod: same unit, nothing to tell.
	w.do(state.ClaimUnitOp("app-2/y", "app-2", 2, 0))
	expectHooks(t, a.drain())
	w.do(state.ReleaseUnitOp("app/2", "", "scaled down"), state.RemoveUnitOp("app/2", 0, "removed"))
	expectHooks(t, a.drain(), "relation-departed:app/2")
	// A new unit joins.
	w.do(state.ClaimUnitOp("app-3/x", "app-3", 3, 0))
	expectHooks(t, a.drain(), "relation-joined:app/3", "relation-changed:app/3")
}

func TestLeadershipChangeFiresLeaderElectedAndSettingsChanges(t *testing.T) {
	w := newWorld(t)
	w.units(2)
	w.lead("app/0")
	f := &unitAgent{w: w, unit: "app/1", pod: "p", config: "c"}
	l := &unitAgent{w: w, unit: "app/0", pod: "p", config: "c"}
	f.drain()
	l.drain()
	w.do(state.CheckLeaseOp("app/0"), state.UpdateLeaderSettingsOp(map[string]string{"k": "v"}))
	expectHooks(t, f.drain(), "leader-settings-changed")
	expectHooks(t, l.drain())
	// The lease expires and app/1 takes it: the new leader is elected, the
	// old one is told, as every follower is when a new leader is chosen.
	w.Advance(2 * time.Minute)
	w.lead("app/1")
	expectHooks(t, f.drain(), "leader-elected")
	expectHooks(t, l.drain(), "leader-settings-changed")
	w.do(state.CheckLeaseOp("app/1"), state.UpdateLeaderSettingsOp(map[string]string{"k": "w"}))
	expectHooks(t, l.drain(), "leader-settings-changed")
	expectHooks(t, f.drain())
}

func TestConfigChangeAndUpdateStatus(t *testing.T) {
	w := newWorld(t)
	w.units(1)
	w.lead("app/0")
	a := &unitAgent{w: w, unit: "app/0", pod: "p", config: "c1", every: 5 * time.Minute}
	expectHooks(t, a.drain(), "install", "leader-elected", "config-changed", "start")
	a.config = "c2"
	expectHooks(t, a.drain(), "config-changed")
	w.Advance(4 * time.Minute)
	expectHooks(t, a.drain())
	w.Advance(time.Minute)
	expectHooks(t, a.drain(), "update-status")
	expectHooks(t, a.drain())
}

func TestRemovedRelationIsBrokenAfterDepartures(t *testing.T) {
	w := newWorld(t)
	w.units(1)
	w.lead("app/0")
	db := w.do(state.EnsureRelationOp("db", "mysql", false, "mysql", "server")).GetOps()[0].GetRelationId()
	w.do(state.UpdateBagOp(db, "mysql/0", map[string]string{"host": "h"}), state.UpdateBagOp(db, "mysql", map[string]string{"db": "x"}))
	a := &unitAgent{w: w, unit: "app/0", pod: "p", config: "c"}
	expectHooks(t, a.drain(), "install", "leader-elected", "config-changed", "start",
		"relation-created", "relation-changed:app=mysql", "relation-joined:mysql/0", "relation-changed:mysql/0")
	w.do(state.RemoveRelationOp(db))
	expectHooks(t, a.drain(), "relation-departed:mysql/0", "relation-broken")
	// A peer relation that goes away is never broken.
	rel := w.peers()
	a.drain()
	w.do(state.RemoveRelationOp(rel))
	expectHooks(t, a.drain())
}

func TestCrashBeforeCommitRedeliversTheSameHook(t *testing.T) {
	w := newWorld(t)
	w.units(2)
	rel := w.peers()
	w.lead("app/0")
	a := &unitAgent{w: w, unit: "app/1", pod: "p", config: "c"}
	a.drain()
	w.do(state.UpdateBagOp(rel, "app/0", map[string]string{"k": "v"}))
	first, ok := Next(a.view(), a.cur)
	if !ok {
		t.Fatal("no hook")
	}
	// The hook's commit never happened: the cursor is unchanged, so the
	// same hook comes again.
	again, _ := Next(a.view(), a.cur)
	if first.Name != again.Name || first.RemoteUnit != again.RemoteUnit || string(first.Next.Encode()) != string(again.Next.Encode()) {
		t.Fatalf("first %v, again %v", first, again)
	}
}

func TestDamagedCursorIsAnError(t *testing.T) {
	if _, err := DecodeCursor([]byte("{not json")); err == nil {
		t.Fatal("damaged cursor accepted")
	}
	c, err := DecodeCursor(nil)
	if err != nil || c.Installed {
		t.Fatalf("empty cursor: %+v %v", c, err)
	}
}

func TestRemoteViewsDriveRelationHooks(t *testing.T) {
	w := newWorld(t)
	w.units(1)
	w.lead("app/0")
	db := w.do(state.OfferedRelationOp("db", "pgsql", "pg", "database")).GetOps()[0].GetRelationId()
	a := &unitAgent{w: w, unit: "app/0", pod: "p", config: "c"}
	expectHooks(t, a.drain(), "install", "leader-elected", "config-changed", "start", "relation-created")
	view := func(revision uint64, app map[string]string, units map[string]map[string]string) {
		w.t.Helper()
		w.do(state.SetRemoteViewOp(db, "pg", "pg-cluster", revision, app, units))
	}
	// Units with nothing published yet are in the relation all the same.
	view(1, nil, map[string]map[string]string{"pg/0": nil, "pg/1": nil})
	expectHooks(t, a.drain(), "relation-joined:pg/0", "relation-changed:pg/0", "relation-joined:pg/1", "relation-changed:pg/1")
	view(2, nil, map[string]map[string]string{"pg/0": nil, "pg/1": nil})
	expectHooks(t, a.drain())
	view(3, nil, map[string]map[string]string{"pg/0": nil, "pg/1": {"host": "h1"}})
	h, ok := Next(a.view(), a.cur)
	if !ok || h.FullName() != "db-relation-changed" || h.RemoteUnit != "pg/1" || h.RemoteApp != "pg" {
		t.Fatalf("after pg/1's change: %+v %v", h, ok)
	}
	expectHooks(t, a.drain(), "relation-changed:pg/1")
	view(4, nil, map[string]map[string]string{"pg/1": {"host": "h1"}})
	expectHooks(t, a.drain(), "relation-departed:pg/0")
	// A stale view (an older revision, delivered late) tells nothing.
	view(2, nil, map[string]map[string]string{"pg/0": nil, "pg/1": nil})
	expectHooks(t, a.drain())
	view(5, map[string]string{"db": "x"}, map[string]map[string]string{"pg/1": {"host": "h1"}})
	h, ok = Next(a.view(), a.cur)
	if !ok || h.Name != HookRelationChanged || h.RemoteUnit != "" || h.RemoteApp != "pg" {
		t.Fatalf("after the application bag's change: %+v %v", h, ok)
	}
	expectHooks(t, a.drain(), "relation-changed:app=pg")
	expectHooks(t, a.drain())
}
