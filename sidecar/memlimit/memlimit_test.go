package memlimit

import (
	"bytes"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestApply(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name       string
		v2, v1     string // file contents; "" means no such file
		env        map[string]string
		wantSet    int64 // the limit Apply sets; 0: it sets none
		wantSource string
		wantNote   string
		wantLog    string
	}{
		{name: "cgroup v2 limit", v2: "268435456\n", v1: "1073741824\n",
			wantSet: 256 * mib / 100 * 90, wantSource: "v2", wantLog: `limit=241591860 source=V2 container_limit=268435456 percent=90`},
		{name: "cgroup v2 without a limit", v2: "max\n", v1: "1073741824\n",
			wantSource: "none", wantNote: "says max", wantLog: `limit=none source=none reason="V2 says max"`},
		{name: "cgroup v1 limit", v1: "536870912\n",
			wantSet: 512 * mib / 100 * 90, wantSource: "v1", wantLog: `source=V1 container_limit=536870912`},
		{name: "cgroup v1 without a limit", v1: "9223372036854771712\n",
			wantSource: "none", wantNote: "says unlimited"},
		{name: "no cgroup files", wantSource: "none", wantNote: "neither", wantLog: "no container memory limit found"},
		{name: "garbage", v2: "lots\n", wantSource: "none", wantNote: `holds "lots", not a limit`},
		{name: "GOMEMLIMIT set", v2: "268435456\n", env: map[string]string{"GOMEMLIMIT": "100MiB"},
			wantSource: "GOMEMLIMIT", wantLog: `msg="Go memory limit from GOMEMLIMIT" limit=none source=GOMEMLIMIT`},
		{name: "GOMEMLIMIT off", v1: "536870912\n", env: map[string]string{"GOMEMLIMIT": "off"},
			wantSource: "GOMEMLIMIT", wantLog: "gogc=50 gc_min_headroom_bytes=8388608"},
		{name: "GOGC set", v2: "268435456\n", env: map[string]string{"GOGC": "200"},
			wantSet: 256 * mib / 100 * 90, wantSource: "v2", wantLog: "percent=90 gogc=200 gogc_source=GOGC"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			files := map[string]string{"v2": filepath.Join(dir, "memory.max"), "v1": filepath.Join(dir, "memory.limit_in_bytes")}
			for k, content := range map[string]string{"v2": tc.v2, "v1": tc.v1} {
				if content != "" {
					if err := os.WriteFile(files[k], []byte(content), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			current, set := int64(math.MaxInt64), false
			var gcSet []int
			tuned := 0
			r := Apply(Config{
				CgroupV2: files["v2"], CgroupV1: files["v1"],
				LookupEnv: func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok },
				SetMemoryLimit: func(l int64) int64 {
					old := current
					if l >= 0 {
						current, set = l, true
					}
					return old
				},
				SetGCPercent: func(p int) int { gcSet = append(gcSet, p); return 100 },
				TuneGC: func(func(int) int) func() {
					tuned++
					return func() {}
				},
			})
			if _, gogc := tc.env["GOGC"]; gogc && (len(gcSet) != 0 || tuned != 0) {
				t.Fatalf("GOGC is set, but the collector's target was set to %v (tuned %d times)", gcSet, tuned)
			} else if !gogc && (len(gcSet) != 1 || gcSet[0] != GCPercent || tuned != 1) {
				t.Fatalf("GOGC is not set: the collector's target was set to %v, want [%d], and tuned %d times, want once", gcSet, GCPercent, tuned)
			}
			if tc.wantSet == 0 && set {
				t.Fatalf("the runtime's limit was set to %d, want it untouched", current)
			}
			if tc.wantSet != 0 && (!set || current != tc.wantSet || r.Limit != tc.wantSet) {
				t.Fatalf("limit set %v to %d, result %d; want %d", set, current, r.Limit, tc.wantSet)
			}
			if tc.wantSet == 0 && r.Limit != math.MaxInt64 {
				t.Fatalf("result limit %d, want the runtime's (none)", r.Limit)
			}
			wantSource := tc.wantSource
			if f, ok := files[wantSource]; ok {
				wantSource = f
			}
			if r.Source != wantSource || !strings.Contains(r.Note, tc.wantNote) {
				t.Fatalf("got %+v, want source %s and a note with %q", r, wantSource, tc.wantNote)
			}

			var log bytes.Buffer
			r.Log(slog.New(slog.NewTextHandler(&log, nil)))
			line := strings.NewReplacer(files["v2"], "V2", files["v1"], "V1").Replace(log.String())
			if strings.Count(line, "\n") != 1 || !strings.Contains(line, "level=INFO") || !strings.Contains(line, tc.wantLog) {
				t.Fatalf("logged %q, want one INFO line with %q", line, tc.wantLog)
			}
		})
	}
}

// The zero Config reads the real files and the real environment; with
// GOMEMLIMIT set it must leave the process's limit alone.
func TestApplyLeavesTheRuntimeAloneWhenGOMEMLIMITIsSet(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "off")
	calls := 0
	r := Apply(Config{SetMemoryLimit: func(l int64) int64 {
		if l >= 0 {
			calls++
		}
		return math.MaxInt64
	}})
	if calls != 0 || r.Source != "GOMEMLIMIT" {
		t.Fatalf("got %+v after %d calls that set the limit", r, calls)
	}
}

func TestPercentFor(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		live uint64
		want int
	}{
		{0, 100},
		{1 * mib, 100},  // Go's default: the heap may double
		{8 * mib, 100},  // doubling is the MinHeadroom
		{10 * mib, 80},  // 8 MiB of 10
		{16 * mib, 50},  // GCPercent gives 8 MiB
		{100 * mib, 50}, // GCPercent
	} {
		if got := PercentFor(tc.live); got != tc.want {
			t.Errorf("PercentFor(%d MiB) = %d, want %d", tc.live/mib, got, tc.want)
		}
	}
}

func TestTheTargetIsRaisedOnlyWhileTheCollectorIsBusy(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		live   uint64
		since  time.Duration
		raised bool
		want   int
	}{
		{4 * mib, BusyInterval / 10, false, 100},
		{4 * mib, BusyInterval, false, GCPercent},    // not busy
		{4 * mib, 2 * BusyInterval, true, 100},       // raised, still busy enough
		{4 * mib, 4 * BusyInterval, true, GCPercent}, // raised, no longer busy
		{10 * mib, time.Millisecond, false, 80},
		{64 * mib, time.Millisecond, false, GCPercent},
	} {
		if got := targetAfter(tc.live, tc.since, tc.raised); got != tc.want {
			t.Errorf("%d MiB live, %v since the last collection, raised %v: target %d, want %d", tc.live/mib, tc.since, tc.raised, got, tc.want)
		}
	}
}

// TestTuneAfterCollections runs the real collector: after collections in
// quick succession the target is set from the live heap they marked.
func TestTuneAfterCollections(t *testing.T) {
	var mu sync.Mutex
	var got []int
	stop := TuneAfterCollections(func(p int) int {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, p)
		return 0
	})
	// This test binary's live heap is small: the target goes from
	// GCPercent to what PercentFor gives it, 100.
	want := PercentFor(1 << 20)
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no target set after 10 s of collections")
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	mu.Lock()
	defer mu.Unlock()
	if got[0] != want {
		t.Errorf("target set to %d after a collection of a small heap, want %d", got[0], want)
	}
}
