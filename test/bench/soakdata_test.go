package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestSoakCSVRoundTrip(t *testing.T) {
	in := []soakSample{
		{At: 0, Phase: phaseFill, Member: "bench-0", RSSAnon: 7 << 20, RSSFile: 15 << 20, HeapInuse: -1, Live: 10 << 20},
		{At: 10*time.Second + 250*time.Millisecond, Phase: phaseSoak, Member: "bench-1", RSSAnon: 1, RSSFile: 2, HeapInuse: 3,
			RaftDB: 4, Snapshots: 5, Disk: 6, SnapshotState: 7, Puts: 8, Live: 9},
	}
	var buf bytes.Buffer
	w := newSoakCSVWriter(&buf)
	if err := w.Write(in[0]); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(in[1]); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(buf.String(), strings.Join(soakCSVHeader, ",")+"\n") {
		t.Errorf("CSV does not start with the header:\n%s", buf.String())
	}
	got, err := parseSoakCSV(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, in) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, in)
	}
}

func TestParseSoakCSVByColumnName(t *testing.T) {
	// Columns in another order, and one more, still read.
	csv := "member,extra,phase,seconds,rss_anon_bytes,rss_file_bytes,heap_inuse_bytes,raft_db_bytes,snapshots_bytes,disk_bytes,snapshot_state_bytes,puts,live_bytes\n" +
		"bench-2,x,soak,12.5,100,200,300,400,500,600,700,800,900\n"
	got, err := parseSoakCSV(strings.NewReader(csv))
	if err != nil {
		t.Fatal(err)
	}
	want := []soakSample{{At: 12500 * time.Millisecond, Phase: "soak", Member: "bench-2", RSSAnon: 100, RSSFile: 200, HeapInuse: 300,
		RaftDB: 400, Snapshots: 500, Disk: 600, SnapshotState: 700, Puts: 800, Live: 900}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if got[0].RSS() != 300 {
		t.Errorf("RSS = %d, want anon + file = 300", got[0].RSS())
	}
}

func TestParseSoakCSVErrors(t *testing.T) {
	header := strings.Join(soakCSVHeader, ",")
	for name, csv := range map[string]string{
		"empty":          "",
		"missing column": "seconds,phase,member\n1,soak,m0\n",
		"bad number":     header + "\n1,soak,m0,x,2,3,4,5,6,7,8,9\n",
		"bad seconds":    header + "\nsoon,soak,m0,1,2,3,4,5,6,7,8,9\n",
		"short record":   header + "\n1,soak\n",
	} {
		if _, err := parseSoakCSV(strings.NewReader(csv)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestParseMetric(t *testing.T) {
	text := `# HELP go_memstats_heap_inuse_bytes Number of heap bytes that are in use.
# TYPE go_memstats_heap_inuse_bytes gauge
go_memstats_heap_inuse_bytes_total 1
go_memstats_heap_inuse_bytes 1.2345e+07
bagkeeper_up{member="x"} 1
`
	if v, ok := parseMetric(text, "go_memstats_heap_inuse_bytes"); !ok || v != 12345000 {
		t.Errorf("parseMetric = %v, %v", v, ok)
	}
	if _, ok := parseMetric(text, "go_memstats_heap_sys_bytes"); ok {
		t.Error("found a metric that is not there")
	}
}

func TestMeasureDataDir(t *testing.T) {
	dir := t.TempDir()
	write := func(rel string, n int) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, make([]byte, n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("identity.json", 100)
	write("raft/raft.db", 64<<10)
	write("raft/snapshots/2-9000-111/state.bin", 3000)
	write("raft/snapshots/2-9000-111/meta.json", 200)
	write("raft/snapshots/3-12000-222/state.bin", 4000)
	write("raft/snapshots/3-12000-222/meta.json", 200)
	write("raft/snapshots/3-15000-333.tmp/state.bin", 5000)
	u, err := measureDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if u.RaftDB != 64<<10 {
		t.Errorf("RaftDB = %d", u.RaftDB)
	}
	if want := int64(3000 + 200 + 4000 + 200 + 5000); u.Snapshots != want {
		t.Errorf("Snapshots = %d, want %d", u.Snapshots, want)
	}
	if u.SnapshotState != 4000 {
		t.Errorf("SnapshotState = %d, want the newest complete snapshot's 4000", u.SnapshotState)
	}
	if u.Disk < 64<<10 {
		t.Errorf("Disk = %d, less than raft.db alone", u.Disk)
	}
	// A member on raft-wal: its log store is the files of wal/.
	walData := filepath.Join(t.TempDir(), "wal-member")
	dir = walData
	write("raft/wal/wal-meta.db", 32<<10)
	write("raft/wal/00000000000000000001-0000000000000000.wal", 1<<20)
	write("raft/snapshots/2-9000-111/state.bin", 3000)
	if u, err := measureDataDir(walData); err != nil || u.RaftDB != 32<<10+1<<20 || u.Snapshots != 3000 {
		t.Errorf("a raft-wal data dir: %+v, %v; want RaftDB %d", u, err, 32<<10+1<<20)
	}
	if u, err := measureDataDir(filepath.Join(dir, "missing")); err != nil || u != (dataDirUse{}) {
		t.Errorf("a missing directory: %+v, %v", u, err)
	}
}

func TestSnapshotNewer(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"2-100-1", "", true},
		{"2-100-1", "2-99-5", true},
		{"2-99-1", "2-100-5", false},
		{"3-100-1", "2-100-5", true},
		{"junk", "2-100-5", false},
	} {
		if got := snapshotNewer(tc.a, tc.b); got != tc.want {
			t.Errorf("snapshotNewer(%q, %q) = %v", tc.a, tc.b, got)
		}
	}
}

func TestSoakWindows(t *testing.T) {
	m := time.Minute
	for _, tc := range []struct {
		start, end, prev, last time.Duration
	}{
		{1 * m, 31 * m, 11 * m, 21 * m}, // 30 minutes: the 10 minutes before the last 10
		{0, 60 * m, 40 * m, 50 * m},     // longer: still 10-minute windows
		{30 * time.Second, 3*m + 30*time.Second, 90 * time.Second, 150 * time.Second}, // shorter: thirds
	} {
		prev, last := soakWindows(tc.start, tc.end)
		if prev != tc.prev || last != tc.last {
			t.Errorf("soakWindows(%v, %v) = %v, %v; want %v, %v", tc.start, tc.end, prev, last, tc.prev, tc.last)
		}
	}
}

// soakSeries makes soak-phase samples of one member every 10 s for
// minutes, with anon RSS from f (MiB at minute x) and fixed file RSS.
func soakSeries(member string, minutes float64, f func(x float64) float64) []soakSample {
	var out []soakSample
	for at := time.Duration(0); at <= time.Duration(minutes*float64(time.Minute)); at += 10 * time.Second {
		out = append(out, soakSample{At: at, Phase: phaseSoak, Member: member,
			RSSAnon: int64(f(at.Minutes()) * (1 << 20)), RSSFile: 20 << 20, Disk: 30 << 20})
	}
	return out
}

func TestLevelOff(t *testing.T) {
	flat := soakSeries("m", 30, func(x float64) float64 { return 50 + float64(int(x)%2) }) // 50–51 MiB
	growing := soakSeries("m", 30, func(x float64) float64 { return 20 + 3*x })            // +30 MiB per 10 min
	falling := soakSeries("m", 30, func(x float64) float64 { return 100 - 2*x })
	end := 30 * time.Minute
	if l := levelOff(flat, 0, end, soakSample.RSS); !l.OK() || l.PrevN != 60 || l.LastN != 61 {
		t.Errorf("flat: %+v, OK %v", l, l.OK())
	}
	l := levelOff(growing, 0, end, soakSample.RSS)
	if l.OK() {
		t.Errorf("growing: %+v passes", l)
	}
	// Last window's max at minute 30: 20+90+20 = 130 MiB; before: at
	// minute 20 (just before the last window) 20+60+20 = 100 MiB.
	if l.LastMax != 130<<20 || l.Change() < 0.25 {
		t.Errorf("growing: %+v, change %.3f", l, l.Change())
	}
	if l := levelOff(falling, 0, end, soakSample.RSS); !l.OK() {
		t.Errorf("falling: %+v fails; a falling level is not growth", l)
	}
	if l := levelOff(nil, 0, end, soakSample.RSS); l.OK() {
		t.Error("no samples passes")
	}
}

func TestEvaluateSoak(t *testing.T) {
	lim := soakLimits{Live: 10 << 20, TrailingLogs: 4096, ValueSize: 4096}
	if lim.AnonLimit() != 60<<20 || lim.DiskLimit() != 46<<20 {
		t.Fatalf("limits %d, %d", lim.AnonLimit(), lim.DiskLimit())
	}
	var samples []soakSample
	samples = append(samples, soakSample{At: 0, Phase: phaseFill, Member: "m0", RSSAnon: 500 << 20}) // not the soak phase: ignored
	samples = append(samples, soakSample{At: 0, Phase: phaseFill, Member: "m1", RSSAnon: 500 << 20})
	good := soakSeries("m0", 3, func(float64) float64 { return 50 })
	bad := soakSeries("m1", 3, func(x float64) float64 { return 40 + 10*x })
	for i := range bad {
		bad[i].Disk = 100 << 20
	}
	samples = append(samples, good...)
	samples = append(samples, bad...)
	checks, err := evaluateSoak(samples, lim)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, c := range checks {
		got[c.Member+" "+c.Target[:3]] = c.Pass
		if c.Detail == "" {
			t.Errorf("%+v has no detail", c)
		}
	}
	want := map[string]bool{
		"m0 (a)": true, "m0 (b)": true, "m0 (c)": true,
		"m1 (a)": false, "m1 (b)": false, "m1 (c)": false,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("checks %v, want %v", got, want)
	}
	if _, err := evaluateSoak(samples[:2], lim); err == nil {
		t.Error("no error without soak samples")
	}
}

func TestSoakChart(t *testing.T) {
	var samples []soakSample
	for i, phase := range []string{phaseFill, phaseRamp, phaseSoak, phaseSoak} {
		for m := range 3 {
			samples = append(samples, soakSample{At: time.Duration(i) * 10 * time.Second, Phase: phase, Member: fmt.Sprintf("bench-%d", m),
				RSSAnon: int64(10+i) << 20, RSSFile: 20 << 20, Disk: 30 << 20})
		}
	}
	c := soakChart(samples, soakLimits{Live: 10 << 20, TrailingLogs: 4096, ValueSize: 4096}, "title", "sub")
	if len(c.Series) != 9 || len(c.Bands) != 2 || len(c.HLines) != 3 {
		t.Fatalf("%d series, %d bands, %d lines", len(c.Series), len(c.Bands), len(c.HLines))
	}
	if b := c.Bands[0]; b.Label != phaseFill || b.X0 != 0 || b.X1 != (10*time.Second).Minutes() {
		t.Errorf("fill band %+v", b)
	}
	var buf bytes.Buffer
	if err := c.WriteSVG(&buf); err != nil {
		t.Fatal(err)
	}
	counts, texts := svgElements(t, buf.Bytes())
	if counts["polyline"] != 9 {
		t.Errorf("%d polylines, want 9", counts["polyline"])
	}
	all := strings.Join(texts, "\n")
	for _, want := range []string{"bench-2 anon RSS", "bench-1 file RSS", "bench-0 disk (data dir)", "live state 10.0 MiB", "MiB"} {
		if !strings.Contains(all, want) {
			t.Errorf("the plot's text lacks %q", want)
		}
	}
}

func TestReplotSoak(t *testing.T) {
	dir := t.TempDir()
	csvPath := filepath.Join(dir, "memory-x.csv")
	f, err := os.Create(csvPath)
	if err != nil {
		t.Fatal(err)
	}
	w := newSoakCSVWriter(f)
	for i := range 12 {
		phase := phaseSoak
		if i < 2 {
			phase = phaseFill
		}
		if err := w.Write(soakSample{At: time.Duration(i) * 10 * time.Second, Phase: phase, Member: "bench-0",
			RSSAnon: 30 << 20, RSSFile: 20 << 20, Disk: 40 << 20, Live: 10 << 20}); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	oldTrailing, oldSVG := *soakTrailingLogs, *soakSVG
	defer func() { *soakTrailingLogs, *soakSVG = oldTrailing, oldSVG }()
	*soakSVG = ""
	*soakTrailingLogs = 0
	if err := replotSoak(io.Discard, csvPath); err == nil {
		t.Error("no error without -soak-trailing-logs")
	}
	*soakTrailingLogs = 4096
	var out strings.Builder
	if err := replotSoak(&out, csvPath); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "PASS"); n != 3 {
		t.Errorf("%d PASS in\n%s", n, out.String())
	}
	svg, err := os.ReadFile(filepath.Join(dir, "memory-x.svg"))
	if err != nil {
		t.Fatal(err)
	}
	svgElements(t, svg)
}
