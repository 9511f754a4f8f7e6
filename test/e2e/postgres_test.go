//go:build linux

package e2e

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestPostgreSQLGrantSurvivesPodSpecChangesAndRestarts is the scenario
// bagkeeper exists for, against a real PostgreSQL server: the provider
// "pg" (testdata/pgsql-provider, its charm config admin-dsn pointing at the
// server's superuser) grants the consumer "web" (testdata/pgsql-consumer,
// Deployment-style pods claiming 3 units) a role and the database appdb;
// every web pod runs a workload that keeps logging in with the credentials
// its charm wrote. Then, as a pod-spec-set rolls both applications:
//
//   - web's charm config changes and every web pod is replaced one by one
//     (new name, new address, empty disk), then every web pod is stopped
//     and started again at once on its disk (with a new container
//     filesystem: a fresh copy of the charm);
//   - every pg pod is restarted on its disk, one by one as a StatefulSet
//     rolls, then all at once;
//   - every pg pod is frozen for 30 s, and a web pod is replaced
//     meanwhile: the new pod has the credentials from the consumer's own
//     raft log and logs in while the provider cannot be reached.
//
// PostgreSQL must never revoke or drop anything (the grant's role and
// database are the same objects at the end; the server logged no REVOKE or
// DROP after the grant, and the provider's charm ran no SQL at all); the
// provider must run no relation-joined or -departed for a consumer unit,
// and relation-changed for one at most once per replacement of it (no
// renegotiation); the consumer must run no hook of the relation; no bag may
// ever lose the request or the grant; and no workload may ever fail to log
// in while its pod runs.
func TestPostgreSQLGrantSurvivesPodSpecChangesAndRestarts(t *testing.T) {
	start := time.Now()
	srv := startPostgres(t)
	claim := []string{"--unit-mode", "claim", "--units", "3"}
	ap := newAppPair(t, claim...)
	sc := &pgScenario{t: t, ap: ap, srv: srv, claim: claim, replaced: map[string]int{}, sqlSeen: map[string]bool{}}
	ap.pg.writeConfig(fmt.Sprintf("admin-dsn: '%s'\nhost: %s\nport: %d\n", srv.adminDSN(), srv.host, srv.port))
	ap.web.writeConfig("database: appdb\ncolour: blue\n")
	ap.pg.startPods(3)
	pgPods := ap.pg.runningPods()
	slices.SortFunc(pgPods, func(a, b *pod) int { return strings.Compare(a.name, b.name) })
	ap.relateWeb(pgPods)
	webPods, before := ap.web.startDeployment(3)
	sc.webUnits = before.unitNames()
	sc.waitLinked("the two applications to see each other")
	ap.pg.settle("the relation's creation")
	ap.web.settle("the relation's creation")

	// The grant: one role, owning appdb, and the same credentials on every
	// consumer pod.
	waitFor(t, startTimeout, "every consumer pod to write the credentials", func() (bool, string) {
		var all []string
		for _, p := range webPods {
			all = append(all, ap.creds(p))
		}
		sc.creds = all[0]
		for _, c := range all {
			if c != all[0] || len(strings.Fields(c)) != 5 {
				return false, strings.Join(all, " | ")
			}
		}
		return true, ""
	})
	f := strings.Fields(sc.creds)
	if want := fmt.Sprintf("%s %d", srv.host, srv.port); f[0]+" "+f[1] != want || f[4] != "appdb" {
		t.Fatalf("the consumer's credentials are %q, want the server's %s and database appdb", sc.creds, want)
	}
	sc.role, sc.password = f[2], f[3]
	sc.grant = srv.mustQuery(grantQuery(sc.role))
	if sc.grant == "" {
		t.Fatalf("the server has no login role %s owning appdb:\n%s", sc.role, srv.mustQuery("select rolname from pg_roles; select datname, datdba::regrole from pg_database"))
	}
	if err := srv.connect(sc.creds); err != nil {
		t.Fatalf("logging in with the consumer's credentials: %v", err)
	}
	t.Logf("granted %s (%s); set up in %v", sc.role, sc.grant, time.Since(start).Round(time.Millisecond))

	sc.load = startWorkload(t, srv)
	for _, p := range webPods {
		sc.follow(ap.web, p)
	}
	for _, p := range pgPods {
		sc.record(ap.pg, p)
	}
	sc.watch = ap.watchBags()
	sc.grants = sc.watchGrant()
	sc.pgMarks, sc.webMarks, sc.sqlMarks = ap.pg.marks(), ap.web.marks(), sqlMarks(ap.pg)
	sc.statementsSeen = len(srv.statements())
	t.Cleanup(func() {
		if !sc.checked {
			// A phase failed: say what else went wrong by then.
			sc.load.finish()
			sc.checkpoint("when the test stopped")
			sc.checkBags("when the test stopped")
		}
	})

	sc.phase("web's pod spec changes: every web pod replaced one by one", sc.rollWeb)
	sc.phase("every web pod restarted at once on its disk", func() { sc.restartAllAtOnce(ap.web) })
	sc.phase("every pg pod restarted on its disk, one by one", func() { sc.rollPg(pgPods) })
	sc.phase("every pg pod restarted at once on its disk", func() { sc.restartAllAtOnce(ap.pg) })
	sc.phase("a web pod replaced while every pg pod is frozen", func() { sc.replaceWithPgFrozen(pgPods) })

	sc.check()
	t.Logf("in %v: %d logins, %d bag samples", time.Since(start).Round(time.Millisecond), sc.load.logins(), sc.watch.samples)
}

// pgScenario is the state of TestPostgreSQLGrantSurvivesPodSpecChangesAndRestarts.
type pgScenario struct {
	t        *testing.T
	ap       *appPair
	srv      *pgServer
	claim    []string
	webUnits []string
	// The grant: the creds line, its role and password, and the server's
	// objects (oids) behind it.
	creds, role, password, grant string

	load   *workload
	watch  *bagWatch
	grants *podSampler

	// Every charm copy any pod ran (a restarted pod gets a new one), and
	// the marks taken before the phases.
	copies                      []charmCopy
	pgMarks, webMarks, sqlMarks map[string]int
	// What the checkpoints have reported.
	statementsSeen int
	sqlSeen        map[string]bool
	checked        bool
	// replaced counts, by web unit, the events that may change the unit's
	// bag as the provider sees it (a new pod, a restart).
	replaced map[string]int
}

// charmCopy is one pod's copy of its charm.
type charmCopy struct {
	cc       *charmCluster
	pod, dir string
}

// record notes the pod's current charm copy.
func (sc *pgScenario) record(cc *charmCluster, p *pod) {
	c := charmCopy{cc, p.name, cc.charms[p.name]}
	if !slices.Contains(sc.copies, c) {
		sc.copies = append(sc.copies, c)
	}
}

// follow records the pod's charm copy and runs a workload for it with the
// credentials its charm writes.
func (sc *pgScenario) follow(cc *charmCluster, p *pod) {
	sc.record(cc, p)
	sc.load.follow(p, cc.path(p, "creds"))
}

// phase runs one phase, then checks what must hold after each.
func (sc *pgScenario) phase(name string, fn func()) {
	sc.t.Helper()
	start := time.Now()
	fn()
	sc.t.Logf("%s: %v", name, time.Since(start).Round(time.Millisecond))
	sc.checkpoint(name)
}

// checkpoint reports, as errors, what went wrong since the last
// checkpoint: on the server (the grant's objects changed; a REVOKE, DROP,
// CREATE or ALTER after the grant), in the provider's charm (any SQL) and
// in the workloads (a failed login while the pod ran).
func (sc *pgScenario) checkpoint(when string) {
	t, srv := sc.t, sc.srv
	if got, err := srv.query(grantQuery(sc.role)); err != nil || got != sc.grant {
		t.Errorf("%s: the grant's objects on the server are %q (%v), were %q: the role or database was dropped (and created again?)", when, got, err, sc.grant)
	}
	stmts := srv.statements()
	grant := slices.IndexFunc(stmts, func(s string) bool {
		return strings.HasPrefix(strings.ToUpper(s[strings.IndexByte(s, ' ')+1:]), `CREATE DATABASE "APPDB"`)
	})
	if grant < 0 {
		t.Errorf("%s: the server's log has no CREATE DATABASE \"appdb\"", when)
	}
	for i := max(grant+1, sc.statementsSeen); grant >= 0 && i < len(stmts); i++ {
		up := strings.ToUpper(stmts[i][strings.IndexByte(stmts[i], ' ')+1:])
		if strings.HasPrefix(up, "REVOKE") || strings.HasPrefix(up, "DROP") || strings.HasPrefix(up, "CREATE") || strings.HasPrefix(up, "ALTER") {
			t.Errorf("%s: the server ran %q after the grant", when, stmts[i])
		}
	}
	sc.statementsSeen = len(stmts)
	for _, l := range sc.sqlSince() {
		if !sc.sqlSeen[l] {
			sc.sqlSeen[l] = true
			t.Errorf("%s: the provider's charm ran SQL: %s", when, l)
		}
	}
	byPod := map[string][]loginFailure{}
	for _, f := range sc.load.newFailures() {
		byPod[f.pod] = append(byPod[f.pod], f)
	}
	for pod, fs := range byPod {
		first, last := fs[0], fs[len(fs)-1]
		t.Errorf("%s: %s's workload failed to log in %d times while the pod ran, first at %s: %v; last at %s: %v",
			when, pod, len(fs), first.at.Format("15:04:05.000"), first.err, last.at.Format("15:04:05.000"), last.err)
	}
}

func (sc *pgScenario) waitLinked(what string) {
	sc.t.Helper()
	waitFor(sc.t, startTimeout, what, func() (bool, string) {
		p := sc.ap.linked(sc.webUnits)
		return p == "", p
	})
}

// waitCreds waits until the pod's charm has written the grant's
// credentials.
func (sc *pgScenario) waitCreds(what string, pods ...*pod) {
	sc.t.Helper()
	waitFor(sc.t, startTimeout, what, func() (bool, string) {
		var bad []string
		for _, p := range pods {
			if c := sc.ap.creds(p); c != sc.creds {
				bad = append(bad, fmt.Sprintf("%s: %q", p.name, c))
			}
		}
		return len(bad) == 0, strings.Join(bad, "; ")
	})
}

// rollWeb changes web's charm config, then replaces every web pod,
// Deployment-style, the followers first and the leader last.
func (sc *pgScenario) rollWeb() {
	ap := sc.ap
	marks := ap.web.marks()
	ap.web.writeConfig("database: appdb\ncolour: green\n")
	waitFor(sc.t, startTimeout, "config-changed on every web unit", func() (bool, string) {
		var missing []string
		for _, p := range ap.web.runningPods() {
			if !slices.ContainsFunc(ap.web.hooksSince(p, marks), func(r hookRun) bool { return r.hook == "config-changed" }) {
				missing = append(missing, p.name)
			}
		}
		return len(missing) == 0, "not yet: " + strings.Join(missing, ", ")
	})
	ap.web.settle("the config change")
	v := ap.web.waitOneCluster(startTimeout, "before the rollout", wantVoters(3), wantMembers(3), allUnitsActive)
	order := append(ap.web.followers(v), ap.web.leaderPod(v))
	for step, o := range order {
		unit := v.statuses[o.name].GetUnit()
		sc.replaced[unit]++
		n := ap.replaceWebPod(fmt.Sprintf("rollout step %d", step), o, unit, sc.password, sc.claim)
		sc.follow(ap.web, n)
	}
	ap.web.settle("the rollout")
	sc.waitLinked("the applications linked after the rollout")
}

// rollPg restarts every pg pod on its disk, from the highest ordinal down
// as a StatefulSet rolls, each with a new container filesystem (a fresh
// copy of the charm) and waiting for the group to be whole again.
func (sc *pgScenario) rollPg(pgPods []*pod) {
	ap := sc.ap
	for i := len(pgPods) - 1; i >= 0; i-- {
		p := pgPods[i]
		p.stop()
		ap.pg.freshPod(p)
		sc.record(ap.pg, p)
		p.start()
		ap.pg.waitReady(p)
		ap.pg.waitOneCluster(startTimeout, p.name+" back", wantVoters(3), wantMembers(3), allUnitsActive)
		sc.waitLinked("the applications linked with " + p.name + " back")
	}
	ap.pg.settle("the pg rollout")
}

// restartAllAtOnce stops every pod of the application at once (SIGTERM)
// and starts them again on their disks, at their addresses, each with a
// fresh copy of the charm.
func (sc *pgScenario) restartAllAtOnce(cc *charmCluster) {
	t, ap := sc.t, sc.ap
	pods := cc.runningPods()
	v := cc.waitOneCluster(startTimeout, "before the restart", wantVoters(3), wantMembers(3), allUnitsActive)
	procs := make([]*process, len(pods))
	for i, p := range pods {
		procs[i] = p.process()
		procs[i].signal(syscall.SIGTERM)
	}
	for i, pr := range procs {
		if !pr.wait(20 * time.Second) {
			t.Fatalf("%s did not stop within 20s of SIGTERM", pods[i].name)
		}
		if code := pr.exitCode(); code != 0 {
			t.Errorf("%s exited with status %d after SIGTERM (want 0)", pods[i].name, code)
		}
	}
	cc.writePeers()
	for _, p := range pods {
		cc.freshPod(p)
		if cc == ap.web {
			p.extra = append(p.extra, sc.claim...)
			sc.replaced[v.statuses[p.name].GetUnit()]++
		}
	}
	cc.startAll(pods)
	cc.waitReady(pods...)
	after := cc.waitOneCluster(startTimeout, "after the restart", wantVoters(3), wantMembers(3), allUnitsActive,
		wantUnits(v.units, nil), cc.unitsHeldByRunningPods)
	for _, p := range pods {
		if got, was := after.statuses[p.name].GetUnit(), v.statuses[p.name].GetUnit(); got != was {
			t.Logf("%s holds %s after the restart, %s before", p.name, got, was)
		}
	}
	for _, p := range pods {
		if cc == ap.web {
			sc.waitCreds(p.name+"'s charm to write the credentials", p)
			sc.follow(cc, p)
		} else {
			sc.record(cc, p)
		}
	}
	sc.waitLinked("the applications linked after the restart")
	cc.settle("the restart")
}

// replaceWithPgFrozen freezes every pg pod (SIGSTOP) and replaces a web
// follower's pod meanwhile. The provider stays unreachable for 30 s: twice
// what the consumer's keepalive needs to drop its stream (15 s), after
// which its reconnections fail and back off a few times over (they are at
// most 5 s apart); the new pod runs its whole start sequence with nobody
// on the other side.
func (sc *pgScenario) replaceWithPgFrozen(pgPods []*pod) {
	const frozenFor = 30 * time.Second
	t, ap := sc.t, sc.ap
	v := ap.web.waitOneCluster(startTimeout, "before the replacement with pg frozen", allUnitsActive)
	o := ap.web.followers(v)[0]
	unit := v.statuses[o.name].GetUnit()
	for _, p := range pgPods {
		p.pause()
	}
	frozen := time.Now()
	defer func() {
		for _, p := range pgPods {
			p.resume()
		}
	}()
	sc.replaced[unit]++
	n := ap.replaceWebPod("with pg frozen", o, unit, sc.password, sc.claim)
	sc.follow(ap.web, n)
	waitFor(t, startTimeout, n.name+"'s workload to log in with pg frozen", func() (bool, string) {
		ok, _ := sc.load.results(n.name)
		return ok > 0, "no login yet"
	})
	// Until the provider is back, the new pod keeps the credentials and
	// runs no hook of the relation.
	holdFor(t, max(time.Second, frozenFor-time.Since(frozen)), n.name+" keeping the credentials with pg frozen", func() (bool, string) {
		if c := ap.creds(n); c != sc.creds {
			return false, fmt.Sprintf("creds %q", c)
		}
		if hs := relationHooks(ap.web.hooks(n)); slices.ContainsFunc(hs, func(h string) bool { return strings.HasPrefix(h, "database-") }) {
			return false, fmt.Sprintf("ran %v", hs)
		}
		return true, ""
	})
	for _, p := range pgPods {
		p.resume()
	}
	sc.waitLinked("the applications linked again after pg's thaw")
	ap.pg.settle("pg's thaw")
	ap.web.settle("pg's thaw")
}

// check makes the scenario's assertions once every phase is over.
func (sc *pgScenario) check() {
	t, ap, srv := sc.t, sc.ap, sc.srv
	sc.checked = true
	sc.load.finish()
	sc.checkpoint("at the end")
	if n := srv.mustQuery("select count(*) from pg_roles where rolname not like 'pg\\_%' and rolname <> 'postgres'"); n != "1" {
		t.Errorf("the server has %s roles besides postgres's own, want 1 (the grant's):\n%s", n, srv.mustQuery("select rolname from pg_roles"))
	}
	for _, l := range sc.load.loops() {
		if l.ok == 0 {
			t.Errorf("%s's workload never logged in (%d failures)", l.pod, len(l.failures))
		}
		for c := range l.creds {
			if c != sc.creds {
				t.Errorf("%s's charm wrote the credentials %q, want %q", l.pod, c, sc.creds)
			}
		}
	}

	sc.checkBags("at the end")

	// The hooks of every charm copy since the marks.
	changed := map[[2]string]int{} // pg unit, web unit
	for _, c := range sc.copies {
		marks := sc.webMarks
		if c.cc == ap.pg {
			marks = sc.pgMarks
		}
		runs := readHooks(c.dir)
		for _, r := range runs[min(marks[c.pod+"\x00"+c.dir], len(runs)):] {
			if !strings.Contains(r.hook, "-relation-") || strings.HasPrefix(r.hook, "replicas-") || strings.HasPrefix(r.hook, "cluster-") {
				continue
			}
			switch {
			case c.cc == ap.web:
				t.Errorf("%s (pod %s) ran %s although the provider's side never changed", r.unit, c.pod, r)
			case r.hook == "db-relation-changed" && r.remote != "":
				k := [2]string{r.unit, r.remote}
				if changed[k]++; changed[k] > sc.replaced[r.remote] {
					t.Errorf("%s ran db-relation-changed for %s %d times; it was replaced or restarted %d times", r.unit, r.remote, changed[k], sc.replaced[r.remote])
				}
			default:
				t.Errorf("%s (pod %s) ran %s", r.unit, c.pod, r)
			}
		}
	}
	t.Logf("the provider's db-relation-changed per (pg unit, web unit): %v; replacements per web unit: %v", changed, sc.replaced)

	if got := ap.web.waitOneCluster(startTimeout, "the end", allUnitsActive).unitNames(); !slices.Equal(got, sc.webUnits) {
		t.Errorf("web's units are %v, want %v: a replaced pod became a new unit", got, sc.webUnits)
	}
}

// checkBags stops the bag watches and reports what they saw go wrong.
func (sc *pgScenario) checkBags(when string) {
	if problems := sc.watch.finish(); len(problems) > 0 {
		sc.t.Errorf("%s: a consumer unit's request was seen missing:\n  %s", when, strings.Join(problems, "\n  "))
	}
	if problems := sc.grants.finish(); len(problems) > 0 {
		sc.t.Errorf("%s: the provider's grant was seen missing or changed:\n  %s", when, strings.Join(problems, "\n  "))
	}
}

// sqlSince returns the statements every pg charm copy logged after the
// marks.
func (sc *pgScenario) sqlSince() []string {
	var out []string
	for _, c := range sc.copies {
		if c.cc != sc.ap.pg {
			continue
		}
		b, _ := os.ReadFile(filepath.Join(c.dir, "sql.log"))
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		for _, l := range lines[min(sc.sqlMarks[c.pod+"\x00"+c.dir], len(lines)):] {
			if l != "" {
				out = append(out, c.pod+": "+l)
			}
		}
	}
	return out
}

// readHooks reads the hook log of a charm copy.
func readHooks(dir string) []hookRun {
	b, _ := os.ReadFile(filepath.Join(dir, "hooks.log"))
	var out []hookRun
	for _, line := range strings.Split(string(b), "\n") {
		switch f := strings.Fields(line); len(f) {
		case 2:
			out = append(out, hookRun{f[0], f[1], ""})
		case 3:
			out = append(out, hookRun{f[0], f[1], f[2]})
		}
	}
	return out
}

// grantQuery describes the grant's objects on the server by their oids:
// the login role and the database appdb it owns (no row when either is
// missing).
func grantQuery(role string) string {
	return fmt.Sprintf(`select 'role ' || r.oid || ', database ' || d.oid from pg_roles r join pg_database d on d.datdba = r.oid
		where r.rolname = '%s' and r.rolcanlogin and d.datname = 'appdb'`, strings.ReplaceAll(role, "'", "''"))
}

// ---- the consumer's workload ----

// workload runs, for each consumer pod it follows, a loop that logs in
// with the credentials the pod's charm wrote, as the application in the
// pod would, for as long as the pod's process runs.
type workload struct {
	srv  *pgServer
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	all  []*podLoad
}

// podLoad is one pod's loop (one per process: a restarted pod gets
// another).
type podLoad struct {
	pod      string
	ok       int
	failures []loginFailure
	// down counts the failures seen as the pod stopped, which do not
	// count: the workload goes with its pod.
	down  int
	creds map[string]bool
	// reported is how many of failures newFailures returned.
	reported int
}

type loginFailure struct {
	pod string
	at  time.Time
	err error
}

func startWorkload(t *testing.T, srv *pgServer) *workload {
	w := &workload{srv: srv, stop: make(chan struct{})}
	t.Cleanup(w.finish)
	return w
}

// follow starts the loop of the pod's running process. credsPath is the
// file its charm writes the credentials to.
func (w *workload) follow(p *pod, credsPath string) {
	pr := p.process()
	l := &podLoad{pod: p.name, creds: map[string]bool{}}
	w.mu.Lock()
	w.all = append(w.all, l)
	w.mu.Unlock()
	w.wg.Go(func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for !pr.exited() {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			b, _ := os.ReadFile(credsPath)
			creds := strings.TrimSpace(string(b))
			if creds == "" || pr.exited() {
				continue
			}
			at := time.Now()
			err := w.srv.connect(creds)
			w.mu.Lock()
			l.creds[creds] = true
			switch {
			case err == nil:
				l.ok++
			case pr.exited():
				l.down++
			default:
				l.failures = append(l.failures, loginFailure{l.pod, at, err})
			}
			w.mu.Unlock()
		}
	})
}

// results returns the logins and failures so far of the pod's loops.
func (w *workload) results(podName string) (ok, failed int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, l := range w.all {
		if l.pod == podName {
			ok += l.ok
			failed += len(l.failures)
		}
	}
	return ok, failed
}

// newFailures returns the failures not returned before.
func (w *workload) newFailures() []loginFailure {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []loginFailure
	for _, l := range w.all {
		out = append(out, l.failures[l.reported:]...)
		l.reported = len(l.failures)
	}
	return out
}

func (w *workload) logins() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, l := range w.all {
		n += l.ok
	}
	return n
}

// finish stops every loop.
func (w *workload) finish() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	w.wg.Wait()
}

// loops returns a copy of every loop's results (call after finish).
func (w *workload) loops() []podLoad {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]podLoad, len(w.all))
	for i, l := range w.all {
		out[i] = *l
		out[i].failures = slices.Clone(l.failures)
		out[i].creds = maps.Clone(l.creds)
	}
	return out
}

// ---- the grant in the bags ----

// watchGrant samples, on every ready pod of both applications, the
// provider's application bag of the relation until stopped, and records
// each time it did not hold the grant (user, password, database appdb), or
// the relation was missing.
func (sc *pgScenario) watchGrant() *podSampler {
	want := map[string]string{"user": sc.role, "password": sc.password, "database": "appdb"}
	return sc.ap.sampleEvery(func(s *podSampler, _ string, p *pod, endpoint string) {
		r, err := p.getBags()
		if err != nil || r.GetNotReadyReason() != "" {
			return
		}
		found := false
		var problem string
		for _, b := range r.GetBags() {
			if !strings.HasPrefix(b.GetRelation(), endpoint+":") {
				continue
			}
			found = true
			if b.GetOwner() != "pg" {
				continue
			}
			for k, v := range want {
				if b.GetData()[k] != v {
					problem = fmt.Sprintf("%s: pg's application bag %v", p.name, b.GetData())
				}
			}
		}
		if !found {
			problem = fmt.Sprintf("%s is ready and holds no %s relation", p.name, endpoint)
		}
		if problem != "" {
			s.report(time.Now().Format("15:04:05.000 ") + problem)
		}
	})
}
