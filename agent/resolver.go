package agent

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
)

// Cursor is what a unit has been told: which events were delivered. It is
// kept in the replicated state (the store does not interpret it) and is
// advanced in the same raft command as the writes of the hook that
// delivered the event, so a hook and its effects commit together or not at
// all — and a pod that comes back, on any disk, resumes exactly where the
// unit was.
type Cursor struct {
	Installed bool `json:"installed,omitempty"`
	Started   bool `json:"started,omitempty"`
	// Pod identifies the pod instance the unit last ran in; a different one
	// means the pod was replaced and the churn sequence runs.
	Pod string `json:"pod,omitempty"`
	// Churn is the next step of the pod-churn sequence ("" when none).
	Churn string `json:"churn,omitempty"`
	// LeaderEpoch is the lease epoch of the last leader-elected.
	LeaderEpoch uint64 `json:"leader_epoch,omitempty"`
	// LeaderSeen: leader-elected or leader-settings-changed ran once.
	LeaderSeen        bool   `json:"leader_seen,omitempty"`
	LeaderSettingsRev uint64 `json:"leader_settings_rev,omitempty"`
	ConfigHash        string `json:"config,omitempty"`
	// UpdateStatus is when update-status last ran (unix nanoseconds).
	UpdateStatus int64                     `json:"update_status,omitempty"`
	Relations    map[int64]*RelationCursor `json:"relations,omitempty"`
	Secrets      *SecretsCursor            `json:"secrets,omitempty"` // secret_events.go
	// Running is the hook the unit was about to run, or running, when this
	// cursor was committed (nil: none). As Juju's uniter records an
	// operation before it runs it, an interrupted hook — its pod killed or
	// replaced, on any disk — runs again before any other, if it is still
	// due. The record rides on the previous hook's commit; only a hook
	// started from idle commits it on its own.
	Running *HookID `json:"running,omitempty"`
}

// HookID identifies a hook: its kind, its relation (0 and Relation false
// outside relation hooks) and its remote unit or application.
type HookID struct {
	Name       string `json:"name"`
	Relation   int64  `json:"relation,omitempty"`
	InRelation bool   `json:"in_relation,omitempty"`
	RemoteUnit string `json:"remote_unit,omitempty"`
	RemoteApp  string `json:"remote_app,omitempty"`
	// Secret and SecretRevision identify a secret hook's secret.
	Secret         string `json:"secret,omitempty"`
	SecretRevision int64  `json:"secret_revision,omitempty"`
}

func (id HookID) String() string {
	s := id.Name
	if id.InRelation {
		s += fmt.Sprintf(" (relation %d", id.Relation)
		if id.RemoteUnit != "" {
			s += ", " + id.RemoteUnit
		} else if id.RemoteApp != "" {
			s += ", " + id.RemoteApp
		}
		s += ")"
	}
	if id.Secret != "" {
		s += fmt.Sprintf(" (%s revision %d)", id.Secret, id.SecretRevision)
	}
	return s
}

// RelationCursor is what a unit was told of one relation.
type RelationCursor struct {
	Endpoint string `json:"endpoint"`
	Peer     bool   `json:"peer,omitempty"`
	Created  bool   `json:"created,omitempty"`
	// Units maps the remote units the unit saw join to the revision of
	// their bag it last saw.
	Units map[string]uint64 `json:"units,omitempty"`
	// AppRev is the revision of the remote (or, for a peer relation, the
	// shared) application bag last seen.
	AppRev uint64 `json:"app_rev,omitempty"`
	// ChangedPending is the unit that joined and whose relation-changed
	// is due next.
	ChangedPending string `json:"changed_pending,omitempty"`
}

// DecodeCursor reads a stored cursor; nil or empty is the zero cursor.
func DecodeCursor(b []byte) (Cursor, error) {
	var c Cursor
	if len(b) == 0 {
		return c, nil
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("event cursor is damaged: %w", err)
	}
	return c, nil
}

// Encode returns the stored form (JSON with sorted keys: deterministic).
func (c Cursor) Encode() []byte {
	b, _ := json.Marshal(c)
	return b
}

func (c Cursor) clone() Cursor {
	n := c
	if c.Running != nil {
		r := *c.Running
		n.Running = &r
	}
	n.Relations = make(map[int64]*RelationCursor, len(c.Relations))
	for id, r := range c.Relations {
		rc := *r
		rc.Units = make(map[string]uint64, len(r.Units))
		for u, v := range r.Units {
			rc.Units[u] = v
		}
		n.Relations[id] = &rc
	}
	return n
}

// View is what the resolver decides from: the replicated state and the
// few local facts that are not in it.
type View struct {
	State *state.State
	// Unit is this unit.
	Unit string
	// Pod identifies this pod instance (the pod's UID where known).
	Pod string
	// ConfigHash identifies the charm config the unit should see.
	ConfigHash string
	Now        time.Time
	// UpdateStatusEvery is the update-status interval (0 = never).
	UpdateStatusEvery time.Duration

	// quiet, if set, remembers the relations found quiet, so that those
	// still quiet are not looked at again (see quietMemo).
	quiet *quietMemo
}

// quietMemo remembers, for each relation a unit's agent found quiet
// (relationQuiet), what that rested on: the relation, the unit's cursor of
// it, the relation's bags, for a peer relation the units, and whether the
// unit led. While all of these stay as they were, the relation is still
// quiet, and the agent does not look at its bags again.
//
// dueHooks runs after every entry its member applies. At 1,000 relations,
// looking at every relation's bags each time was a fifth of a follower's
// CPU under a stream of writes to one bag.
//
// The memo holds what it compares (the cursor of the relation and the
// versions are pointers): none can be freed and its address reused while
// it is remembered.
//
// A memo is used by one goroutine at a time (the agent's loop).
type quietMemo struct {
	unit string // the unit the marks are of
	m    map[int64]quietMark
	hits int // verdicts the memo gave (tests)
}

type quietMark struct {
	r      *state.Relation
	rc     *RelationCursor
	bags   any // State.RelationBagsVersion
	units  any // State.UnitsVersion, for a peer relation
	leader bool
}

func newQuietMemo() *quietMemo { return &quietMemo{m: map[int64]quietMark{}} }

// relationQuiet is relationQuiet, remembered.
func (q *quietMemo) relationQuiet(rc *RelationCursor, v View, r *state.Relation, leader bool, relations int) bool {
	if q == nil || rc == nil {
		return relationQuiet(rc, v, r, leader)
	}
	if q.unit != v.Unit {
		clear(q.m)
		q.unit = v.Unit
	}
	mark := quietMark{r: r, rc: rc, bags: v.State.RelationBagsVersion(r.ID), leader: leader}
	if r.Peer {
		mark.units = v.State.UnitsVersion()
	}
	if m, ok := q.m[r.ID]; ok && m == mark {
		q.hits++
		return true
	}
	if !relationQuiet(rc, v, r, leader) {
		delete(q.m, r.ID)
		return false
	}
	if len(q.m) > 2*relations+16 {
		clear(q.m) // relations removed meanwhile
	}
	q.m[r.ID] = mark
	return true
}

// Hook is the next event to deliver.
type Hook struct {
	// Name is the kind of hook ("install", "relation-changed", ...); see
	// FullName for the name the charm sees.
	Name string
	// Relation is the relation of a relation hook (nil otherwise).
	Relation      *state.Relation
	RemoteUnit    string
	RemoteApp     string
	DepartingUnit string
	// Secret is the secret of a secret hook (secret_events.go).
	Secret *SecretHook
	// Next is the cursor once the hook has succeeded. It is also the
	// unit's view of its relations during the hook (see relation-list).
	Next Cursor
	// StoreView: the hook sees the store's relations and members rather
	// than the unit's view of them (a removed unit's last hooks).
	StoreView bool
}

// ID identifies the hook (see Cursor.Running).
func (h Hook) ID() HookID {
	id := HookID{Name: h.Name, RemoteUnit: h.RemoteUnit}
	if h.Relation != nil {
		id.Relation, id.InRelation = h.Relation.ID, true
		if h.RemoteUnit == "" {
			id.RemoteApp = h.RemoteApp
		}
	}
	if h.Secret != nil {
		id.Secret, id.SecretRevision = h.Secret.ID, h.Secret.Revision
	}
	return id
}

// FullName is the hook's name as Juju gives it to the charm: relation hooks
// are named after their endpoint ("db-relation-changed").
func (h Hook) FullName() string {
	if h.Relation != nil && h.Relation.Endpoint != "" {
		return h.Relation.Endpoint + "-" + h.Name
	}
	return h.Name
}

// Hook kinds.
const (
	HookInstall               = "install"
	HookStart                 = "start"
	HookStop                  = "stop"
	HookConfigChanged         = "config-changed"
	HookUpgradeCharm          = "upgrade-charm"
	HookUpdateStatus          = "update-status"
	HookLeaderElected         = "leader-elected"
	HookLeaderSettingsChanged = "leader-settings-changed"
	HookRelationCreated       = "relation-created"
	HookRelationJoined        = "relation-joined"
	HookRelationChanged       = "relation-changed"
	HookRelationDeparted      = "relation-departed"
	HookRelationBroken        = "relation-broken"
)

// Next decides the next hook for a unit, as Juju's uniter would, from the
// state and the unit's cursor. It is a pure function: no clocks, no I/O.
//
// The order: install; for each peer relation relation-created; then
// leader-elected (leader) or leader-settings-changed (others);
// config-changed; start. After that, when the pod was replaced, the churn
// sequence Juju gives sidecar charms when their pod is recreated
// (upgrade-charm, config-changed, leader-settings-changed for non-leaders,
// start) and nothing else of what the unit already knew; then relation
// events, relation by relation in id order (created, the changed due after
// a join, departed, the remote application's changed, joined, changed);
// relations that are gone (departed for each unit, then broken, never for
// peer relations); leader-elected or leader-settings-changed;
// config-changed; and update-status when due.
func Next(v View, cur Cursor) (Hook, bool) {
	var first Hook
	found := false
	dueHooks(v, cur, func(h Hook) bool {
		first, found = h, true
		return false
	})
	first.Next = first.Next.clone()
	return first, found
}

// Due returns the hook identified by id if it is due now (any hook Next
// could return next or later without the state changing): the hook an
// interrupted run recorded, run again first.
func Due(v View, cur Cursor, id HookID) (Hook, bool) {
	var match Hook
	found := false
	dueHooks(v, cur, func(h Hook) bool {
		if h.ID() == id {
			match, found = h, true
			match.Next = match.Next.clone()
			return false
		}
		return true
	})
	return match, found
}

// dueHooks calls yield with each hook due for the unit, in Next's order of
// priority, until yield returns false. Each is decided from cur as it is:
// the first is the one Next returns.
//
// It runs after every entry the member applies, on every unit, mostly to
// find nothing due: that path allocates nothing per relation (see
// relationQuiet). c shares cur's maps, which nothing here changes in place;
// a yielded hook's Next may share them too: Next and Due return a copy.
func dueHooks(v View, cur Cursor, yield func(Hook) bool) {
	c := cur
	st := v.State
	lease := st.Lease()
	leader := lease.HeldBy(v.Unit, v.Now)
	_, settingsRev := st.LeaderSettings()
	if leader {
		// A leader is never told of its own leader-settings writes.
		c.LeaderSettingsRev = settingsRev
	}
	rels := st.Relations()

	if !c.Installed {
		n := c
		n.Installed, n.Pod = true, v.Pod
		yield(Hook{Name: HookInstall, Next: n})
		return
	}
	if !c.Started {
		for _, r := range rels {
			if rc := c.Relations[r.ID]; r.Peer && (rc == nil || !rc.Created) {
				if h := relationHook(c, r, HookRelationCreated, "", "", func(rc *RelationCursor) { rc.Created = true }); !yield(h) {
					return
				}
			}
		}
		if h, ok := leadershipHook(c, v, leader, lease, settingsRev, true); ok && !yield(h) {
			return
		}
		if c.ConfigHash != v.ConfigHash {
			n := c
			n.ConfigHash = v.ConfigHash
			if !yield(Hook{Name: HookConfigChanged, Next: n}) {
				return
			}
		}
		n := c
		n.Started, n.Pod, n.UpdateStatus = true, v.Pod, v.Now.UnixNano()
		yield(Hook{Name: HookStart, Next: n})
		return
	}

	if c.Pod != v.Pod && c.Churn == "" {
		n := c
		n.Pod, n.Churn = v.Pod, HookConfigChanged
		yield(Hook{Name: HookUpgradeCharm, Next: n})
		return
	}
	switch c.Churn {
	case HookConfigChanged:
		n := c
		n.ConfigHash, n.Churn = v.ConfigHash, HookLeaderSettingsChanged
		yield(Hook{Name: HookConfigChanged, Next: n})
		return
	case HookLeaderSettingsChanged:
		n := c
		n.Churn = HookStart
		if !leader {
			n.LeaderSettingsRev, n.LeaderSeen = settingsRev, true
			if lease.Unit != "" {
				n.LeaderEpoch = lease.Epoch
			}
			yield(Hook{Name: HookLeaderSettingsChanged, Next: n})
			return
		}
		c = n
		fallthrough
	case HookStart:
		n := c
		n.Churn = ""
		yield(Hook{Name: HookStart, Next: n})
		return
	}

	known := 0 // relations of the state the cursor knows
	for _, r := range rels {
		rc, ok := c.Relations[r.ID]
		if ok {
			known++
		}
		if v.quiet.relationQuiet(rc, v, r, leader, len(rels)) {
			continue
		}
		var more bool
		if c, more = relationEvents(c, v, r, leader, yield); !more {
			return
		}
	}
	var gone []int64
	if known != len(c.Relations) {
		for id := range c.Relations {
			if _, ok := st.Relation(id); !ok {
				gone = append(gone, id)
			}
		}
		slices.Sort(gone)
	}
	for _, id := range gone {
		rc := c.Relations[id]
		r := &state.Relation{ID: id, Endpoint: rc.Endpoint, Peer: rc.Peer}
		if units := sortedUnits(rc.Units); len(units) > 0 {
			for _, u := range units {
				if h := relationHook(c, r, HookRelationDeparted, u, appOf(u), func(rc *RelationCursor) { delete(rc.Units, u) }, u); !yield(h) {
					return
				}
			}
			continue // broken once every unit departed
		}
		n := c.clone()
		delete(n.Relations, id)
		if rc.Peer || !rc.Created {
			c = n // peer relations are never broken; nothing was created
			continue
		}
		if !yield(Hook{Name: HookRelationBroken, Relation: r, Next: n}) {
			return
		}
	}
	if h, ok := secretEvents(c, v); ok && !yield(h) {
		return
	}

	if h, ok := leadershipHook(c, v, leader, lease, settingsRev, false); ok && !yield(h) {
		return
	}
	if c.ConfigHash != v.ConfigHash {
		n := c
		n.ConfigHash = v.ConfigHash
		if !yield(Hook{Name: HookConfigChanged, Next: n}) {
			return
		}
	}
	if v.UpdateStatusEvery > 0 && v.Now.Sub(time.Unix(0, c.UpdateStatus)) >= v.UpdateStatusEvery {
		n := c
		n.UpdateStatus = v.Now.UnixNano()
		yield(Hook{Name: HookUpdateStatus, Next: n})
	}
}

// leadershipHook returns leader-elected for a leader not yet told of its
// lease, or leader-settings-changed for a non-leader: once during the
// install phase, then whenever the settings change or a new leader is
// chosen (as Juju tells every follower).
func leadershipHook(c Cursor, v View, leader bool, lease state.Lease, settingsRev uint64, installPhase bool) (Hook, bool) {
	switch {
	case leader && (c.LeaderEpoch != lease.Epoch || !c.LeaderSeen):
		n := c
		n.LeaderEpoch, n.LeaderSeen = lease.Epoch, true
		return Hook{Name: HookLeaderElected, Next: n}, true
	case !leader && installPhase && !c.LeaderSeen,
		!leader && !installPhase && (c.LeaderSettingsRev != settingsRev || (lease.Unit != "" && c.LeaderEpoch != lease.Epoch)):
		n := c
		n.LeaderSeen, n.LeaderSettingsRev = true, settingsRev
		if lease.Unit != "" {
			n.LeaderEpoch = lease.Epoch
		}
		return Hook{Name: HookLeaderSettingsChanged, Next: n}, true
	}
	return Hook{}, false
}

// relationEvents yields the due events of one live relation, in order; it
// returns the cursor later events are decided from (changed only by what
// the unit absorbs without a hook) and false once yield returned false.
func relationEvents(c Cursor, v View, r *state.Relation, leader bool, yield func(Hook) bool) (Cursor, bool) {
	rc := c.Relations[r.ID]
	if rc == nil || !rc.Created {
		h := relationHook(c, r, HookRelationCreated, "", "", func(rc *RelationCursor) { rc.Created = true })
		return c, yield(h) // nothing else of the relation before it is created
	}
	if u := rc.ChangedPending; u != "" {
		h := relationHook(c, r, HookRelationChanged, u, appOf(u), func(rc *RelationCursor) { rc.ChangedPending = "" })
		return c, yield(h) // the changed due after a join comes first
	}
	members := Members(v.State, r, v.Unit)
	for _, u := range sortedUnits(rc.Units) {
		if _, ok := members[u]; !ok {
			if h := relationHook(c, r, HookRelationDeparted, u, appOf(u), func(rc *RelationCursor) { delete(rc.Units, u) }, u); !yield(h) {
				return c, false
			}
		}
	}
	appOwner, appRev := appBag(v.State, r)
	if appRev != rc.AppRev {
		if r.Peer && leader {
			// The leader is not told of the peer application bag it writes.
			c = c.clone()
			c.Relations[r.ID].AppRev = appRev
			rc = c.Relations[r.ID]
		} else if h := relationHook(c, r, HookRelationChanged, "", appOwner, func(rc *RelationCursor) { rc.AppRev = appRev }); !yield(h) {
			return c, false
		}
	}
	names := make([]string, 0, len(members))
	for u := range members {
		names = append(names, u)
	}
	sortUnitNames(names)
	for _, u := range names {
		if _, ok := rc.Units[u]; !ok {
			rev := members[u]
			if h := relationHook(c, r, HookRelationJoined, u, appOf(u), func(rc *RelationCursor) {
				rc.Units[u] = rev
				rc.ChangedPending = u
			}); !yield(h) {
				return c, false
			}
		}
	}
	for _, u := range names {
		if rev, seen := rc.Units[u]; seen && members[u] != rev {
			if h := relationHook(c, r, HookRelationChanged, u, appOf(u), func(rc *RelationCursor) { rc.Units[u] = members[u] }); !yield(h) {
				return c, false
			}
		}
	}
	return c, true
}

// relationQuiet reports, without allocating, that relationEvents would
// yield nothing for r and leave the cursor as it is: the unit was told of
// the relation's creation, of every member's bag at its current revision,
// of the application bag, and of every departure. False means only that
// relationEvents must decide.
func relationQuiet(rc *RelationCursor, v View, r *state.Relation, leader bool) bool {
	if rc == nil || !rc.Created || rc.ChangedPending != "" {
		return false
	}
	if _, appRev := appBag(v.State, r); appRev != rc.AppRev {
		return false
	}
	quiet, n := true, 0
	eachMember(v.State, r, v.Unit, func(u string, rev uint64) bool {
		n++
		if seen, ok := rc.Units[u]; !ok || seen != rev {
			quiet = false
		}
		return quiet
	})
	// Every member is known at its revision; as many as the cursor knows:
	// none departed.
	return quiet && n == len(rc.Units)
}

// appBag returns the owner of the application bag a unit is told of in
// r (the remote application, or its own for a peer relation) and the
// bag's revision (0: never written).
func appBag(st *state.State, r *state.Relation) (string, uint64) {
	owner := r.RemoteApp
	if r.Peer {
		owner = st.App()
	}
	if b, ok := st.Bag(r.ID, owner); ok {
		return owner, b.Revision
	}
	return owner, 0
}

// relationHook builds a relation hook whose Next cursor is c changed by
// update.
func relationHook(c Cursor, r *state.Relation, name, remoteUnit, remoteApp string, update func(*RelationCursor), departing ...string) Hook {
	n := c.clone()
	rc := n.Relations[r.ID]
	if rc == nil {
		rc = &RelationCursor{Endpoint: r.Endpoint, Peer: r.Peer, Units: map[string]uint64{}}
		n.Relations[r.ID] = rc
	}
	update(rc)
	if remoteApp == "" {
		remoteApp = r.RemoteApp
	}
	h := Hook{Name: name, Relation: r, RemoteUnit: remoteUnit, RemoteApp: remoteApp, Next: n}
	if len(departing) > 0 {
		h.DepartingUnit = departing[0]
	}
	return h
}

// Members returns the remote units of a relation with the revision of
// their bag: for a peer relation every unit of the application but unit
// and the removed ones; for another relation the remote application's
// units that have a bag in it.
func Members(st *state.State, r *state.Relation, unit string) map[string]uint64 {
	out := map[string]uint64{}
	eachMember(st, r, unit, func(u string, rev uint64) bool {
		out[u] = rev
		return true
	})
	return out
}

// eachMember calls fn with each of Members' units and revisions, in no
// promised order, until fn returns false.
func eachMember(st *state.State, r *state.Relation, unit string, fn func(unit string, rev uint64) bool) {
	if r.Peer {
		st.EachUnit(func(u *state.Unit) bool {
			if u.State == state.UnitRemoved || u.Name == unit {
				return true
			}
			var rev uint64
			if b, ok := st.Bag(r.ID, u.Name); ok {
				rev = b.Revision
			}
			return fn(u.Name, rev)
		})
		return
	}
	st.EachUnitBag(r.ID, r.RemoteApp, func(b *state.Bag) bool {
		if _, _, ok := state.ParseUnitName(b.Owner); ok {
			return fn(b.Owner, b.Revision)
		}
		return true
	})
}

func appOf(unit string) string {
	app, _, _ := state.ParseUnitName(unit)
	return app
}

func sortedUnits(m map[string]uint64) []string {
	out := make([]string, 0, len(m))
	for u := range m {
		out = append(out, u)
	}
	sortUnitNames(out)
	return out
}

// sortUnitNames orders unit names by application, then number.
func sortUnitNames(names []string) {
	sort.Slice(names, func(i, j int) bool {
		ai, ni, _ := state.ParseUnitName(names[i])
		aj, nj, _ := state.ParseUnitName(names[j])
		if ai != aj {
			return ai < aj
		}
		return ni < nj
	})
}
