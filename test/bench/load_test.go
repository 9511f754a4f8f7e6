package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestRunLoadOps(t *testing.T) {
	c := &fakeCluster{failEvery: 10}
	writers := []Writer{fakeWriter{c}, fakeWriter{c}, fakeWriter{c}}
	res, err := runLoad(context.Background(), writers, loadSpec{
		Writers: 3, ValueSize: 100, Ops: 100, OpTimeout: time.Second, KeyPrefix: "t",
	})
	if err != nil {
		t.Fatal(err)
	}
	// 100 ops over 3 writers round up to 34 each; every 10th put fails.
	if c.puts != 102 || res.Errors != 10 || len(res.Latencies) != 92 {
		t.Errorf("puts %d, errors %d, latencies %d; want 102, 10, 92", c.puts, res.Errors, len(res.Latencies))
	}
	if len(c.keys) != 92 {
		t.Errorf("%d distinct keys written, want 92", len(c.keys))
	}
	for k, n := range c.keys {
		if n != 100 || !strings.HasPrefix(k, "t/w") {
			t.Errorf("key %q with %d-byte value", k, n)
		}
	}
	if res.FirstErr == nil || res.Wall <= 0 || res.Throughput() <= 0 {
		t.Errorf("result %+v", res)
	}
}

func TestRunLoadDuration(t *testing.T) {
	c := &fakeCluster{}
	res, err := runLoad(context.Background(), []Writer{fakeWriter{c}}, loadSpec{
		Writers: 1, ValueSize: 8, Duration: 10 * time.Millisecond, OpTimeout: time.Second, KeyPrefix: "d",
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Latencies) == 0 || res.Wall < 10*time.Millisecond {
		t.Errorf("%d latencies in %v", len(res.Latencies), res.Wall)
	}
}

func TestRunLoadInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := runLoad(ctx, []Writer{fakeWriter{&fakeCluster{}}}, loadSpec{Writers: 1, ValueSize: 8, Ops: 10, OpTimeout: time.Second})
	if err == nil {
		t.Error("no error from an interrupted load")
	}
}

func TestLatencyExperimentRows(t *testing.T) {
	env := testEnv(t, &fakeTarget{c: &fakeCluster{}})
	env.Config.Writers = []int{1, 4}
	env.Config.Sizes = []int{256, 4096}
	env.Config.Warmup = 0
	env.Config.Ops = 40
	rows, err := latencyExperiment(context.Background(), env)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"put latency, 1 writer, 256 B values",
		"put latency, 1 writer, 4 KiB values",
		"put latency, 4 writers, 256 B values",
		"put latency, 4 writers, 4 KiB values",
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(rows), len(want))
	}
	for i, r := range rows {
		if r.What != want[i] || r.Target != "fake" || !strings.HasSuffix(r.Value, "commits/s") || !strings.HasPrefix(r.Note, "40 puts") {
			t.Errorf("row %d = %+v", i, r)
		}
	}
}
