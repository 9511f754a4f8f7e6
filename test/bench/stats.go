package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// percentile returns the p-th percentile (0 < p <= 100) of samples by the
// nearest-rank method: the smallest sample such that at least p percent of
// all samples are less than or equal to it. It returns 0 for no samples.
// samples need not be sorted and are not modified.
func percentile(samples []time.Duration, p float64) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	return percentileSorted(sorted, p)
}

// percentileSorted is percentile for samples already sorted in ascending
// order.
func percentileSorted(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	// The epsilon keeps floating-point error (99.9/100*1000 is a hair
	// above 999) from moving the rank up by one.
	rank := int(math.Ceil(p/100*float64(n) - 1e-9))
	rank = min(max(rank, 1), n)
	return sorted[rank-1]
}

// summary describes a set of durations.
type summary struct {
	N        int
	P50, P99 time.Duration
	Max      time.Duration
}

// summarize computes the nearest-rank p50 and p99 and the maximum of
// samples. With an even number of samples the p50 is the lower of the two
// middle samples (nearest rank); no interpolation is done.
func summarize(samples []time.Duration) summary {
	if len(samples) == 0 {
		return summary{}
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	return summary{
		N:   len(sorted),
		P50: percentileSorted(sorted, 50),
		P99: percentileSorted(sorted, 99),
		Max: sorted[len(sorted)-1],
	}
}

// fmtDuration formats d for the result table with about three significant
// digits: "0.412 ms", "1.23 ms", "45.6 ms", "812 ms", "1.52 s".
func fmtDuration(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case d < 0:
		return "-" + fmtDuration(-d)
	case ms < 1:
		return fmt.Sprintf("%.3f ms", ms)
	case ms < 10:
		return fmt.Sprintf("%.2f ms", ms)
	case ms < 100:
		return fmt.Sprintf("%.1f ms", ms)
	case ms < 1000:
		return fmt.Sprintf("%.0f ms", ms)
	default:
		return fmt.Sprintf("%.2f s", ms/1000)
	}
}

// fmtDurations formats a list of durations, each with fmtDuration, joined
// by ", ".
func fmtDurations(ds []time.Duration) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = fmtDuration(d)
	}
	return strings.Join(parts, ", ")
}

// fmtBytes formats a size in bytes using binary units: "256 B", "4 KiB",
// "1.5 MiB".
func fmtBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	units := []string{"KiB", "MiB", "GiB", "TiB"}
	v := float64(n) / unit
	i := 0
	for v >= unit && i < len(units)-1 {
		v /= unit
		i++
	}
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f %s", v, units[i])
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

// fmtRate formats a rate in events per second with a unit word, e.g.
// "812 commits/s" or "12.3 commits/s".
func fmtRate(perSecond float64, unit string) string {
	if perSecond < 100 {
		return fmt.Sprintf("%.1f %s/s", perSecond, unit)
	}
	return fmt.Sprintf("%.0f %s/s", perSecond, unit)
}
