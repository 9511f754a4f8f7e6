package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

// The scale measurement (-experiments scale, bagkeeper only): one
// application of -scale-units sidecars (pods scl-0 … scl-N-1, so units are
// ordinal), each running the unit agent with a charm whose hooks do
// nothing, --bootstrap-expect 3, --voters -scale-voters (the members beyond
// the voters are non-voters), each given the first three members' peer
// addresses plus its own. It loads -scale-relations relations (one peer
// relation, the rest to remote applications that have no units here) and
// -scale-keys keys in their application bags through the admin API, and
// reports
//
//   - how long the group took to form and for every member to be ready;
//   - each member's RSS with an empty state and with the load (min, median,
//     max), next to the size of the data;
//   - put latency of one writer (256 B values) at that size;
//   - idle CPU of the leader, of voting followers and of non-voters;
//   - the fan-out of a write to the peer relation's application bag: the
//     time until every other unit's relation-changed hook started;
//   - a wiped pod (kill -9, empty disk, new address) ready with all bags;
//   - a rolling replacement of -scale-replace pods (SIGTERM, the same pod
//     started again), then that the application has the same units.

var (
	scaleUnits       = flag.Int("scale-units", 100, "scale: units (sidecars) of the application")
	scaleRelations   = flag.Int("scale-relations", 1000, "scale: relations (one peer relation, the rest to remote applications); at least 2")
	scaleKeys        = flag.Int("scale-keys", 100000, "scale: keys loaded, spread over the application bags of the non-peer relations")
	scaleWrites      = flag.Int("scale-writes", 10, "scale: writes to the peer relation's application bag timed to every unit's relation-changed")
	scaleReplace     = flag.Int("scale-replace", -1, "scale: pods replaced one at a time in the rolling replacement (-1: all units; 0 skips)")
	scaleVoters      = flag.Int("scale-voters", 5, "scale: --voters of every sidecar (the others are non-voters)")
	scaleIdle        = flag.Duration("scale-idle", 30*time.Second, "scale: window of the idle CPU measurement")
	scalePutDuration = flag.Duration("scale-put-duration", 10*time.Second, "scale: measured put load (1 writer, 256 B values) at full size")
	scaleLoadLimit   = flag.Duration("scale-load-limit", 15*time.Minute, "scale: longest time spent writing keys; the keys written by then are what the later rows measure")
	scaleBudget      = flag.Duration("scale-budget", 0, "scale: if > 0, the longest the whole measurement may take; the steps it leaves out are named in a row")
	scaleSettleLimit = flag.Duration("scale-settle-limit", 15*time.Minute, "scale: longest wait for the hooks to settle after formation and after the load (the measurements then go on)")
	scaleProfile     = flag.String("scale-profile", "", "scale: directory for CPU profiles of the leader, a voting follower and a non-voter taken over the first 20 s of relation creation (relations-<role>-<pod>.pprof), the idle window (idle-<role>-<pod>.pprof) and the measured put load (put-<role>-<pod>.pprof), and heap profiles with the empty state and after the load (heap-empty-…, heap-loaded-…); the sidecars need --pprof in -bagkeeper-args; empty takes none")
)

const (
	scaleApp = "scl"
	// scalePeerEndpoint is the charm's peer relation, written by the
	// fan-out measurement; scaleRemoteEndpoint is the endpoint of the
	// relations to remote applications that hold the loaded keys.
	scalePeerEndpoint   = "replicas"
	scaleRemoteEndpoint = "db"
	// scaleSeeds is how many of the first members every member is given
	// as peers (plus itself).
	scaleSeeds = 3
	// scaleValueSize is the size of a loaded value; scaleBatch the keys
	// per SetBag while loading; scaleLoaders the concurrent loaders.
	scaleValueSize = 100
	scaleBatch     = 10
	scaleLoaders   = 4
	// scaleRelationsProfile is the window of the profiles (-scale-profile)
	// taken while the relations are made.
	scaleRelationsProfile = 20 * time.Second
	// scaleFirstHost is the third octet base of the members' loopback
	// addresses (127.2.x.y, away from the other experiments' 127.0.0.x).
	scaleNet = "127.2"
)

func scaleExperiment(ctx context.Context, env *Env) ([]Row, error) {
	b, ok := env.Target.(*bagkeeperTarget)
	if !ok {
		return nil, nil
	}
	return b.measureScale(ctx, env)
}

// scaleHost is the loopback address of slot i: 127.2.x.y with y from 1 to
// 250, so that any number of pods (and their replacements) get distinct
// addresses.
func scaleHost(i int) string {
	return fmt.Sprintf("%s.%d.%d", scaleNet, i/250, i%250+1)
}

// scalePeers is the --peers list of member i: the first seeds members'
// addresses, plus its own when it is not among them.
func scalePeers(addrs []string, i, seeds int) []string {
	seeds = min(seeds, len(addrs))
	out := slices.Clone(addrs[:seeds])
	if i >= seeds {
		out = append(out, addrs[i])
	}
	return out
}

// spreadKeys splits keys over n bags as evenly as possible (the first
// bags get one more).
func spreadKeys(keys, n int) []int {
	if n <= 0 {
		return nil
	}
	out := make([]int, n)
	for i := range out {
		out[i] = keys / n
		if i < keys%n {
			out[i]++
		}
	}
	return out
}

// scaleKey is the name of the j-th loaded key of a bag.
func scaleKey(j int) string { return fmt.Sprintf("k%07d", j) }

// spread is the minimum, median (nearest rank, the lower middle) and
// maximum of xs; zeros for none.
type spread struct{ min, median, max int64 }

func spreadOf(xs []int64) spread {
	if len(xs) == 0 {
		return spread{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return spread{s[0], s[(len(s)-1)/2], s[len(s)-1]}
}

func (s spread) bytes() string {
	return fmt.Sprintf("min %s, median %s, max %s", fmtSignedBytes(s.min), fmtSignedBytes(s.median), fmtSignedBytes(s.max))
}

// fmtSignedBytes is fmtBytes for a difference, which may be negative (a
// member's RSS can shrink between two readings).
func fmtSignedBytes(n int64) string {
	if n < 0 {
		return "-" + fmtBytes(-n)
	}
	return fmtBytes(n)
}

// unitSet is the units of the application that are not removed, as
// "name@pod", sorted, and the names of the removed ones.
func unitSet(units []*adminpb.Unit) (live, removed []string) {
	for _, u := range units {
		if u.GetState() == "removed" {
			removed = append(removed, u.GetName())
			continue
		}
		live = append(live, u.GetName()+"@"+u.GetPod())
	}
	slices.Sort(live)
	slices.Sort(removed)
	return live, removed
}

// diffSets returns what is in b and not in a, and what is in a and not in
// b (both sorted).
func diffSets(a, b []string) (added, gone []string) {
	for _, x := range b {
		if !slices.Contains(a, x) {
			added = append(added, x)
		}
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			gone = append(gone, x)
		}
	}
	return added, gone
}

// bagTotals counts the keys and the bytes of keys and values in bags.
func bagTotals(bags []*adminpb.Bag) (keys int, size int64) {
	for _, b := range bags {
		for k, v := range b.GetData() {
			keys++
			size += int64(len(k) + len(v))
		}
	}
	return keys, size
}

// hookStart is one "running hook" line of a sidecar's log.
type hookStart struct {
	at         time.Time
	hook       string
	remoteUnit string
}

// parseHookStarts parses the complete lines of data (a piece of a
// sidecar's text log) and returns the hooks they say were started and how
// many bytes it consumed (up to the last newline). busy is whether a hook
// was still running at the end of those lines: the last line about a hook
// (or the sidecar's start or stop) was a hook's start; it stays was when
// the lines say nothing of it.
func parseHookStarts(data []byte, was bool) (hs []hookStart, busy bool, n int) {
	end := bytes.LastIndexByte(data, '\n') + 1
	busy = was
	for _, line := range strings.Split(string(data[:end]), "\n") {
		if hookEndRE.MatchString(line) {
			busy = false
			continue
		}
		g := runningHookRE.FindStringSubmatch(line)
		if g == nil {
			continue
		}
		busy = true
		t, err := time.Parse(time.RFC3339Nano, g[1])
		if err != nil {
			continue
		}
		ru := g[3]
		if ru == `""` {
			ru = ""
		}
		hs = append(hs, hookStart{at: t, hook: g[2], remoteUnit: ru})
	}
	return hs, busy, end
}

// hookEndRE matches the log lines after which a member runs no hook: one
// committed, failed or refused, and the sidecar's start and stop (a
// process killed in a hook logs nothing of its end).
var hookEndRE = regexp.MustCompile(`msg=("hook committed"|"hook failed; retrying"|"the hook's changes were refused|starting |"sidecar stopped")`)

// logTail reads a member's log incrementally.
type logTail struct {
	path string
	off  int64
	// busy: the member's agent was running a hook at the end of what was
	// read.
	busy bool
}

// next returns the hook starts logged since the last call.
func (l *logTail) next() ([]hookStart, error) {
	f, err := os.Open(l.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(l.off, io.SeekStart); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	hs, busy, n := parseHookStarts(data, l.busy)
	l.off += int64(n)
	l.busy = busy
	return hs, nil
}

// skip moves the tail to the end of the log (what it passes still says
// whether a hook runs).
func (l *logTail) skip() {
	if _, err := l.next(); err != nil {
		if fi, err := os.Stat(l.path); err == nil {
			l.off = fi.Size()
		}
	}
}

// scaleGroup is the scale experiment's application.
type scaleGroup struct {
	t     *bagkeeperTarget
	env   *Env
	tails []*logTail
	slots int // addresses handed out
	// settledHooks is how many hooks started during the last settle.
	settledHooks int
}

func (b *bagkeeperTarget) measureScale(ctx context.Context, env *Env) ([]Row, error) {
	n, nrel := *scaleUnits, *scaleRelations
	switch {
	case n < scaleSeeds:
		return nil, fmt.Errorf("scale: -scale-units must be at least %d", scaleSeeds)
	case nrel < 2:
		return nil, errors.New("scale: -scale-relations must be at least 2 (the peer relation and one that holds keys)")
	case *scaleKeys < 0:
		return nil, errors.New("scale: -scale-keys must not be negative")
	}
	replace := *scaleReplace
	if replace < 0 || replace > n {
		replace = n
	}
	dir := filepath.Join(env.Dir, "scale")
	charm := filepath.Join(dir, "charm")
	if err := os.MkdirAll(charm, 0o755); err != nil {
		return nil, err
	}
	jujuc := filepath.Join(filepath.Dir(b.bin), "jujuc")
	if _, err := os.Stat(jujuc); err != nil {
		return nil, fmt.Errorf("scale measurement needs jujuc next to the bagkeeper binary: %w", err)
	}
	md := fmt.Sprintf("name: bench-scale\npeers:\n  %s:\n    interface: bench-peers\nrequires:\n  %s:\n    interface: bench-db\n", scalePeerEndpoint, scaleRemoteEndpoint)
	if err := os.WriteFile(filepath.Join(charm, "metadata.yaml"), []byte(md), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(charm, "dispatch"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		return nil, err
	}
	t := &bagkeeperTarget{bin: b.bin, version: b.version, defaults: b.defaults, via: b.via, app: scaleApp, logStore: b.logStore,
		attemptTimeout: b.attemptTimeout, startTimeout: b.startTimeout, http: b.http,
		extraArgs: func(m *bkMember) []string {
			return []string{"--charm-dir=" + charm, "--hook-tool=" + jujuc, "--update-status-interval=1h", "--voters=" + strconv.Itoa(*scaleVoters)}
		}}
	defer t.stopCluster()
	t.dir = filepath.Join(dir, scaleApp)
	if err := os.MkdirAll(t.dir, 0o755); err != nil {
		return nil, err
	}
	sockDir, err := shortTempDir("bks")
	if err != nil {
		return nil, err
	}
	t.sockDir = sockDir
	g := &scaleGroup{t: t, env: env}
	name := b.Name()
	var rows []Row
	outer := ctx
	if *scaleBudget > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *scaleBudget)
		defer cancel()
	}
	// stop ends the measurement at step with err; when -scale-budget ran
	// out it keeps the rows measured so far and says which steps were not.
	stop := func(step string, err error) ([]Row, error) {
		// A call may fail on the budget's deadline (the server's copy of
		// it) a moment before the context says it is done: look at the
		// clock too.
		dl, budgeted := ctx.Deadline()
		if outer.Err() == nil && (ctx.Err() != nil || *scaleBudget > 0 && budgeted && time.Until(dl) < time.Second) {
			env.Progressf("scale: -scale-budget %s ran out during %s", *scaleBudget, step)
			return append(rows, Row{What: "scale: steps not measured", Target: name,
				Note: fmt.Sprintf("-scale-budget %s ran out during %s (%s); that step and the later ones were skipped", *scaleBudget, step, shortErr(err))}), nil
		}
		return rows, err
	}

	// 1. Formation.
	formed, ready, err := g.start(ctx, n)
	if err != nil {
		return stop("the formation", err)
	}
	settled, unsettled, err := g.settle(ctx, 3*time.Second, *scaleSettleLimit)
	if err != nil {
		return stop("the formation's hooks", err)
	}
	termFormed := termOf(g.term(ctx))
	rows = append(rows, Row{What: fmt.Sprintf("scale: %d units form one group and are ready", n), Target: name,
		Value: fmt.Sprintf("formed in %s, all ready in %s, hooks settled in %s (%d hooks started after all were ready), raft term %s then", fmtDuration(formed), fmtDuration(ready), fmtDuration(settled), g.settledHooks, termFormed) + prefixed("; ", unsettled),
		Note: fmt.Sprintf("all %d sidecars started at once (pods %s-0 … %s-%d, ordinal units, --bootstrap-expect 3, --voters %d, --peers the first %d members' addresses plus its own); "+
			"formed: every member in the leader's raft configuration; ready: /readyz 200 on every member; settled: no hook started for 3 s, none running (its log says each started hook ended) and every member ready (each unit runs its start hooks and relation-joined/changed for every other unit)",
			n, scaleApp, scaleApp, n-1, *scaleVoters, scaleSeeds)})
	emptyRSS, emptyAnon := g.rss()
	env.Progressf("scale: RSS with an empty state: %s", spreadOf(emptyRSS).bytes())
	if err := g.heapProfiles(ctx, "empty"); err != nil {
		env.Progressf("scale: no heap profiles with an empty state: %v", err)
	}

	// 2. Load.
	peerRel, rels, written, loadTook, err := g.load(ctx, nrel, *scaleKeys)
	if err != nil {
		return stop("the load", err)
	}
	settled, unsettled, err = g.settle(ctx, 3*time.Second, *scaleSettleLimit)
	if err != nil {
		return stop("the load's hooks", err)
	}
	loadHooks := g.settledHooks
	leader, err := t.findLeader(ctx)
	if err != nil {
		return stop("the load", err)
	}
	bags, err := leader.admin.GetBags(ctx, &adminpb.GetBagsRequest{RelationId: -1, Stale: true})
	if err != nil {
		return stop("the load", fmt.Errorf("scale: read the leader's bags: %w", err))
	}
	keys, size := bagTotals(bags.GetBags())
	loaded := ""
	if written < *scaleKeys {
		loaded = fmt.Sprintf("STOPPED by -scale-load-limit with %d of %d keys written", written, *scaleKeys)
	}
	rows = append(rows, Row{What: fmt.Sprintf("scale: load %d relations, %d keys (%d units)", nrel, *scaleKeys, n), Target: name,
		Value: fmt.Sprintf("%s, hooks settled %s later (%d hooks started in that time), raft term %s → %s", fmtDuration(loadTook), fmtDuration(settled), loadHooks, termFormed, termOf(g.term(ctx))) + prefixed("; ", loaded) + prefixed("; ", unsettled),
		Note: fmt.Sprintf("1 peer relation and %d relations to remote applications (no remote units) made with EnsureRelation, then %d keys of %d-byte values in the application bags of the latter, %d keys per SetBag, %d loaders, through the raft leader's admin socket; "+
			"every unit runs relation-created for every relation; the leader then holds %d keys, %s of keys and values", nrel-1, *scaleKeys, scaleValueSize, scaleBatch, scaleLoaders, keys, fmtBytes(size))})

	// 3a. Memory.
	fullRSS, fullAnon := g.rss()
	diffs := make([]int64, len(fullRSS))
	for i := range fullRSS {
		diffs[i] = fullAnon[i] - emptyAnon[i]
	}
	rows = append(rows, Row{What: fmt.Sprintf("scale: sidecar RSS, %d units, empty state", n), Target: name,
		Value: spreadOf(emptyRSS).bytes(),
		Note:  fmt.Sprintf("VmRSS of every member once the hooks settled after formation; RssAnon %s", spreadOf(emptyAnon).bytes())})
	rows = append(rows, Row{What: fmt.Sprintf("scale: sidecar RSS, %d units, %d relations, %d keys loaded", n, nrel, written), Target: name,
		Value: spreadOf(fullRSS).bytes(),
		Note: fmt.Sprintf("VmRSS of every member after the load, hooks settled; RssAnon %s; RssAnon minus its empty-state figure, per member: %s; the state holds %d keys (the loaded ones and those the agents set in their units' bags) of %s (keys + values)",
			spreadOf(fullAnon).bytes(), spreadOf(diffs).bytes(), keys, fmtBytes(size))})
	env.Progressf("scale: RSS with the load: %s (data %s)", spreadOf(fullRSS).bytes(), fmtBytes(size))
	if err := g.heapProfiles(ctx, "loaded"); err != nil {
		env.Progressf("scale: no heap profiles after the load: %v", err)
	}

	// 3c. Idle CPU (before the put load, which leaves the log longer).
	idleRow, err := g.idle(ctx, *scaleIdle)
	if err != nil {
		return stop("the idle CPU", err)
	}
	rows = append(rows, idleRow)

	// 3b. Put latency.
	latRow, err := g.putLatency(ctx, rels[0], name, n, written)
	if err != nil {
		return stop("the put latency", err)
	}
	rows = append(rows, latRow)

	// 3d. Fan-out.
	if *scaleWrites > 0 {
		fanRow, err := g.fanOut(ctx, peerRel, *scaleWrites, name, n)
		if err != nil {
			if fanRow.What != "" {
				rows = append(rows, fanRow)
			}
			return stop("the fan-out", err)
		}
		rows = append(rows, fanRow)
	}

	// 3e. Wiped pod.
	wipeRow, err := g.wipe(ctx, name, keys)
	if err != nil {
		return stop("the wiped pod", err)
	}
	rows = append(rows, wipeRow)

	// 3f. Rolling replacement.
	if replace > 0 {
		rollRow, err := g.rolling(ctx, replace, name, n)
		if err != nil {
			if rollRow.What != "" {
				rows = append(rows, rollRow)
			}
			return stop("the rolling replacement", err)
		}
		rows = append(rows, rollRow)
	}
	return rows, nil
}

// newSlotAddresses gives m the next loopback address of the plan.
func (g *scaleGroup) newSlotAddresses(m *bkMember) error {
	host := scaleHost(g.slots)
	g.slots++
	return m.listenOn(host)
}

// start starts n members at once and waits until all are in the
// configuration (formed) and ready.
func (g *scaleGroup) start(ctx context.Context, n int) (formed, ready time.Duration, err error) {
	t := g.t
	for i := range n {
		m := &bkMember{
			index:   i,
			pod:     fmt.Sprintf("%s-%d", scaleApp, i),
			dataDir: filepath.Join(t.dir, fmt.Sprintf("m%d", i)),
			socket:  filepath.Join(t.sockDir, fmt.Sprintf("m%d.sock", i)),
			logPath: filepath.Join(t.dir, fmt.Sprintf("m%d.log", i)),
		}
		if err := g.newSlotAddresses(m); err != nil {
			return 0, 0, err
		}
		conn, err := dialAdmin(m.socket)
		if err != nil {
			return 0, 0, err
		}
		m.conn, m.admin = conn, adminpb.NewAdminClient(conn)
		t.members = append(t.members, m)
		g.tails = append(g.tails, &logTail{path: m.logPath})
	}
	addrs := t.peerAddrs()
	g.env.Progressf("scale: starting %d sidecars of %s", n, scaleApp)
	t0 := time.Now()
	for i, m := range t.members {
		m.peers = scalePeers(addrs, i, scaleSeeds)
		if err := t.startMember(m); err != nil {
			return 0, 0, err
		}
	}
	deadline := time.Now().Add(max(t.startTimeout, time.Duration(n)*6*time.Second))
	last := time.Now()
	for formed == 0 || ready == 0 {
		if err := t.checkRunning(); err != nil {
			return 0, 0, err
		}
		if err := ctx.Err(); err != nil {
			return 0, 0, err
		}
		inConfig, readyN := 0, 0
		for _, s := range t.statusAll(ctx, true) {
			if s.isLeader() {
				inConfig = len(s.resp.GetMembers())
			}
		}
		if formed == 0 && inConfig == n {
			formed = time.Since(t0)
			g.env.Progressf("scale: all %d members in the configuration after %s", n, fmtDuration(formed))
		}
		readyN = g.readyCount(ctx)
		if formed > 0 && readyN == n {
			ready = time.Since(t0)
			break
		}
		if time.Since(last) >= 5*time.Second {
			last = time.Now()
			g.env.Progressf("scale: %s: %d of %d members in the configuration, %d ready", fmtDuration(time.Since(t0)), inConfig, n, readyN)
		}
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("scale: after %s, %d of %d members in the configuration, %d ready", fmtDuration(time.Since(t0)), inConfig, n, readyN)
		}
		// Polling 100 members often is load of its own: a second is
		// fine resolution for minutes.
		poll := 200 * time.Millisecond
		if n > 12 {
			poll = time.Second
		}
		if err := sleepCtx(ctx, poll); err != nil {
			return 0, 0, fmt.Errorf("scale: after %s, %d of %d members in the configuration, %d ready: %w", fmtDuration(time.Since(t0)), inConfig, n, readyN, err)
		}
	}
	g.env.Progressf("scale: all %d ready after %s", n, fmtDuration(ready))
	return formed, ready, nil
}

// readyCount asks every member's /readyz in parallel and counts the 200s.
func (g *scaleGroup) readyCount(ctx context.Context) int {
	var n atomic.Int64
	var wg sync.WaitGroup
	for _, m := range g.t.members {
		wg.Go(func() {
			if ok, _ := g.t.readyz(ctx, m); ok {
				n.Add(1)
			}
		})
	}
	wg.Wait()
	return int(n.Load())
}

// settle waits until no member has started a hook for quiet, none runs
// one (its log says the last hook it started ended), and every member is
// ready (one that fell behind decides no hook until it has caught up), and
// returns how long that took (quiet included). After limit it gives up
// without an error (the measurements then go on with hooks still running)
// and returns a note saying so.
func (g *scaleGroup) settle(ctx context.Context, quiet, limit time.Duration) (time.Duration, string, error) {
	t0 := time.Now()
	since := t0
	total := 0
	last := t0
	why := ""
	for {
		started, err := g.hooksStarted()
		if err != nil {
			return 0, "", err
		}
		total += started
		g.settledHooks = total
		switch {
		case started > 0:
			since = time.Now()
		case time.Since(since) >= quiet:
			why = g.unsettled(ctx)
			if why == "" {
				g.env.Progressf("scale: hooks settled after %s (%d hooks started meanwhile)", fmtDuration(time.Since(t0)), total)
				return time.Since(t0), "", nil
			}
		}
		if err := g.t.checkRunning(); err != nil {
			return 0, "", err
		}
		if time.Since(t0) > limit {
			g.env.Progressf("scale: hooks still running after %s (%d started); going on", limit, total)
			return time.Since(t0), fmt.Sprintf("HOOKS STILL RUNNING after %s (%d started)", limit, total), nil
		}
		if time.Since(last) >= 10*time.Second {
			last = time.Now()
			g.env.Progressf("scale: waiting for the hooks to settle: %d started in %s%s", total, fmtDuration(time.Since(t0)), prefixed(", ", why))
		}
		if err := sleepCtx(ctx, 500*time.Millisecond); err != nil {
			return 0, "", err
		}
	}
}

// unsettled says why the group has not settled although no hook started
// lately — a member runs a hook (waiting for its commit), or is not ready
// — or "" if it has.
func (g *scaleGroup) unsettled(ctx context.Context) string {
	busy := 0
	for _, l := range g.tails {
		if l.busy {
			busy++
		}
	}
	if busy > 0 {
		return fmt.Sprintf("%d members run a hook", busy)
	}
	for _, m := range g.t.members {
		if ok, why := g.t.readyz(ctx, m); !ok {
			return fmt.Sprintf("%s not ready: %s", m.pod, why)
		}
	}
	return ""
}

// rss reads every member's VmRSS and RssAnon.
func (g *scaleGroup) rss() (rss, anon []int64) {
	for _, m := range g.t.members {
		s := readProc(m.proc.Pid())
		rss = append(rss, s.rss)
		anon = append(anon, s.rssAnon)
	}
	return rss, anon
}

// load creates the relations and writes the keys; it returns the peer
// relation's id, the other relations' ids, the keys written (fewer than
// keys when -scale-load-limit ran out) and how long it took.
func (g *scaleGroup) load(ctx context.Context, nrel, keys int) (peerRel int64, rels []int64, written int, took time.Duration, err error) {
	leader, err := g.t.findLeader(ctx)
	if err != nil {
		return 0, nil, 0, 0, err
	}
	t0 := time.Now()
	g.env.Progressf("scale: creating %d relations", nrel)
	peer, err := ensureRelationOn(ctx, leader, g.t.members, &adminpb.EnsureRelationRequest{Endpoint: scalePeerEndpoint, Interface: "bench-peers", Peer: true})
	if err != nil {
		return 0, nil, 0, 0, err
	}
	rels = make([]int64, nrel-1)
	var next, made atomic.Int64
	var firstErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	made.Store(1) // the peer relation
	stopMade := everyFewSeconds(func() { g.env.Progressf("scale: %d of %d relations made", made.Load(), nrel) })
	// The relation-created hooks run while the relations are made: the
	// busiest time of the run, profiled from its start.
	profiled := g.profileRoles(ctx, scaleRelationsProfile, "relations")
	defer func() {
		if perr := profiled(); perr != nil {
			g.env.Progressf("scale: %v", perr)
		}
	}()
	for range scaleLoaders {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(rels) || ctx.Err() != nil {
					return
				}
				id, err := ensureRelationOn(ctx, leader, g.t.members, &adminpb.EnsureRelationRequest{Endpoint: scaleRemoteEndpoint, Interface: "bench-db",
					RemoteApp: fmt.Sprintf("ext%d", i), RemoteEndpoint: scaleRemoteEndpoint})
				if err != nil {
					mu.Lock()
					firstErr = cmpOr(firstErr, err)
					mu.Unlock()
					return
				}
				rels[i] = id
				made.Add(1)
			}
		})
	}
	wg.Wait()
	stopMade()
	if firstErr != nil {
		return 0, nil, 0, 0, firstErr
	}
	g.env.Progressf("scale: %d relations made in %s; writing %d keys", nrel, fmtDuration(time.Since(t0)), keys)
	type batch struct {
		rel      int64
		from, to int
	}
	var batches []batch
	for i, k := range spreadKeys(keys, len(rels)) {
		for j := 0; j < k; j += scaleBatch {
			batches = append(batches, batch{rels[i], j, min(j+scaleBatch, k)})
		}
	}
	var done atomic.Int64
	next.Store(0)
	stop := everyFewSeconds(func() { g.env.Progressf("scale: %d of %d keys written", done.Load(), keys) })
	value := strings.Repeat("v", scaleValueSize)
	stopAt := time.Now().Add(*scaleLoadLimit)
	for range scaleLoaders {
		wg.Go(func() {
			for {
				if time.Now().After(stopAt) {
					return
				}
				i := int(next.Add(1)) - 1
				if i >= len(batches) || ctx.Err() != nil {
					return
				}
				bt := batches[i]
				set := make(map[string]string, bt.to-bt.from)
				for j := bt.from; j < bt.to; j++ {
					set[scaleKey(j)] = value
				}
				wctx, cancel := context.WithTimeout(ctx, time.Minute)
				_, err := leader.admin.SetBag(wctx, &adminpb.SetBagRequest{RelationId: bt.rel, Owner: scaleApp, Set: set})
				cancel()
				if err != nil {
					mu.Lock()
					firstErr = cmpOr(firstErr, fmt.Errorf("scale: load: %w", err))
					mu.Unlock()
					return
				}
				done.Add(int64(len(set)))
			}
		})
	}
	wg.Wait()
	stop()
	if firstErr != nil {
		return 0, nil, 0, 0, firstErr
	}
	if err := ctx.Err(); err != nil {
		return 0, nil, 0, 0, err
	}
	took = time.Since(t0)
	if int(done.Load()) < keys {
		g.env.Progressf("scale: load stopped after %s (-scale-load-limit): %d of %d keys written", fmtDuration(took), done.Load(), keys)
	} else {
		g.env.Progressf("scale: loaded in %s", fmtDuration(took))
	}
	return peer, rels, int(done.Load()), took, nil
}

// prefixed is prefix+s, or "" when s is empty.
func prefixed(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}

// cmpOr returns a unless it is nil, else b.
func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// everyFewSeconds calls report every 5 s, from another goroutine, until
// the returned stop is called: the progress of a long step.
func everyFewSeconds(report func()) (stop func()) {
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				report()
			}
		}
	}()
	return func() { close(done) }
}

// ensureRelationOn runs EnsureRelation on first, and on failure tries
// again on the next member of all after it, and so on (any member
// forwards it to the leader, and it is idempotent): a member that dies or
// stops answering under load does not stop the step.
func ensureRelationOn(ctx context.Context, first *bkMember, all []*bkMember, req *adminpb.EnsureRelationRequest) (int64, error) {
	at := max(0, slices.Index(all, first))
	var lastErr error
	for try := range 20 {
		m := first
		if try > 0 && len(all) > 0 {
			m = all[(at+try)%len(all)]
		}
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		resp, err := m.admin.EnsureRelation(actx, req)
		cancel()
		if err == nil {
			return resp.GetRelationId(), nil
		}
		lastErr = fmt.Errorf("on %s: %w", m.pod, err)
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return 0, err
		}
	}
	return 0, fmt.Errorf("scale: ensure relation %s: %w", req.GetEndpoint(), lastErr)
}

// rolesWait is how long roles asks the members again while none says it
// leads (an election, or a leader too busy to answer in time).
const rolesWait = 30 * time.Second

// roles finds the leader, the voting followers and the non-voters.
func (g *scaleGroup) roles(ctx context.Context) (leader *bkMember, voters, nonvoters []*bkMember, err error) {
	byID := map[string]*bkMember{}
	var lr *adminpb.StatusResponse
	deadline := time.Now().Add(rolesWait)
	for {
		sts := g.t.statusAll(ctx, true)
		clear(byID)
		for i, s := range sts {
			if s.err != nil {
				continue
			}
			byID[s.resp.GetSelf()] = g.t.members[i]
			if s.isLeader() {
				leader, lr = g.t.members[i], s.resp
			}
		}
		if leader != nil {
			break
		}
		why := noLeaderWhy(sts)
		if time.Now().After(deadline) {
			return nil, nil, nil, fmt.Errorf("scale: no leader for %s: %s", rolesWait, why)
		}
		g.env.Progressf("scale: no leader yet: %s", why)
		if err := sleepCtx(ctx, time.Second); err != nil {
			return nil, nil, nil, err
		}
	}
	for _, m := range lr.GetMembers() {
		x := byID[m.GetId()]
		if x == nil || x == leader {
			continue
		}
		if m.GetSuffrage() == "Voter" {
			voters = append(voters, x)
		} else {
			nonvoters = append(nonvoters, x)
		}
	}
	return leader, voters, nonvoters, nil
}

// noLeaderWhy sums up what the members said when none said it leads: how
// many answered, the leaders and terms they named, the first error.
func noLeaderWhy(sts []bkStatus) string {
	named := map[string]int{}
	failed := 0
	var first error
	for _, s := range sts {
		if s.err != nil {
			failed++
			if first == nil {
				first = s.err
			}
			continue
		}
		named[fmt.Sprintf("%q in term %d", s.resp.GetLeader(), s.resp.GetTerm())]++
	}
	parts := make([]string, 0, len(named))
	for k, v := range named {
		parts = append(parts, fmt.Sprintf("%d name %s", v, k))
	}
	slices.Sort(parts)
	why := fmt.Sprintf("%d of %d answered (%s)", len(sts)-failed, len(sts), strings.Join(parts, ", "))
	if first != nil {
		why += fmt.Sprintf("; %d did not, first: %v", failed, first)
	}
	return why
}

// idle measures the CPU of the leader, up to 3 voting followers and up to
// 3 non-voters over window.
func (g *scaleGroup) idle(ctx context.Context, window time.Duration) (Row, error) {
	leader, voters, nonvoters, err := g.roles(ctx)
	if err != nil {
		return Row{}, err
	}
	nv, vf := len(nonvoters), len(voters)
	voters, nonvoters = voters[:min(3, len(voters))], nonvoters[:min(3, len(nonvoters))]
	all := append(append([]*bkMember{leader}, voters...), nonvoters...)
	g.env.Progressf("scale: measuring idle CPU for %s", window)
	// What would make the window not idle: hooks that start in it (the
	// tails are read up to now first) and a change of leader.
	if _, err := g.hooksStarted(); err != nil {
		return Row{}, err
	}
	term := g.leaderTerm(ctx, leader)
	profiled := g.profile(ctx, window, "idle", leader, voters, nonvoters)
	before := make([]procSample, len(all))
	for i, m := range all {
		before[i] = readProc(m.proc.Pid())
	}
	if err := sleepCtx(ctx, window); err != nil {
		return Row{}, err
	}
	pct := make([]string, len(all))
	var leaderPct float64
	for i, m := range all {
		after := readProc(m.proc.Pid())
		p := 100 * (after.cpu - before[i].cpu).Seconds() / after.at.Sub(before[i].at).Seconds()
		if i == 0 {
			leaderPct = p
		}
		pct[i] = fmt.Sprintf("%s %.2f%%", m.pod, p)
	}
	if err := profiled(); err != nil {
		return Row{}, err
	}
	hooks, err := g.hooksStarted()
	if err != nil {
		return Row{}, err
	}
	termAfter := g.leaderTerm(ctx, leader)
	quiet := fmt.Sprintf("%d hooks started in the window, the leader's term %d at its start and %d at its end", hooks, term, termAfter)
	wasIdle := hooks == 0 && term == termAfter && term != 0
	list := func(from, to int) string {
		if from == to {
			return "none"
		}
		return strings.Join(pct[from:to], ", ")
	}
	value := fmt.Sprintf("leader %.2f%% of a core", leaderPct)
	if !wasIdle {
		value += "; NOT IDLE: " + quiet
	}
	g.env.Progressf("scale: idle CPU: %s", strings.Join(pct, ", "))
	return Row{What: fmt.Sprintf("scale: idle CPU, leader with %d followers (%d voters in all)", len(g.t.members)-1, 1+vf), Target: g.t.Name(),
		Value: value,
		Note: fmt.Sprintf("utime+stime from /proc/<pid>/stat over %s with nothing written, after the load and its hooks: leader %s; voting followers (%d in all): %s; non-voters (%d in all): %s; %s",
			window, pct[0], vf, list(1, 1+len(voters)), nv, list(1+len(voters), len(all)), quiet)}, nil
}

// hooksStarted reads every member's log up to now and returns how many
// hooks started since the last read.
func (g *scaleGroup) hooksStarted() (int, error) {
	n := 0
	for _, l := range g.tails {
		hs, err := l.next()
		if err != nil {
			return 0, err
		}
		n += len(hs)
	}
	return n, nil
}

// term returns the raft term of the group's leader (each election takes a
// new term), or 0 if no leader answers.
func (g *scaleGroup) term(ctx context.Context) uint64 {
	leader, err := g.t.findLeader(ctx)
	if err != nil {
		return 0
	}
	return g.leaderTerm(ctx, leader)
}

// termOf shows a term from term: "?" for 0 (no leader answered).
func termOf(term uint64) string {
	if term == 0 {
		return "?"
	}
	return strconv.FormatUint(term, 10)
}

// leaderTerm returns the raft term m reports if it still leads, else 0.
func (g *scaleGroup) leaderTerm(ctx context.Context, m *bkMember) uint64 {
	sctx, cancel := context.WithTimeout(ctx, g.t.attemptTimeout)
	defer cancel()
	resp, err := m.admin.Status(sctx, &adminpb.StatusRequest{SkipProbe: true})
	if err != nil || resp.GetLeader() != resp.GetSelf() {
		return 0
	}
	return resp.GetTerm()
}

// putLatency measures 1 writer × 256 B puts to the application bag of
// relation rel, through the raft leader's admin socket.
func (g *scaleGroup) putLatency(ctx context.Context, rel int64, name string, n, keys int) (Row, error) {
	leader, err := g.t.findLeader(ctx)
	if err != nil {
		return Row{}, err
	}
	what := fmt.Sprintf("scale: put latency, 1 writer, 256 B values, %d units, %d keys loaded", n, keys)
	value := strings.Repeat("p", 256)
	put := func(i int) (time.Duration, error) {
		req := &adminpb.SetBagRequest{RelationId: rel, Owner: scaleApp, Set: map[string]string{fmt.Sprintf("lat%08d", i): value}}
		if i >= bkKeepKeys {
			req.Delete = []string{fmt.Sprintf("lat%08d", i-bkKeepKeys)}
		}
		pctx, cancel := context.WithTimeout(ctx, g.env.Config.OpTimeout)
		defer cancel()
		t0 := time.Now()
		_, err := leader.admin.SetBag(pctx, req)
		return time.Since(t0), err
	}
	i := 0
	g.env.Progressf("%s: warming up for 1s, measuring for %s", what, *scalePutDuration)
	for end := time.Now().Add(time.Second); time.Now().Before(end); i++ {
		if _, err := put(i); err != nil {
			return Row{}, fmt.Errorf("%s: %w", what, err)
		}
	}
	var lat []time.Duration
	before := make([]procSample, len(g.t.members))
	for j, m := range g.t.members {
		before[j] = readProc(m.proc.Pid())
	}
	profiled := g.profileRoles(ctx, *scalePutDuration, "put")
	t0 := time.Now()
	for end := t0.Add(*scalePutDuration); time.Now().Before(end); i++ {
		d, err := put(i)
		if err != nil {
			return Row{}, fmt.Errorf("%s: %w", what, err)
		}
		lat = append(lat, d)
	}
	wall := time.Since(t0)
	var leaderCPU time.Duration
	var others []int64
	for j, m := range g.t.members {
		d := readProc(m.proc.Pid()).cpu - before[j].cpu
		if m == leader {
			leaderCPU = d
		} else {
			others = append(others, int64(d))
		}
	}
	if err := profiled(); err != nil {
		return Row{}, fmt.Errorf("%s: %w", what, err)
	}
	s := summarize(lat)
	cpu := spreadOf(others)
	perCommit := func(d int64) string { return fmtDuration(time.Duration(d) / time.Duration(max(1, len(lat)))) }
	note := fmt.Sprintf("%d puts in %s, max %s: SetBag of one new 256 B key (deleting the key from %d puts earlier) in the application bag of a relation to a remote application (no hooks run), to the raft leader's admin socket",
		s.N, fmtDuration(wall), fmtDuration(s.Max), bkKeepKeys)
	note += fmt.Sprintf("; CPU per put: leader %s, other members min %s, median %s, max %s", perCommit(int64(leaderCPU)), perCommit(cpu.min), perCommit(cpu.median), perCommit(cpu.max))
	if base := latencyBaseline(latencyCurve, name, 1, 256); base > 0 {
		note += fmt.Sprintf("; the 3-unit cluster's p50 in this run was %s: %.2f× (target ≤ 2×)", fmtDuration(base), float64(s.P50)/float64(base))
	} else {
		note += "; no 3-unit figure in this run (-experiments latency with -writers 1 -sizes 256 gives one)"
	}
	g.env.Progressf("%s: p50 %s, p99 %s", what, fmtDuration(s.P50), fmtDuration(s.P99))
	return Row{What: what, Target: name, P50: fmtDuration(s.P50), P99: fmtDuration(s.P99),
		Value: fmtRate(float64(s.N)/wall.Seconds(), "commits"), Note: note}, nil
}

// profileRoles is profile of the roles as the members name them now.
func (g *scaleGroup) profileRoles(ctx context.Context, window time.Duration, what string) (wait func() error) {
	if *scaleProfile == "" {
		return func() error { return nil }
	}
	leader, voters, nonvoters, err := g.roles(ctx)
	if err != nil {
		return func() error { return err }
	}
	return g.profile(ctx, window, what, leader, voters, nonvoters)
}

// profile starts, when -scale-profile names a directory, CPU profiles of
// window on the leader, the first voting follower and the first
// non-voter, and returns a wait for them that writes
// <what>-<role>-<pod>.pprof there (go tool pprof reads them with the
// bagkeeper binary).
func (g *scaleGroup) profile(ctx context.Context, window time.Duration, what string, leader *bkMember, voters, nonvoters []*bkMember) (wait func() error) {
	return g.fetchProfiles(ctx, window, fmt.Sprintf("profile?seconds=%d", max(1, int(window.Round(time.Second)/time.Second))), "CPU profile", what, leader, voters, nonvoters)
}

// heapProfiles writes, when -scale-profile names a directory, the heap
// profiles (after a GC) of the roles as the members name them now, as
// heap-<what>-<role>-<pod>.pprof.
func (g *scaleGroup) heapProfiles(ctx context.Context, what string) error {
	if *scaleProfile == "" {
		return nil
	}
	leader, voters, nonvoters, err := g.roles(ctx)
	if err != nil {
		return err
	}
	return g.fetchProfiles(ctx, 0, "heap?gc=1", "heap profile", "heap-"+what, leader, voters, nonvoters)()
}

// fetchProfiles gets /debug/pprof/<query> of the leader, the first voting
// follower and the first non-voter, and returns a wait for them that
// writes <what>-<role>-<pod>.pprof in the -scale-profile directory.
func (g *scaleGroup) fetchProfiles(ctx context.Context, window time.Duration, query, kind, what string, leader *bkMember, voters, nonvoters []*bkMember) (wait func() error) {
	if *scaleProfile == "" {
		return func() error { return nil }
	}
	type target struct {
		role string
		m    *bkMember
	}
	targets := []target{{"leader", leader}}
	if len(voters) > 0 {
		targets = append(targets, target{"voter", voters[0]})
	}
	if len(nonvoters) > 0 {
		targets = append(targets, target{"nonvoter", nonvoters[0]})
	}
	if err := os.MkdirAll(*scaleProfile, 0o755); err != nil {
		return func() error { return err }
	}
	client := &http.Client{Timeout: window + 30*time.Second}
	errs := make(chan error, len(targets))
	for _, tg := range targets {
		go func() {
			url := fmt.Sprintf("http://%s/debug/pprof/%s", tg.m.httpAddr, query)
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				errs <- err
				return
			}
			resp, err := client.Do(req)
			if err != nil {
				errs <- fmt.Errorf("%s of %s: %w", kind, tg.m.pod, err)
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				errs <- fmt.Errorf("%s of %s: %s (is --pprof in -bagkeeper-args?)", kind, tg.m.pod, resp.Status)
				return
			}
			path := filepath.Join(*scaleProfile, fmt.Sprintf("%s-%s-%s.pprof", what, tg.role, tg.m.pod))
			f, err := os.Create(path)
			if err != nil {
				errs <- err
				return
			}
			_, err = io.Copy(f, resp.Body)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err == nil {
				g.env.Progressf("scale: %s of the %s (%s), %s: %s", kind, tg.role, tg.m.pod, what, path)
			}
			errs <- err
		}()
	}
	return func() error {
		var first error
		for range targets {
			if err := <-errs; err != nil && first == nil {
				first = err
			}
		}
		return first
	}
}

// latencyBaseline is the p50 of the latency experiment's point for target,
// writers and size, or 0.
func latencyBaseline(curve []latencyPoint, target string, writers, size int) time.Duration {
	for _, p := range curve {
		if p.Target == target && p.Writers == writers && p.Size == size {
			return p.P50
		}
	}
	return 0
}

// fanOut writes the peer relation's application bag writes times through
// the raft leader and times every other unit's relation-changed.
func (g *scaleGroup) fanOut(ctx context.Context, peerRel int64, writes int, name string, n int) (Row, error) {
	leader, err := g.t.findLeader(ctx)
	if err != nil {
		return Row{}, err
	}
	st, err := leader.admin.Status(ctx, &adminpb.StatusRequest{SkipProbe: true})
	if err != nil {
		return Row{}, err
	}
	holder := podOfUnit(st.GetLeaderUnit())
	hook := scalePeerEndpoint + "-relation-changed"
	g.env.Progressf("scale: timing %d application-bag writes to every unit's %s (the leader unit %s is not told)", writes, hook, st.GetLeaderUnit())
	var all, worst, acks []time.Duration
	// partial is the row for the writes timed before err stopped the
	// measurement.
	partial := func(err error) (Row, error) {
		if len(worst) == 0 {
			return Row{}, err
		}
		s := summarize(all)
		return Row{What: fmt.Sprintf("scale: leader's peer application-bag write → relation-changed starts on the other %d units", n-1), Target: name,
			P50: fmtDuration(s.P50), P99: fmtDuration(s.P99),
			Value: fmt.Sprintf("INTERRUPTED after %d of %d writes; all units: median %s, max %s", len(worst), writes, fmtDuration(percentile(worst, 50)), fmtDuration(percentile(worst, 100))),
			Note:  fmt.Sprintf("from sending the SetBag to the hook's start in each unit's log; per write, time until the last unit: %s; stopped by: %s", fmtDurations(worst), shortErr(err))}, err
	}
	for w := 1; w <= writes; w++ {
		for _, l := range g.tails {
			l.skip()
		}
		var waiting []int
		for i, m := range g.t.members {
			if m.pod != holder {
				waiting = append(waiting, i)
			}
		}
		// Log lines have millisecond times: start on a fresh millisecond.
		time.Sleep(time.Until(time.Now().Truncate(time.Millisecond).Add(time.Millisecond)))
		t0 := time.Now()
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := leader.admin.SetBag(wctx, &adminpb.SetBagRequest{RelationId: peerRel, Owner: scaleApp, Set: map[string]string{"fan": strconv.Itoa(w)}})
		cancel()
		if err != nil {
			return partial(fmt.Errorf("scale: fan-out write %d: %w", w, err))
		}
		acks = append(acks, time.Since(t0))
		var slowest time.Duration
		deadline := time.Now().Add(5 * time.Minute)
		for len(waiting) > 0 {
			var still []int
			for _, i := range waiting {
				hs, err := g.tails[i].next()
				if err != nil {
					return partial(err)
				}
				found := false
				for _, h := range hs {
					if h.hook == hook && h.remoteUnit == "" && !h.at.Before(t0.Truncate(time.Millisecond)) {
						d := h.at.Sub(t0)
						all = append(all, d)
						slowest = max(slowest, d)
						found = true
						break
					}
				}
				if !found {
					still = append(still, i)
				}
			}
			waiting = still
			if len(waiting) == 0 {
				break
			}
			if time.Now().After(deadline) {
				return partial(fmt.Errorf("scale: fan-out write %d: %d units ran no %s within 5 minutes (e.g. %s)", w, len(waiting), hook, g.t.members[waiting[0]].pod))
			}
			if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
				return partial(err)
			}
		}
		worst = append(worst, slowest)
		g.env.Progressf("scale: write %d: every unit's %s started within %s", w, hook, fmtDuration(slowest))
		if _, _, err := g.settle(ctx, time.Second, 5*time.Minute); err != nil {
			return partial(err)
		}
	}
	s := summarize(all)
	return Row{What: fmt.Sprintf("scale: leader's peer application-bag write → relation-changed starts on the other %d units", n-1), Target: name,
		P50: fmtDuration(s.P50), P99: fmtDuration(s.P99),
		Value: fmt.Sprintf("all units: median %s, max %s", fmtDuration(percentile(worst, 50)), fmtDuration(percentile(worst, 100))),
		Note: fmt.Sprintf("%d writes × %d units = %d samples (max %s), each from sending the SetBag to the raft leader to the hook's start in the unit's log (ms resolution); the write's acknowledgement came after a median %s; per write, time until the last unit: %s",
			writes, n-1, s.N, fmtDuration(s.Max), fmtDuration(percentile(acks, 50)), fmtDurations(worst))}, nil
}

// wipe kills a follower (a non-voter if there is one, never the leader
// unit's pod) with SIGKILL, starts a pod of the same name on an empty disk
// at a new address and times it to ready with every key the leader holds.
func (g *scaleGroup) wipe(ctx context.Context, name string, wantKeys int) (Row, error) {
	leader, voters, nonvoters, err := g.roles(ctx)
	if err != nil {
		return Row{}, err
	}
	st, err := leader.admin.Status(ctx, &adminpb.StatusRequest{SkipProbe: true})
	if err != nil {
		return Row{}, err
	}
	holder := podOfUnit(st.GetLeaderUnit())
	var victim *bkMember
	kind := "non-voter"
	for _, m := range append(slices.Clone(nonvoters), voters...) {
		if m.pod != holder {
			victim = m
			break
		}
	}
	if victim == nil {
		return Row{}, errors.New("scale: no follower to wipe")
	}
	if !slices.Contains(nonvoters, victim) {
		kind = "voter"
	}
	g.env.Progressf("scale: wiping %s (a %s)", victim.pod, kind)
	if err := victim.proc.Signal(syscall.SIGKILL); err != nil {
		return Row{}, err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = victim.proc.Wait(wctx)
	cancel()
	if err != nil {
		return Row{}, err
	}
	if err := os.RemoveAll(victim.dataDir); err != nil {
		return Row{}, err
	}
	victim.dataDir += "-wiped"
	if err := g.newSlotAddresses(victim); err != nil {
		return Row{}, err
	}
	addrs := g.t.peerAddrs()
	victim.peers = scalePeers(addrs, victim.index, scaleSeeds)
	t0 := time.Now()
	if err := g.t.startMember(victim); err != nil {
		return Row{}, err
	}
	last := ""
	deadline := t0.Add(10 * time.Minute)
	var readyAt time.Duration
	for {
		if time.Now().After(deadline) {
			return Row{}, fmt.Errorf("scale: wiped %s not ready with %d keys within 10 minutes: %s", victim.pod, wantKeys, last)
		}
		if victim.proc.Exited() {
			return Row{}, fmt.Errorf("scale: wiped %s exited: %v", victim.pod, victim.proc.ExitError())
		}
		if ok, why := g.t.readyz(ctx, victim); !ok {
			last = "not ready: " + why
		} else {
			if readyAt == 0 {
				readyAt = time.Since(t0)
			}
			bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			r, err := victim.admin.GetBags(bctx, &adminpb.GetBagsRequest{RelationId: -1, Stale: true})
			cancel()
			if err != nil {
				last = err.Error()
			} else if k, _ := bagTotals(r.GetBags()); k >= wantKeys {
				break
			} else {
				last = fmt.Sprintf("%d of %d keys", k, wantKeys)
			}
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return Row{}, err
		}
	}
	took := time.Since(t0)
	g.env.Progressf("scale: wiped %s ready in %s, with every key in %s", victim.pod, fmtDuration(readyAt), fmtDuration(took))
	if _, _, err := g.settle(ctx, 3*time.Second, 10*time.Minute); err != nil {
		return Row{}, err
	}
	return Row{What: fmt.Sprintf("scale: wiped pod ready with all bags (%d units, %d keys)", len(g.t.members), wantKeys), Target: name,
		Value: fmt.Sprintf("%s (/readyz 200 after %s)", fmtDuration(took), fmtDuration(readyAt)),
		Note: fmt.Sprintf("%s (a %s follower) got kill -9, its disk removed, then a pod of the same name on an empty disk at a new address; from the new process's start to /readyz 200 and its own state holding as many keys as the leader's (%d, counted in every bag)",
			victim.pod, kind, wantKeys)}, nil
}

// rolling stops pods one at a time, from the highest ordinal down as a
// StatefulSet rolling update does, starts each again with the same name,
// disk and address, and checks the application's units afterwards.
func (g *scaleGroup) rolling(ctx context.Context, count int, name string, n int) (Row, error) {
	unitsOf := func() ([]string, []string, error) {
		leader, err := g.t.findLeader(ctx)
		if err != nil {
			return nil, nil, err
		}
		st, err := leader.admin.Status(ctx, &adminpb.StatusRequest{SkipProbe: true})
		if err != nil {
			return nil, nil, err
		}
		live, removed := unitSet(st.GetUnits())
		return live, removed, nil
	}
	before, removedBefore, err := unitsOf()
	if err != nil {
		return Row{}, err
	}
	g.env.Progressf("scale: rolling replacement of %d pods", count)
	var per []time.Duration
	t0 := time.Now()
	// partial is the row for the pods replaced before err stopped the
	// replacement.
	partial := func(err error) (Row, error) {
		if len(per) == 0 {
			return Row{}, err
		}
		return Row{What: fmt.Sprintf("scale: rolling replacement of %d of %d pods", count, n), Target: name,
			Value: fmt.Sprintf("INTERRUPTED after %d pods in %s; per pod median %s, max %s", len(per), fmtDuration(time.Since(t0)), fmtDuration(percentile(per, 50)), fmtDuration(percentile(per, 100))),
			Note:  fmt.Sprintf("highest ordinal first, SIGTERM then the same pod started again, per pod from the SIGTERM to /readyz 200; stopped by: %s; units not compared", shortErr(err))}, err
	}
	for k := range count {
		m := g.t.members[len(g.t.members)-1-k]
		if err := m.proc.Signal(syscall.SIGTERM); err != nil {
			return partial(err)
		}
		start := time.Now()
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := m.proc.Wait(wctx)
		cancel()
		if err != nil {
			_ = m.proc.Kill()
			return partial(fmt.Errorf("scale: rolling: %s did not stop within a minute of SIGTERM", m.pod))
		}
		if err := g.t.startMember(m); err != nil {
			return partial(err)
		}
		last := ""
		for {
			if ok, why := g.t.readyz(ctx, m); ok {
				break
			} else {
				last = why
			}
			if m.proc.Exited() {
				return partial(fmt.Errorf("scale: rolling: %s exited: %v", m.pod, m.proc.ExitError()))
			}
			if time.Since(start) > 5*time.Minute {
				return partial(fmt.Errorf("scale: rolling: %s not ready within 5 minutes: %s", m.pod, last))
			}
			if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
				return partial(err)
			}
		}
		per = append(per, time.Since(start))
		if (k+1)%5 == 0 || k+1 == count {
			g.env.Progressf("scale: rolling: %d of %d pods replaced in %s", k+1, count, fmtDuration(time.Since(t0)))
		}
	}
	total := time.Since(t0)
	if _, _, err := g.settle(ctx, 3*time.Second, 10*time.Minute); err != nil {
		return Row{}, err
	}
	after, removedAfter, err := unitsOf()
	if err != nil {
		return Row{}, err
	}
	added, gone := diffSets(before, after)
	newlyRemoved, _ := diffSets(removedBefore, removedAfter)
	check := fmt.Sprintf("units before and after: the same %d (unit@pod), none removed", len(after))
	if len(added) > 0 || len(gone) > 0 || len(newlyRemoved) > 0 || len(after) != n {
		check = fmt.Sprintf("UNITS CHANGED: %d before, %d after (want %d); new %v, gone %v, removed %v", len(before), len(after), n, added, gone, newlyRemoved)
	}
	return Row{What: fmt.Sprintf("scale: rolling replacement of %d of %d pods", count, n), Target: name,
		Value: fmt.Sprintf("%s in all; per pod median %s, max %s", fmtDuration(total), fmtDuration(percentile(per, 50)), fmtDuration(percentile(per, 100))),
		Note: fmt.Sprintf("highest ordinal first: SIGTERM, wait for the exit, the same pod started again (same disk and address, as a StatefulSet pod with its volume and a stable DNS name), wait for /readyz 200; per pod from the SIGTERM to ready; %s",
			check)}, nil
}
