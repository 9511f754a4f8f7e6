package main

import (
	"flag"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

var latencySVG = flag.String("latency-svg", filepath.Join("docs", "commit-latency.svg"), "where the latency experiment writes its plot of commit latency against writers (\"\" for none)")

// latencyPoint is one measured combination of the latency experiment.
type latencyPoint struct {
	Target  string
	Writers int
	Size    int
	P50     time.Duration
	Rate    float64 // commits per second
}

// latencyCurve collects the latency experiment's points over all targets
// of the run, in the order measured.
var latencyCurve []latencyPoint

// latencyDashes tell the value sizes apart; the targets differ by colour.
var latencyDashes = []string{"", "6 3", "2 2", "8 3 2 3"}

// latencyChart plots p50 commit latency against the number of writers: one
// line per target and value size.
func latencyChart(points []latencyPoint, subtitle string) lineChart {
	var targets []string
	var sizes []int
	for _, p := range points {
		if !slices.Contains(targets, p.Target) {
			targets = append(targets, p.Target)
		}
		if !slices.Contains(sizes, p.Size) {
			sizes = append(sizes, p.Size)
		}
	}
	slices.Sort(sizes)
	chart := lineChart{
		Title:    "Commit latency (p50) against concurrent writers",
		Subtitle: subtitle,
		XLabel:   "writers",
		YLabel:   "p50 put latency, ms",
	}
	for ti, t := range targets {
		for si, size := range sizes {
			s := chartSeries{
				Name:  fmt.Sprintf("%s, %s values", t, fmtBytes(int64(size))),
				Color: chartColors[ti%len(chartColors)],
				Dash:  latencyDashes[si%len(latencyDashes)],
			}
			for _, p := range points {
				if p.Target == t && p.Size == size {
					s.X = append(s.X, float64(p.Writers))
					s.Y = append(s.Y, float64(p.P50)/float64(time.Millisecond))
				}
			}
			if len(s.X) > 0 {
				chart.Series = append(chart.Series, s)
			}
		}
	}
	return chart
}

// writeLatencyChart writes the plot of points to path; header is the run's
// header line, split into the subtitle.
func writeLatencyChart(path string, points []latencyPoint, header string) error {
	parts := strings.Split(header, " · ")
	sub := strings.Join(parts[:min(len(parts), 3)], " · ")
	if len(parts) > 3 {
		sub += "\n" + strings.Join(parts[3:], " · ")
	}
	return writeChartFile(path, latencyChart(points, sub))
}
