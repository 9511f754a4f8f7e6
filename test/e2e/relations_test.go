//go:build linux

package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// relPort is every pod's relations port.
const relPort = 7402

func (p *pod) relAddr() string { return net.JoinHostPort(p.host, strconv.Itoa(relPort)) }

// appPair is two applications related across their raft groups: "pg"
// (testdata/pgsql-provider, StatefulSet-style pods) offers its db endpoint
// to "web" (testdata/pgsql-consumer, Deployment-style pods), which
// relates its database endpoint to it.
type appPair struct {
	t         *testing.T
	pg, web   *charmCluster
	dir       string
	tokenFile string
	pgFile    string
	webFile   string
}

func newAppPair(t *testing.T, webFlags ...string) *appPair {
	t.Helper()
	ap := &appPair{t: t, dir: t.TempDir()}
	for _, d := range []string{"tokens", "pg-relations", "web-relations"} {
		if err := os.MkdirAll(filepath.Join(ap.dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ap.tokenFile = filepath.Join(ap.dir, "tokens", "db.token")
	if err := os.WriteFile(ap.tokenFile, []byte(randHex(16)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ap.pgFile = filepath.Join(ap.dir, "pg-relations", "relations.yaml")
	ap.webFile = filepath.Join(ap.dir, "web-relations", "relations.yaml")
	ap.writeFile(ap.pgFile, fmt.Sprintf("offers:\n  - endpoint: db\n    consumers: [web]\n    token-file: %s\n", ap.tokenFile))
	own := func(p *pod) []string { return []string{"--relations-bind", p.relAddr()} }
	ap.pg = newAppCluster(t, "pg", "testdata/pgsql-provider", "--relations-file", ap.pgFile)
	ap.pg.podFlags = own
	ap.web = newAppCluster(t, "web", "testdata/pgsql-consumer", append([]string{"--relations-file", ap.webFile}, webFlags...)...)
	ap.web.podFlags = own
	t.Cleanup(func() {
		if t.Failed() {
			ap.pg.dumpLogs()
		}
	})
	return ap
}

// writeFile replaces a file atomically, as the kubelet updates a mounted
// ConfigMap.
func (ap *appPair) writeFile(path, content string) {
	ap.t.Helper()
	if err := os.WriteFile(path+".new", []byte(content), 0o644); err != nil {
		ap.t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		ap.t.Fatal(err)
	}
}

// relateWeb writes web's relations file: its database endpoint related to
// pg's db offer at the pods' relations ports (as a Service would list them).
func (ap *appPair) relateWeb(pgPods []*pod) {
	var addrs []string
	for _, p := range pgPods {
		addrs = append(addrs, p.relAddr())
	}
	ap.writeFile(ap.webFile, fmt.Sprintf("relations:\n  - endpoint: database\n    app: pg\n    offer: db\n    interface: pgsql\n    addresses: [%s]\n    token-file: %s\n",
		strings.Join(addrs, ", "), ap.tokenFile))
}

// startLinked starts pg (three StatefulSet-style pods) and web (three
// Deployment-style pods with webFlags), relates them and waits until each
// side holds the other's and both applications' hooks have settled. It
// returns web's cluster as it then is.
func (ap *appPair) startLinked(webFlags ...string) clusterView {
	ap.t.Helper()
	ap.pg.startPods(3)
	ap.relateWeb(ap.pg.runningPods())
	_, before := ap.web.startDeployment(3, webFlags...)
	webUnits := before.unitNames()
	waitFor(ap.t, startTimeout, "the two applications to see each other", func() (bool, string) {
		p := ap.linked(webUnits)
		return p == "", p
	})
	ap.pg.settle("the relation's creation")
	ap.web.settle("the relation's creation")
	return before
}

// relationBags returns, by owner, the bags of the pod's relation whose key
// starts with endpoint+":" (nil if the pod does not answer or holds no such
// relation), and whether the pod is ready.
func relationBags(p *pod, endpoint string) (map[string]map[string]string, bool) {
	r, err := p.getBags()
	if err != nil {
		return nil, false
	}
	var out map[string]map[string]string
	for _, b := range r.GetBags() {
		if strings.HasPrefix(b.GetRelation(), endpoint+":") {
			if out == nil {
				out = map[string]map[string]string{}
			}
			out[b.GetOwner()] = b.GetData()
		}
	}
	return out, r.GetNotReadyReason() == ""
}

// linked describes what is missing for the two sides to see each other
// completely on every running pod: on web, pg's application bag with
// credentials for appdb and pg's units; on pg, each of webUnits asking for
// appdb ("" when nothing is missing). Pods in skip are not looked at.
func (ap *appPair) linked(webUnits []string, skip ...*pod) string {
	var problems []string
	for _, p := range ap.web.runningPods() {
		if contains(skip, p) {
			continue
		}
		bags, _ := relationBags(p, "database")
		switch {
		case bags == nil:
			problems = append(problems, p.name+": no database relation")
		case bags["pg"]["password"] == "" || bags["pg"]["database"] != "appdb":
			problems = append(problems, fmt.Sprintf("%s: pg's app bag %v", p.name, bags["pg"]))
		}
		for _, u := range []string{"pg/0", "pg/1", "pg/2"} {
			if _, ok := bags[u]; !ok {
				problems = append(problems, p.name+": no "+u)
			}
		}
	}
	for _, p := range ap.pg.runningPods() {
		bags, _ := relationBags(p, "db")
		for _, u := range webUnits {
			if bags[u]["database"] != "appdb" {
				problems = append(problems, fmt.Sprintf("%s: %s asks %v", p.name, u, bags[u]))
			}
		}
	}
	return strings.Join(problems, "; ")
}

// podSampler calls a function for every running, unpaused pod of both
// applications every 100 ms until finish, and keeps the first problems it
// reports.
type podSampler struct {
	mu       sync.Mutex
	problems []string
	stop     chan struct{}
	done     chan struct{}
}

// sampleEvery starts a podSampler that calls each with the sampler, the
// pod's side ("web" or "pg"), the pod and its end of the relation
// ("database" or "db").
func (ap *appPair) sampleEvery(each func(s *podSampler, side string, p *pod, endpoint string)) *podSampler {
	s := &podSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
			for _, p := range ap.web.runningPods() {
				if !p.isPaused() {
					each(s, "web", p, "database")
				}
			}
			for _, p := range ap.pg.runningPods() {
				if !p.isPaused() {
					each(s, "pg", p, "db")
				}
			}
		}
	}()
	ap.t.Cleanup(func() { s.finish() })
	return s
}

// report records a problem (the first 20 are kept).
func (s *podSampler) report(problem string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.problems) < 20 {
		s.problems = append(s.problems, problem)
	}
}

// finish stops sampling and returns what went wrong.
func (s *podSampler) finish() []string {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.problems
}

// bagWatch samples every ready pod of both applications until stopped and
// records each time a web unit's request for appdb was seen missing or
// different once seen, on either side: the data bagkeeper exists to keep.
type bagWatch struct {
	*podSampler
	seen    map[string]bool // "<side> <unit>": seen asking for appdb; sampler goroutine only
	samples int             // read after finish
}

func (ap *appPair) watchBags() *bagWatch {
	w := &bagWatch{seen: map[string]bool{}}
	w.podSampler = ap.sampleEvery(func(s *podSampler, side string, p *pod, endpoint string) {
		bags, ready := relationBags(p, endpoint)
		if !ready || bags == nil {
			return
		}
		w.samples++
		for key := range w.seen {
			unit := strings.TrimPrefix(key, side+" ")
			if unit == key {
				continue
			}
			if got, ok := bags[unit]; !ok || got["database"] != "appdb" {
				s.report(fmt.Sprintf("%s: %s held %v for %s", side, p.name, got, unit))
			}
		}
		for owner, data := range bags {
			if strings.HasPrefix(owner, "web/") && data["database"] == "appdb" {
				w.seen[side+" "+owner] = true
			}
		}
	})
	return w
}

// relationHooks returns the relation hooks (name contains "-relation-") in
// runs, as "<hook> <remote unit>".
func relationHooks(runs []hookRun) []string {
	var out []string
	for _, r := range runs {
		if strings.Contains(r.hook, "-relation-") {
			out = append(out, strings.TrimSpace(r.hook+" "+r.remote))
		}
	}
	return out
}

// sqlSince returns the SQL statements pg's charm copies logged after marks
// (the statements only, without time and unit).
func (ap *appPair) sqlSince(marks map[string]int) []string {
	var out []string
	for name, dir := range ap.pg.charms {
		b, _ := os.ReadFile(filepath.Join(dir, "sql.log"))
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		for _, l := range lines[min(marks[name+"\x00"+dir], len(lines)):] {
			if f := strings.SplitN(l, " ", 3); len(f) == 3 {
				out = append(out, f[2])
			}
		}
	}
	return out
}

func sqlMarks(cc *charmCluster) map[string]int {
	m := map[string]int{}
	for name, dir := range cc.charms {
		b, _ := os.ReadFile(filepath.Join(dir, "sql.log"))
		m[name+"\x00"+dir] = strings.Count(string(b), "\n")
	}
	return m
}

// creds is the credentials line the pod's consumer charm last wrote.
func (ap *appPair) creds(p *pod) string {
	return strings.TrimSpace(ap.web.read(p, "creds"))
}

// replaceWebPod replaces web pod o, which holds unit, Deployment-style: a
// new pod (new name, new address, empty disk) starts as o gets SIGTERM,
// and must hold unit and have written the credentials with password.
func (ap *appPair) replaceWebPod(step string, o *pod, unit, password string, flags []string) *pod {
	ap.t.Helper()
	n := ap.web.deploymentPod(randHex(3), flags...)
	o.stop()
	n.start()
	ap.web.waitReady(n)
	waitFor(ap.t, startTimeout, fmt.Sprintf("%s: %s to hold %s with the credentials", step, n.name, unit), func() (bool, string) {
		st, err := n.statusNoProbe()
		if err != nil {
			return false, err.Error()
		}
		c := ap.creds(n)
		return st.GetUnit() == unit && strings.Contains(c, " "+password+" "), "holds " + st.GetUnit() + ", creds " + c
	})
	return n
}

// TestRelationBetweenApplicationsSurvivesReplacedPods is the failure
// bagkeeper exists to end, between two applications: the consumer asks the
// provider for a database over a pgsql relation, and the provider's charm,
// as PostgreSQL's does, revokes the grant when a consumer unit departs or
// asks for another database. Every consumer pod is replaced one by one,
// Deployment-style (new name, new address, empty disk), then one more
// while every provider pod is frozen. Nothing may depart, nothing may be
// revoked, the request may never be missing from a bag on either side,
// and each new pod has the credentials from its first hook on, with the
// provider reachable or not.
func TestRelationBetweenApplicationsSurvivesReplacedPods(t *testing.T) {
	claim := []string{"--unit-mode", "claim", "--units", "3"}
	ap := newAppPair(t, claim...)
	before := ap.startLinked()
	webUnits := before.unitNames()
	pgPods, webPods := ap.pg.runningPods(), ap.web.runningPods()
	password := ""
	waitFor(t, startTimeout, "every consumer pod to write the credentials", func() (bool, string) {
		var all []string
		for _, p := range webPods {
			all = append(all, ap.creds(p))
		}
		password = strings.Fields(all[0] + " x x x x")[3]
		for _, c := range all {
			if c != all[0] || !strings.HasSuffix(c, " appdb") {
				return false, strings.Join(all, " | ")
			}
		}
		return true, ""
	})
	watch := ap.watchBags()
	pgMarks, sqlMark, webMarks := ap.pg.marks(), sqlMarks(ap.pg), ap.web.marks()

	// Replace every consumer pod, the followers first and the leader last.
	// A replaced unit's address changes, so the provider sees one
	// relation-changed for it per replacement, and nothing else.
	replaced := map[string]int{}
	order := append(ap.web.followers(before), ap.web.leaderPod(before))
	for step, o := range order {
		unit := before.statuses[o.name].GetUnit()
		replaced[unit]++
		ap.replaceWebPod(fmt.Sprintf("step %d", step), o, unit, password, claim)
	}
	ap.web.settle("the replacements")

	// The provider unreachable: every pg pod frozen while one more consumer
	// pod is replaced.
	for _, p := range pgPods {
		p.pause()
	}
	v := ap.web.waitOneCluster(startTimeout, "before the replacement with pg frozen", allUnitsActive)
	o := ap.web.followers(v)[0]
	unit := v.statuses[o.name].GetUnit()
	replaced[unit]++
	ap.replaceWebPod("with pg frozen", o, unit, password, claim)
	ap.web.settle("the replacement with pg frozen")
	for _, p := range pgPods {
		p.resume()
	}
	waitFor(t, startTimeout, "the two applications to see each other again", func() (bool, string) {
		p := ap.linked(webUnits)
		return p == "", p
	})
	ap.pg.settle("pg's thaw")
	ap.web.settle("pg's thaw")

	if problems := watch.finish(); len(problems) > 0 {
		t.Errorf("a consumer unit's request was seen missing:\n  %s", strings.Join(problems, "\n  "))
	}
	for _, p := range ap.pg.runningPods() {
		changed := map[string]int{}
		for _, h := range relationHooks(ap.pg.hooksSince(p, pgMarks)) {
			unit, ok := strings.CutPrefix(h, "db-relation-changed ")
			if !ok {
				t.Errorf("%s ran %s while consumer pods were replaced", p.name, h)
				continue
			}
			if changed[unit]++; changed[unit] > replaced[unit] {
				t.Errorf("%s ran db-relation-changed for %s %d times; it was replaced %d times", p.name, unit, changed[unit], replaced[unit])
			}
		}
	}
	if got := ap.sqlSince(sqlMark); len(got) > 0 {
		t.Errorf("the provider changed grants while consumer pods were replaced:\n  %s", strings.Join(got, "\n  "))
	}
	for _, p := range ap.web.runningPods() {
		for _, h := range relationHooks(ap.web.hooksSince(p, webMarks)) {
			if strings.HasPrefix(h, "database-") {
				t.Errorf("%s ran %s although the provider's side never changed", p.name, h)
			}
		}
	}
	if got := ap.web.waitOneCluster(startTimeout, "the end", allUnitsActive).unitNames(); !slices.Equal(got, webUnits) {
		t.Errorf("web's units are %v, want %v: a replaced pod became a new unit", got, webUnits)
	}
	t.Logf("bag samples: %d", watch.samples)
}

// TestRemovingARelationFromEitherSidesFileEndsItOnBoth: a relation dropped
// from the consumer's relations file, or a consumer dropped from the
// provider's offer, ends the relation on both sides as Juju ends one:
// every unit runs relation-departed for each remote unit, then
// relation-broken; and the provider's charm revokes the grant.
func TestRemovingARelationFromEitherSidesFileEndsItOnBoth(t *testing.T) {
	for _, side := range []string{"consumer", "provider"} {
		t.Run(side, func(t *testing.T) {
			ap := newAppPair(t)
			webUnits := ap.startLinked().unitNames()
			pgMarks, webMarks, sqlMark := ap.pg.marks(), ap.web.marks(), sqlMarks(ap.pg)
			if side == "consumer" {
				ap.writeFile(ap.webFile, "relations: []\n")
			} else {
				ap.writeFile(ap.pgFile, fmt.Sprintf("offers:\n  - endpoint: db\n    consumers: [api]\n    token-file: %s\n", ap.tokenFile))
			}
			ended := func(cc *charmCluster, marks map[string]int, endpoint string, remote []string) (bool, string) {
				for _, p := range cc.runningPods() {
					var want []string
					for _, u := range remote {
						want = append(want, endpoint+"-relation-departed "+u)
					}
					want = append(want, endpoint+"-relation-broken")
					if got := relationHooks(cc.hooksSince(p, marks)); !slices.Equal(got, want) {
						return false, fmt.Sprintf("%s ran %v, want %v", p.name, got, want)
					}
				}
				return true, ""
			}
			waitFor(t, startTimeout, "departed and broken on web", func() (bool, string) {
				return ended(ap.web, webMarks, "database", []string{"pg/0", "pg/1", "pg/2"})
			})
			waitFor(t, startTimeout, "departed and broken on pg", func() (bool, string) {
				return ended(ap.pg, pgMarks, "db", webUnits)
			})
			for _, cc := range []*charmCluster{ap.web, ap.pg} {
				for _, p := range cc.runningPods() {
					if bags, _ := relationBags(p, map[string]string{"web": "database", "pg": "db"}[cc.app]); bags != nil {
						t.Errorf("%s still holds the relation's bags: %v", p.name, bags)
					}
				}
			}
			if got := ap.sqlSince(sqlMark); !slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, "REVOKE") }) {
				t.Errorf("the provider's charm did not revoke the grant of the ended relation: %v", got)
			}
		})
	}
}

// TestControllerSeeingNoConsumerPodsChangesNothing is the controller race
// of the original report: during a rolling replacement of the consumer,
// discovery (what a controller watching pods reports) lists no consumer
// pod at all for a while. Units and relations never follow a pod list:
// nothing departs on either side, nothing is revoked, and once discovery
// lists pods again the new pod takes the released unit with its data.
func TestControllerSeeingNoConsumerPodsChangesNothing(t *testing.T) {
	claim := []string{"--unit-mode", "claim", "--units", "3"}
	ap := newAppPair(t, claim...)
	before := ap.startLinked()
	webUnits := before.unitNames()
	watch := ap.watchBags()
	pgMarks, sqlMark, webMarks := ap.pg.marks(), sqlMarks(ap.pg), ap.web.marks()

	ap.web.setDiscovery([]string{})
	o := ap.web.followers(before)[0]
	unit := before.statuses[o.name].GetUnit()
	n := ap.web.deploymentPod(randHex(3), claim...)
	o.stop()
	n.start()
	// For a while the new pod finds nobody, and nothing may change: the
	// unit stays released (not removed), the relation stays whole.
	holdFor(t, 3*time.Second, "nothing to change while discovery lists no pod", func() (bool, string) {
		// The new pod, alone, holds nothing yet.
		if p := ap.linked(webUnits, n); p != "" {
			return false, p
		}
		for _, p := range ap.pg.runningPods() {
			if got := relationHooks(ap.pg.hooksSince(p, pgMarks)); len(got) > 0 {
				return false, fmt.Sprintf("%s ran %v", p.name, got)
			}
		}
		return true, ""
	})
	ap.web.setDiscovery(nil)
	waitFor(t, startTimeout, n.name+" to hold "+unit+" with the credentials", func() (bool, string) {
		st, err := n.statusNoProbe()
		if err != nil {
			return false, err.Error()
		}
		c := ap.creds(n)
		return st.GetUnit() == unit && c != "", "holds " + st.GetUnit() + ", creds " + c
	})
	ap.web.settle("the replacement")
	ap.pg.settle("the replacement")
	if problems := watch.finish(); len(problems) > 0 {
		t.Errorf("a consumer unit's request was seen missing:\n  %s", strings.Join(problems, "\n  "))
	}
	for _, p := range ap.pg.runningPods() {
		for _, h := range relationHooks(ap.pg.hooksSince(p, pgMarks)) {
			if h != "db-relation-changed "+unit {
				t.Errorf("%s ran %s", p.name, h)
			}
		}
	}
	for _, p := range ap.web.runningPods() {
		for _, h := range relationHooks(ap.web.hooksSince(p, webMarks)) {
			if strings.HasPrefix(h, "database-") {
				t.Errorf("%s ran %s", p.name, h)
			}
		}
	}
	if got := ap.sqlSince(sqlMark); len(got) > 0 {
		t.Errorf("the provider changed grants: %v", got)
	}
	if got := ap.web.waitOneCluster(startTimeout, "the end", allUnitsActive).unitNames(); !slices.Equal(got, webUnits) {
		t.Errorf("web's units are %v, want %v", got, webUnits)
	}
}

// TestAFrozenProviderMemberIsLeftForAnother: the consumer's stream goes to
// one provider member; when that member freezes (SIGSTOP: its connections
// stay open, nothing answers), the consumer notices by keepalive within
// seconds and reconnects through another address, so a change the rest of
// the provider's group makes still reaches it.
func TestAFrozenProviderMemberIsLeftForAnother(t *testing.T) {
	ap := newAppPair(t)
	ap.startLinked()
	pgPods := ap.pg.runningPods()
	// The first address of the entry is pg-0's: the stream runs there
	// (the consumer tries its addresses in order).
	leader := ap.web.leaderPod(ap.web.waitOneCluster(startTimeout, "a leader", allUnitsActive))
	waitFor(t, startTimeout, "the stream to run through pg-0", func() (bool, string) {
		r := runCLI(t, 30*time.Second, "status", "--admin-socket", leader.sock)
		return strings.Contains(r.stdout, "open to "+pgPods[0].relAddr()), r.stdout
	})
	pgPods[0].pause()
	defer pgPods[0].resume()
	other := pgPods[1]
	var rel int64 = -1
	if r, err := other.getBags(); err == nil {
		for _, b := range r.GetBags() {
			if strings.HasPrefix(b.GetRelation(), "db:") {
				rel = b.GetRelationId()
			}
		}
	}
	if rel < 0 {
		t.Fatal("pg-1 holds no db relation")
	}
	waitFor(t, startTimeout, "a write to pg's application bag without pg-0", func() (bool, string) {
		if err := other.setBag(5*time.Second, rel, "pg", map[string]string{"marker": "while pg-0 is frozen"}); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	waitFor(t, startTimeout, "the change to reach every web pod", func() (bool, string) {
		for _, p := range ap.web.runningPods() {
			bags, _ := relationBags(p, "database")
			if bags["pg"]["marker"] != "while pg-0 is frozen" {
				return false, fmt.Sprintf("%s: %v", p.name, bags["pg"])
			}
		}
		return true, ""
	})
}
