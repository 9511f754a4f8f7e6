package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

// The memory soak (-experiments soak, bagkeeper only): a fresh 3-member
// cluster, a bounded key space written over and over so that the live
// relation data stay the same size while the raft log churns, and every
// member's RSS (anonymous and file-backed) and data directory sampled
// until the end. It runs in three phases:
//
//   - fill: every key written once;
//   - ramp: closed-loop steps with more and more concurrent writers, to
//     find the highest write rate the group sustains;
//   - soak: writes paced at a fraction of that rate for -soak-duration.
//
// The samples go to a CSV file, the plot to an SVG file, and the checks of
// the three targets to the table; a target that is missed is a FAIL row,
// not an error: this is a benchmark.

// Flags of the memory soak.
var (
	soakDuration      = flag.Duration("soak-duration", 30*time.Minute, "soak: how long to write at the found rate")
	soakSampleEvery   = flag.Duration("soak-sample-every", 10*time.Second, "soak: interval between samples of every member's RSS and data directory")
	soakKeys          = flag.Int("soak-keys", 2560, "soak: keys in the bounded key space (the live state is keys × (key + value))")
	soakKeysPerBag    = flag.Int("soak-keys-per-bag", 512, "soak: keys per bag (each bag is the application bag of a peer relation of its own; bagkeeper's limit is 16 MiB a bag)")
	soakValueSize     = flag.Int("soak-value-size", 4096, "soak: bytes per value")
	soakRampStep      = flag.Duration("soak-ramp-step", 5*time.Second, "soak: length of each step of the ramp")
	soakRate          = flag.Float64("soak-rate", 0, "soak: puts per second to soak at; 0 finds the rate with the ramp")
	soakRateFraction  = flag.Float64("soak-rate-fraction", 0.9, "soak: fraction of the ramp's best throughput to soak at")
	soakTrailingLogs  = flag.Uint64("soak-trailing-logs", 0, "soak: --raft-trailing-logs passed to the members (0: the binary's default, passed explicitly)")
	soakSnapThreshold = flag.Uint64("soak-snapshot-threshold", 0, "soak: --raft-snapshot-threshold passed to the members (0: the binary's default, passed explicitly)")
	soakOut           = flag.String("soak-out", filepath.Join("bin", "soak"), "soak: directory for the CSV and a copy of the SVG")
	soakSVG           = flag.String("soak-svg", filepath.Join("docs", "soak-memory.svg"), "soak: where to write the plot as well (\"\" for only the copy in -soak-out)")
	soakReplot        = flag.String("soak-replot", "", "soak: run nothing; check the targets and draw the plot again from this CSV of an earlier soak (with -soak-trailing-logs and -soak-value-size as that run had them)")
	soakRampWriters   = intList{1, 4, 16, 64}
)

func init() {
	flag.Var(&soakRampWriters, "soak-ramp-writers", "soak: comma-separated numbers of concurrent writers of the ramp's steps")
}

// soakExperiment runs the memory soak on a bagkeeper target; other targets
// have nothing to measure here.
func soakExperiment(ctx context.Context, env *Env) ([]Row, error) {
	b, ok := env.Target.(*bagkeeperTarget)
	if !ok {
		return nil, nil
	}
	return b.measureSoak(ctx, env)
}

// soakLoad is the soak's workload: puts of fresh values to keys taken in
// turn from a bounded key space spread over several bags.
type soakLoad struct {
	rels      []int64 // relation id of each bag
	keys      int
	perBag    int
	valueSize int

	next  atomic.Int64 // number of the next put; it writes key next % keys
	acked atomic.Int64 // puts acknowledged
	errs  atomic.Int64 // puts that failed

	mu       sync.Mutex
	firstErr error
	lat      []time.Duration // latencies of the puts since resetLatencies
}

// key returns the name of key k.
func (l *soakLoad) key(k int) string { return fmt.Sprintf("soak%06d", k) }

// live is the size of the live relation data once every key is written.
func (l *soakLoad) live() int64 {
	return int64(l.keys) * int64(len(l.key(0))+l.valueSize)
}

// put writes the next key with a fresh value through w.
func (l *soakLoad) put(ctx context.Context, w *bkWriter, rng *rand.ChaCha8, raw []byte, timeout time.Duration) {
	n := l.next.Add(1) - 1
	k := int(n % int64(l.keys))
	_, _ = rng.Read(raw)
	req := &adminpb.SetBagRequest{
		RelationId: l.rels[k/l.perBag],
		Owner:      bkApp,
		Set:        map[string]string{l.key(k): printable(raw)},
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	t0 := time.Now()
	err := w.setBag(pctx, req)
	d := time.Since(t0)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		l.errs.Add(1)
		l.mu.Lock()
		if l.firstErr == nil {
			l.firstErr = err
		}
		l.mu.Unlock()
		return
	}
	l.acked.Add(1)
	l.mu.Lock()
	l.lat = append(l.lat, d)
	l.mu.Unlock()
}

// takeLatencies returns the latencies recorded since the last call.
func (l *soakLoad) takeLatencies() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.lat
	l.lat = nil
	return out
}

// soakWriters runs workers, each with a writer of its own, until ctx ends
// or work returns false; gate, if not nil, is a channel each put waits for
// a token from.
func (b *bagkeeperTarget) soakWriters(ctx context.Context, n int, l *soakLoad, timeout time.Duration, gate <-chan struct{}, stop func() bool) error {
	writers := make([]*bkWriter, 0, n)
	defer func() {
		for _, w := range writers {
			_ = w.Close()
		}
	}()
	for range n {
		w, err := b.newWriter("leader")
		if err != nil {
			return err
		}
		writers = append(writers, w)
	}
	var wg sync.WaitGroup
	for i, w := range writers {
		wg.Go(func() {
			rng := rand.NewChaCha8(seedFor(fmt.Sprintf("soak/%d", time.Now().UnixNano()), i))
			raw := make([]byte, l.valueSize)
			for ctx.Err() == nil && !stop() {
				if gate != nil {
					select {
					case <-ctx.Done():
						return
					case <-gate:
					}
				}
				l.put(ctx, w, rng, raw, timeout)
			}
		})
	}
	wg.Wait()
	return nil
}

// soakSampler samples every member of b at an interval and writes the
// samples to a CSV file.
type soakSampler struct {
	b     *bagkeeperTarget
	load  *soakLoad
	t0    time.Time
	csv   *soakCSVWriter
	phase atomic.Value // string

	mu      sync.Mutex
	samples []soakSample
}

// sample reads every member once and records the samples.
func (s *soakSampler) sample(ctx context.Context) ([]soakSample, error) {
	phase, _ := s.phase.Load().(string)
	at := time.Since(s.t0)
	var out []soakSample
	var errs []error
	for _, m := range s.b.members {
		if m.proc.Exited() {
			return nil, fmt.Errorf("%s exited: %v; log ends with:\n%s", m.pod, m.proc.ExitError(), tailFile(m.logPath, 2048))
		}
		p := readProc(m.proc.Pid())
		if !p.readingsOK {
			errs = append(errs, fmt.Errorf("%s: %w", m.pod, errors.Join(p.statErr, p.statusErr)))
			continue
		}
		u, err := measureDataDir(m.dataDir)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.pod, err))
		}
		out = append(out, soakSample{
			At: at, Phase: phase, Member: m.pod,
			RSSAnon: p.rssAnon, RSSFile: p.rssFile, HeapInuse: s.b.heapInuse(ctx, m),
			RaftDB: u.RaftDB, Snapshots: u.Snapshots, Disk: u.Disk, SnapshotState: u.SnapshotState,
			Puts: s.load.acked.Load(), Live: s.load.live(),
		})
	}
	s.mu.Lock()
	s.samples = append(s.samples, out...)
	s.mu.Unlock()
	if err := s.csv.Write(out...); err != nil {
		errs = append(errs, fmt.Errorf("write CSV: %w", err))
	}
	return out, errors.Join(errs...)
}

// heapInuse reads go_memstats_heap_inuse_bytes from m's /metrics, or -1.
func (b *bagkeeperTarget) heapInuse(ctx context.Context, m *bkMember) int64 {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+m.httpAddr+"/metrics", nil)
	if err != nil {
		return -1
	}
	resp, err := b.http.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		return -1
	}
	v, ok := parseMetric(string(body), "go_memstats_heap_inuse_bytes")
	if !ok {
		return -1
	}
	return int64(v)
}

// soakSettings are the member flags the soak passes, with their values.
type soakSettings struct {
	trailingLogs, snapshotThreshold uint64
	snapshotInterval                string
}

// settings returns the trailing logs and snapshot threshold to pass: the
// flags' values, else the binary's defaults.
func (b *bagkeeperTarget) soakSettings() (soakSettings, error) {
	s := soakSettings{trailingLogs: *soakTrailingLogs, snapshotThreshold: *soakSnapThreshold, snapshotInterval: b.defaultOf("raft-snapshot-interval")}
	for _, f := range []struct {
		name string
		v    *uint64
	}{{"raft-trailing-logs", &s.trailingLogs}, {"raft-snapshot-threshold", &s.snapshotThreshold}} {
		if *f.v != 0 {
			continue
		}
		d, ok := b.defaults[f.name]
		if !ok {
			return s, fmt.Errorf("the binary's --help gives no default for --%s: pass -soak-%s", f.name, strings.TrimPrefix(f.name, "raft-"))
		}
		n, err := strconv.ParseUint(d, 10, 64)
		if err != nil {
			return s, fmt.Errorf("default of --%s: %w", f.name, err)
		}
		*f.v = n
	}
	return s, nil
}

// measureSoak runs the memory soak on a fresh cluster (see the top of this
// file) and returns the table rows.
func (b *bagkeeperTarget) measureSoak(ctx context.Context, env *Env) ([]Row, error) {
	cfg := env.Config
	if *soakKeys < 1 || *soakKeysPerBag < 1 || *soakValueSize < 1 || *soakSampleEvery <= 0 || *soakDuration <= 0 || len(soakRampWriters) == 0 && *soakRate <= 0 {
		return nil, errors.New("soak: -soak-keys, -soak-keys-per-bag, -soak-value-size, -soak-sample-every, -soak-duration and either -soak-ramp-writers or -soak-rate must be positive")
	}
	settings, err := b.soakSettings()
	if err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	b.extraArgs = func(*bkMember) []string {
		return []string{
			"--raft-trailing-logs=" + strconv.FormatUint(settings.trailingLogs, 10),
			"--raft-snapshot-threshold=" + strconv.FormatUint(settings.snapshotThreshold, 10),
		}
	}
	if err := os.MkdirAll(*soakOut, 0o755); err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	stamp := time.Now().UTC().Format("20060102-150405")
	csvPath := filepath.Join(*soakOut, "memory-"+stamp+".csv")
	csvFile, err := os.Create(csvPath)
	if err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	defer csvFile.Close()

	env.Progressf("soak: starting a fresh cluster (--raft-trailing-logs=%d --raft-snapshot-threshold=%d, snapshot check every %s)",
		settings.trailingLogs, settings.snapshotThreshold, settings.snapshotInterval)
	if err := b.startFresh(ctx, filepath.Join(env.Dir, "soak")); err != nil {
		return nil, fmt.Errorf("soak: fresh cluster: %w", err)
	}
	load := &soakLoad{keys: *soakKeys, perBag: *soakKeysPerBag, valueSize: *soakValueSize}
	for i := 0; i*load.perBag < load.keys; i++ {
		id, err := b.ensureRelation(ctx, fmt.Sprintf("soak%d", i))
		if err != nil {
			return nil, fmt.Errorf("soak: %w", err)
		}
		load.rels = append(load.rels, id)
	}
	smp := &soakSampler{b: b, load: load, t0: time.Now(), csv: newSoakCSVWriter(csvFile)}
	smp.phase.Store(phaseFill)

	// Sample until the end; a member that exits ends the run.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var sampling sync.WaitGroup
	stopSampling := make(chan struct{})
	sampling.Go(func() {
		tick := time.NewTicker(*soakSampleEvery)
		defer tick.Stop()
		for {
			out, err := smp.sample(ctx)
			if err != nil {
				env.Progressf("soak: sample: %v", err)
				if len(out) == 0 {
					cancel(fmt.Errorf("soak: %w", err))
					return
				}
			}
			env.Progressf("soak: %s %s", smp.phase.Load(), describeSamples(out))
			select {
			case <-stopSampling:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	defer func() {
		select {
		case <-stopSampling:
		default:
			close(stopSampling)
		}
		sampling.Wait()
	}()
	fail := func(err error) ([]Row, error) {
		if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) {
			err = c
		}
		return nil, err
	}

	// Fill.
	env.Progressf("soak: fill: %d keys of %s (live state %s) in %d bags", load.keys, fmtBytes(int64(load.valueSize)), fmtMiB(load.live()), len(load.rels))
	t0 := time.Now()
	if err := b.soakWriters(ctx, bkFillWorkers, load, cfg.OpTimeout, nil, func() bool { return load.next.Load() >= int64(load.keys) }); err != nil {
		return fail(err)
	}
	if ctx.Err() != nil {
		return fail(ctx.Err())
	}
	if n := load.errs.Load(); n > 0 {
		return fail(fmt.Errorf("soak: fill: %d puts failed, first: %v", n, load.firstErr))
	}
	load.takeLatencies()
	env.Progressf("soak: fill took %s", fmtDuration(time.Since(t0)))

	// Ramp.
	rate, writers := *soakRate, max(1, slices.Max(append([]int{1}, soakRampWriters...)))
	var rampNotes []string
	if rate <= 0 {
		smp.phase.Store(phaseRamp)
		var best float64
		for _, n := range soakRampWriters {
			if n < 1 {
				continue
			}
			before, t0 := load.acked.Load(), time.Now()
			sctx, scancel := context.WithTimeout(ctx, *soakRampStep)
			err := b.soakWriters(sctx, n, load, cfg.OpTimeout, nil, func() bool { return false })
			scancel()
			if err != nil {
				return fail(err)
			}
			if ctx.Err() != nil {
				return fail(ctx.Err())
			}
			tput := float64(load.acked.Load()-before) / time.Since(t0).Seconds()
			s := summarize(load.takeLatencies())
			env.Progressf("soak: ramp: %d writers: %s, p50 %s, p99 %s", n, fmtRate(tput, "puts"), fmtDuration(s.P50), fmtDuration(s.P99))
			rampNotes = append(rampNotes, fmt.Sprintf("%d writers %.0f/s", n, tput))
			if tput > best {
				best, writers = tput, n
			}
		}
		rate = *soakRateFraction * best
		env.Progressf("soak: best %s with %d writers; soaking at %s for %s", fmtRate(best, "puts"), writers, fmtRate(rate, "puts"), *soakDuration)
	}
	if rate <= 0 {
		return fail(errors.New("soak: the ramp found no rate (no put was acknowledged)"))
	}

	// Soak: a pacer hands out tokens at the rate; workers take them.
	smp.phase.Store(phaseSoak)
	soakStart, ackedBefore, errsBefore := time.Now(), load.acked.Load(), load.errs.Load()
	sctx, scancel := context.WithTimeout(ctx, *soakDuration)
	gate := make(chan struct{}, writers)
	var missed atomic.Int64
	var pacing sync.WaitGroup
	pacing.Go(func() {
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		var issued int64
		for {
			due := int64(rate * time.Since(soakStart).Seconds())
			for ; issued < due; issued++ {
				select {
				case gate <- struct{}{}:
				default: // every worker is busy: the group is behind
					missed.Add(due - issued)
					issued = due - 1
				}
			}
			select {
			case <-sctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	err = b.soakWriters(sctx, writers, load, cfg.OpTimeout, gate, func() bool { return false })
	scancel()
	pacing.Wait()
	if err != nil {
		return fail(err)
	}
	if ctx.Err() != nil {
		return fail(ctx.Err())
	}
	soakWall := time.Since(soakStart)
	soakLat := summarize(load.takeLatencies())
	acked := load.acked.Load() - ackedBefore
	failed := load.errs.Load() - errsBefore
	// Stop the periodic sampler before the last sample: samples go to one
	// CSV writer, one at a time.
	close(stopSampling)
	sampling.Wait()
	if _, err := smp.sample(ctx); err != nil {
		env.Progressf("soak: last sample: %v", err)
	}

	// The live state as the leader has it.
	liveNote := ""
	if leader, err := b.findLeader(ctx); err == nil {
		if got, err := b.soakLiveBytes(ctx, leader, load.rels); err == nil {
			liveNote = fmt.Sprintf("; GetBags on the leader at the end: %s of keys and values (the workload's %s)", fmtMiB(got), fmtMiB(load.live()))
		} else {
			liveNote = "; GetBags at the end failed: " + shortErr(err)
		}
	}
	if err := csvFile.Close(); err != nil {
		return fail(fmt.Errorf("soak: %w", err))
	}

	// Evaluate and plot what the CSV holds.
	si := collectSysInfo(env.Dir)
	title := fmt.Sprintf("bagkeeper memory soak: %s at %.0f puts/s", fmtDuration(soakWall), float64(acked)/soakWall.Seconds())
	subtitle := fmt.Sprintf("%s, 3 members; %d keys × %s values in %d bags (live %s)\ntrailing logs %d, snapshot threshold %d, snapshot check every %s; run %s, nproc %d, %s",
		b.Name(), load.keys, fmtBytes(int64(load.valueSize)), len(load.rels), fmtMiB(load.live()),
		settings.trailingLogs, settings.snapshotThreshold, settings.snapshotInterval,
		time.Now().UTC().Format("2006-01-02"), si.CPUs, runtime.Version())
	svgPaths := []string{filepath.Join(*soakOut, "memory-"+stamp+".svg")}
	if *soakSVG != "" {
		svgPaths = append(svgPaths, *soakSVG)
	}
	checks, err := soakReport(csvPath, int64(settings.trailingLogs), int64(load.valueSize), title, subtitle, svgPaths)
	if err != nil {
		return fail(err)
	}

	what := "memory soak"
	rows := []Row{{
		What: what + ": write rate", Target: b.Name(),
		P50: fmtDuration(soakLat.P50), P99: fmtDuration(soakLat.P99),
		Value: fmtRate(float64(acked)/soakWall.Seconds(), "puts"),
		Note: fmt.Sprintf("%d puts of %s in %s, paced at %.0f/s (%s) by %d writers; %d slots missed (every writer busy), %d puts failed%s; ramp (%s steps): %s; %d samples per member every %s; CSV %s, plot %s%s",
			acked, fmtBytes(int64(load.valueSize)), fmtDuration(soakWall), rate, rateOrigin(*soakRate, *soakRateFraction), writers,
			missed.Load(), failed, firstErrNote(load), *soakRampStep, strings.Join(rampNotes, ", "),
			len(smp.samples)/max(1, len(b.members)), *soakSampleEvery, filepath.ToSlash(csvPath), strings.Join(slashAll(svgPaths), " and "), liveNote),
	}}
	for _, c := range checks {
		rows = append(rows, Row{What: what + " " + c.Target, Target: b.Name() + " " + c.Member, Value: passFail(c.Pass), Note: c.Detail})
		env.Progressf("soak: %s %s: %s (%s)", c.Target, c.Member, passFail(c.Pass), c.Detail)
	}
	return rows, nil
}

// soakReport reads the samples of a soak from its CSV, checks the
// targets and writes the plot to each of svgPaths.
func soakReport(csvPath string, trailingLogs, valueSize int64, title, subtitle string, svgPaths []string) ([]soakCheck, error) {
	f, err := os.Open(csvPath)
	if err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	samples, err := parseSoakCSV(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	lim := soakLimits{TrailingLogs: trailingLogs, ValueSize: valueSize}
	for _, s := range samples {
		lim.Live = max(lim.Live, s.Live)
	}
	checks, err := evaluateSoak(samples, lim)
	if err != nil {
		return nil, err
	}
	chart := soakChart(samples, lim, title, subtitle)
	for _, p := range svgPaths {
		if err := writeChartFile(p, chart); err != nil {
			return nil, fmt.Errorf("soak: %w", err)
		}
	}
	return checks, nil
}

// replotSoak is -soak-replot: the checks and the plot of an earlier soak
// from its CSV, printed as a table.
func replotSoak(w io.Writer, csvPath string) error {
	trailing := int64(*soakTrailingLogs)
	if trailing == 0 {
		return errors.New("-soak-replot needs -soak-trailing-logs (the members' --raft-trailing-logs in that run)")
	}
	svg := strings.TrimSuffix(csvPath, filepath.Ext(csvPath)) + ".svg"
	paths := []string{svg}
	if *soakSVG != "" {
		paths = append(paths, *soakSVG)
	}
	title := "bagkeeper memory soak: " + filepath.Base(csvPath)
	checks, err := soakReport(csvPath, trailing, int64(*soakValueSize), title, fmt.Sprintf("trailing logs %d, values of %s", trailing, fmtBytes(int64(*soakValueSize))), paths)
	if err != nil {
		return err
	}
	t := &Table{}
	for _, c := range checks {
		t.Add(Row{What: "memory soak " + c.Target, Target: c.Member, Value: passFail(c.Pass), Note: c.Detail})
	}
	if err := t.WriteMarkdown(w); err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "\nplot: %s\n", strings.Join(slashAll(paths), " and "))
	return err
}

// soakLiveBytes sums the keys and values of the soak's bags as m reads
// them (linearizably).
func (b *bagkeeperTarget) soakLiveBytes(ctx context.Context, m *bkMember, rels []int64) (int64, error) {
	var n int64
	for _, id := range rels {
		gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := m.admin.GetBags(gctx, &adminpb.GetBagsRequest{RelationId: id, Owner: bkApp})
		cancel()
		if err != nil {
			return 0, err
		}
		for _, bag := range resp.GetBags() {
			for k, v := range bag.GetData() {
				n += int64(len(k) + len(v))
			}
		}
	}
	return n, nil
}

// writeChartFile writes chart as SVG to path, through a temporary file.
func writeChartFile(path string, chart lineChart) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := chart.WriteSVG(f); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

// describeSamples renders one round of samples for the progress log.
func describeSamples(ss []soakSample) string {
	var parts []string
	for _, s := range ss {
		parts = append(parts, fmt.Sprintf("%s anon %s file %s heap %s disk %s", s.Member, fmtMiB(s.RSSAnon), fmtMiB(s.RSSFile), fmtMiB(s.HeapInuse), fmtMiB(s.Disk)))
	}
	puts := int64(0)
	if len(ss) > 0 {
		puts = ss[0].Puts
	}
	return fmt.Sprintf("%d puts; %s", puts, strings.Join(parts, "; "))
}

// rateOrigin says where the soak's rate came from.
func rateOrigin(given, fraction float64) string {
	if given > 0 {
		return "given with -soak-rate"
	}
	return fmt.Sprintf("%.0f %% of the ramp's best", 100*fraction)
}

// firstErrNote renders the load's first error, if any, for a note.
func firstErrNote(l *soakLoad) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.firstErr == nil {
		return ""
	}
	return " (first: " + shortErr(l.firstErr) + ")"
}

// slashAll returns paths with forward slashes.
func slashAll(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = filepath.ToSlash(p)
	}
	return out
}
