package pods

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"
)

// app is a started workload with what the tests compare after a fault.
type app struct {
	*cluster
	ca        *ca
	tlsSecret []string
	dnsNames  []string
	unitName  string         // the application's name, from its units
	bags      map[string]any // every bag, as all pods read it after the writes
	units     []string       // "name state" of every unit
	firstInc  map[string]int // the incarnation whose charm dir ran install
	charmDir  string
}

// startApp renders the chart with sets, issues its certificates and starts
// its replicas; then it writes one key per unit and in the application bag
// and records the state every later check compares with.
func startApp(t *testing.T, sets ...string) *app {
	t.Helper()
	needDocker(t)
	m := render(t, sets...)
	a := &app{ca: newCA(t, "pods test CA"), firstInc: map[string]int{}}
	for _, s := range m.serviceNames() {
		a.dnsNames = append(a.dnsNames, "*."+s, s)
	}
	a.tlsSecret = tlsSecrets(m)
	for _, name := range a.tlsSecret {
		m.secrets[name] = a.ca.issue(t, release, a.dnsNames...)
	}
	a.cluster = newCluster(t, m)
	a.charmDir = a.findCharmDir()
	start := time.Now()
	pods := a.startAll()
	t.Logf("%d pods ready in %v (%s %s, headless service %s)", len(pods), time.Since(start).Round(time.Millisecond), m.kind, m.name, m.headless)
	for _, p := range pods {
		a.firstInc[p.name] = 1
	}
	a.settle("the install sequence")
	a.writeBags(t)
	return a
}

// serviceNames of the headless service, before a cluster exists.
func (m *manifests) serviceNames() []string {
	base := m.headless + "." + namespace + ".svc"
	return []string{base + ".cluster.local", base}
}

// findCharmDir is the charm directory of the hook runner (where the demo
// charm keeps hooks.log).
func (a *app) findCharmDir() string {
	for _, list := range [][]container{a.spec.Containers, a.spec.InitContainers} {
		for _, ct := range list {
			all := append(append([]string{}, ct.Command...), ct.Args...)
			hr := false
			for i, s := range all {
				if s == "hook-runner" {
					hr = true
				}
				if hr && strings.HasPrefix(s, "--charm-dir=") {
					return strings.TrimPrefix(s, "--charm-dir=")
				}
				if hr && s == "--charm-dir" && i+1 < len(all) {
					return all[i+1]
				}
			}
		}
	}
	a.t.Fatal("no container runs `bagkeeper hook-runner --charm-dir ...`")
	return ""
}

// charmContainer is the container whose charm dir holds hooks.log.
func (a *app) charmContainer(p *pod) string {
	for _, ct := range a.spec.Containers {
		for _, s := range append(append([]string{}, ct.Command...), ct.Args...) {
			if s == "hook-runner" {
				p.mu.Lock()
				defer p.mu.Unlock()
				return p.containers[ct.Name]
			}
		}
	}
	return p.sidecar()
}

type statusJSON struct {
	Self    string `json:"self"`
	Unit    string `json:"unit"`
	Leader  string `json:"leader"`
	Ready   bool   `json:"ready"`
	Reason  string `json:"not_ready_reason"`
	Members []struct {
		ID        string `json:"id"`
		Suffrage  string `json:"suffrage"`
		Leader    bool   `json:"leader"`
		Reachable bool   `json:"reachable"`
	} `json:"members"`
	Units []struct {
		Name  string `json:"name"`
		State string `json:"state"`
		Pod   string `json:"pod"`
	} `json:"units"`
	Relations []struct {
		ID   int64 `json:"id"`
		Peer bool  `json:"peer"`
	} `json:"relations"`
}

func (p *pod) status(ctx context.Context) (*statusJSON, error) {
	var st statusJSON
	return &st, p.jsonOut(ctx, &st, "status", "--format", "json")
}

// waitFor retries f until it returns nil or the deadline passes.
func waitFor(t testing.TB, what string, d time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v: %v", what, d, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// healthy: every pod ready, every pod sees the same single raft leader,
// every member a reachable voter, one member per pod.
func (a *app) healthy(ctx context.Context) error {
	pods := a.runningPods()
	leaders := map[string]bool{}
	for _, p := range pods {
		if err := p.ready(ctx); err != nil {
			return err
		}
		st, err := p.status(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		n := 0
		for _, m := range st.Members {
			if m.Leader {
				n++
			}
			if m.Suffrage != "voter" || !m.Reachable {
				return fmt.Errorf("%s sees member %s %s reachable=%v", p.name, m.ID, m.Suffrage, m.Reachable)
			}
		}
		if n != 1 || st.Leader == "" {
			return fmt.Errorf("%s sees %d leaders (leader %q)", p.name, n, st.Leader)
		}
		if len(st.Members) != len(pods) {
			return fmt.Errorf("%s sees %d members, want %d", p.name, len(st.Members), len(pods))
		}
		leaders[st.Leader] = true
	}
	if len(leaders) != 1 {
		return fmt.Errorf("pods disagree on the leader: %v", leaders)
	}
	return nil
}

func (a *app) runningPods() []*pod {
	var out []*pod
	for _, p := range a.allPods() {
		p.mu.Lock()
		r := p.running
		p.mu.Unlock()
		if r {
			out = append(out, p)
		}
	}
	return out
}

// settle waits until the group is healthy and no hook is pending: every
// unit active (the demo charm's config-changed sets it).
func (a *app) settle(what string) {
	a.t.Helper()
	defer func(start time.Time) {
		if d := time.Since(start); d > 10*time.Second {
			a.t.Logf("%s: settled in %v", what, d.Round(time.Millisecond))
		}
	}(time.Now())
	waitFor(a.t, what, readyTimeout, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := a.healthy(ctx); err != nil {
			return err
		}
		st, err := a.runningPods()[0].status(ctx)
		if err != nil {
			return err
		}
		if len(st.Units) != a.m.replicas {
			return fmt.Errorf("%d units, want %d", len(st.Units), a.m.replicas)
		}
		for _, u := range st.Units {
			if u.State != "active" {
				return fmt.Errorf("unit %s is %s", u.Name, u.State)
			}
		}
		return nil
	})
}

// leaderPod returns the pod the group names as its raft leader, asking
// until one does or ctx ends: a member that has just lost its leader (an
// election under way, a returning member not yet heard from) names none
// for a moment.
func (a *app) leaderPod(ctx context.Context) (*pod, error) {
	for {
		p, err := a.namedLeader(ctx)
		if err == nil {
			return p, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (%v)", err, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// namedLeader is the pod the first pod that answers status names as the
// raft leader.
func (a *app) namedLeader(ctx context.Context) (*pod, error) {
	for _, p := range a.runningPods() {
		st, err := p.status(ctx)
		if err != nil {
			continue
		}
		for _, q := range a.runningPods() {
			if strings.HasPrefix(st.Leader, q.name+"/") {
				return q, nil
			}
		}
		return nil, fmt.Errorf("leader %q is no running pod", st.Leader)
	}
	return nil, fmt.Errorf("no pod answers status")
}

// peerRelation is the id of the peer relation (the demo charm's replicas).
func (a *app) peerRelation(ctx context.Context) (int64, []string, error) {
	st, err := a.runningPods()[0].status(ctx)
	if err != nil {
		return 0, nil, err
	}
	var units []string
	for _, u := range st.Units {
		units = append(units, u.Name)
	}
	for _, r := range st.Relations {
		if r.Peer {
			return r.ID, units, nil
		}
	}
	return 0, nil, fmt.Errorf("no peer relation yet")
}

// writeBags writes a key in every unit's bag and in the application bag
// through the sidecars, then records every bag and unit.
func (a *app) writeBags(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rel, units, err := a.peerRelation(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a.unitName, _, _ = strings.Cut(units[0], "/")
	pods := a.runningPods()
	for i, u := range append(units, a.unitName) {
		p := pods[i%len(pods)]
		if _, err := p.bk(ctx, "bags", "set", "--relation", fmt.Sprint(rel), u, "written-by="+p.name, "pods-test="+randHex(8)); err != nil {
			t.Fatal(err)
		}
	}
	a.record(t)
}

// record keeps what every later check compares with.
func (a *app) record(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := a.runningPods()[0]
	var bags map[string]any
	if err := p.jsonOut(ctx, &bags, "bags", "--format", "json"); err != nil {
		t.Fatal(err)
	}
	a.bags = bags
	st, err := p.status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a.units = unitList(st)
	t.Logf("recorded %d units (%s) and the bags of %d relations", len(a.units), strings.Join(a.units, ", "), len(bags))
}

// addressKeys are the keys the agent itself keeps in a unit's bag: the
// address of the pod holding the unit, which changes with the pod.
var addressKeys = []string{"private-address", "ingress-address", "egress-subnets"}

// withoutAddresses is bags without the address keys.
func withoutAddresses(bags map[string]any) map[string]any {
	out := map[string]any{}
	for rel, owners := range bags {
		o := map[string]any{}
		for owner, bag := range owners.(map[string]any) {
			b := map[string]any{}
			for k, v := range bag.(map[string]any) {
				b[k] = v
			}
			for _, k := range addressKeys {
				delete(b, k)
			}
			o[owner] = b
		}
		out[rel] = o
	}
	return out
}

// addressesOf checks that every unit's bag has the address of the pod that
// holds the unit now (pod <app>-N holds <app>/N).
func (a *app) addressesOf(bags map[string]any) error {
	ips := map[string]string{}
	for _, p := range a.runningPods() {
		if p.ordinal >= 0 {
			p.mu.Lock()
			ips[fmt.Sprintf("%s/%d", a.unitName, p.ordinal)] = p.ip
			p.mu.Unlock()
		}
	}
	for rel, owners := range bags {
		for owner, bag := range owners.(map[string]any) {
			ip, ok := ips[owner]
			if !ok {
				continue
			}
			if got := bag.(map[string]any)["private-address"]; got != ip {
				return fmt.Errorf("relation %s: %s's private-address is %v, its pod's address %s", rel, owner, got, ip)
			}
		}
	}
	return nil
}

func unitList(st *statusJSON) []string {
	var out []string
	for _, u := range st.Units {
		out = append(out, u.Name+" "+u.State)
	}
	sort.Strings(out)
	return out
}

// check is what every scenario ends with: the group healthy (every pod
// ready, one leader), the same units, every pod reading the same bags as
// before, and no hook a pod that kept its unit must not run.
func (a *app) check(t *testing.T) {
	t.Helper()
	a.settle("healthy again")
	waitFor(t, "the bags and units as before, from every pod", time.Minute, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, p := range a.runningPods() {
			var bags map[string]any
			if err := p.jsonOut(ctx, &bags, "bags", "--format", "json"); err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
			if err := a.addressesOf(bags); err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
			if !reflect.DeepEqual(withoutAddresses(bags), withoutAddresses(a.bags)) {
				return fmt.Errorf("%s reads other bags:\n got %v\nwant %v", p.name, bags, a.bags)
			}
			st, err := p.status(ctx)
			if err != nil {
				return err
			}
			if got := unitList(st); !reflect.DeepEqual(got, a.units) {
				return fmt.Errorf("%s sees units %v, want %v", p.name, got, a.units)
			}
		}
		return nil
	})
	a.checkHooks(t)
}

// checkHooks reads each pod's hooks.log: install and the peer relation's
// created/joined run only in a pod's first incarnation; no unit departs.
func (a *app) checkHooks(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, p := range a.runningPods() {
		out, err := docker(ctx, "exec", a.charmContainer(p), "cat", a.charmDir+"/hooks.log")
		if err != nil {
			t.Errorf("%s: %v", p.name, err)
			continue
		}
		p.mu.Lock()
		inc := p.incarnation
		p.mu.Unlock()
		first := a.firstInc[p.name] == inc
		lines := strings.Split(strings.TrimSpace(out), "\n")
		for _, l := range lines {
			hook, _, _ := strings.Cut(l, " ")
			switch {
			case hook == "install" && !first,
				strings.HasSuffix(hook, "-relation-created") && !first,
				strings.HasSuffix(hook, "-relation-joined") && !first,
				strings.HasSuffix(hook, "-relation-departed"):
				t.Errorf("%s (incarnation %d) ran %q; its hooks: %s", p.name, inc, l, strings.Join(lines, ", "))
			}
		}
		installs := 0
		for _, l := range lines {
			if l == "install" {
				installs++
			}
		}
		if first && (len(lines) == 0 || lines[0] != "install" || installs != 1) {
			t.Errorf("%s's first incarnation did not start with install: %s", p.name, strings.Join(lines, ", "))
		}
		if !first && len(lines) > 0 && lines[0] != "upgrade-charm" {
			t.Logf("%s (incarnation %d) hooks: %s", p.name, inc, strings.Join(lines, ", "))
		}
	}
}

// replace stops a pod and starts its next incarnation (same name and
// claims: a StatefulSet pod recreated), then waits until it is ready.
func (a *app) replace(t *testing.T, p *pod) time.Duration {
	t.Helper()
	p.stop()
	start := time.Now()
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	p.waitReady()
	return time.Since(start)
}
