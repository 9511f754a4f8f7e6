package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

// The relations measurement (-experiments relations, bagkeeper only): two
// applications of three sidecars each, "pgb" offering -relations endpoints
// to "webb", which relates one of its endpoints to each, with charms whose
// hooks do nothing. It reports
//
//   - the time from a write to the provider's application bag of one
//     relation (what a provider-side relation-set commits) to the start of
//     relation-changed on each consumer unit;
//   - the time for a replaced consumer pod (SIGTERM, then a new pod with a
//     new name, a new address and an empty disk) to be ready and hold the
//     provider's data;
//   - each sidecar's RSS with every relation established;
//   - what the idle streams cost: CPU of the consumer's leader (which runs
//     them) and of the provider member serving them, and bytes on the
//     relations ports per minute.

var (
	relCount        = flag.Int("relations", 100, "relations: relations between the two applications")
	relWrites       = flag.Int("relations-writes", 50, "relations: provider writes timed to the consumer's relation-changed")
	relIdle         = flag.Duration("relations-idle", time.Minute, "relations: how long the idle streams are measured")
	relReplacements = flag.Int("relations-replacements", 3, "relations: consumer pods replaced (SIGTERM, then a new pod with an empty disk)")
)

func relationsExperiment(ctx context.Context, env *Env) ([]Row, error) {
	b, ok := env.Target.(*bagkeeperTarget)
	if !ok {
		return nil, nil
	}
	return b.measureRelations(ctx, env)
}

const (
	relProvider = "pgb"
	relConsumer = "webb"
	relToken    = "bench-offer-token"
)

// relCharm writes a charm with n endpoints of kind ("provides" or
// "requires") named prefix0 … prefix(n-1), and a dispatch that does nothing.
func relCharm(dir, name, kind, prefix string, n int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var md strings.Builder
	fmt.Fprintf(&md, "name: %s\n%s:\n", name, kind)
	for i := range n {
		fmt.Fprintf(&md, "  %s%d:\n    interface: bench-rel\n", prefix, i)
	}
	if err := os.WriteFile(filepath.Join(dir, "metadata.yaml"), []byte(md.String()), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "dispatch"), []byte("#!/bin/sh\nexit 0\n"), 0o755)
}

func (b *bagkeeperTarget) measureRelations(ctx context.Context, env *Env) ([]Row, error) {
	n := *relCount
	if n < 1 {
		return nil, errors.New("relations: -relations must be at least 1")
	}
	dir := filepath.Join(env.Dir, "relations")
	jujuc := filepath.Join(filepath.Dir(b.bin), "jujuc")
	if _, err := os.Stat(jujuc); err != nil {
		return nil, fmt.Errorf("relations measurement needs jujuc next to the bagkeeper binary: %w", err)
	}
	tokenFile := filepath.Join(dir, "token")
	pgCharm, webCharm := filepath.Join(dir, "pgb-charm"), filepath.Join(dir, "webb-charm")
	pgFile, webFile := filepath.Join(dir, "pgb-relations", "relations.yaml"), filepath.Join(dir, "webb-relations", "relations.yaml")
	for _, d := range []string{filepath.Dir(pgFile), filepath.Dir(webFile), filepath.Join(dir, relProvider), filepath.Join(dir, relConsumer)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(tokenFile, []byte(relToken), 0o600); err != nil {
		return nil, err
	}
	if err := relCharm(pgCharm, "bench-provider", "provides", "p", n); err != nil {
		return nil, err
	}
	if err := relCharm(webCharm, "bench-consumer", "requires", "r", n); err != nil {
		return nil, err
	}
	var offers strings.Builder
	offers.WriteString("offers:\n")
	for i := range n {
		fmt.Fprintf(&offers, "  - {endpoint: p%d, consumers: [%s], token-file: %s}\n", i, relConsumer, tokenFile)
	}
	if err := os.WriteFile(pgFile, []byte(offers.String()), 0o644); err != nil {
		return nil, err
	}

	relAddrs := map[string]string{} // pod → its relations port
	relArgs := func(charm, file string, extra ...string) func(m *bkMember) []string {
		return func(m *bkMember) []string {
			addr, ok := relAddrs[m.pod]
			if !ok {
				host := strings.Split(m.raftAddr, ":")[0]
				ports, err := freePortsOn(host, 1)
				if err == nil {
					addr = host + ":" + strconv.Itoa(ports[0])
					relAddrs[m.pod] = addr
				}
			}
			return append([]string{"--charm-dir=" + charm, "--hook-tool=" + jujuc, "--update-status-interval=1h",
				"--relations-file=" + file, "--relations-bind=" + addr}, extra...)
		}
	}
	pg := &bagkeeperTarget{bin: b.bin, version: b.version, defaults: b.defaults, via: b.via, app: relProvider,
		attemptTimeout: b.attemptTimeout, startTimeout: b.startTimeout, lastHost: b.lastHost + 40, http: b.http,
		extraArgs: relArgs(pgCharm, pgFile)}
	web := &bagkeeperTarget{bin: b.bin, version: b.version, defaults: b.defaults, via: b.via, app: relConsumer,
		attemptTimeout: b.attemptTimeout, startTimeout: b.startTimeout, lastHost: b.lastHost + 60, http: b.http,
		extraArgs: relArgs(webCharm, webFile, "--unit-mode=claim", "--units=3")}
	defer pg.stopCluster()
	defer web.stopCluster()

	env.Progressf("relations: starting %s, which offers %d endpoints", relProvider, n)
	sctx, cancel := context.WithTimeout(ctx, b.startTimeout)
	err := pg.Start(sctx, filepath.Join(dir, relProvider))
	cancel()
	if err != nil {
		return nil, err
	}
	var addrs []string
	for _, m := range pg.members {
		addrs = append(addrs, relAddrs[m.pod])
	}
	var rels strings.Builder
	rels.WriteString("relations:\n")
	for i := range n {
		fmt.Fprintf(&rels, "  - {endpoint: r%d, app: %s, offer: p%d, addresses: [%s], token-file: %s}\n", i, relProvider, i, strings.Join(addrs, ", "), tokenFile)
	}
	if err := os.WriteFile(webFile, []byte(rels.String()), 0o644); err != nil {
		return nil, err
	}
	env.Progressf("relations: starting %s, which relates to each", relConsumer)
	sctx, cancel = context.WithTimeout(ctx, b.startTimeout)
	err = web.Start(sctx, filepath.Join(dir, relConsumer))
	cancel()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := waitAllRelated(ctx, web, n); err != nil {
		return nil, err
	}
	env.Progressf("relations: %d relations made in %s; waiting for the hooks to settle", n, fmtDuration(time.Since(start)))
	logs := append(slices.Clone(pg.members), web.members...)
	if err := waitHooksSettled(ctx, logs, 3*time.Second, 10*time.Minute); err != nil {
		return nil, err
	}
	env.Progressf("relations: settled after %s", fmtDuration(time.Since(start)))

	name := b.Name()
	var rows []Row
	idleRows, err := measureIdleStreams(ctx, env, pg, web, relAddrs, n)
	if err != nil {
		return nil, err
	}
	rows = append(rows, idleRows...)

	lat, lastValue, err := measureRelationChanged(ctx, env, pg, web)
	if err != nil {
		return nil, err
	}
	rows = append(rows, Row{What: fmt.Sprintf("relations: provider app-bag write → consumer relation-changed starts (%d relations, 3 + 3 units)", n), Target: name,
		P50: fmtDuration(percentile(lat, 50)), P99: fmtDuration(percentile(lat, 99)),
		Note: fmt.Sprintf("%d writes × 3 consumer units; the write through the provider's admin API, the hook start from the consumer's log", len(lat)/3)})

	ready, err := measureConsumerReplacement(ctx, env, web, lastValue)
	if err != nil {
		return nil, err
	}
	rows = append(rows, Row{What: fmt.Sprintf("relations: replaced consumer pod ready with the remote data (%d relations; new name, new address, empty disk)", n), Target: name,
		Value: fmt.Sprintf("median %s, max %s", fmtDuration(percentile(ready, 50)), fmtDuration(percentile(ready, 100))),
		Note:  fmt.Sprintf("%d replacements: %s from the new process's start to /readyz 200 and the provider's last write in its state", len(ready), fmtDurations(ready))})
	return rows, nil
}

// waitAllRelated waits until the consumer's leader holds a remote view of
// every relation.
func waitAllRelated(ctx context.Context, web *bagkeeperTarget, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	last := ""
	for {
		for _, s := range web.statusAll(ctx, true) {
			if s.err != nil || !s.isLeader() {
				continue
			}
			held := 0
			for _, r := range s.resp.GetRelations() {
				if !r.GetPeer() && r.GetRemoteRevision() > 0 {
					held++
				}
			}
			if held == n {
				return nil
			}
			last = fmt.Sprintf("%d of %d relations hold a remote view", held, n)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("relations: not all made: %s", last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

var runningHookRE = regexp.MustCompile(`^time=(\S+) .*msg="running hook".* hook=(\S+) .*remote_unit=(\S*)`)

// countHookStarts counts the hooks a member's log says were started.
func countHookStarts(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), `msg="running hook"`) {
			n++
		}
	}
	return n
}

// waitHooksSettled waits until no member has started a hook for quiet.
func waitHooksSettled(ctx context.Context, members []*bkMember, quiet, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var last []int
	since := time.Now()
	for {
		cur := make([]int, len(members))
		for i, m := range members {
			cur[i] = countHookStarts(m.logPath)
		}
		if !slices.Equal(cur, last) {
			last, since = cur, time.Now()
		} else if time.Since(since) >= quiet {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("relations: hooks still running after %s: %v hooks started", limit, cur)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

var ssBytesRE = regexp.MustCompile(`bytes_(sent|received):(\d+)`)

// relationBytes is the payload bytes sent and received on the established
// connections of the given relations ports, from ss.
func relationBytes(ports []string) (int64, error) {
	var total int64
	for _, p := range ports {
		out, err := exec.Command("ss", "-tinH", "state", "established", "( sport = :"+p+" )").Output()
		if err != nil {
			return 0, fmt.Errorf("ss: %w", err)
		}
		for _, m := range ssBytesRE.FindAllStringSubmatch(string(out), -1) {
			v, _ := strconv.ParseInt(m[2], 10, 64)
			total += v
		}
	}
	return total, nil
}

// measureIdleStreams samples RSS, CPU and relation-port bytes of both
// applications over -relations-idle with nothing changing.
func measureIdleStreams(ctx context.Context, env *Env, pg, web *bagkeeperTarget, relAddrs map[string]string, n int) ([]Row, error) {
	env.Progressf("relations: measuring the idle streams for %s", *relIdle)
	all := append(slices.Clone(pg.members), web.members...)
	var ports []string
	for _, m := range pg.members {
		ports = append(ports, relAddrs[m.pod][strings.LastIndexByte(relAddrs[m.pod], ':')+1:])
	}
	before := make([]procSample, len(all))
	for i, m := range all {
		if before[i] = readProc(m.proc.Pid()); !before[i].readingsOK {
			return nil, fmt.Errorf("relations: %s: %v %v", m.pod, before[i].statErr, before[i].statusErr)
		}
	}
	bytesBefore, err := relationBytes(ports)
	if err != nil {
		return nil, err
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(*relIdle):
	}
	bytesAfter, err := relationBytes(ports)
	if err != nil {
		return nil, err
	}
	var maxCPU time.Duration
	var maxPG, maxWeb int64
	var cpus []string
	for i, m := range all {
		s := readProc(m.proc.Pid())
		if !s.readingsOK {
			return nil, fmt.Errorf("relations: %s: %v %v", m.pod, s.statErr, s.statusErr)
		}
		d := s.cpu - before[i].cpu
		maxCPU = max(maxCPU, d)
		cpus = append(cpus, fmt.Sprintf("%s %.2f%%", m.pod, 100*d.Seconds()/relIdle.Seconds()))
		if i < len(pg.members) {
			maxPG = max(maxPG, s.rss)
		} else {
			maxWeb = max(maxWeb, s.rss)
		}
	}
	minutes := relIdle.Minutes()
	return []Row{
		{What: fmt.Sprintf("relations: sidecar RSS with %d relations (3 + 3 units, every view held)", n), Target: env.Target.Name(),
			Value: fmt.Sprintf("provider %.1f MiB, consumer %.1f MiB", float64(maxPG)/(1<<20), float64(maxWeb)/(1<<20)),
			Note:  "the largest of each application's three sidecars, after the relations were made and their hooks ran"},
		{What: fmt.Sprintf("relations: %d idle streams, cost", n), Target: env.Target.Name(),
			Value: fmt.Sprintf("%.2f%% of a core at most; %.0f bytes/min", 100*maxCPU.Seconds()/relIdle.Seconds(), float64(bytesAfter-bytesBefore)/minutes),
			Note:  fmt.Sprintf("over %s with nothing changing: CPU per sidecar %s; bytes are the payload both ways on the provider's relations ports (keepalive pings)", *relIdle, strings.Join(cpus, ", "))},
	}, nil
}

// relationID returns the id of the relation of endpoint in st.
func relationID(st *adminpb.StatusResponse, endpoint string) (int64, bool) {
	for _, r := range st.GetRelations() {
		if strings.HasPrefix(r.GetKey(), endpoint+":") {
			return r.GetId(), true
		}
	}
	return 0, false
}

// hookStartsSince returns the times a member's log says hook (without a
// remote unit) started at or after since, reading the log from byte from
// on (what was there before the write need not be read again).
func hookStartsSince(m *bkMember, hook string, since time.Time, from int64) ([]time.Time, error) {
	f, err := os.Open(m.logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return nil, err
	}
	var out []time.Time
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		g := runningHookRE.FindStringSubmatch(sc.Text())
		if g == nil || g[2] != hook || (g[3] != `""` && g[3] != "") {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, g[1])
		if err == nil && !t.Before(since) {
			out = append(out, t)
		}
	}
	return out, nil
}

// logSize is the length of a member's log now (0 if unknown).
func logSize(m *bkMember) int64 {
	fi, err := os.Stat(m.logPath)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// measureRelationChanged writes the provider's application bag of relation
// p0 -relations-writes times and times each consumer unit's
// r0-relation-changed (the remote application's bag changed). It returns
// the latencies and the last value written.
func measureRelationChanged(ctx context.Context, env *Env, pg, web *bagkeeperTarget) ([]time.Duration, string, error) {
	env.Progressf("relations: timing %d provider writes to the consumer's relation-changed", *relWrites)
	sts := pg.statusAll(ctx, true)
	if sts[0].err != nil {
		return nil, "", sts[0].err
	}
	rel, ok := relationID(sts[0].resp, "p0")
	if !ok {
		return nil, "", errors.New("relations: the provider holds no relation p0")
	}
	var lat []time.Duration
	value := ""
	for i := 1; i <= *relWrites; i++ {
		value = fmt.Sprintf("write-%d", i)
		offsets := make([]int64, len(web.members))
		for j, m := range web.members {
			offsets[j] = logSize(m)
		}
		// Log lines have millisecond times: start on a fresh millisecond.
		t0 := time.Now().Truncate(time.Millisecond)
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := pg.members[i%len(pg.members)].admin.SetBag(wctx, &adminpb.SetBagRequest{RelationId: rel, Owner: relProvider, Set: map[string]string{"n": value}})
		cancel()
		if err != nil {
			return nil, "", fmt.Errorf("relations: write %d: %w", i, err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for j, m := range web.members {
			for {
				starts, err := hookStartsSince(m, "r0-relation-changed", t0, offsets[j])
				if err != nil {
					return nil, "", err
				}
				if len(starts) > 0 {
					lat = append(lat, starts[0].Sub(t0))
					break
				}
				if time.Now().After(deadline) {
					return nil, "", fmt.Errorf("relations: write %d: %s ran no r0-relation-changed within 30s", i, m.pod)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		if err := waitHooksSettled(ctx, web.members, 300*time.Millisecond, time.Minute); err != nil {
			return nil, "", err
		}
	}
	return lat, value, nil
}

// measureConsumerReplacement replaces consumer followers one by one as a
// rolling update does and times each new pod to ready with want in the
// provider's application bag of relation r0.
func measureConsumerReplacement(ctx context.Context, env *Env, web *bagkeeperTarget, want string) ([]time.Duration, error) {
	var out []time.Duration
	for k := 1; k <= *relReplacements; k++ {
		leader, err := web.findLeader(ctx)
		if err != nil {
			return nil, err
		}
		var old *bkMember
		for _, m := range web.members {
			if m != leader {
				old = m
				break
			}
		}
		env.Progressf("relations: replacing %s (%d of %d)", old.pod, k, *relReplacements)
		if err := old.proc.Signal(syscall.SIGTERM); err != nil {
			return nil, err
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_ = old.proc.Wait(wctx)
		cancel()
		_ = old.conn.Close()
		m := &bkMember{
			index:   old.index,
			pod:     fmt.Sprintf("%s-new%d", relConsumer, k),
			dataDir: filepath.Join(web.dir, fmt.Sprintf("new%d", k)),
			socket:  filepath.Join(web.sockDir, fmt.Sprintf("n%d.sock", k)),
			logPath: filepath.Join(web.dir, fmt.Sprintf("new%d.log", k)),
		}
		if err := web.assignAddresses(m); err != nil {
			return nil, err
		}
		conn, err := dialAdmin(m.socket)
		if err != nil {
			return nil, err
		}
		m.conn, m.admin = conn, adminpb.NewAdminClient(conn)
		for i, x := range web.members {
			if x == old {
				web.members[i] = m
			}
		}
		m.peers = web.peerAddrs()
		for _, x := range web.members {
			x.peers = m.peers
		}
		start := time.Now()
		if err := web.startMember(m); err != nil {
			return nil, err
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err = waitReadyWith(rctx, web, m, want)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("relations: replacement %d: %w", k, err)
		}
		out = append(out, time.Since(start))
		if err := waitHooksSettled(ctx, web.members, time.Second, 5*time.Minute); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// waitReadyWith waits until m answers /readyz with 200 and its own state
// holds want in the provider's application bag of relation r0.
func waitReadyWith(ctx context.Context, web *bagkeeperTarget, m *bkMember, want string) error {
	last := ""
	for {
		if ok, why := web.readyz(ctx, m); !ok {
			last = why
		} else if st, err := m.admin.Status(ctx, &adminpb.StatusRequest{SkipProbe: true}); err != nil {
			last = err.Error()
		} else if rel, ok := relationID(st, "r0"); !ok {
			last = "no relation r0 yet"
		} else if r, err := m.admin.GetBags(ctx, &adminpb.GetBagsRequest{RelationId: rel, Owner: relProvider, Stale: true}); err != nil {
			last = err.Error()
		} else if len(r.GetBags()) == 1 && r.GetBags()[0].GetData()["n"] == want {
			return nil
		} else {
			last = fmt.Sprint(r.GetBags())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready with the remote data: %s", m.pod, last)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
