//go:build linux

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

// pauseFor is how long a frozen leader stays frozen: ten election
// timeouts, long past the election of its successor.
const pauseFor = 5 * time.Second

// TestFrozenLeaderDoesNotTurnAReplacedPodIntoANewUnit replaces a pod of a
// Deployment-style application (claim mode, declared scale 3) while the
// raft leader is frozen (SIGSTOP), as a stalled node or VM would be: its
// connections stay open, it answers nothing. The old pod's unit release
// must reach the new leader within an election or two (not wait out its
// whole budget on the frozen one), and the replacement must claim the
// released unit — never create a fourth unit, which would make every other
// unit see a departure and a join.
func TestFrozenLeaderDoesNotTurnAReplacedPodIntoANewUnit(t *testing.T) {
	for _, tc := range []struct {
		name       string
		pauseFirst bool
	}{
		{"leader frozen before the old pod's SIGTERM", true},
		{"leader frozen right after the old pod's SIGTERM", false},
	} {
		t.Run(tc.name, func(t *testing.T) { testFrozenLeaderReplacement(t, tc.pauseFirst) })
	}
}

func testFrozenLeaderReplacement(t *testing.T, pauseFirst bool) {
	c := newCluster(t, "--unit-mode", "claim", "--units", "3")
	old := make([]*pod, 3)
	for i := range old {
		old[i] = c.newPod(deploymentPodName(c.app, "7f9c5d"), "--bootstrap-expect", "3")
	}
	c.startAll(old)
	c.waitReady(old...)
	before := c.waitOneCluster(startTimeout, "the initial cluster", wantVoters(3), wantMembers(3), allUnitsActive)
	seen := watchUnits(t, c)
	leader := c.leaderPod(before)
	victim := c.followers(before)[0]
	unit := before.statuses[victim.name].GetUnit()

	paused := time.Now()
	if pauseFirst {
		leader.pause()
		victim.stop()
	} else {
		pr := victim.process()
		pr.signal(syscall.SIGTERM)
		paused = time.Now()
		leader.pause()
		if !pr.wait(20 * time.Second) {
			t.Fatalf("%s did not stop within 20s of SIGTERM", victim.name)
		}
		c.writePeers()
	}
	stopped := time.Since(paused)
	log := victim.allLogs()
	if !strings.Contains(log, "unit released") || strings.Contains(log, "could not release the unit") {
		t.Fatalf("%s did not release %s while the leader was frozen (stopped after %v):\n%s", victim.name, unit, stopped, grepLines(log, "unit"))
	}
	t.Logf("%s released %s and stopped %v after the leader froze:\n%s", victim.name, unit, stopped.Round(time.Millisecond), lastLines(log, 12))

	// The replacement starts while the old leader is still frozen, as a
	// rolling update goes on; with two of three voters gone it can only join
	// once the fault is over, which lasts its whole length.
	repl := c.newPod(deploymentPodName(c.app, "5b8e21"), "--bootstrap-expect", "3")
	repl.start()
	if d := pauseFor - time.Since(paused); d > 0 {
		time.Sleep(d)
	}
	leader.resume()
	waitFor(t, startTimeout, repl.name+" to claim a unit", func() (bool, string) {
		st, err := repl.statusNoProbe()
		if err != nil {
			return false, err.Error()
		}
		return st.GetUnit() != "", "no unit yet"
	})
	if st, err := repl.statusNoProbe(); err != nil || st.GetUnit() != unit {
		t.Fatalf("%s holds %q (%v), want %s, which %s released", repl.name, st.GetUnit(), err, unit, victim.name)
	}
	v := c.waitOneCluster(startTimeout, "the cluster after the frozen leader resumed", allUnitsActive, c.unitsHeldByRunningPods)
	if got := fmt.Sprint(v.unitNames()); got != "[web/0 web/1 web/2]" {
		t.Fatalf("units %s, want web/0, web/1 and web/2", got)
	}
	if names := seen(); len(names) != 3 {
		t.Fatalf("units seen at some point: %v; a unit beyond the declared scale was created", names)
	}
}

// watchUnits records every unit any running, unpaused pod reports until the
// test ends; the returned function lists them.
func watchUnits(t *testing.T, c *cluster) func() []string {
	var mu sync.Mutex
	names := map[string]bool{}
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
			for _, p := range c.runningPods() {
				if p.isPaused() {
					continue
				}
				st, err := p.statusNoProbe()
				if err != nil {
					continue
				}
				mu.Lock()
				for _, u := range st.GetUnits() {
					names[u.GetName()] = true
				}
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { close(done); <-stopped })
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := make([]string, 0, len(names))
		for n := range names {
			out = append(out, n)
		}
		sort.Strings(out)
		return out
	}
}

// TestTakenOverHolderResumedCommitsNothing freezes a pod of a
// Deployment-style application while its hook runs. A replacement pod
// waits for a unit (the declared scale is reached), and once the frozen
// holder has been unreachable for --unit-takeover-after, the leader frees
// its unit and the replacement takes it over. When the old holder thaws,
// its hook finishes — and its changes are refused (the commit carries the
// claim it no longer holds), and its agent runs no hook any more.
func TestTakenOverHolderResumedCommitsNothing(t *testing.T) {
	cc := newCharmCluster(t)
	claim := []string{"--unit-mode", "claim", "--units", "3", "--unit-takeover-after", "2s"}
	pods, before := cc.startDeployment(3, claim...)
	seen := watchUnits(t, cc.cluster)

	holder := cc.followers(before)[0]
	unit := before.statuses[holder.name].GetUnit()
	cc.touch(holder, "hold-config-changed")
	cc.writeConfig("colour: green\n")
	cc.waitFile(holder, "holding")
	holder.pause()

	repl := cc.deploymentPod("5b8e21", claim...)
	repl.start()
	waitFor(t, startTimeout, repl.name+" to take "+unit+" over", func() (bool, string) {
		st, err := repl.statusNoProbe()
		if err != nil {
			return false, err.Error()
		}
		_, why := repl.readyz()
		return st.GetUnit() == unit, fmt.Sprintf("holds %q; readyz: %s", st.GetUnit(), why)
	})
	if names := seen(); len(names) != 3 {
		t.Fatalf("units seen: %v; a unit beyond the declared scale was created", names)
	}

	holder.resume()
	cc.touch(holder, "release")
	waitFor(t, startTimeout, holder.name+"'s hook commit to be refused", func() (bool, string) {
		log := holder.lastLog()
		return strings.Contains(log, "no longer holds the unit"), lastLines(grepLines(log, "hook"), 5)
	})
	for _, p := range []*pod{repl, pods[0], pods[1], pods[2]} {
		if p == holder {
			continue
		}
		if bags := cc.peerBags(p); bags[unit]["held"] != "" {
			t.Fatalf("%s reads held=%q in %s's bag: the taken-over holder's hook committed", p.name, bags[unit]["held"], unit)
		}
	}
	code, why := holder.readyz()
	if code == 200 {
		t.Fatalf("the taken-over holder %s is ready: %s", holder.name, why)
	}
	// A config change: every unit runs config-changed, the old holder none.
	n := len(cc.hooks(holder))
	cc.remove(holder, "hold-config-changed")
	cc.writeConfig("colour: red\n")
	waitFor(t, startTimeout, "every unit's config-changed for red", func() (bool, string) {
		for _, p := range cc.runningPods() {
			if p == holder {
				continue
			}
			if !strings.Contains(cc.read(p, "colours"), "red") {
				return false, p.name + " has not seen red"
			}
		}
		return true, ""
	})
	cc.settle("the red config")
	if runs := cc.hooks(holder); len(runs) != n {
		t.Fatalf("the taken-over holder ran hooks after its commit was refused: %v", runs[n:])
	}
	if !slices.Contains(seen(), unit) || len(seen()) != 3 {
		t.Fatalf("units seen: %v", seen())
	}
}

// TestHookToolsReadFilesWhereTheHookRuns: relation-set --file names a file
// as the hook sees it. The sidecar must never open such a path itself: an
// endless file (/dev/zero) once grew a sidecar to 13 GB until the kernel
// killed it, raft member, probes and all. Now the hook tool reads the file
// in the hook's process, up to the bag limit, and fails at once.
func TestHookToolsReadFilesWhereTheHookRuns(t *testing.T) {
	cc := newCharmCluster(t)
	cc.startPods(3)
	cc.settle("the install sequence")
	p := cc.runningPods()[0]
	before := rss(t, p)
	cc.touch(p, "zero-file")
	cc.writeConfig("colour: yellow\n")
	cc.waitFile(p, "zero.code")
	if code := strings.TrimSpace(cc.read(p, "zero.code")); code != "1" {
		t.Fatalf("relation-set --file /dev/zero exited %s, want 1; stderr %q", code, cc.read(p, "zero.err"))
	}
	if msg := cc.read(p, "zero.err"); !strings.Contains(msg, "over the 16777216 byte limit") {
		t.Fatalf("relation-set --file /dev/zero: stderr %q, want the size limit named", msg)
	}
	cc.settle("config-changed with /dev/zero")
	after := rss(t, p)
	if after > before+64<<20 {
		t.Fatalf("the sidecar grew from %d to %d MiB while a hook read /dev/zero", before>>20, after>>20)
	}
	if code, why := p.readyz(); code != 200 {
		t.Fatalf("%s is not ready after the hook: %s", p.name, why)
	}
	t.Logf("sidecar RSS %d MiB before, %d MiB after", before>>20, after>>20)
}

// rss returns the resident memory of the pod's process, in bytes.
func rss(t *testing.T, p *pod) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.process().pid()))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" {
			var kb int64
			fmt.Sscan(f[1], &kb)
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", p.process().pid())
	return 0
}

// TestFlippedByteInAFollowersLogIsNeverServed changes one byte of a
// committed value in a stopped follower's raft.db, as a failing disk
// would, and starts it again. The member must find the damage by the
// entry's checksum and serve nothing of it: not ready, naming the entry,
// on /readyz and /metrics; a stale read shows the state from before the
// damaged entry, never the changed value; a linearizable read through it
// fails. The other members go on serving the right value.
//
// It runs on raft-boltdb, where a changed byte leaves the entry readable
// and only its checksum tells. On raft-wal the append's CRC tells first:
// the member refuses to start (TestDamagedRaftStoreStopsThePodWithAnError).
func TestFlippedByteInAFollowersLogIsNeverServed(t *testing.T) {
	c := newCluster(t, "--log-store", "boltdb")
	c.startCluster(3)
	v := c.waitOneCluster(startTimeout, "the cluster", wantVoters(3))
	leader, f := c.leaderPod(v), c.followers(v)[0]
	rel, err := leader.ensureRelation(&adminpb.EnsureRelationRequest{Endpoint: "replicas", Interface: "web-peers", Peer: true})
	if err != nil {
		t.Fatal(err)
	}
	canary := "canary-" + randHex(16)
	if err := leader.setBag(10*time.Second, rel, "web", map[string]string{"k": canary}); err != nil {
		t.Fatal(err)
	}
	want, err := leader.bags()
	if err != nil {
		t.Fatal(err)
	}
	c.waitBags(want, f)
	f.stop()

	db := filepath.Join(f.dataDir, "raft", "raft.db")
	data, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	flipped := strings.ToUpper(canary[:1]) + canary[1:]
	n := bytes.Count(data, []byte(canary))
	if n == 0 {
		t.Fatalf("the value is not in %s", db)
	}
	data = bytes.ReplaceAll(data, []byte(canary), []byte(flipped))
	if err := os.WriteFile(db, data, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Logf("changed %d cop%s of the value in %s", n, map[bool]string{true: "y", false: "ies"}[n == 1], db)
	f.start()

	waitFor(t, startTimeout, f.name+" to say it is damaged", func() (bool, string) {
		code, body := f.readyz()
		return code == 503 && strings.Contains(body, "damaged"), fmt.Sprintf("%d %s", code, body)
	})
	metrics := scrape(t, f)
	if !strings.Contains(metrics, "\nbagkeeper_store_damaged 1\n") || strings.Contains(metrics, "\nbagkeeper_store_damaged_index 0\n") {
		t.Fatalf("/metrics does not report the damage:\n%s", grepLines(metrics, "damaged"))
	}
	var stale *adminpb.GetBagsResponse
	if err := f.adminCall(5*time.Second, func(ctx context.Context, ac adminpb.AdminClient) error {
		var err error
		stale, err = ac.GetBags(ctx, &adminpb.GetBagsRequest{RelationId: -1, Stale: true})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for _, b := range stale.GetBags() {
		if b.GetData()["k"] == flipped {
			t.Fatalf("%s served the damaged value %q", f.name, flipped)
		}
	}
	if stale.GetNotReadyReason() == "" {
		t.Fatal("a stale read from the damaged member does not say it is not ready")
	}
	if _, err := f.getBags(); err == nil {
		t.Fatal("a linearizable read through the damaged member succeeded")
	}
	c.waitBags(want, leader, c.followers(v)[1])
}

// scrape returns the pod's /metrics.
func scrape(t *testing.T, p *pod) string {
	t.Helper()
	resp, err := httpClient.Get("http://" + p.httpAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
