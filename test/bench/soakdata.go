package main

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The memory soak's data: one soakSample per member every sample interval,
// kept as CSV, and the checks made on them. Nothing here talks to a
// cluster, so all of it is unit-tested.

// Soak phases, in the order they run.
const (
	phaseFill = "fill" // every key written once
	phaseRamp = "ramp" // closed-loop steps with more and more writers
	phaseSoak = "soak" // paced writes at the rate the ramp found
)

// soakSample is one reading of one member.
type soakSample struct {
	At     time.Duration // since the cluster started
	Phase  string
	Member string // pod name
	// From /proc/<pid>/status.
	RSSAnon, RSSFile int64
	// go_memstats_heap_inuse_bytes from the member's /metrics; -1 if it
	// could not be read.
	HeapInuse int64
	// The data directory: the raft log store's size (raft.db, or the
	// files of raft-wal's wal/), the snapshots' files, and the blocks every
	// file of the directory occupies on disk (du).
	RaftDB, Snapshots, Disk int64
	// The newest snapshot's state.bin; 0 before the first snapshot.
	SnapshotState int64
	// Puts acknowledged so far by the whole workload.
	Puts int64
	// The live relation data the workload keeps (keys plus values).
	Live int64
}

// RSS is the member's resident set: anonymous plus file-backed.
func (s soakSample) RSS() int64 { return s.RSSAnon + s.RSSFile }

// soakCSVHeader names the CSV columns, in soakSample's order.
var soakCSVHeader = []string{
	"seconds", "phase", "member", "rss_anon_bytes", "rss_file_bytes", "heap_inuse_bytes",
	"raft_db_bytes", "snapshots_bytes", "disk_bytes", "snapshot_state_bytes", "puts", "live_bytes",
}

// csvRecord renders s as one CSV record.
func (s soakSample) csvRecord() []string {
	i := func(n int64) string { return strconv.FormatInt(n, 10) }
	return []string{
		strconv.FormatFloat(s.At.Seconds(), 'f', 3, 64), s.Phase, s.Member,
		i(s.RSSAnon), i(s.RSSFile), i(s.HeapInuse),
		i(s.RaftDB), i(s.Snapshots), i(s.Disk), i(s.SnapshotState), i(s.Puts), i(s.Live),
	}
}

// soakCSVWriter writes samples as CSV, flushing after every batch so that
// a run that is interrupted keeps what it measured.
type soakCSVWriter struct {
	w   *csv.Writer
	err error
}

func newSoakCSVWriter(w io.Writer) *soakCSVWriter {
	cw := &soakCSVWriter{w: csv.NewWriter(w)}
	cw.err = cw.w.Write(soakCSVHeader)
	return cw
}

// Write writes samples and flushes.
func (c *soakCSVWriter) Write(samples ...soakSample) error {
	if c.err != nil {
		return c.err
	}
	for _, s := range samples {
		if c.err = c.w.Write(s.csvRecord()); c.err != nil {
			return c.err
		}
	}
	c.w.Flush()
	c.err = c.w.Error()
	return c.err
}

// parseSoakCSV reads samples written by soakCSVWriter. Columns are found by
// name, so a file with columns added later still reads.
func parseSoakCSV(r io.Reader) ([]soakSample, error) {
	cr := csv.NewReader(bufio.NewReader(r))
	header, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("soak CSV: header: %w", err)
	}
	col := map[string]int{}
	for i, h := range header {
		col[strings.TrimSpace(h)] = i
	}
	for _, h := range soakCSVHeader {
		if _, ok := col[h]; !ok {
			return nil, fmt.Errorf("soak CSV: no column %q", h)
		}
	}
	var out []soakSample
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("soak CSV: %w", err)
		}
		var perr error
		num := func(name string) int64 {
			n, err := strconv.ParseInt(rec[col[name]], 10, 64)
			if err != nil && perr == nil {
				perr = fmt.Errorf("soak CSV line %d: %s: %w", line, name, err)
			}
			return n
		}
		secs, err := strconv.ParseFloat(rec[col["seconds"]], 64)
		if err != nil {
			return nil, fmt.Errorf("soak CSV line %d: seconds: %w", line, err)
		}
		s := soakSample{
			At:            time.Duration(secs * float64(time.Second)),
			Phase:         rec[col["phase"]],
			Member:        rec[col["member"]],
			RSSAnon:       num("rss_anon_bytes"),
			RSSFile:       num("rss_file_bytes"),
			HeapInuse:     num("heap_inuse_bytes"),
			RaftDB:        num("raft_db_bytes"),
			Snapshots:     num("snapshots_bytes"),
			Disk:          num("disk_bytes"),
			SnapshotState: num("snapshot_state_bytes"),
			Puts:          num("puts"),
			Live:          num("live_bytes"),
		}
		if perr != nil {
			return nil, perr
		}
		out = append(out, s)
	}
}

// parseMetric returns the value of an unlabelled metric from a Prometheus
// text exposition, or false if it is not there.
func parseMetric(text, name string) (float64, bool) {
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || !strings.HasPrefix(rest, " ") {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil {
			return 0, false
		}
		return v, true
	}
	return 0, false
}

// dataDirUse is how much a member's data directory holds.
type dataDirUse struct {
	RaftDB        int64 // the raft log store: raft/raft.db's size, or the sum of raft/wal/* or raft/segments/*
	Snapshots     int64 // raft/snapshots/**, the files' sizes
	SnapshotState int64 // the newest snapshot's state.bin
	Disk          int64 // blocks of every file under the directory, as du counts them
}

// measureDataDir walks a member's data directory. Files that vanish while
// it walks (a snapshot being replaced) are skipped.
func measureDataDir(dir string) (dataDirUse, error) {
	var u dataDirUse
	raftDir := filepath.Join(dir, "raft")
	snapDir := filepath.Join(raftDir, "snapshots")
	walDir := filepath.Join(raftDir, "wal")
	segDir := filepath.Join(raftDir, "segments")
	newest := ""
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		u.Disk += allocatedBytes(info)
		switch {
		case path == filepath.Join(raftDir, "raft.db"):
			u.RaftDB = info.Size()
		case strings.HasPrefix(path, walDir+string(filepath.Separator)), strings.HasPrefix(path, segDir+string(filepath.Separator)):
			u.RaftDB += info.Size()
		case strings.HasPrefix(path, snapDir+string(filepath.Separator)):
			u.Snapshots += info.Size()
			// Snapshot directories are <term>-<index>-<ms>; the newest
			// complete one has the largest index.
			rel, _ := filepath.Rel(snapDir, path)
			snap, file, _ := strings.Cut(rel, string(filepath.Separator))
			if file == "state.bin" && !strings.HasSuffix(snap, ".tmp") && snapshotNewer(snap, newest) {
				newest, u.SnapshotState = snap, info.Size()
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return u, err
	}
	return u, nil
}

// snapshotNewer reports whether snapshot directory a has a higher index
// than b (names <term>-<index>-<ms>; "" is older than anything).
func snapshotNewer(a, b string) bool {
	idx := func(s string) (uint64, uint64) {
		parts := strings.Split(s, "-")
		if len(parts) != 3 {
			return 0, 0
		}
		term, _ := strconv.ParseUint(parts[0], 10, 64)
		index, _ := strconv.ParseUint(parts[1], 10, 64)
		return term, index
	}
	if b == "" {
		return true
	}
	at, ai := idx(a)
	bt, bi := idx(b)
	return ai > bi || ai == bi && at > bt
}

// soakWindows returns the two windows whose maxima the levelling-off check
// compares: the last w of the soak phase and the w before it, where w is
// 10 minutes, or a third of the phase when it is shorter than 30 minutes.
func soakWindows(start, end time.Duration) (prevFrom, lastFrom time.Duration) {
	w := min(10*time.Minute, (end-start)/3)
	return end - 2*w, end - w
}

// levelling is the outcome of the levelling-off check of one series.
type levelling struct {
	PrevMax, LastMax int64
	PrevN, LastN     int // samples in each window
}

// Change is the last window's maximum relative to the window before, e.g.
// 0.05 for 5 % higher.
func (l levelling) Change() float64 {
	if l.PrevMax == 0 {
		return 0
	}
	return float64(l.LastMax)/float64(l.PrevMax) - 1
}

// OK reports whether the last window's maximum is at most 10 % above the
// one before (a fall passes: the level is not growing).
func (l levelling) OK() bool {
	return l.PrevN > 0 && l.LastN > 0 && float64(l.LastMax) <= 1.10*float64(l.PrevMax)
}

// levelOff compares the maxima of value over the soak phase's last window
// and the window before it (see soakWindows), for the samples of one
// member. start and end delimit the soak phase.
func levelOff(samples []soakSample, start, end time.Duration, value func(soakSample) int64) levelling {
	prevFrom, lastFrom := soakWindows(start, end)
	var l levelling
	for _, s := range samples {
		switch {
		case s.At < prevFrom || s.At > end:
		case s.At < lastFrom:
			l.PrevMax = max(l.PrevMax, value(s))
			l.PrevN++
		default:
			l.LastMax = max(l.LastMax, value(s))
			l.LastN++
		}
	}
	return l
}

// phaseSpan returns the first and last sample time of phase, and false if
// no sample is of that phase.
func phaseSpan(samples []soakSample, phase string) (from, to time.Duration, ok bool) {
	for _, s := range samples {
		if s.Phase != phase {
			continue
		}
		if !ok || s.At < from {
			from = s.At
		}
		if !ok || s.At > to {
			to = s.At
		}
		ok = true
	}
	return from, to, ok
}

// soakMembers returns the members that appear in samples, in order of
// first appearance.
func soakMembers(samples []soakSample) []string {
	var out []string
	for _, s := range samples {
		if !slices.Contains(out, s.Member) {
			out = append(out, s.Member)
		}
	}
	return out
}

// soakLimits are the targets of the memory soak.
type soakLimits struct {
	Live         int64 // live relation data: keys plus values
	TrailingLogs int64 // --raft-trailing-logs of the members
	ValueSize    int64
}

// AnonLimit is target (b): anonymous RSS ≤ 2 × live state + 40 MiB.
func (l soakLimits) AnonLimit() int64 { return 2*l.Live + 40<<20 }

// DiskLimit is target (c): disk ≤ 3 × live state + the log's trailing
// entries (entries × value size).
func (l soakLimits) DiskLimit() int64 { return 3*l.Live + l.TrailingLogs*l.ValueSize }

// soakCheck is one line of the soak's summary.
type soakCheck struct {
	Target string // "(a) RSS levels off"
	Member string
	Pass   bool
	Detail string
}

// evaluateSoak checks the three targets for every member over the soak
// phase of samples.
func evaluateSoak(samples []soakSample, lim soakLimits) ([]soakCheck, error) {
	start, end, ok := phaseSpan(samples, phaseSoak)
	if !ok {
		return nil, errors.New("no sample of the soak phase")
	}
	prevFrom, lastFrom := soakWindows(start, end)
	var out []soakCheck
	for _, m := range soakMembers(samples) {
		var mine []soakSample
		for _, s := range samples {
			if s.Member == m && s.Phase == phaseSoak {
				mine = append(mine, s)
			}
		}
		if len(mine) == 0 {
			continue
		}
		l := levelOff(mine, start, end, soakSample.RSS)
		la := levelOff(mine, start, end, func(s soakSample) int64 { return s.RSSAnon })
		out = append(out, soakCheck{
			Target: "(a) RSS levels off", Member: m, Pass: l.OK(),
			Detail: fmt.Sprintf("max RSS %s in %s–%s against %s in %s–%s (%+.1f %%; target ≤ +10 %%); anon alone %s against %s (%+.1f %%)",
				fmtMiB(l.LastMax), fmtMinutes(lastFrom-start), fmtMinutes(end-start),
				fmtMiB(l.PrevMax), fmtMinutes(prevFrom-start), fmtMinutes(lastFrom-start), 100*l.Change(),
				fmtMiB(la.LastMax), fmtMiB(la.PrevMax), 100*la.Change()),
		})
		var anon, disk, raftDB, snaps int64
		for _, s := range mine {
			anon = max(anon, s.RSSAnon)
			disk = max(disk, s.Disk)
			raftDB = max(raftDB, s.RaftDB)
			snaps = max(snaps, s.Snapshots)
		}
		out = append(out, soakCheck{
			Target: "(b) anon RSS ≤ 2 × live + 40 MiB", Member: m, Pass: anon <= lim.AnonLimit(),
			Detail: fmt.Sprintf("max anon RSS %s; limit %s (live state %s)", fmtMiB(anon), fmtMiB(lim.AnonLimit()), fmtMiB(lim.Live)),
		})
		out = append(out, soakCheck{
			Target: "(c) disk ≤ 3 × live + trailing log", Member: m, Pass: disk <= lim.DiskLimit(),
			Detail: fmt.Sprintf("max disk use %s (raft log store up to %s, snapshots up to %s); limit %s = 3 × %s + %d trailing entries × %s",
				fmtMiB(disk), fmtMiB(raftDB), fmtMiB(snaps), fmtMiB(lim.DiskLimit()), fmtMiB(lim.Live), lim.TrailingLogs, fmtBytes(lim.ValueSize)),
		})
	}
	return out, nil
}

// fmtMiB formats bytes as MiB with one decimal.
func fmtMiB(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// fmtMinutes formats a duration as minutes and seconds, "12m30s", for
// window bounds.
func fmtMinutes(d time.Duration) string { return d.Round(time.Second).String() }

// passFail renders a check's outcome.
func passFail(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

// allocatedBytes is the disk space a file occupies (its blocks), or its
// size where the file system does not say.
func allocatedBytes(info os.FileInfo) int64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return info.Size()
}

// chartColors are the lines' colours: the members' in the soak plot, the
// targets' in the latency plot.
var chartColors = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"}

// soakChart plots every member's anonymous and file-backed RSS and its
// disk use over time, with the phases shaded and the live state and the
// limits of targets (b) and (c) as reference lines.
func soakChart(samples []soakSample, lim soakLimits, title, subtitle string) lineChart {
	c := lineChart{
		Title: title, Subtitle: subtitle,
		XLabel: "time since the cluster started (minutes)",
		YLabel: "MiB",
	}
	mib := func(n int64) float64 { return float64(n) / (1 << 20) }
	for i, m := range soakMembers(samples) {
		color := chartColors[i%len(chartColors)]
		anon := chartSeries{Name: m + " anon RSS", Color: color}
		file := chartSeries{Name: m + " file RSS", Color: color, Dash: "7 4"}
		disk := chartSeries{Name: m + " disk (data dir)", Color: color, Dash: "2 3"}
		for _, s := range samples {
			if s.Member != m {
				continue
			}
			x := s.At.Minutes()
			anon.X, anon.Y = append(anon.X, x), append(anon.Y, mib(s.RSSAnon))
			file.X, file.Y = append(file.X, x), append(file.Y, mib(s.RSSFile))
			disk.X, disk.Y = append(disk.X, x), append(disk.Y, mib(s.Disk))
		}
		c.Series = append(c.Series, anon, file, disk)
	}
	for _, p := range []string{phaseFill, phaseRamp} {
		if from, to, ok := phaseSpan(samples, p); ok {
			// A phase lasts until the next phase's first sample.
			next := to
			for _, s := range samples {
				if s.At > to {
					next = s.At
					break
				}
			}
			c.Bands = append(c.Bands, chartBand{X0: from.Minutes(), X1: next.Minutes(), Label: p})
		}
	}
	if lim.Live > 0 {
		c.HLines = append(c.HLines,
			chartHLine{Y: mib(lim.Live), Label: "live state " + fmtMiB(lim.Live), Color: "#444"},
			chartHLine{Y: mib(lim.AnonLimit()), Label: "(b) anon limit " + fmtMiB(lim.AnonLimit()), Color: "#8c564b"},
			chartHLine{Y: mib(lim.DiskLimit()), Label: "(c) disk limit " + fmtMiB(lim.DiskLimit()), Color: "#7f7f7f"},
		)
	}
	return c
}
