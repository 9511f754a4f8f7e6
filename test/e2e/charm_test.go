//go:build linux

package e2e

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestBashCharmOnThreeSidecars runs the bash charm of testdata/charm on
// three sidecar processes, as three pods of a StatefulSet whose sidecars
// run the unit agent, and checks what the charm sees through the hook
// tools and what it commits (invariants 1, 5, 6 and 7, and the pod-churn
// sequence of the agent's resolver):
//
//   - every unit runs Juju's install sequence, then relation-joined and
//     relation-changed for each peer, and the bags hold what the hooks
//     wrote, the same on every member;
//   - a non-leader's relation-set --app fails with Juju's error;
//   - a change of the charm config file fires config-changed on every unit
//     without a restart;
//   - a hook killed mid-way commits nothing, and is run again before any
//     other event, then commits;
//   - a pod replaced on an empty disk at a new address keeps its unit, bags
//     and charm state, runs only the churn sequence and relation-changed
//     for what changed while it was away, and its peers see only its
//     address change;
//   - the leader's pod replaced the same way keeps its unit leading: no
//     election, no leaderless interval, no install or join again;
//   - a leader deposed while its hook runs cannot commit the application
//     bag it wrote;
//   - a hook interrupted by its sidecar's death (kill -9) runs again first
//     when the sidecar restarts, before an event that came due meanwhile.
//
// The steps share one cluster and run in this order; each ends with every
// unit agent idle (and the next waits for that if a step failed).
func TestBashCharmOnThreeSidecars(t *testing.T) {
	cc := newCharmCluster(t)
	start := time.Now()
	cc.startPods(3)
	waitFor(t, startTimeout, "every unit to see the others join", func() (bool, string) {
		var missing []string
		for _, p := range cc.runningPods() {
			runs := cc.hooks(p)
			for _, u := range cc.units() {
				if w := (hookRun{cc.unitOf(p), peerChanged, u}); u != w.unit && !slices.Contains(runs, w) {
					missing = append(missing, w.String())
				}
			}
		}
		return len(missing) == 0, "not yet run: " + strings.Join(missing, ", ")
	})
	cc.settle("the install sequence and the joins")
	t.Logf("three units installed, started and joined in %v", time.Since(start).Round(time.Millisecond))

	steps := []struct {
		name string
		fn   func(t *testing.T, cc *charmCluster)
	}{
		{"every unit runs Juju's install sequence and sees each peer join", testInstallSequence},
		{"a non-leader's relation-set --app fails with Juju's error", testNonLeaderCannotWriteAppBag},
		{"a config file change fires config-changed on every unit without a restart", testConfigChangeWithoutRestart},
		{"a hook killed mid-way commits nothing and runs again first", testKilledHookCommitsNothing},
		{"a pod replaced on an empty disk at a new address sees only the churn sequence", testEmptyDiskReplacement},
		{"the leader's pod replaced keeps the unit leading, with no election and no gap", testLeaderPodReplaced},
		{"a leader deposed during a hook cannot commit the application bag", testDeposedLeader},
		{"a hook interrupted by its sidecar's death runs first when it restarts", testInterruptedHookRunsFirst},
	}
	failed := false
	for _, s := range steps {
		stepStart := time.Now()
		ok := t.Run(s.name, func(t *testing.T) {
			defer cc.use(t)()
			if failed {
				cc.settle("a failed step")
			}
			s.fn(t, cc)
		})
		t.Logf("%s: %v", s.name, time.Since(stepStart).Round(time.Millisecond))
		failed = failed || !ok
	}
}

// testInstallSequence checks each unit's hook log from the start: install,
// relation-created, leader-elected or leader-settings-changed,
// config-changed, start, then relation-joined and relation-changed for each
// other unit; and the bags the hooks wrote.
func testInstallSequence(t *testing.T, cc *charmCluster) {
	leader, leaderUnit := cc.leader()
	units := cc.units()
	for _, p := range cc.runningPods() {
		unit := cc.unitOf(p)
		others := slices.DeleteFunc(slices.Clone(units), func(u string) bool { return u == unit })
		if err := checkInstallSequence(cc.hooks(p), unit, p == leader, others); err != nil {
			t.Errorf("%s (pod %s): %v\nits hooks:\n%s", unit, p.name, err, runsString(cc.hooks(p)))
		}
		if err := checkViews(cc.read(p, "views.log"), unit, cc.rel); err != nil {
			t.Errorf("%s (pod %s): %v\nits views:\n%s", unit, p.name, err, cc.read(p, "views.log"))
		}
		if got := cc.read(p, "token-at-start"); !strings.HasPrefix(got, unit+":") {
			t.Errorf("%s read the token %q from its charm state in start, want the one install stored (%s:...)", unit, got, unit)
		}
	}
	want := map[string]map[string]string{
		cc.app: {"leader": leaderUnit, "colour": "blue", "colour-by": leaderUnit},
	}
	for _, p := range cc.runningPods() {
		unit := cc.unitOf(p)
		want[unit] = addressKeys(p, map[string]string{"created-by": unit, "colour": "blue"})
	}
	cc.waitPeerBags("the bags the install sequence wrote", exactBags(want))
}

// checkInstallSequence checks the hooks one unit ran from its install on.
func checkInstallSequence(runs []hookRun, unit string, leader bool, others []string) error {
	leadership := "leader-settings-changed"
	if leader {
		leadership = "leader-elected"
	}
	want := []string{"install", peerCreated, leadership, "config-changed", "start"}
	if len(runs) < len(want) {
		return fmt.Errorf("ran %d hooks, want at least %d", len(runs), len(want))
	}
	for i, w := range want {
		if runs[i].hook != w || runs[i].remote != "" || runs[i].unit != unit {
			return fmt.Errorf("hook %d is %s, want %s (Juju's install sequence: %s)", i+1, runs[i], w, strings.Join(want, ", "))
		}
	}
	joined := map[string]bool{}
	for i := len(want); i < len(runs); i++ {
		r := runs[i]
		switch {
		case r.unit != unit:
			return fmt.Errorf("hook %d ran as %s", i+1, r.unit)
		case r.hook == peerJoined && slices.Contains(others, r.remote) && !joined[r.remote]:
			joined[r.remote] = true
			if i+1 >= len(runs) || runs[i+1] != (hookRun{unit, peerChanged, r.remote}) {
				return fmt.Errorf("hook %d is %s: it must be followed by relation-changed for %s", i+1, r, r.remote)
			}
			i++
		case r.hook == peerChanged && joined[r.remote]:
			// A later change of a peer's bag.
		case r.hook == peerChanged && r.remote == "" && !leader:
			// The leader's writes to the application bag.
		case r.hook == "leader-settings-changed" && r.remote == "" && !leader:
			// Followers are told when a leader is elected after their install.
		default:
			return fmt.Errorf("hook %d is %s, which Juju would not run here", i+1, r)
		}
	}
	for _, o := range others {
		if !joined[o] {
			return fmt.Errorf("never saw %s join", o)
		}
	}
	return nil
}

// checkViews checks the unit's view of the peer relation hook by hook, as
// Juju's uniter keeps it: no relation during install; the relation from
// relation-created on, with no member; each peer listed from its
// relation-joined on (inside that hook too), and every listed peer one
// whose relation-joined ran.
func checkViews(log, unit string, rel int64) error {
	joined := []string{}
	for i, line := range strings.Split(strings.TrimSpace(log), "\n") {
		f := strings.SplitN(line, " ", 4)
		if len(f) != 4 || f[0] != unit {
			return fmt.Errorf("line %d is %q", i+1, line)
		}
		hook, remote, view := f[1], f[2], f[3]
		if hook == peerJoined {
			joined = append(joined, remote)
			slices.SortFunc(joined, compareUnits)
		}
		ids := fmt.Sprintf("ids=[replicas:%d]", rel)
		if hook == "install" {
			ids = "ids=[]"
		}
		want := ids + " list=[" + strings.Join(joined, " ") + "]"
		if view != want {
			return fmt.Errorf("in %s %s (hook %d) the unit saw %s, want %s", hook, remote, i+1, view, want)
		}
	}
	if len(joined) == 0 {
		return errors.New("no relation-joined in the views")
	}
	return nil
}

// compareUnits orders unit names by number.
func compareUnits(a, b string) int {
	na, _ := strconv.Atoi(a[strings.LastIndexByte(a, '/')+1:])
	nb, _ := strconv.Atoi(b[strings.LastIndexByte(b, '/')+1:])
	return na - nb
}

// testNonLeaderCannotWriteAppBag checks what the charm recorded when each
// non-leader tried relation-set --app, and status-get --application, in
// leader-settings-changed.
func testNonLeaderCannotWriteAppBag(t *testing.T, cc *charmCluster) {
	leader, _ := cc.leader()
	for _, p := range cc.runningPods() {
		if p == leader {
			continue
		}
		code, stderr := cc.read(p, "app-write.code"), cc.read(p, "app-write.stderr")
		if code != "1\n" || stderr != "ERROR cannot write relation settings\n" {
			t.Errorf("%s: relation-set --app by a non-leader: exit %q, stderr %q; want exit 1 and stderr %q",
				cc.unitOf(p), strings.TrimSpace(code), stderr, "ERROR cannot write relation settings\n")
		}
		const notLeader = "ERROR finding application status: this unit is not the leader\n"
		if code, stderr := cc.read(p, "app-status.code"), cc.read(p, "app-status.stderr"); code != "1\n" || stderr != notLeader {
			t.Errorf("%s: status-get --application by a non-leader: exit %q, stderr %q; want exit 1 and stderr %q",
				cc.unitOf(p), strings.TrimSpace(code), stderr, notLeader)
		}
	}
	for _, p := range cc.runningPods() {
		bags := cc.peerBags(p)
		if v, ok := bags[cc.app]["usurper"]; ok {
			t.Errorf("%s holds usurper=%s in the application bag: a non-leader's write was committed", p.name, v)
		}
	}
}

// testConfigChangeWithoutRestart rewrites the charm config file: every
// unit must run config-changed with the new value, in the same process,
// and its peers then see its bag change (never their own).
func testConfigChangeWithoutRestart(t *testing.T, cc *charmCluster) {
	_, leaderUnit := cc.leader()
	pids := map[string]int{}
	for _, p := range cc.runningPods() {
		pids[p.name] = p.process().pid()
	}
	base := cc.marks()
	cc.writeConfig("colour: green\n")
	cc.waitPeerBags("every unit's colour green", colours(cc, "green", "green"))
	cc.settle("the config change")

	units := cc.units()
	for _, p := range cc.runningPods() {
		unit := cc.unitOf(p)
		if pr := p.process(); pr.pid() != pids[p.name] {
			t.Errorf("%s was restarted (pid %d, was %d)", p.name, pr.pid(), pids[p.name])
		}
		if got := lastLine(cc.read(p, "colours")); got != "green" {
			t.Errorf("%s: config-get colour in its last config-changed said %q, want green", unit, got)
		}
		want := []hookRun{{unit, "config-changed", ""}}
		for _, u := range units {
			if u != unit {
				want = append(want, hookRun{unit, peerChanged, u})
			}
		}
		if unit != leaderUnit {
			want = append(want, hookRun{unit, peerChanged, ""}) // the leader's app bag write
		}
		if d := diffRuns(want, cc.hooksSince(p, base)); d != "" {
			t.Errorf("%s after the config change: %s", unit, d)
		}
	}
}

// testKilledHookCommitsNothing makes one unit's config-changed write its
// bag and charm state and then kill itself with kill -9. Nothing of it may
// commit; the unit must run config-changed again, before the other event
// that became due meanwhile (Juju retries a failed hook first), and that
// run commits.
func testKilledHookCommitsNothing(t *testing.T, cc *charmCluster) {
	leader, leaderUnit := cc.leader()
	k := cc.nonLeaders()[0]
	unit := cc.unitOf(k)
	cc.touch(k, "kill-config-changed")
	defer cc.remove(k, "kill-config-changed")
	defer cc.touch(k, "die", "proceed") // first: never leave the hook waiting
	base := cc.marks()
	cc.writeConfig("colour: red\n")
	cc.waitFile(k, "about-to-die")

	// While the doomed hook runs, a peer's bag changes: relation-changed
	// becomes due for the unit, besides the config-changed that fails.
	if err := leader.setBag(10*time.Second, cc.rel, leaderUnit, map[string]string{"poke": "1"}); err != nil {
		t.Fatalf("writing %s's bag through %s: %v", leaderUnit, leader.name, err)
	}
	waitFor(t, startTimeout, k.name+" to hold the poke", func() (bool, string) {
		b := cc.peerBags(k)
		return b[leaderUnit]["poke"] == "1", fmt.Sprint(b[leaderUnit])
	})
	cc.touch(k, "die")
	cc.waitFile(k, "rerun")

	// The killed run's fate is sealed: the run after it has started.
	for _, p := range cc.runningPods() {
		b := cc.peerBags(p)[unit]
		if v, ok := b["doomed"]; ok || b["colour"] != "green" {
			t.Errorf("%s holds %s's bag %v after its hook was killed: doomed=%q (want none), colour %q (want green, as before)", p.name, unit, b, v, b["colour"])
		}
	}
	if got := cc.read(k, "doomed-seen"); got != "doomed=\ndoomed=\n" {
		t.Errorf("state-get doomed at the start of the two runs said %q, want nothing both times: the killed run's state-set was committed", got)
	}
	if log := k.lastLog(); !strings.Contains(log, `msg="hook failed; retrying"`) || !strings.Contains(log, "killed by signal") {
		t.Errorf("%s's log does not report the killed hook as failed:\n%s", k.name, lastLines(grepLines(log, "hook"), 10))
	}
	runs, statuses := cc.hooksSince(k, base), cc.statusesSince(k, base)
	killed := slices.Index(runs, hookRun{unit, "config-changed", ""})
	if killed < 0 || killed+1 >= len(runs) {
		t.Fatalf("%s has not run config-changed twice:\n%s", unit, runsString(runs))
	}
	if st := at(statuses, killed+1); !strings.Contains(st, `"status":"error"`) || !strings.Contains(st, "config-changed") {
		t.Errorf("the hook %s ran after the killed one saw the unit status %s, want the error of config-changed", runs[killed+1], st)
	}
	if next := runs[killed+1]; next.hook != "config-changed" {
		t.Errorf("after its killed config-changed %s ran %s before config-changed again; Juju retries a failed hook before any other event\nhooks since the config change:\n%s",
			unit, next, runsString(runs))
	}

	cc.touch(k, "proceed")
	cc.waitPeerBags("every unit's colour red, the retried hook's writes committed", func(bags map[string]map[string]string) string {
		if bad := colours(cc, "red", "red")(bags); bad != "" {
			return bad
		}
		if bags[unit]["doomed"] != "red" {
			return fmt.Sprintf("%s's bag %v has no doomed=red", unit, bags[unit])
		}
		return ""
	})
	cc.settle("the retried hook")
	if n := count(cc.hooksSince(k, base), hookRun{unit, "config-changed", ""}); n != 2 {
		t.Errorf("%s ran config-changed %d times, want 2 (the killed run and the retry)\n%s", unit, n, runsString(cc.hooksSince(k, base)))
	}
}

// testEmptyDiskReplacement kills a non-leader's pod, wipes its volume and
// starts it again under the same name on a new address with a fresh copy
// of the charm, as a StatefulSet reschedules a pod to a node without its
// disk. While it is away, a peer's bag changes.
func testEmptyDiskReplacement(t *testing.T, cc *charmCluster) {
	before := cc.waitOneCluster(startTimeout, "before the replacement", wantVoters(3), wantMembers(3), allUnitsActive)
	leader, leaderUnit := cc.leader()
	nl := cc.nonLeaders()
	v, witness := nl[len(nl)-1], nl[0]
	unit, witnessUnit := cc.unitOf(v), cc.unitOf(witness)
	oldBag := cc.peerBags(v)[unit]
	oldToken := cc.read(v, "token-at-start")
	oldHost, oldID := v.host, before.selfOf(v)
	base := cc.marks()

	v.kill()
	v.wipe()
	v.move()
	cc.freshPod(v)
	note := "written while " + unit + " was away"
	if err := leader.setBag(10*time.Second, cc.rel, leaderUnit, map[string]string{"note": note}); err != nil {
		t.Fatalf("writing %s's bag through %s: %v", leaderUnit, leader.name, err)
	}
	v.start()
	cc.waitReady(v)
	after := cc.waitOneCluster(startTimeout, "the new incarnation promoted, the old one gone",
		wantVoters(3), wantMembers(3), without(oldID), wantUnits(before.units, nil), allUnitsActive, cc.unitsHeldByRunningPods)
	if got := after.statuses[v.name].GetUnit(); got != unit {
		t.Fatalf("%s came back holding unit %q, want %s", v.name, got, unit)
	}
	wantChurn := []hookRun{
		{unit, "upgrade-charm", ""}, {unit, "config-changed", ""}, {unit, "leader-settings-changed", ""}, {unit, "start", ""},
		{unit, peerChanged, leaderUnit},
	}
	waitFor(t, startTimeout, unit+" to run the pod-churn sequence", func() (bool, string) {
		runs := cc.hooks(v)
		return len(runs) >= len(wantChurn), runsString(runs)
	})
	cc.settle("the replaced pod's hooks")

	t.Logf("%s's new pod ran:\n%s", unit, runsString(cc.hooks(v)))
	if runs := cc.hooks(v); !slices.Equal(runs, wantChurn) {
		t.Errorf("the replaced %s ran\n%s\nwant only the pod-churn sequence and relation-changed for %s's bag, changed while it was away:\n%s",
			unit, runsString(runs), leaderUnit, runsString(wantChurn))
	}
	if got := cc.read(v, "token-at-start"); got != oldToken {
		t.Errorf("the replaced %s read the token %q from its charm state, want %q", unit, got, oldToken)
	}
	if got := lastLine(cc.read(v, "colours")); got != "red" {
		t.Errorf("the replaced %s: config-get colour said %q, want red", unit, got)
	}
	wantBag := addressKeys(v, maps.Clone(oldBag))
	cc.waitPeerBags(unit+"'s bag as before, with its new address", func(bags map[string]map[string]string) string {
		if !maps.Equal(bags[unit], wantBag) {
			return fmt.Sprintf("%s's bag is %v, want %v (it was %v at %s)", unit, bags[unit], wantBag, oldBag, oldHost)
		}
		return ""
	})
	// The peers see the address change, and nothing else of the move.
	for p, want := range map[*pod][]hookRun{
		leader:  {{leaderUnit, peerChanged, unit}},
		witness: {{witnessUnit, peerChanged, leaderUnit}, {witnessUnit, peerChanged, unit}},
	} {
		got := cc.hooksSince(p, base)
		t.Logf("meanwhile %s ran:\n%s", cc.unitOf(p), runsString(got))
		if d := diffRuns(want, got); d != "" {
			t.Errorf("%s while %s was replaced: %s", cc.unitOf(p), unit, d)
		}
	}
}

// testDeposedLeader blocks the leader's config-changed after it wrote the
// application bag, and pauses the leader's sidecar (SIGSTOP) until another
// member leads and its unit has taken the leadership lease. Resumed and
// unblocked, the hook exits 0, but its commit must be refused: the
// application bag keeps what it held, the unit reports the hook as failed,
// and the hook runs again, now as a follower, and commits.
func testDeposedLeader(t *testing.T, cc *charmCluster) {
	cc.waitOneCluster(startTimeout, "three voters before the leader is paused", wantVoters(3), wantMembers(3), allUnitsActive)
	l, lUnit := cc.leader()
	appBefore := cc.peerBags(l)[cc.app]
	var others []*pod
	for _, p := range cc.runningPods() {
		if p != l {
			others = append(others, p)
		}
	}
	cc.touch(l, "block-config-changed")
	defer cc.remove(l, "block-config-changed")
	defer cc.touch(l, "unblock") // first: never leave the hook waiting
	base := cc.marks()
	cc.writeConfig("colour: violet\n")
	cc.waitFile(l, "blocked")

	pr := l.process()
	paused := time.Now()
	pr.signal(syscall.SIGSTOP)
	defer pr.signal(syscall.SIGCONT)
	// The lease runs out (it has at least 30s left: is-leader said True
	// when the hook wrote) and the new leader's unit takes it.
	var newLeader *pod
	waitFor(t, 2*time.Minute, "another unit to be elected leader while "+l.name+" is paused", func() (bool, string) {
		var seen []string
		for _, p := range others {
			runs := cc.hooksSince(p, base)
			if slices.Contains(runs, hookRun{cc.unitOf(p), "leader-elected", ""}) {
				newLeader = p
				return true, ""
			}
			seen = append(seen, runsString(runs))
		}
		return false, strings.Join(seen, "\n")
	})
	t.Logf("%s took the lease %v after %s was paused", cc.unitOf(newLeader), time.Since(paused).Round(time.Millisecond), l.name)
	newUnit := cc.unitOf(newLeader)
	pr.signal(syscall.SIGCONT)
	waitFor(t, startTimeout, l.name+" to see "+newUnit+" lead the application", func() (bool, string) {
		st, err := l.status()
		if err != nil {
			return false, err.Error()
		}
		return st.GetLeaderUnit() == newUnit && st.GetAppliedIndex() >= st.GetCommitIndex(), fmt.Sprintf("%s says the application leader is %q", l.name, st.GetLeaderUnit())
	})

	cc.touch(l, "unblock")
	waitFor(t, startTimeout, l.name+" to report the refused commit", func() (bool, string) {
		lines := grepLines(l.lastLog(), `msg="hook failed; retrying"`)
		return strings.Contains(lines, "no longer the leader"), lastLines(lines, 3)
	})
	cc.waitPeerBags(lUnit+"'s colour violet, from config-changed run again", func(bags map[string]map[string]string) string {
		if bags[lUnit]["colour"] != "violet" {
			return fmt.Sprintf("%s's bag %v", lUnit, bags[lUnit])
		}
		return ""
	})
	cc.settle("the deposed leader's retried hook")

	wantApp := maps.Clone(appBefore)
	wantApp["leader"] = newUnit
	cc.waitPeerBags("the application bag without the deposed leader's write", func(bags map[string]map[string]string) string {
		if !maps.Equal(bags[cc.app], wantApp) {
			return fmt.Sprintf("application bag %v, want %v (the deposed leader wrote colour=violet)", bags[cc.app], wantApp)
		}
		return ""
	})
	runs, statuses := cc.hooksSince(l, base), cc.statusesSince(l, base)
	if n := count(runs, hookRun{lUnit, "config-changed", ""}); n != 2 {
		t.Fatalf("%s ran config-changed %d times, want 2 (the refused run and the retry)\n%s", lUnit, n, runsString(runs))
	}
	refused := slices.Index(runs, hookRun{lUnit, "config-changed", ""})
	if st := at(statuses, refused+1); !strings.Contains(st, `"status":"error"`) || !strings.Contains(st, "config-changed") {
		t.Errorf("the hook %s ran after the refused one saw the unit status %s, want the error of config-changed", runs[refused+1], st)
	}
}

// ---- the charm cluster ----

// charmCluster is a cluster whose pods run the unit agent with the charm
// of testdata/charm. Each pod has its own copy of the charm, as each pod
// has its own container filesystem, so a replaced pod starts a new hook
// log. The charm config file is shared, as a mounted ConfigMap is.
type charmCluster struct {
	*cluster
	configFile string
	rel        int64             // the peer relation
	charms     map[string]string // pod name → its charm directory
	gen        int
	// src is the charm every pod gets a copy of.
	src string
	// podFlags, when set, gives each pod flags of its own (after the
	// charm's), e.g. its relations port.
	podFlags func(p *pod) []string
}

func newCharmCluster(t *testing.T) *charmCluster {
	t.Helper()
	return newAppCluster(t, "web", "testdata/charm")
}

// newAppCluster prepares a cluster of application app running the charm in
// directory src, with flags given to every pod after the charm's.
func newAppCluster(t *testing.T, app, src string, flags ...string) *charmCluster {
	t.Helper()
	cfgDir := filepath.Join(t.TempDir(), "charm-config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(cfgDir, "config.yaml")
	c := newCluster(t, append([]string{
		"--charm-config", cfgFile,
		"--hook-tool", jujucBin,
		"--hook-retry-delay", "200ms",
		"--update-status-interval", "1h",
		"--model-name", "e2e",
	}, flags...)...)
	c.app = app
	return &charmCluster{cluster: c, configFile: cfgFile, charms: map[string]string{}, src: src}
}

// freshPod gives the pod a new copy of the charm and a new pod UID: what a
// new pod gets, whether or not its volume survived.
func (cc *charmCluster) freshPod(p *pod) {
	cc.t.Helper()
	cc.gen++
	dir := filepath.Join(cc.dir, "pods", fmt.Sprintf("%s.%d", p.name, cc.gen), "charm")
	if err := copyDir(cc.src, dir); err != nil {
		cc.t.Fatal(err)
	}
	cc.charms[p.name] = dir
	p.extra = []string{
		"--bootstrap-expect", "3",
		"--charm-dir", dir,
		"--pod-uid", randHex(8),
		"--agent-socket", filepath.Join(cc.sockDir, p.name+".agent.sock"),
	}
	if cc.podFlags != nil {
		p.extra = append(p.extra, cc.podFlags(p)...)
	}
}

// startPods starts n pods web-0 … web-(n-1) at once and waits until they
// form one cluster and the peer relation exists.
func (cc *charmCluster) startPods(n int) {
	cc.t.Helper()
	pods := make([]*pod, n)
	for i := range pods {
		pods[i] = cc.newPod(fmt.Sprintf("%s-%d", cc.app, i))
		cc.freshPod(pods[i])
	}
	cc.startAll(pods)
	cc.waitReady(pods...)
	cc.waitOneCluster(startTimeout, "the initial cluster", wantVoters(n), wantMembers(n), allUnitsActive)
	waitFor(cc.t, startTimeout, "the charm's peer relation", func() (bool, string) {
		st, err := pods[0].status()
		if err != nil {
			return false, err.Error()
		}
		for _, r := range st.GetRelations() {
			if r.GetPeer() {
				cc.rel = r.GetId()
				return true, ""
			}
		}
		return false, fmt.Sprint(st.GetRelations())
	})
}

// deploymentPod creates (but does not start) a pod named as a Deployment's
// ReplicaSet names it, with a fresh copy of the charm and extra flags.
func (cc *charmCluster) deploymentPod(hash string, extra ...string) *pod {
	cc.t.Helper()
	p := cc.newPod(deploymentPodName(cc.app, hash))
	cc.freshPod(p)
	p.extra = append(p.extra, extra...)
	return p
}

// startDeployment starts n Deployment-style pods with extra flags and waits
// until they form one cluster, every unit is active and the install
// sequence is over.
func (cc *charmCluster) startDeployment(n int, extra ...string) ([]*pod, clusterView) {
	cc.t.Helper()
	pods := make([]*pod, n)
	for i := range pods {
		pods[i] = cc.deploymentPod("7f9c5d", extra...)
	}
	cc.startAll(pods)
	cc.waitReady(pods...)
	v := cc.waitOneCluster(startTimeout, "the initial cluster", wantVoters(n), wantMembers(n), allUnitsActive)
	cc.settle("the install sequence")
	return pods, v
}

func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, info.Mode().Perm())
	})
}

// writeConfig replaces the charm config file atomically, as the kubelet
// updates a mounted ConfigMap.
func (cc *charmCluster) writeConfig(content string) {
	cc.t.Helper()
	tmp := cc.configFile + ".new"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		cc.t.Fatal(err)
	}
	if err := os.Rename(tmp, cc.configFile); err != nil {
		cc.t.Fatal(err)
	}
}

func (cc *charmCluster) path(p *pod, name string) string {
	return filepath.Join(cc.charms[p.name], name)
}

// read returns a file the charm wrote ("" if there is none).
func (cc *charmCluster) read(p *pod, name string) string {
	b, _ := os.ReadFile(cc.path(p, name))
	return string(b)
}

// touch creates control files in the pod's charm directory.
func (cc *charmCluster) touch(p *pod, names ...string) {
	for _, n := range names {
		if err := os.WriteFile(cc.path(p, n), nil, 0o644); err != nil {
			cc.t.Error(err)
		}
	}
}

func (cc *charmCluster) remove(p *pod, names ...string) {
	for _, n := range names {
		_ = os.Remove(cc.path(p, n))
	}
}

// waitFile waits until the charm of p creates name.
func (cc *charmCluster) waitFile(p *pod, name string) {
	cc.t.Helper()
	waitFor(cc.t, startTimeout, fmt.Sprintf("%s's charm to create %s", p.name, name), func() (bool, string) {
		_, err := os.Stat(cc.path(p, name))
		return err == nil, runsString(cc.hooks(p))
	})
}

// unitOf returns the unit the pod holds (app/N for pod app-N).
func (cc *charmCluster) unitOf(p *pod) string {
	i := strings.LastIndexByte(p.name, '-')
	return cc.app + "/" + p.name[i+1:]
}

// units returns the units of the running pods, sorted.
func (cc *charmCluster) units() []string {
	var out []string
	for _, p := range cc.runningPods() {
		out = append(out, cc.unitOf(p))
	}
	sort.Strings(out)
	return out
}

// leader returns the pod whose unit holds the application leadership
// lease (a unit, not the raft leader, leads the application) once the
// application bag names it as leader (its leader-elected ran).
func (cc *charmCluster) leader() (*pod, string) {
	cc.t.Helper()
	var lp *pod
	waitFor(cc.t, startTimeout, "a running pod's unit to be the application leader", func() (bool, string) {
		lp = nil
		var holder string
		for _, p := range cc.runningPods() {
			st, err := p.status()
			if err != nil {
				return false, err.Error()
			}
			if holder = st.GetLeaderUnit(); holder != "" {
				break
			}
		}
		for _, p := range cc.runningPods() {
			if cc.unitOf(p) == holder {
				lp = p
			}
		}
		if lp == nil {
			return false, fmt.Sprintf("the lease is held by %q, the unit of no running pod", holder)
		}
		app := cc.peerBags(lp)[cc.app]
		return app["leader"] == holder, fmt.Sprintf("%s holds the lease; the application bag says the leader is %q", holder, app["leader"])
	})
	return lp, cc.unitOf(lp)
}

// nonLeaders returns the running pods but the leader's, by unit.
func (cc *charmCluster) nonLeaders() []*pod {
	cc.t.Helper()
	l, _ := cc.leader()
	var out []*pod
	for _, p := range cc.runningPods() {
		if p != l {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// ---- hooks ----

// The hooks of the charm's peer relation, named after its endpoint as Juju
// names relation hooks.
const (
	peerCreated = "replicas-relation-created"
	peerJoined  = "replicas-relation-joined"
	peerChanged = "replicas-relation-changed"
)

// hookRun is one line of a charm's hook log: a hook as the unit ran it.
type hookRun struct{ unit, hook, remote string }

func (r hookRun) String() string {
	if r.remote == "" {
		return r.unit + " " + r.hook
	}
	return r.unit + " " + r.hook + " " + r.remote
}

func runsString(runs []hookRun) string {
	if len(runs) == 0 {
		return "  (none)"
	}
	lines := make([]string, len(runs))
	for i, r := range runs {
		lines[i] = "  " + r.String()
	}
	return strings.Join(lines, "\n")
}

// hooks returns the hooks the pod's charm ran, in order.
func (cc *charmCluster) hooks(p *pod) []hookRun {
	var out []hookRun
	for _, line := range strings.Split(cc.read(p, "hooks.log"), "\n") {
		f := strings.Fields(line)
		switch len(f) {
		case 2:
			out = append(out, hookRun{f[0], f[1], ""})
		case 3:
			out = append(out, hookRun{f[0], f[1], f[2]})
		}
	}
	return out
}

// marks returns how many hooks each pod's charm has run so far.
func (cc *charmCluster) marks() map[string]int {
	m := map[string]int{}
	for name, dir := range cc.charms {
		b, _ := os.ReadFile(filepath.Join(dir, "hooks.log"))
		m[name+"\x00"+dir] = strings.Count(string(b), "\n")
	}
	return m
}

// hooksSince returns the hooks the pod's current charm ran after marks
// were taken (all of them for a charm copy that is newer).
func (cc *charmCluster) hooksSince(p *pod, marks map[string]int) []hookRun {
	runs := cc.hooks(p)
	return runs[min(marks[p.name+"\x00"+cc.charms[p.name]], len(runs)):]
}

// statusesSince returns the unit statuses the hooks of hooksSince saw as
// they started (the charm logs one line per hook in each file).
func (cc *charmCluster) statusesSince(p *pod, marks map[string]int) []string {
	lines := strings.Split(strings.TrimRight(cc.read(p, "status.log"), "\n"), "\n")
	return lines[min(marks[p.name+"\x00"+cc.charms[p.name]], len(lines)):]
}

func at(lines []string, i int) string {
	if i < 0 || i >= len(lines) {
		return "(none)"
	}
	return lines[i]
}

func count(runs []hookRun, r hookRun) int {
	n := 0
	for _, x := range runs {
		if x == r {
			n++
		}
	}
	return n
}

// diffRuns compares hooks as multisets: the order of events of different
// remote units is the resolver's business.
func diffRuns(want, got []hookRun) string {
	w, g := slices.Clone(want), slices.Clone(got)
	less := func(a, b hookRun) int { return strings.Compare(a.String(), b.String()) }
	slices.SortFunc(w, less)
	slices.SortFunc(g, less)
	if slices.Equal(w, g) {
		return ""
	}
	return fmt.Sprintf("ran\n%s\nwant (in any order)\n%s", runsString(got), runsString(want))
}

// agentActivity reads a pod's log: how many hooks were started and not
// yet ended, and whether the last one to end failed (its retry is due).
func agentActivity(log string) (running int, lastFailed bool) {
	started := strings.Count(log, `msg="running hook"`)
	committed := strings.Count(log, `msg="hook committed"`)
	failed := strings.Count(log, `msg="hook failed; retrying"`)
	refused := strings.Count(log, `msg="the hook's changes were refused: this pod no longer holds the unit"`)
	return started - committed - failed - refused, strings.LastIndex(log, `msg="hook failed; retrying"`) > strings.LastIndex(log, `msg="hook committed"`)
}

// settle waits until every running pod's unit agent is idle: no hook runs,
// none failed without having been retried, and no hook has started for a
// while. What a step expects must have been waited for before; this only
// makes sure the step leaves nothing in flight for the next.
func (cc *charmCluster) settle(what string) {
	cc.t.Helper()
	const quiet = 750 * time.Millisecond
	var last string
	var since time.Time
	waitFor(cc.t, startTimeout, "the unit agents to be idle after "+what, func() (bool, string) {
		var state []string
		idle := true
		for _, p := range cc.runningPods() {
			running, failed := agentActivity(p.lastLog())
			n := len(cc.hooks(p))
			state = append(state, fmt.Sprintf("%s: %d hooks, %d running, last failed %v", p.name, n, running, failed))
			idle = idle && running == 0 && !failed
		}
		sig := strings.Join(state, "; ")
		if sig != last || !idle {
			last, since = sig, time.Now()
			return false, sig
		}
		return time.Since(since) >= quiet, sig
	})
}

// ---- bags ----

// peerBags returns the bags of the peer relation as the pod holds them, by
// owner (nil if the pod does not answer).
func (cc *charmCluster) peerBags(p *pod) map[string]map[string]string {
	bs, err := p.bags()
	if err != nil {
		return nil
	}
	out := map[string]map[string]string{}
	for id, b := range bs {
		if id.rel == cc.rel {
			out[id.owner] = b.data
		}
	}
	return out
}

// waitPeerBags waits until every running pod holds the same bags of the
// peer relation and check accepts them ("" when it does).
func (cc *charmCluster) waitPeerBags(what string, check func(map[string]map[string]string) string) {
	cc.t.Helper()
	waitFor(cc.t, startTimeout, what+", the same on every member", func() (bool, string) {
		var first map[string]map[string]string
		var firstPod string
		for _, p := range cc.runningPods() {
			b := cc.peerBags(p)
			if b == nil {
				return false, p.name + " does not answer"
			}
			if first == nil {
				first, firstPod = b, p.name
				continue
			}
			if !maps.EqualFunc(first, b, maps.Equal) {
				return false, fmt.Sprintf("%s holds %v, %s holds %v", firstPod, first, p.name, b)
			}
		}
		if bad := check(first); bad != "" {
			return false, bad
		}
		return true, ""
	})
}

// exactBags accepts exactly want.
func exactBags(want map[string]map[string]string) func(map[string]map[string]string) string {
	return func(got map[string]map[string]string) string {
		if !maps.EqualFunc(want, got, maps.Equal) {
			return fmt.Sprintf("bags %v, want %v", got, want)
		}
		return ""
	}
}

// colours accepts bags where every unit published colour and the
// application bag holds appColour.
func colours(cc *charmCluster, colour, appColour string) func(map[string]map[string]string) string {
	return func(bags map[string]map[string]string) string {
		for _, u := range cc.units() {
			if bags[u]["colour"] != colour {
				return fmt.Sprintf("%s's colour is %q, want %s", u, bags[u]["colour"], colour)
			}
		}
		if bags[cc.app]["colour"] != appColour {
			return fmt.Sprintf("the application's colour is %q, want %s", bags[cc.app]["colour"], appColour)
		}
		return ""
	}
}

// addressKeys adds the keys the agent keeps in a unit's bags.
func addressKeys(p *pod, m map[string]string) map[string]string {
	m["private-address"] = p.host
	m["ingress-address"] = p.host
	m["egress-subnets"] = p.host + "/32"
	return m
}

// ---- text ----

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	return s[strings.LastIndexByte(s, '\n')+1:]
}

// grepLines returns the lines of s that contain substr.
func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
