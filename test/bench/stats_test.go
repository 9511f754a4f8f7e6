package main

import (
	"testing"
	"time"
)

func ms(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }

func TestPercentileNearestRank(t *testing.T) {
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = ms(float64(100 - i)) // 100 ms down to 1 ms, unsorted
	}
	thousand := make([]time.Duration, 1000)
	for i := range thousand {
		thousand[i] = ms(float64(i + 1))
	}
	tests := []struct {
		name    string
		samples []time.Duration
		p       float64
		want    time.Duration
	}{
		{"empty", nil, 50, 0},
		{"single p50", []time.Duration{ms(7)}, 50, ms(7)},
		{"single p99", []time.Duration{ms(7)}, 99, ms(7)},
		{"two p50 is the lower", []time.Duration{ms(2), ms(1)}, 50, ms(1)},
		{"odd p50 is the middle", []time.Duration{ms(5), ms(1), ms(3)}, 50, ms(3)},
		{"100 p50", hundred, 50, ms(50)},
		{"100 p99", hundred, 99, ms(99)},
		{"100 p100", hundred, 100, ms(100)},
		{"1000 p99", thousand, 99, ms(990)},
		{"1000 p99.9", thousand, 99.9, ms(999)},
		{"tiny p is the minimum", thousand, 0.0001, ms(1)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := percentile(tc.samples, tc.p); got != tc.want {
				t.Errorf("percentile(%v) = %v, want %v", tc.p, got, tc.want)
			}
		})
	}
}

func TestPercentileDoesNotModifyInput(t *testing.T) {
	in := []time.Duration{3, 1, 2}
	percentile(in, 50)
	summarize(in)
	if in[0] != 3 || in[1] != 1 || in[2] != 2 {
		t.Errorf("input reordered: %v", in)
	}
}

func TestSummarize(t *testing.T) {
	s := summarize([]time.Duration{ms(4), ms(1), ms(3), ms(2), ms(100)})
	want := summary{N: 5, P50: ms(3), P99: ms(100), Max: ms(100)}
	if s != want {
		t.Errorf("summarize = %+v, want %+v", s, want)
	}
	if (summarize(nil) != summary{}) {
		t.Errorf("summarize(nil) = %+v, want zero", summarize(nil))
	}
}

func TestFmtDuration(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0.000 ms"},
		{412 * time.Microsecond, "0.412 ms"},
		{ms(1.234), "1.23 ms"},
		{ms(45.67), "45.7 ms"},
		{ms(812.4), "812 ms"},
		{ms(1523), "1.52 s"},
		{-ms(2), "-2.00 ms"},
	}
	for _, tc := range tests {
		if got := fmtDuration(tc.d); got != tc.want {
			t.Errorf("fmtDuration(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

func TestFmtBytesAndRate(t *testing.T) {
	for n, want := range map[int64]string{
		256: "256 B", 1023: "1023 B", 4096: "4 KiB", 1536: "1.5 KiB",
		50 << 20: "50 MiB", 23 << 30: "23 GiB",
	} {
		if got := fmtBytes(n); got != want {
			t.Errorf("fmtBytes(%d) = %q, want %q", n, got, want)
		}
	}
	if got := fmtRate(812.4, "commits"); got != "812 commits/s" {
		t.Errorf("fmtRate = %q", got)
	}
	if got := fmtRate(12.34, "commits"); got != "12.3 commits/s" {
		t.Errorf("fmtRate = %q", got)
	}
}
