package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

// The bagkeeper target's own measurements (ExtraMeasurer):
//
//   - idle memory and CPU of one leader and one follower sidecar;
//   - put latency through the other route than the latency experiment
//     (forwarded by a follower, or straight to the leader);
//   - "wiped pod": how long a member whose disk was lost takes, after its
//     restart, to be ready with all the relation data, for growing amounts
//     of data.

// Flags of the bagkeeper target's extra measurements.
var (
	bagkeeperWipeMiB    = intList{1, 10, 50}
	bagkeeperIdleSettle = flag.Duration("bagkeeper-idle-settle", 10*time.Second, "how long the bagkeeper cluster idles before its idle RSS and CPU are measured")
	bagkeeperIdleWindow = flag.Duration("bagkeeper-idle-window", 15*time.Second, "the window over which idle CPU use is measured")
	bagkeeperFillBagMiB = flag.Int("bagkeeper-fill-bag-mib", 4, "MiB of fill data per bag in the bagkeeper wiped-pod measurement (bagkeeper's limit is 16 MiB per bag)")
)

func init() {
	flag.Var(&bagkeeperWipeMiB, "bagkeeper-wipe-mib", "comma-separated amounts of relation data in MiB (cumulative, ascending) for the bagkeeper wiped-pod measurement; empty skips it")
}

// Fill data for the wiped-pod measurement.
const (
	// bkFillEntry is the size of one fill key plus its value: one
	// SetBag, hence one raft log entry, per key.
	bkFillEntry = 4096
	// bkFillKeyLen is the length of a fill key ("fill0000123").
	bkFillKeyLen = 11
	// bkFillWorkers is the number of concurrent fill puts.
	bkFillWorkers = 16
	// bkUserHZ is the unit of the CPU times in /proc/<pid>/stat (USER_HZ,
	// 100 on every Linux architecture Go supports).
	bkUserHZ = 100
)

// bkFill is how much fill data the cluster holds.
type bkFill struct {
	relations []int64 // relation ids of the fill bags, in order
	keys      int     // fill keys written
}

// MeasureExtra implements ExtraMeasurer. If other experiments ran before,
// it measures idle use and the other write route on their cluster, then
// replaces it by a fresh cluster; on the fresh cluster it measures idle
// use and then runs the wiped-pod measurements, so that their raft log
// holds little but the fill data.
func (b *bagkeeperTarget) MeasureExtra(ctx context.Context, env *Env) ([]Row, error) {
	var rows []Row
	add := func(r []Row, err error) error {
		for _, row := range r {
			if row.What != "" {
				rows = append(rows, row)
			}
		}
		return err
	}
	otherRoute := func() ([]Row, error) {
		row, err := b.measureOtherRoute(ctx, env)
		return []Row{row}, err
	}
	loaded := slices.ContainsFunc(env.Config.Experiments, func(k string) bool { return k != "extra" })
	if loaded {
		if err := add(b.measureIdle(ctx, env, "after the other experiments", *bagkeeperIdleSettle, *bagkeeperIdleWindow)); err != nil {
			return rows, err
		}
		if err := add(otherRoute()); err != nil {
			return rows, err
		}
		env.Progressf("starting a fresh cluster for the idle baseline and the wiped-pod measurements")
		if err := b.startFresh(ctx, filepath.Join(env.Dir, "fresh")); err != nil {
			return rows, fmt.Errorf("fresh cluster: %w", err)
		}
	}
	if err := add(b.measureIdle(ctx, env, "fresh cluster", *bagkeeperIdleSettle, *bagkeeperIdleWindow)); err != nil {
		return rows, err
	}
	if !loaded {
		if err := add(otherRoute()); err != nil {
			return rows, err
		}
	}
	if *bagkeeperHookRuns > 0 {
		if err := add(b.measureHooks(ctx, env)); err != nil {
			return rows, err
		}
	}
	sizes := slices.Clone([]int(bagkeeperWipeMiB))
	slices.Sort(sizes)
	for _, mib := range sizes {
		if mib <= 0 {
			continue
		}
		row, err := b.measureWipe(ctx, env, mib)
		if err := add([]Row{row}, err); err != nil {
			return rows, err
		}
	}
	return rows, nil
}

// measureOtherRoute measures put latency of 1 writer with 256-byte values
// through the route the latency experiment did not take: via a follower
// (which forwards to the leader) when the writers went to the leader, and
// the other way round.
func (b *bagkeeperTarget) measureOtherRoute(ctx context.Context, env *Env) (Row, error) {
	via, what := "follower", "put latency, 1 writer, 256 B values, via a follower (forwarded to the leader)"
	if b.via == "follower" {
		via, what = "leader", "put latency, 1 writer, 256 B values, straight to the leader"
	}
	return measureLoadWith(ctx, env, what, "via-"+via, 1, 256, func(context.Context) (Writer, error) {
		return b.newWriter(via)
	})
}

// procSample is one reading of a process's memory and CPU time.
type procSample struct {
	at                    time.Time
	cpu                   time.Duration // user + system CPU time so far
	rss, rssAnon, rssFile int64         // bytes
	threads               int
	statErr, statusErr    error
	readingsOK            bool
}

// readProc reads /proc/<pid>/stat and /proc/<pid>/status.
func readProc(pid int) procSample {
	s := procSample{at: time.Now()}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err == nil {
		s.cpu, err = parseProcStatCPU(string(stat))
	}
	s.statErr = err
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err == nil {
		mem := parseProcStatus(string(st))
		s.rss, s.rssAnon, s.rssFile = mem["VmRSS"], mem["RssAnon"], mem["RssFile"]
		s.threads = int(mem["Threads"])
	}
	s.statusErr = err
	s.readingsOK = s.statErr == nil && s.statusErr == nil
	return s
}

// parseProcStatCPU returns utime + stime from the text of /proc/<pid>/stat.
func parseProcStatCPU(stat string) (time.Duration, error) {
	// The command name (field 2) is in parentheses and may contain
	// spaces; the fields after it start with the state (field 3).
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("/proc/<pid>/stat: no command name")
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/<pid>/stat: %d fields after the command name", len(f))
	}
	var ticks int64
	for _, s := range f[11:13] { // utime (field 14), stime (field 15)
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/<pid>/stat: %w", err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / bkUserHZ, nil
}

// parseProcStatus returns the numeric fields of /proc/<pid>/status, sizes
// ("1234 kB") in bytes.
func parseProcStatus(text string) map[string]int64 {
	out := map[string]int64{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue
		}
		if len(f) > 1 && f[1] == "kB" {
			n *= 1024
		}
		out[k] = n
	}
	return out
}

// measureIdle lets the cluster idle for settle, then measures the RSS and
// CPU use of the leader's and a follower's sidecar over window. label
// says what the cluster has been through.
func (b *bagkeeperTarget) measureIdle(ctx context.Context, env *Env, label string, settle, window time.Duration) ([]Row, error) {
	leader, err := b.findLeader(ctx)
	if err != nil {
		return nil, fmt.Errorf("idle: %w", err)
	}
	follower, err := b.findFollower(ctx)
	if err != nil {
		return nil, fmt.Errorf("idle: %w", err)
	}
	state, err := b.stateSummary(ctx, leader)
	if err != nil {
		state = "state unknown: " + shortErr(err)
	}
	env.Progressf("idle (%s): letting the cluster idle for %s, then measuring for %s", label, settle, window)
	if err := sleepCtx(ctx, settle); err != nil {
		return nil, fmt.Errorf("idle: %w", err)
	}
	roles := []struct {
		role string
		m    *bkMember
	}{{"leader", leader}, {"follower", follower}}
	before := make([]procSample, len(roles))
	for i, r := range roles {
		before[i] = readProc(r.m.proc.Pid())
	}
	if err := sleepCtx(ctx, window); err != nil {
		return nil, fmt.Errorf("idle: %w", err)
	}
	var rows []Row
	for i, r := range roles {
		after := readProc(r.m.proc.Pid())
		row := Row{What: "idle sidecar: RSS, CPU (" + r.role + ", " + label + ")", Target: b.Name()}
		if r.m.proc.Exited() || !before[i].readingsOK || !after.readingsOK {
			row.Note = fmt.Sprintf("error: cannot read /proc of %s: %v", r.m.pod, errors.Join(after.statErr, after.statusErr, r.m.proc.ExitError()))
			rows = append(rows, row)
			continue
		}
		wall := after.at.Sub(before[i].at)
		cpu := after.cpu - before[i].cpu
		pct := 100 * cpu.Seconds() / wall.Seconds()
		row.Value = fmt.Sprintf("RSS %s, CPU %.2f%% of a core", fmtBytes(after.rss), pct)
		row.Note = fmt.Sprintf("VmRSS after %s idle + %s window (RssAnon %s, RssFile %s, %d threads); CPU %s in %s; %s; target: RSS ≤ 25 MB",
			fmtDuration(settle), fmtDuration(wall), fmtBytes(after.rssAnon), fmtBytes(after.rssFile), after.threads,
			fmtDuration(cpu), fmtDuration(wall), state)
		env.Progressf("idle (%s) %s: %s", label, r.role, row.Value)
		rows = append(rows, row)
	}
	return rows, nil
}

// stateSummary describes how much state the cluster holds, for notes.
func (b *bagkeeperTarget) stateSummary(ctx context.Context, m *bkMember) (string, error) {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := m.admin.Status(sctx, &adminpb.StatusRequest{})
	if err != nil {
		return "", err
	}
	d, err := b.digestOf(sctx, m)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("state: raft index %d, %d bag%s with %s of relation data", st.GetCommitIndex(), d.bags, plural(d.bags), fmtBytes(d.bytes)), nil
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// bagsDigest summarises all the relation data a member holds.
type bagsDigest struct {
	sum   [32]byte
	bags  int
	keys  int
	bytes int64 // keys plus values
}

// digestBags hashes bags in a canonical order (relation, owner, key).
func digestBags(bags []*adminpb.Bag) bagsDigest {
	sorted := slices.Clone(bags)
	slices.SortFunc(sorted, func(a, b *adminpb.Bag) int {
		if a.GetRelationId() != b.GetRelationId() {
			if a.GetRelationId() < b.GetRelationId() {
				return -1
			}
			return 1
		}
		return strings.Compare(a.GetOwner(), b.GetOwner())
	})
	h := sha256.New()
	var d bagsDigest
	var n [8]byte
	writeStr := func(s string) {
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	for _, bag := range sorted {
		binary.BigEndian.PutUint64(n[:], uint64(bag.GetRelationId()))
		h.Write(n[:])
		writeStr(bag.GetOwner())
		keys := make([]string, 0, len(bag.GetData()))
		for k := range bag.GetData() {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		binary.BigEndian.PutUint64(n[:], uint64(len(keys)))
		h.Write(n[:])
		for _, k := range keys {
			v := bag.GetData()[k]
			writeStr(k)
			writeStr(v)
			d.bytes += int64(len(k) + len(v))
		}
		d.keys += len(keys)
		d.bags++
	}
	copy(d.sum[:], h.Sum(nil))
	return d
}

// digestOf reads all bags from m's own state (GetBags on its admin
// socket, over a new connection so that no reconnect back-off delays it)
// and digests them.
func (b *bagkeeperTarget) digestOf(ctx context.Context, m *bkMember) (bagsDigest, error) {
	conn, err := dialAdmin(m.socket)
	if err != nil {
		return bagsDigest{}, err
	}
	defer conn.Close()
	resp, err := adminpb.NewAdminClient(conn).GetBags(ctx, &adminpb.GetBagsRequest{RelationId: -1})
	if err != nil {
		return bagsDigest{}, fmt.Errorf("GetBags on %s: %w", m.pod, err)
	}
	return digestBags(resp.GetBags()), nil
}

// fillTo writes fill keys (bkFillEntry bytes each, one SetBag per key,
// bkFillWorkers at a time, to the leader) until the fill data reach
// target bytes.
func (b *bagkeeperTarget) fillTo(ctx context.Context, env *Env, target int64) error {
	want := int((target + bkFillEntry - 1) / bkFillEntry)
	if want <= b.fill.keys {
		return nil
	}
	// Each fill bag is the application bag of a peer relation of its own.
	perBag := max(*bagkeeperFillBagMiB<<20/bkFillEntry, 1)
	for len(b.fill.relations)*perBag < want {
		id, err := b.ensureRelation(ctx, fmt.Sprintf("fill%d", len(b.fill.relations)))
		if err != nil {
			return err
		}
		b.fill.relations = append(b.fill.relations, id)
	}
	w, err := b.newWriter("leader")
	if err != nil {
		return err
	}
	defer w.Close()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	from := b.fill.keys
	var next, done atomic.Int64
	next.Store(int64(from))
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	t0 := time.Now()
	env.Progressf("fill: writing %s of relation data (%d keys of %s, one SetBag each, %d keys per bag) to reach %s",
		fmtBytes(int64(want-from)*bkFillEntry), want-from, fmtBytes(bkFillEntry), perBag, fmtBytes(int64(want)*bkFillEntry))
	for worker := range bkFillWorkers {
		wg.Go(func() {
			rng := rand.NewChaCha8(seedFor(fmt.Sprintf("fill/%d", from), worker))
			raw := make([]byte, bkFillEntry-bkFillKeyLen)
			for {
				k := int(next.Add(1) - 1)
				if k >= want || ctx.Err() != nil {
					return
				}
				_, _ = rng.Read(raw)
				req := &adminpb.SetBagRequest{
					RelationId: b.fill.relations[k/perBag],
					Owner:      bkApp,
					Set:        map[string]string{fmt.Sprintf("fill%07d", k): printable(raw)},
				}
				pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
				err := w.setBag(pctx, req)
				pcancel()
				if err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("fill key %d: %w", k, err); cancel() })
					return
				}
				done.Add(1)
			}
		})
	}
	stop := make(chan struct{})
	var pg sync.WaitGroup
	pg.Go(func() {
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				n := done.Load()
				env.Progressf("fill: %s of %s written (%.0f puts/s)",
					fmtBytes(int64(from+int(n))*bkFillEntry), fmtBytes(int64(want)*bkFillEntry), float64(n)/time.Since(t0).Seconds())
			}
		}
	})
	wg.Wait()
	close(stop)
	pg.Wait()
	b.fill.keys = from + int(done.Load())
	if firstErr != nil {
		return firstErr
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("fill: %w", err)
	}
	took := time.Since(t0)
	env.Progressf("fill: %d puts in %s (%.0f puts/s, %s/s)", want-from, fmtDuration(took),
		float64(want-from)/took.Seconds(), fmtBytes(int64(float64(int64(want-from)*bkFillEntry)/took.Seconds())))
	return nil
}

// snapshotIndex returns the index of the newest raft snapshot in a
// member's data directory, or 0 if there is none. Snapshot directories
// are named <term>-<index>-<timestamp>.
func snapshotIndex(dataDir string) uint64 {
	entries, err := os.ReadDir(filepath.Join(dataDir, "raft", "snapshots"))
	if err != nil {
		return 0
	}
	var best uint64
	for _, e := range entries {
		parts := strings.Split(e.Name(), "-")
		if !e.IsDir() || len(parts) != 3 || strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		if n, err := strconv.ParseUint(parts[1], 10, 64); err == nil && n > best {
			best = n
		}
	}
	return best
}

// logContains reports whether the file at path contains s.
func logContains(path, s string) bool {
	b, err := os.ReadFile(path)
	return err == nil && bytes.Contains(b, []byte(s))
}

// measureWipe fills the cluster up to mib MiB of fill data, then kills a
// follower with SIGKILL, deletes its data directory and restarts it as
// the same pod on a new address, and measures the time from the restart
// until its /readyz answers 200 and its own GetBags returns exactly the
// leader's data. It then waits until the cluster has replaced the old
// incarnation by the new one (3 voters again).
func (b *bagkeeperTarget) measureWipe(ctx context.Context, env *Env, mib int) (Row, error) {
	what := fmt.Sprintf("wiped pod ready with all bags, %d MiB of relation data", mib)
	row := Row{What: what, Target: b.Name()}
	fail := func(err error) (Row, error) {
		row.Note = "error: " + shortErr(err)
		return row, fmt.Errorf("%s: %w", what, err)
	}
	if err := b.fillTo(ctx, env, int64(mib)<<20); err != nil {
		return fail(err)
	}
	hctx, cancel := context.WithTimeout(ctx, b.startTimeout)
	err := b.waitHealthy(hctx)
	cancel()
	if err != nil {
		return fail(err)
	}
	leader, err := b.findLeader(ctx)
	if err != nil {
		return fail(err)
	}
	want, err := b.digestOf(ctx, leader)
	if err != nil {
		return fail(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	st, err := leader.admin.Status(sctx, &adminpb.StatusRequest{})
	cancel()
	if err != nil {
		return fail(fmt.Errorf("status of the leader: %w", err))
	}
	leaderIndex, leaderSnap := st.GetCommitIndex(), snapshotIndex(leader.dataDir)
	victim, err := b.findFollower(ctx)
	if err != nil {
		return fail(err)
	}

	env.Progressf("wipe: kill -9 %s, delete its data directory, restart it on a new address (%s of relation data, raft index %d)", victim.pod, fmtBytes(want.bytes), leaderIndex)
	if err := victim.proc.Kill(); err != nil {
		return fail(err)
	}
	if err := os.RemoveAll(victim.dataDir); err != nil {
		return fail(fmt.Errorf("wipe %s: %w", victim.dataDir, err))
	}
	b.wipes++
	victim.logPath = filepath.Join(b.dir, fmt.Sprintf("m%d-wiped%d.log", victim.index, b.wipes))
	if err := b.assignAddresses(victim); err != nil {
		return fail(err)
	}
	victim.peers = b.peerAddrs()
	t0 := time.Now()
	if err := b.startMember(victim); err != nil {
		return fail(err)
	}
	timeout := b.startTimeout + time.Duration(mib)*time.Second
	readyAt, doneAt, got, err := b.waitCaughtUp(ctx, env, victim, want, t0, timeout)
	if err != nil {
		return fail(err)
	}
	took := doneAt.Sub(t0)
	how := fmt.Sprintf("by log replay (the leader had no snapshot; its log held entries up to %d)", leaderIndex)
	if leaderSnap > 0 {
		how = fmt.Sprintf("by log replay although the leader had a snapshot at index %d of %d", leaderSnap, leaderIndex)
	}
	if logContains(victim.logPath, "Installed remote snapshot") {
		how = fmt.Sprintf("by snapshot install (the leader's snapshot at index %d of %d) plus replay of the entries after it", leaderSnap, leaderIndex)
	}
	row.Value = fmtDuration(took)
	row.Note = fmt.Sprintf("fresh cluster filled with keys of %s, one SetBag each, up to %d MiB per bag; clock from the restart with an empty data dir: /readyz 200 after %s; its GetBags had all %d keys in %d bag(s) (%s, same sha256 as the leader's) at %s (%s/s); data arrived %s; target: ≤ 1 s for 10 MB",
		fmtBytes(bkFillEntry), *bagkeeperFillBagMiB, fmtDuration(readyAt.Sub(t0)), got.keys, got.bags, fmtBytes(got.bytes), fmtDuration(took),
		fmtBytes(int64(float64(got.bytes)/took.Seconds())), how)
	env.Progressf("wipe: %s ready with all data after %s (%s)", victim.pod, fmtDuration(took), how)

	env.Progressf("wipe: waiting until the new incarnation of %s replaces the old one as a voter", victim.pod)
	t1 := time.Now()
	hctx, cancel = context.WithTimeout(ctx, b.startTimeout)
	err = b.waitHealthy(hctx)
	cancel()
	if err != nil {
		return row, fmt.Errorf("%s: after the measurement: %w", what, err)
	}
	env.Progressf("wipe: 3 voters again after %s", fmtDuration(time.Since(t1)))
	return row, nil
}

// waitCaughtUp polls the restarted member m until its /readyz answers 200
// and then until its GetBags matches want, and returns when /readyz first
// answered 200 and when the matching GetBags was sent.
func (b *bagkeeperTarget) waitCaughtUp(ctx context.Context, env *Env, m *bkMember, want bagsDigest, t0 time.Time, timeout time.Duration) (readyAt, doneAt time.Time, got bagsDigest, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	lastReport := t0
	why := "not started"
	for {
		if m.proc.Exited() {
			return readyAt, doneAt, got, fmt.Errorf("%s exited: %v; log ends with:\n%s", m.pod, m.proc.ExitError(), tailFile(m.logPath, 2048))
		}
		if readyAt.IsZero() {
			ok, body := b.readyz(ctx, m)
			if ok {
				readyAt = time.Now()
			} else {
				why = body
			}
		}
		if !readyAt.IsZero() {
			sent := time.Now()
			d, err := b.digestOf(ctx, m)
			switch {
			case err != nil:
				why = err.Error()
			case d.sum == want.sum:
				return readyAt, sent, d, nil
			default:
				why = fmt.Sprintf("ready, but GetBags has %d keys, %s; want %d keys, %s", d.keys, fmtBytes(d.bytes), want.keys, fmtBytes(want.bytes))
			}
		}
		if time.Since(lastReport) >= 2*time.Second {
			lastReport = time.Now()
			env.Progressf("wipe: %s after %s: %s", m.pod, fmtDuration(time.Since(t0)), why)
		}
		pause := 5 * time.Millisecond
		if !readyAt.IsZero() {
			pause = 20 * time.Millisecond
		}
		if err := sleepCtx(ctx, pause); err != nil {
			return readyAt, doneAt, got, fmt.Errorf("%s not caught up after %s (%s): %w", m.pod, fmtDuration(time.Since(t0)), why, err)
		}
	}
}
