package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/bagkeeper/bagkeeper/agent/hooktools"
	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

// LeaseGuarantee is how long is-leader promises leadership for: it answers
// true only while the lease has at least this long to run.
const LeaseGuarantee = 30 * time.Second

// hookContext is one running hook as its tools see it. Reads come from the
// snapshot taken when the hook started, plus the hook's own buffered
// writes; nothing is written to the store until the hook exits 0 (commit).
// Status, workload version, leader settings and logs act at once.
type hookContext struct {
	id   string
	hook Hook
	unit string
	app  string
	st   *state.State // the snapshot
	a    *Agent
	log  *slog.Logger

	// config is the charm config as it was when the hook started.
	config map[string]any

	mu           sync.Mutex
	leaderWrites map[string]string           // this hook's leader-set writes ("" deletes)
	unitWrites   map[int64]map[string]string // "" deletes
	appWrites    map[int64]map[string]string
	stateSet     map[string]string
	stateDel     map[string]bool
	portsOpen    []state.Port
	portsClose   []state.Port
	secrets      secretBuffer // secrets.go

	// action is the action this context runs, nil for a hook (actions.go).
	action *actionRun
}

var (
	_ hooktools.Context       = (*hookContext)(nil)
	_ hooktools.UnitAddresser = (*hookContext)(nil)
)

func newHookContext(a *Agent, id, unit string, h Hook, st *state.State) *hookContext {
	return &hookContext{
		id: id, hook: h, unit: unit, app: st.App(), st: st, a: a, config: a.config(),
		leaderWrites: map[string]string{},
		log:          a.logger().With("hook", h.FullName()),
		unitWrites:   map[int64]map[string]string{},
		appWrites:    map[int64]map[string]string{},
		stateSet:     map[string]string{},
		stateDel:     map[string]bool{},
	}
}

// apply commits ops at once (status, leader settings, workload version),
// fenced with the unit's current claim.
func (c *hookContext) apply(ops ...*storepb.Op) (*storepb.Result, error) {
	return c.a.applyFenced(context.Background(), c.a.fence(c.a.node.State(), c.unit), ops...)
}

func (c *hookContext) UnitName() string { return c.unit }
func (c *hookContext) AppName() string  { return c.app }

func (c *hookContext) HookRelation() (int, bool) {
	if c.hook.Relation == nil {
		return 0, false
	}
	return int(c.hook.Relation.ID), true
}

func (c *hookContext) RemoteUnit() string { return c.hook.RemoteUnit }
func (c *hookContext) RemoteApp() string  { return c.hook.RemoteApp }

// The relations a hook sees, and their members, are the unit's own view
// of them, hook by hook, as Juju's uniter keeps it: a relation is there
// from its relation-created on (inside that hook too) until its
// relation-broken has run (inside that hook still), and a remote unit is a
// member from its relation-joined on (inside that hook too) until its
// relation-departed (not inside that hook). That view is the cursor the
// hook commits (Hook.Next), plus the hook's own relation. A removed
// unit's last hooks (Hook.StoreView) see the store's relations and
// members.

// viewed returns the unit's view of a relation during this hook (nil when
// the hook has no cursor: see above) and whether the relation is in it.
func (c *hookContext) viewed(id int64) (*RelationCursor, bool) {
	if c.hook.StoreView {
		_, ok := c.st.Relation(id)
		return nil, ok || (c.hook.Relation != nil && c.hook.Relation.ID == id)
	}
	if rc, ok := c.hook.Next.Relations[id]; ok {
		return rc, true
	}
	if c.hook.Relation != nil && c.hook.Relation.ID == id {
		return &RelationCursor{Endpoint: c.hook.Relation.Endpoint, Peer: c.hook.Relation.Peer}, true
	}
	return nil, false
}

func (c *hookContext) Relation(id int) (hooktools.Relation, error) {
	rc, visible := c.viewed(int64(id))
	if !visible {
		return nil, hooktools.ErrRelationNotFound
	}
	r, ok := c.st.Relation(int64(id))
	if !ok {
		// A departed or broken hook runs for a relation the store no
		// longer has; its tools still work on what the hook knows.
		switch {
		case c.hook.Relation != nil && c.hook.Relation.ID == int64(id):
			r = c.hook.Relation
		case rc != nil:
			r = &state.Relation{ID: int64(id), Endpoint: rc.Endpoint, Peer: rc.Peer}
		default:
			return nil, hooktools.ErrRelationNotFound
		}
	}
	return &hookRelation{c: c, r: r, view: rc}, nil
}

func (c *hookContext) RelationIDs(endpoint string) []int {
	var out []int
	if c.hook.StoreView {
		for _, r := range c.st.Relations() {
			if r.Endpoint == endpoint {
				out = append(out, int(r.ID))
			}
		}
		return out
	}
	for id, rc := range c.hook.Next.Relations {
		if rc.Endpoint == endpoint {
			out = append(out, int(id))
		}
	}
	if r := c.hook.Relation; r != nil && r.Endpoint == endpoint && c.hook.Next.Relations[r.ID] == nil {
		out = append(out, int(r.ID))
	}
	slices.Sort(out)
	return out
}

// IsLeader answers from the live lease, not the snapshot: leadership is a
// promise about the future.
func (c *hookContext) IsLeader() (bool, error) {
	l := c.a.node.State().Lease()
	return l.Unit == c.unit && l.Expires.Sub(c.a.now()) >= LeaseGuarantee, nil
}

// LeaderSettings reads the snapshot, plus this hook's own leader-set writes.
func (c *hookContext) LeaderSettings() (map[string]string, error) {
	s, _ := c.st.LeaderSettings()
	out := s.Map()
	if out == nil {
		out = map[string]string{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return overlay(out, c.leaderWrites), nil
}

func (c *hookContext) WriteLeaderSettings(settings map[string]string) error {
	if ok, _ := c.IsLeader(); !ok {
		return hooktools.ErrNotLeader
	}
	set, del := splitSettings(settings)
	_, err := c.apply(state.CheckLeaseOp(c.unit), state.UpdateLeaderSettingsOp(set, del...))
	if isNotLeader(err) {
		return hooktools.ErrNotLeader
	}
	if err == nil {
		c.mu.Lock()
		maps.Copy(c.leaderWrites, settings)
		c.mu.Unlock()
	}
	return err
}

func (c *hookContext) Config() map[string]any { return maps.Clone(c.config) }

func (c *hookContext) CharmState() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.st.CharmState(c.unit).Map()
	if out == nil {
		out = map[string]string{}
	}
	for k := range c.stateDel {
		delete(out, k)
	}
	maps.Copy(out, c.stateSet)
	return out
}

func (c *hookContext) SetCharmState(key, value string) error {
	if key == "" {
		return fmt.Errorf("empty key")
	}
	if len(key) > state.MaxCharmStateKey {
		return fmt.Errorf("key %.40q... is %d bytes, over the %d byte limit", key, len(key), state.MaxCharmStateKey)
	}
	if len(value) > state.MaxCharmStateValue {
		return fmt.Errorf("value of %q is %d bytes, over the %d byte limit", key, len(value), state.MaxCharmStateValue)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	next := c.st.CharmState(c.unit).Map()
	if next == nil {
		next = map[string]string{}
	}
	for k := range c.stateDel {
		delete(next, k)
	}
	maps.Copy(next, c.stateSet)
	next[key] = value
	if n := size(next); n > state.MaxCharmStateSize {
		return fmt.Errorf("charm state of %s would be %d bytes, over the %d byte limit", c.unit, n, state.MaxCharmStateSize)
	}
	delete(c.stateDel, key)
	c.stateSet[key] = value
	return nil
}

func (c *hookContext) DeleteCharmState(key string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.stateSet, key)
	c.stateDel[key] = true
	return nil
}

func (c *hookContext) Log(level, message string) {
	lv := slog.LevelInfo
	switch strings.ToUpper(level) {
	case "TRACE", "DEBUG":
		lv = slog.LevelDebug
	case "WARNING", "WARN":
		lv = slog.LevelWarn
	case "ERROR", "CRITICAL":
		lv = slog.LevelError
	}
	c.a.log.Log(context.Background(), lv, message, "logger", "unit."+c.unit+".juju-log", "hook", c.hook.FullName())
}

func (c *hookContext) UnitStatus() (hooktools.Status, error) {
	return unitStatus(c.a.node.State(), c.unit), nil
}

func unitStatus(st *state.State, unit string) hooktools.Status {
	if e := st.UnitExtra(unit); e.HookError != "" {
		return hooktools.Status{Status: "error", Message: fmt.Sprintf("hook failed: %q", e.HookError), Since: e.HookErrorSince}
	}
	s, ok := st.Status(unit)
	if !ok {
		return hooktools.Status{Status: "unknown"}
	}
	return toolStatus(s)
}

func toolStatus(s *state.Status) hooktools.Status {
	out := hooktools.Status{Status: s.Status, Message: s.Message, Since: s.Since, Data: map[string]any{}}
	if len(s.DataJSON) > 0 {
		_ = json.Unmarshal(s.DataJSON, &out.Data)
	}
	return out
}

func (c *hookContext) AppStatus() (hooktools.Status, map[string]hooktools.Status, error) {
	if ok, _ := c.IsLeader(); !ok {
		return hooktools.Status{}, nil, hooktools.ErrIsNotLeader
	}
	st := c.a.node.State()
	app := hooktools.Status{Status: "unknown", Data: map[string]any{}}
	if s, ok := st.Status(c.app); ok {
		app = toolStatus(s)
	}
	units := map[string]hooktools.Status{}
	for _, u := range st.Units() {
		if u.State != state.UnitRemoved {
			units[u.Name] = unitStatus(st, u.Name)
		}
	}
	return app, units, nil
}

func statusData(s hooktools.Status) ([]byte, error) {
	if len(s.Data) == 0 {
		return nil, nil
	}
	return json.Marshal(s.Data)
}

func (c *hookContext) SetUnitStatus(s hooktools.Status) error {
	data, err := statusData(s)
	if err != nil {
		return err
	}
	_, err = c.apply(state.SetStatusOp(c.unit, s.Status, s.Message, data))
	return err
}

func (c *hookContext) SetAppStatus(s hooktools.Status) error {
	if ok, _ := c.IsLeader(); !ok {
		return hooktools.ErrIsNotLeader
	}
	data, err := statusData(s)
	if err != nil {
		return err
	}
	_, err = c.apply(state.CheckLeaseOp(c.unit), state.SetStatusOp(c.app, s.Status, s.Message, data))
	if isNotLeader(err) {
		return hooktools.ErrIsNotLeader
	}
	return err
}

func (c *hookContext) SetApplicationVersion(version string) error {
	_, err := c.apply(state.SetWorkloadVersionOp(c.unit, version))
	return err
}

// NetworkInfo reports the pod's address for every binding: in a pod there
// is one network.
func (c *hookContext) NetworkInfo(binding string, relationID int) (hooktools.NetworkInfo, error) {
	if !c.a.knownBinding(binding) {
		return hooktools.NetworkInfo{}, hooktools.ErrNoNetworkConfig
	}
	addr := c.a.cfg.Address
	cidr := hostCIDR(addr)
	return hooktools.NetworkInfo{
		Interfaces:       []hooktools.NetworkInterface{{InterfaceName: "eth0", Addresses: []hooktools.InterfaceAddress{{Address: addr, CIDR: cidr}}}},
		IngressAddresses: []string{addr},
		EgressSubnets:    []string{cidr},
	}, nil
}

// storePort and toolPort convert port ranges: the tools mark icmp's
// absent ports -1, as Juju does; the store 0.
func storePort(endpoint string, p hooktools.PortRange) state.Port {
	if p.Protocol == "icmp" {
		return state.Port{Endpoint: endpoint, Protocol: "icmp"}
	}
	return state.Port{Endpoint: endpoint, From: p.From, To: p.To, Protocol: p.Protocol}
}

func toolPort(p state.Port) hooktools.PortRange {
	if p.Protocol == "icmp" {
		return hooktools.PortRange{From: -1, To: -1, Protocol: "icmp"}
	}
	return hooktools.PortRange{From: p.From, To: p.To, Protocol: p.Protocol}
}

func (c *hookContext) OpenPort(endpoint string, p hooktools.PortRange) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.portsOpen = append(c.portsOpen, storePort(endpoint, p))
	return nil
}

func (c *hookContext) ClosePort(endpoint string, p hooktools.PortRange) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.portsClose = append(c.portsClose, storePort(endpoint, p))
	return nil
}

func (c *hookContext) OpenedPorts() map[string][]hooktools.PortRange {
	c.mu.Lock()
	defer c.mu.Unlock()
	set := map[state.Port]bool{}
	for _, p := range c.st.UnitExtra(c.unit).Ports {
		set[p] = true
	}
	// Buffered changes in the order they were made.
	for _, p := range c.portsOpen {
		set[p] = true
	}
	for _, p := range c.portsClose {
		delete(set, p)
	}
	out := map[string][]hooktools.PortRange{}
	for p := range set {
		out[p.Endpoint] = append(out[p.Endpoint], toolPort(p))
	}
	return out
}

// hostCIDR is the one-address subnet of addr (/32, or /128 for IPv6).
func hostCIDR(addr string) string {
	if ip := net.ParseIP(addr); ip != nil && ip.To4() == nil {
		return addr + "/128"
	}
	return addr + "/32"
}

// PrivateAddress and PublicAddress answer unit-get: in a pod both are the
// pod's address.
func (c *hookContext) PrivateAddress() (string, error) { return c.a.cfg.Address, nil }
func (c *hookContext) PublicAddress() (string, error)  { return c.a.cfg.Address, nil }

// GoalState reports what Juju's controller reports: every unit of the
// application that is not removed, with its workload status and since when
// (a unit whose charm never set one: unknown, since the unit was created);
// and for each relation with another application (peer relations are left
// out, as in Juju), keyed by this side's endpoint, the remote application
// and the remote units in the relation. The remote side's workload statuses
// are not replicated here: those entries say joined, since the relation was
// made.
func (c *hookContext) GoalState() (hooktools.GoalState, error) {
	gs := hooktools.GoalState{Units: map[string]hooktools.GoalStatus{}, Relations: map[string]map[string]hooktools.GoalStatus{}}
	st := c.st
	for _, u := range st.Units() {
		if u.State == state.UnitRemoved {
			continue
		}
		ws := unitStatus(st, u.Name)
		since := ws.Since
		if since.IsZero() {
			since = u.Created
		}
		gs.Units[u.Name] = hooktools.GoalStatus{Status: ws.Status, Since: &since}
	}
	for _, r := range st.Relations() {
		if r.Peer {
			continue
		}
		m := gs.Relations[r.Endpoint]
		if m == nil {
			m = map[string]hooktools.GoalStatus{}
			gs.Relations[r.Endpoint] = m
		}
		since := r.Created
		m[r.RemoteApp] = hooktools.GoalStatus{Status: "joined", Since: &since}
		for u := range Members(st, r, c.unit) {
			m[u] = hooktools.GoalStatus{Status: "joined", Since: &since}
		}
	}
	return gs, nil
}

// ops returns the hook's buffered writes as store operations.
func (c *hookContext) ops() []*storepb.Op {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ops []*storepb.Op
	if len(c.appWrites) > 0 {
		// Checked when applied: a leader deposed during the hook cannot
		// commit the application bag it wrote.
		ops = append(ops, state.CheckLeaseOp(c.unit))
	}
	for _, id := range sortedIDs(c.unitWrites) {
		set, del := splitSettings(c.unitWrites[id])
		ops = append(ops, state.UpdateBagOp(id, c.unit, set, del...))
	}
	for _, id := range sortedIDs(c.appWrites) {
		set, del := splitSettings(c.appWrites[id])
		ops = append(ops, state.UpdateBagOp(id, c.app, set, del...))
	}
	if len(c.stateSet) > 0 || len(c.stateDel) > 0 {
		var del []string
		for k := range c.stateDel {
			del = append(del, k)
		}
		sort.Strings(del)
		ops = append(ops, state.UpdateCharmStateOp(c.unit, maps.Clone(c.stateSet), del...))
	}
	if len(c.portsOpen) > 0 || len(c.portsClose) > 0 {
		ops = append(ops, state.UpdatePortsOp(c.unit, c.portsOpen, c.portsClose))
	}
	ops = append(ops, c.secretHookOps()...) // secrets.go
	return ops
}

func sortedIDs(m map[int64]map[string]string) []int64 {
	ids := make([]int64, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// splitSettings turns "" values into deletions.
func splitSettings(m map[string]string) (map[string]string, []string) {
	set := map[string]string{}
	var del []string
	for k, v := range m {
		if v == "" {
			del = append(del, k)
		} else {
			set[k] = v
		}
	}
	sort.Strings(del)
	return set, del
}

// hookRelation is a relation as one hook sees it.
type hookRelation struct {
	c *hookContext
	r *state.Relation
	// view is the unit's view of the relation in this hook (nil: none,
	// see hookContext.viewed).
	view *RelationCursor
}

func (h *hookRelation) ID() int           { return int(h.r.ID) }
func (h *hookRelation) Endpoint() string  { return h.r.Endpoint }
func (h *hookRelation) Key() string       { return h.r.Key() }
func (h *hookRelation) RemoteApp() string { return h.r.RemoteApp }
func (h *hookRelation) Peer() bool        { return h.r.Peer }

// ModelUUID is the model of the application at the other end: this one's
// for a peer relation, the remote's as its view said for another.
func (h *hookRelation) ModelUUID() string {
	if !h.r.Peer && h.r.RemoteModel != "" {
		return h.r.RemoteModel
	}
	return h.c.a.cfg.ModelUUID
}

// Members are the remote units the unit has seen join and not yet depart,
// as of this hook (see viewed).
func (h *hookRelation) Members() []string {
	var m map[string]uint64
	if h.view != nil {
		m = h.view.Units
	} else {
		m = Members(h.c.st, h.r, h.c.unit)
	}
	out := make([]string, 0, len(m))
	for u := range m {
		out = append(out, u)
	}
	sortUnitNames(out)
	return out
}

func (h *hookRelation) bag(owner string) map[string]string {
	out := map[string]string{}
	if b, ok := h.c.st.Bag(h.r.ID, owner); ok {
		maps.Insert(out, b.Data.All())
	}
	return out
}

func overlay(base, writes map[string]string) map[string]string {
	for k, v := range writes {
		if v == "" {
			delete(base, k)
		} else {
			base[k] = v
		}
	}
	return base
}

func (h *hookRelation) ReadUnit(unit string) (map[string]string, error) {
	c := h.c
	if unit == c.unit {
		c.mu.Lock()
		defer c.mu.Unlock()
		return overlay(h.bag(unit), c.unitWrites[h.r.ID]), nil
	}
	app, _, ok := state.ParseUnitName(unit)
	switch {
	case !ok:
		return nil, hooktools.ErrPermissionDenied
	case h.r.Peer && app == c.app:
		// Bags of departed peers stay readable while the relation exists.
		if _, ok := c.st.Unit(unit); !ok {
			return nil, hooktools.ErrPermissionDenied
		}
	case !h.r.Peer && app == h.r.RemoteApp:
		// Only the remote units in the relation (the hook's own remote
		// unit too: a departing one is read in its relation-departed).
		if _, ok := c.st.Bag(h.r.ID, unit); !ok && unit != c.hook.RemoteUnit {
			return nil, hooktools.ErrPermissionDenied
		}
	default:
		return nil, hooktools.ErrPermissionDenied
	}
	return h.bag(unit), nil
}

func (h *hookRelation) ReadApp(app string) (map[string]string, error) {
	c := h.c
	if app != c.app {
		if h.r.Peer || app != h.r.RemoteApp {
			return nil, hooktools.ErrPermissionDenied
		}
		return h.bag(app), nil
	}
	leader, _ := c.IsLeader()
	if !h.r.Peer && !leader {
		return nil, hooktools.ErrPermissionDenied
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if leader {
		return overlay(h.bag(app), c.appWrites[h.r.ID]), nil
	}
	return h.bag(app), nil
}

func (h *hookRelation) WriteUnit(settings map[string]string) error {
	c := h.c
	c.mu.Lock()
	defer c.mu.Unlock()
	w, err := mergeChecked(c.unitWrites[h.r.ID], settings, h.bag(c.unit), "relation data of "+c.unit+" in "+h.r.Key())
	if err != nil {
		return err
	}
	c.unitWrites[h.r.ID] = w
	return nil
}

// mergeChecked returns the buffered writes with settings added, unless
// the bag would then exceed its size limit (then nothing is buffered).
func mergeChecked(buffered, settings, committed map[string]string, what string) (map[string]string, error) {
	w := maps.Clone(buffered)
	if w == nil {
		w = map[string]string{}
	}
	maps.Copy(w, settings)
	if n := size(overlay(committed, w)); n > state.MaxBagSize {
		return nil, fmt.Errorf("%s would be %d bytes, over the %d byte limit", what, n, state.MaxBagSize)
	}
	return w, nil
}

func (h *hookRelation) WriteApp(settings map[string]string) error {
	c := h.c
	if ok, _ := c.IsLeader(); !ok {
		return hooktools.ErrCannotWriteSettings
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	w, err := mergeChecked(c.appWrites[h.r.ID], settings, h.bag(c.app), "application relation data in "+h.r.Key())
	if err != nil {
		return err
	}
	c.appWrites[h.r.ID] = w
	return nil
}

func size(m map[string]string) int {
	n := 0
	for k, v := range m {
		n += len(k) + len(v)
	}
	return n
}
