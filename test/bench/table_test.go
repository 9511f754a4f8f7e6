package main

import (
	"strings"
	"testing"
)

func TestTableGroupsRowsByWhat(t *testing.T) {
	var tb Table
	tb.Add(
		Row{What: "put latency", Target: "a", P50: "1.00 ms", P99: "2.00 ms", Value: "900 commits/s"},
		Row{What: "failover", Target: "a", Value: "median 1.00 s"},
	)
	tb.Add(
		Row{What: "put latency", Target: "b", P50: "3.00 ms", P99: "4.00 ms", Value: "300 commits/s"},
		Row{What: "failover", Target: "b", Value: "median 2.00 s", Note: "x|y\nz"},
		Row{What: "idle RSS", Target: "a", Value: "20 MiB"},
	)
	var b strings.Builder
	if err := tb.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"| what        | target | p50     | p99     | throughput or time | note   |",
		"|-------------|--------|---------|---------|--------------------|--------|",
		"| put latency | a      | 1.00 ms | 2.00 ms | 900 commits/s      | –      |",
		"| put latency | b      | 3.00 ms | 4.00 ms | 300 commits/s      | –      |",
		"| failover    | a      | –       | –       | median 1.00 s      | –      |",
		"| failover    | b      | –       | –       | median 2.00 s      | x\\|y z |",
		"| idle RSS    | a      | –       | –       | 20 MiB             | –      |",
		"",
	}, "\n")
	if got := b.String(); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
	if tb.Len() != 5 {
		t.Errorf("Len = %d, want 5", tb.Len())
	}
}

func TestTableEmpty(t *testing.T) {
	var b strings.Builder
	if err := (&Table{}).WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(b.String(), "\n"); lines != 2 {
		t.Errorf("empty table has %d lines, want header and rule:\n%s", lines, b.String())
	}
}
