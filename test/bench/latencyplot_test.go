package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLatencyChartHasALinePerTargetAndSize(t *testing.T) {
	var points []latencyPoint
	for _, target := range []string{"bagkeeper x", "etcd 3.4"} {
		for _, w := range []int{1, 4, 64} {
			for _, size := range []int{4096, 256} {
				points = append(points, latencyPoint{Target: target, Writers: w, Size: size, P50: time.Duration(w*size) * time.Microsecond / 100})
			}
		}
	}
	c := latencyChart(points, "sub")
	var names []string
	for _, s := range c.Series {
		names = append(names, s.Name)
		if len(s.X) != 3 || s.X[0] != 1 || s.X[2] != 64 {
			t.Errorf("%s: x %v, want the writer counts 1, 4, 64", s.Name, s.X)
		}
	}
	want := []string{"bagkeeper x, 256 B values", "bagkeeper x, 4 KiB values", "etcd 3.4, 256 B values", "etcd 3.4, 4 KiB values"}
	if strings.Join(names, "|") != strings.Join(want, "|") {
		t.Errorf("series %q, want %q", names, want)
	}
	if got := c.Series[1].Y[2]; got != 64*4096/100.0/1000 {
		t.Errorf("bagkeeper 4 KiB at 64 writers: %v ms", got)
	}
	if c.Series[0].Color == c.Series[2].Color || c.Series[0].Dash == c.Series[1].Dash {
		t.Errorf("targets must differ by colour and sizes by dash: %+v", c.Series)
	}

	path := filepath.Join(t.TempDir(), "docs", "latency.svg")
	if err := writeLatencyChart(path, points, "Run a · nproc 2 · memory 1 GiB · command: `x`"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || !bytes.Contains(b, []byte("<svg")) || !bytes.Contains(b, []byte("etcd 3.4, 4 KiB values")) {
		t.Fatalf("plot file: %v, %.100s", err, b)
	}
}
