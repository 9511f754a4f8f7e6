//go:build linux

package e2e

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

// ---- invariant 1: bags ----

type bagID struct {
	rel   int64
	owner string
}

type bagView struct {
	relation string
	data     map[string]string
	revision uint64
}

// bagSet is every bag a member holds.
type bagSet map[bagID]bagView

func toBagSet(r *adminpb.GetBagsResponse) bagSet {
	out := bagSet{}
	for _, b := range r.GetBags() {
		data := maps.Clone(b.GetData())
		if data == nil {
			data = map[string]string{}
		}
		out[bagID{b.GetRelationId(), b.GetOwner()}] = bagView{relation: b.GetRelation(), data: data, revision: b.GetRevision()}
	}
	return out
}

// bags reads every bag from the pod's own admin socket.
func (p *pod) bags() (bagSet, error) {
	r, err := p.getBags()
	if err != nil {
		return nil, err
	}
	return toBagSet(r), nil
}

// diffBags describes how got differs from want ("" if it does not).
func diffBags(want, got bagSet) string {
	var d []string
	for id, w := range want {
		g, ok := got[id]
		switch {
		case !ok:
			d = append(d, fmt.Sprintf("bag %s of %s missing", w.relation, id.owner))
		case g.relation != w.relation || g.revision != w.revision || !maps.Equal(g.data, w.data):
			d = append(d, fmt.Sprintf("bag %s of %s differs: revision %d→%d, %s", w.relation, id.owner, w.revision, g.revision, diffMap(w.data, g.data)))
		}
	}
	for id, g := range got {
		if _, ok := want[id]; !ok {
			d = append(d, fmt.Sprintf("unexpected bag %s of %s", g.relation, id.owner))
		}
	}
	sort.Strings(d)
	if len(d) > 8 {
		d = append(d[:8], fmt.Sprintf("… and %d more", len(d)-8))
	}
	return strings.Join(d, "; ")
}

func diffMap(want, got map[string]string) string {
	var d []string
	for k, v := range want {
		if g, ok := got[k]; !ok {
			d = append(d, k+" missing")
		} else if g != v {
			d = append(d, k+" changed")
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			d = append(d, k+" added")
		}
	}
	sort.Strings(d)
	return strings.Join(d, ", ")
}

// waitBags waits until every given pod (default: every running pod) holds
// exactly want, byte for byte.
func (c *cluster) waitBags(want bagSet, pods ...*pod) {
	c.t.Helper()
	if len(pods) == 0 {
		pods = c.runningPods()
	}
	waitFor(c.t, startTimeout, fmt.Sprintf("all %d committed bags, unchanged, on %s", len(want), podNames(pods)), func() (bool, string) {
		var bad []string
		for _, p := range pods {
			got, err := p.bags()
			if err != nil {
				bad = append(bad, p.name+": "+err.Error())
				continue
			}
			if d := diffBags(want, got); d != "" {
				bad = append(bad, p.name+": "+d)
			}
		}
		return len(bad) == 0, strings.Join(bad, "\n  ")
	})
}

func podNames(pods []*pod) string {
	names := make([]string, len(pods))
	for i, p := range pods {
		names[i] = p.name
	}
	return strings.Join(names, ", ")
}

// seed writes test data through p: a peer relation and a relation to a
// remote application, with a bag for each unit, the application and the
// remote side, each holding valueSize random bytes besides a few small
// keys. It returns the bags as p reads them back.
func seed(t interface {
	Helper()
	Fatalf(string, ...any)
}, p *pod, units []string, valueSize int) bagSet {
	t.Helper()
	peerRel, err := p.ensureRelation(&adminpb.EnsureRelationRequest{Endpoint: "replicas", Interface: "web-peers", Peer: true})
	if err != nil {
		t.Fatalf("creating the peer relation through %s: %v", p.name, err)
	}
	dbRel, err := p.ensureRelation(&adminpb.EnsureRelationRequest{Endpoint: "db", Interface: "pgsql", RemoteApp: "pg", RemoteEndpoint: "database"})
	if err != nil {
		t.Fatalf("creating the db relation through %s: %v", p.name, err)
	}
	type w struct {
		rel   int64
		owner string
	}
	var writes []w
	for _, u := range units {
		writes = append(writes, w{peerRel, u}, w{dbRel, u})
	}
	writes = append(writes, w{peerRel, "web"}, w{dbRel, "web"}, w{dbRel, "pg"}, w{dbRel, "pg/0"})
	want := bagSet{}
	for i, x := range writes {
		data := map[string]string{
			"owner":    x.owner,
			"password": randHex(16),
			"blob":     randHex(valueSize / 2),
		}
		if err := p.setBag(10*time.Second, x.rel, x.owner, data); err != nil {
			t.Fatalf("writing bag %d (%s in relation %d) through %s: %v", i, x.owner, x.rel, p.name, err)
		}
		want[bagID(x)] = bagView{data: data}
	}
	got, err := p.bags()
	if err != nil {
		t.Fatalf("reading back the bags from %s: %v", p.name, err)
	}
	for id, v := range want {
		g, ok := got[id]
		if !ok || !maps.Equal(g.data, v.data) {
			t.Fatalf("%s does not read back what was just committed for %s in relation %d", p.name, id.owner, id.rel)
		}
	}
	return got
}

// ---- invariant 2: units ----

type unitView struct {
	state, member, pod string
}

type unitSet map[string]unitView

func toUnitSet(st *adminpb.StatusResponse) unitSet {
	out := unitSet{}
	for _, u := range st.GetUnits() {
		out[u.GetName()] = unitView{state: u.GetState(), member: u.GetMember(), pod: u.GetPod()}
	}
	return out
}

func (u unitSet) String() string {
	names := slices.Sorted(maps.Keys(u))
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s=%s(%s)", n, u[n].state, u[n].member)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// unitChurn describes how after differs from before in a way invariant 2
// forbids: a unit that appeared, disappeared, or was removed. States listed
// in allowed are fine for the units named there ("released" for a pod that
// was stopped gracefully, for example).
func unitChurn(before, after unitSet, allowed map[string][]string) string {
	var d []string
	for name, b := range before {
		a, ok := after[name]
		switch {
		case !ok:
			d = append(d, name+" vanished")
		case a.state == b.state:
		case slices.Contains(allowed[name], a.state):
		default:
			d = append(d, fmt.Sprintf("%s went from %s to %s", name, b.state, a.state))
		}
	}
	for name, a := range after {
		if _, ok := before[name]; !ok {
			d = append(d, fmt.Sprintf("new unit %s (%s, held by %s)", name, a.state, a.member))
		}
	}
	sort.Strings(d)
	return strings.Join(d, "; ")
}

// ---- invariant 3 and 4: one cluster ----

// member is one entry of a raft configuration as a pod reports it.
type member struct {
	id, address, suffrage string
}

// clusterView is what every running pod agreed on.
type clusterView struct {
	clusterID string
	leader    string
	members   []member // sorted by id
	units     unitSet
	statuses  map[string]*adminpb.StatusResponse
}

func (v clusterView) voters() []string {
	var out []string
	for _, m := range v.members {
		if m.suffrage == "Voter" {
			out = append(out, m.id)
		}
	}
	return out
}

func (v clusterView) member(id string) (member, bool) {
	for _, m := range v.members {
		if m.id == id {
			return m, true
		}
	}
	return member{}, false
}

func (v clusterView) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cluster %s leader %s members", v.clusterID, v.leader)
	for _, m := range v.members {
		fmt.Fprintf(&b, " %s(%s@%s)", m.id, m.suffrage, m.address)
	}
	fmt.Fprintf(&b, " units %s", v.units)
	return b.String()
}

// viewCheck is an extra condition on the agreed view; "" when satisfied.
type viewCheck func(v clusterView) string

func wantVoters(n int) viewCheck {
	return func(v clusterView) string {
		if got := len(v.voters()); got != n {
			return fmt.Sprintf("%d voters, want %d", got, n)
		}
		return ""
	}
}

func wantMembers(n int) viewCheck {
	return func(v clusterView) string {
		if len(v.members) != n {
			return fmt.Sprintf("%d members, want %d", len(v.members), n)
		}
		return ""
	}
}

// selfOf returns the raft id a pod reports for itself.
func (v clusterView) selfOf(p *pod) string { return v.statuses[p.name].GetSelf() }

// observeCluster asks every running pod for its status and checks they
// agree: one non-empty cluster id, one configuration, one unit list, one
// leader, which considers itself the leader, and which every pod names. It returns the
// agreed view, or a description of the disagreement.
func (c *cluster) observeCluster() (clusterView, string) {
	pods := c.runningPods()
	v := clusterView{statuses: map[string]*adminpb.StatusResponse{}}
	if len(pods) == 0 {
		return v, "no pod runs"
	}
	var problems []string
	var cfgs, leaders, ids, units []string
	leaderSelf := 0
	for _, p := range pods {
		st, err := p.status()
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", p.name, err))
			continue
		}
		v.statuses[p.name] = st
		ms := make([]member, 0, len(st.GetMembers()))
		selfIn := false
		for _, m := range st.GetMembers() {
			ms = append(ms, member{m.GetId(), m.GetAddress(), m.GetSuffrage()})
			selfIn = selfIn || m.GetId() == st.GetSelf()
		}
		sort.Slice(ms, func(i, j int) bool { return ms[i].id < ms[j].id })
		if !selfIn {
			problems = append(problems, fmt.Sprintf("%s (%s) is not in its own configuration %v", p.name, st.GetSelf(), ms))
		}
		cfgs = append(cfgs, fmt.Sprint(ms))
		leaders = append(leaders, st.GetLeader())
		ids = append(ids, st.GetClusterId())
		units = append(units, toUnitSet(st).String())
		if st.GetLeader() != "" && st.GetLeader() == st.GetSelf() {
			leaderSelf++
		}
		if v.members == nil {
			v.members, v.clusterID, v.leader, v.units = ms, st.GetClusterId(), st.GetLeader(), toUnitSet(st)
		}
	}
	if len(problems) == 0 {
		if ids[0] == "" || !allSame(ids) {
			problems = append(problems, fmt.Sprintf("cluster ids differ or are empty: %v", ids))
		}
		if !allSame(cfgs) {
			problems = append(problems, "configurations differ:\n    "+strings.Join(cfgs, "\n    "))
		}
		if !allSame(units) {
			problems = append(problems, "unit lists differ (not caught up yet?):\n    "+strings.Join(units, "\n    "))
		}
		if leaders[0] == "" || !allSame(leaders) {
			problems = append(problems, fmt.Sprintf("leaders differ or are unknown: %v", leaders))
		}
		if leaderSelf != 1 {
			problems = append(problems, fmt.Sprintf("%d pods consider themselves leader", leaderSelf))
		}
	}
	if len(problems) > 0 {
		return v, strings.Join(problems, "\n  ")
	}
	return v, ""
}

func allSame(xs []string) bool {
	for _, x := range xs {
		if x != xs[0] {
			return false
		}
	}
	return true
}

// waitOneCluster waits until the running pods agree on one cluster (see
// observeCluster) that also passes checks, and returns it.
func (c *cluster) waitOneCluster(timeout time.Duration, what string, checks ...viewCheck) clusterView {
	c.t.Helper()
	var v clusterView
	waitFor(c.t, timeout, "one cluster: "+what, func() (bool, string) {
		var problem string
		v, problem = c.observeCluster()
		if problem != "" {
			return false, problem
		}
		for _, chk := range checks {
			if p := chk(v); p != "" {
				return false, p + "\n  view: " + v.String()
			}
		}
		return true, ""
	})
	return v
}

// wantUnits checks the agreed unit list against before with unitChurn.
func wantUnits(before unitSet, allowed map[string][]string) viewCheck {
	return func(v clusterView) string {
		if d := unitChurn(before, v.units, allowed); d != "" {
			return "unit churn: " + d
		}
		return ""
	}
}

// allUnitsActive requires every unit of the view to be active.
func allUnitsActive(v clusterView) string {
	for name, u := range v.units {
		if u.state != "active" {
			return fmt.Sprintf("unit %s is %s", name, u.state)
		}
	}
	return ""
}

// unitsHeldByRunningPods requires every active unit to be held by a running
// pod's member.
func (c *cluster) unitsHeldByRunningPods(v clusterView) string {
	holders := map[string]bool{}
	for _, st := range v.statuses {
		holders[st.GetSelf()] = true
	}
	for name, u := range v.units {
		if u.state == "active" && !holders[u.member] {
			return fmt.Sprintf("unit %s is held by %s, which no running pod is", name, u.member)
		}
	}
	return ""
}

// leaderPod returns the running pod the view names as leader.
func (c *cluster) leaderPod(v clusterView) *pod {
	c.t.Helper()
	for _, p := range c.runningPods() {
		if v.selfOf(p) == v.leader {
			return p
		}
	}
	c.t.Fatalf("no running pod is the leader %s", v.leader)
	return nil
}

// followers returns the running pods that are not the leader of v.
func (c *cluster) followers(v clusterView) []*pod {
	var out []*pod
	for _, p := range c.runningPods() {
		if v.selfOf(p) != v.leader {
			out = append(out, p)
		}
	}
	return out
}

// unitNames returns the names of units in the view, sorted.
func (v clusterView) unitNames() []string {
	return slices.Sorted(maps.Keys(v.units))
}
