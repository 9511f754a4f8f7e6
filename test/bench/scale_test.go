package main

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

func TestScaleHostDistinct(t *testing.T) {
	seen := map[string]int{}
	for i := range 1000 {
		h := scaleHost(i)
		if j, dup := seen[h]; dup {
			t.Fatalf("slots %d and %d share %s", j, i, h)
		}
		seen[h] = i
	}
	if got := scaleHost(0); got != "127.2.0.1" {
		t.Errorf("scaleHost(0) = %s, want 127.2.0.1", got)
	}
	if got := scaleHost(250); got != "127.2.1.1" {
		t.Errorf("scaleHost(250) = %s, want 127.2.1.1", got)
	}
}

func TestScalePeers(t *testing.T) {
	addrs := []string{"a", "b", "c", "d", "e"}
	for _, tc := range []struct {
		i    int
		want []string
	}{
		{0, []string{"a", "b", "c"}},
		{2, []string{"a", "b", "c"}},
		{3, []string{"a", "b", "c", "d"}},
		{4, []string{"a", "b", "c", "e"}},
	} {
		if got := scalePeers(addrs, tc.i, 3); !slices.Equal(got, tc.want) {
			t.Errorf("scalePeers(%d) = %v, want %v", tc.i, got, tc.want)
		}
	}
	if got := scalePeers(addrs[:2], 1, 3); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("fewer members than seeds: %v", got)
	}
	// The plan must not alias the address list.
	p := scalePeers(addrs, 4, 3)
	p[0] = "x"
	if addrs[0] != "a" {
		t.Error("scalePeers changed its input")
	}
}

func TestSpreadKeys(t *testing.T) {
	for _, tc := range []struct {
		keys, n int
		want    []int
	}{
		{10, 3, []int{4, 3, 3}},
		{9, 3, []int{3, 3, 3}},
		{2, 4, []int{1, 1, 0, 0}},
		{0, 2, []int{0, 0}},
		{5, 0, nil},
	} {
		got := spreadKeys(tc.keys, tc.n)
		if !slices.Equal(got, tc.want) {
			t.Errorf("spreadKeys(%d, %d) = %v, want %v", tc.keys, tc.n, got, tc.want)
		}
	}
	sum := 0
	for _, k := range spreadKeys(100000, 999) {
		sum += k
	}
	if sum != 100000 {
		t.Errorf("spreadKeys(100000, 999) sums to %d", sum)
	}
}

func TestSpreadOf(t *testing.T) {
	if got := spreadOf([]int64{5, 1, 9, 3}); got != (spread{1, 3, 9}) {
		t.Errorf("spreadOf = %+v, want min 1, median 3, max 9", got)
	}
	if got := spreadOf([]int64{7}); got != (spread{7, 7, 7}) {
		t.Errorf("one sample: %+v", got)
	}
	if got := spreadOf(nil); got != (spread{}) {
		t.Errorf("no samples: %+v", got)
	}
	xs := []int64{3, 2, 1}
	spreadOf(xs)
	if !slices.Equal(xs, []int64{3, 2, 1}) {
		t.Error("spreadOf sorted its input")
	}
}

func TestSpreadBytesNegative(t *testing.T) {
	if got, want := (spread{-2048, 0, 1536}).bytes(), "min -2 KiB, median 0 B, max 1.5 KiB"; got != want {
		t.Errorf("bytes() = %q, want %q", got, want)
	}
}

func TestUnitSetAndDiff(t *testing.T) {
	units := []*adminpb.Unit{
		{Name: "scl/1", State: "active", Pod: "scl-1"},
		{Name: "scl/0", State: "released", Pod: "scl-0"},
		{Name: "scl/2", State: "removed"},
	}
	live, removed := unitSet(units)
	if !slices.Equal(live, []string{"scl/0@scl-0", "scl/1@scl-1"}) || !slices.Equal(removed, []string{"scl/2"}) {
		t.Fatalf("unitSet = %v, %v", live, removed)
	}
	added, gone := diffSets([]string{"a", "b"}, []string{"b", "c"})
	if !slices.Equal(added, []string{"c"}) || !slices.Equal(gone, []string{"a"}) {
		t.Errorf("diffSets = %v, %v", added, gone)
	}
	if added, gone := diffSets(live, live); len(added)+len(gone) != 0 {
		t.Errorf("same sets differ: %v, %v", added, gone)
	}
}

func TestBagTotals(t *testing.T) {
	keys, size := bagTotals([]*adminpb.Bag{
		{Data: map[string]string{"ab": "xyz", "c": ""}},
		{Data: map[string]string{"k": "v"}},
		{},
	})
	if keys != 3 || size != 2+3+1+0+1+1 {
		t.Errorf("bagTotals = %d keys, %d bytes; want 3, 8", keys, size)
	}
}

func TestParseHookStarts(t *testing.T) {
	line := func(ts, hook, remote string) string {
		return fmt.Sprintf(`time=%s level=INFO msg="running hook" app=scl unit=scl/1 hook=%s relation=replicas:0 remote_unit=%s`, ts, hook, remote)
	}
	data := line("2026-12-05T10:00:00.123Z", "replicas-relation-changed", `""`) + "\n" +
		`time=2026-12-05T10:00:00.200Z level=INFO msg="hook done" hook=x` + "\n" +
		line("2026-12-05T10:00:01.5Z", "replicas-relation-joined", "scl/2") + "\n" +
		line("2026-12-05T10:00:02Z", "start", "") // no newline yet: not consumed
	hs, busy, n := parseHookStarts([]byte(data), false)
	if len(hs) != 2 || !busy {
		t.Fatalf("got %d hook starts, want 2 with the second running: %+v, running %v", len(hs), hs, busy)
	}
	want0 := time.Date(2026, 12, 5, 10, 0, 0, 123e6, time.UTC)
	if !hs[0].at.Equal(want0) || hs[0].hook != "replicas-relation-changed" || hs[0].remoteUnit != "" {
		t.Errorf("first = %+v", hs[0])
	}
	if hs[1].hook != "replicas-relation-joined" || hs[1].remoteUnit != "scl/2" {
		t.Errorf("second = %+v", hs[1])
	}
	if want := len(data) - len(line("2026-12-05T10:00:02Z", "start", "")); n != want {
		t.Errorf("consumed %d bytes, want %d (up to the last newline)", n, want)
	}
	if hs, busy, n := parseHookStarts([]byte("partial line"), true); len(hs) != 0 || n != 0 || !busy {
		t.Errorf("partial line: %v, %d, running %v", hs, n, busy)
	}
	// A hook runs from its start to its commit, failure or refusal, or
	// until the sidecar stops or starts again (killed in the hook).
	for _, end := range []string{
		`time=2026-12-05T10:00:03Z level=INFO msg="hook committed" hook=start writes=0 run_ms=3 commit_ms=2`,
		`time=2026-12-05T10:00:03Z level=ERROR msg="hook failed; retrying" hook=start err="exit 1" attempt=1 retry_in=5s`,
		`time=2026-12-05T10:00:03Z level=WARN msg="the hook's changes were refused: this pod no longer holds the unit" hook=start err=x`,
		`time=2026-12-05T10:00:03Z level=INFO msg=starting version=dev app=scl pod=scl-1`,
		`time=2026-12-05T10:00:03Z level=INFO msg="sidecar stopped" took=1s`,
	} {
		if _, busy, _ := parseHookStarts([]byte(line("2026-12-05T10:00:02Z", "start", `""`)+"\n"+end+"\n"), false); busy {
			t.Errorf("still running after %s", end)
		}
		if _, busy, _ := parseHookStarts([]byte(end+"\n"+line("2026-12-05T10:00:04Z", "stop", `""`)+"\n"), false); !busy {
			t.Errorf("a hook started after %s is not running", end)
		}
	}
	if _, busy, _ := parseHookStarts([]byte(`time=2026-12-05T10:00:03Z level=INFO msg="hook committed" hook=start`+"\n"), true); busy {
		t.Error("a hook that ended in a later read still runs")
	}
	if _, busy, _ := parseHookStarts([]byte(`time=2026-12-05T10:00:03Z level=INFO msg="unit ready"`+"\n"), true); !busy {
		t.Error("a line about something else ended the running hook")
	}
}

func TestLatencyBaseline(t *testing.T) {
	curve := []latencyPoint{
		{Target: "etcd", Writers: 1, Size: 256, P50: time.Millisecond},
		{Target: "bk", Writers: 4, Size: 256, P50: 2 * time.Millisecond},
		{Target: "bk", Writers: 1, Size: 256, P50: 3 * time.Millisecond},
	}
	if got := latencyBaseline(curve, "bk", 1, 256); got != 3*time.Millisecond {
		t.Errorf("baseline = %s, want 3ms", got)
	}
	if got := latencyBaseline(curve, "bk", 1, 4096); got != 0 {
		t.Errorf("missing point = %s, want 0", got)
	}
}
