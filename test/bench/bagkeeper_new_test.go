package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// setFlag sets *p to v for the rest of the test.
func setFlag[T any](t *testing.T, p *T, v T) {
	t.Helper()
	old := *p
	*p = v
	t.Cleanup(func() { *p = old })
}

// TestBagkeeperPauseReadsSoak runs one pause trial, the reads experiment
// with one reader and a memory soak of a few seconds on a real cluster. It
// takes about half a minute; -short skips it.
func TestBagkeeperPauseReadsSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real cluster")
	}
	env := testEnv(t, nil)
	env.Config.ProbeInterval = 5 * time.Millisecond
	env.Config.Warmup, env.Config.Duration = 0, 300*time.Millisecond
	tg, err := newBagkeeperTarget(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	env.Target = tg
	t.Cleanup(func() {
		if err := tg.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := tg.Start(ctx, env.Dir); err != nil {
		t.Fatal(err)
	}

	setFlag(t, pauseTrials, 1)
	rows, err := pauseExperiment(ctx, env)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].P50 == "" || !strings.Contains(rows[0].Note, "1 trials: ") {
		t.Errorf("pause rows = %+v", rows)
	}
	t.Logf("pause: %s", rows[0].Value)

	setFlag(t, &readReaders, intList{1})
	rows, err = readsExperiment(ctx, env)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 {
		t.Fatalf("%d reads rows, want 4 (stale and linearizable, leader and follower)", len(rows))
	}
	for _, r := range rows {
		if r.P50 == "" || strings.Contains(r.Note, "failed") {
			t.Errorf("reads row %+v", r)
		}
	}

	out := t.TempDir()
	setFlag(t, soakKeys, 64)
	setFlag(t, soakKeysPerBag, 32)
	setFlag(t, soakValueSize, 256)
	setFlag(t, soakRampStep, 500*time.Millisecond)
	setFlag(t, &soakRampWriters, intList{1, 4})
	setFlag(t, soakDuration, 2*time.Second)
	setFlag(t, soakSampleEvery, 250*time.Millisecond)
	setFlag(t, soakTrailingLogs, 128)
	setFlag(t, soakOut, out)
	setFlag(t, soakSVG, "")
	rows, err = soakExperiment(ctx, env)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1+3*3 {
		t.Fatalf("%d soak rows, want the write rate and 3 checks for each of 3 members", len(rows))
	}
	if !strings.Contains(rows[0].Note, "GetBags on the leader at the end: ") || strings.Contains(rows[0].Note, "GetBags at the end failed") {
		t.Errorf("soak rate row %+v", rows[0])
	}
	for _, r := range rows[1:] {
		if r.Value != "PASS" && r.Value != "FAIL" {
			t.Errorf("soak check row %+v", r)
		}
	}
	csvs, _ := filepath.Glob(filepath.Join(out, "memory-*.csv"))
	svgs, _ := filepath.Glob(filepath.Join(out, "memory-*.svg"))
	if len(csvs) != 1 || len(svgs) != 1 {
		t.Fatalf("soak output: %v, %v", csvs, svgs)
	}
	f, err := os.Open(csvs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	samples, err := parseSoakCSV(f)
	if err != nil {
		t.Fatal(err)
	}
	phases := map[string]bool{}
	for _, s := range samples {
		phases[s.Phase] = true
		if s.RSSAnon <= 0 || s.RSSFile <= 0 {
			t.Errorf("sample without RSS: %+v", s)
		}
	}
	if !phases[phaseFill] || !phases[phaseRamp] || !phases[phaseSoak] {
		t.Errorf("phases sampled: %v", phases)
	}
	if last := samples[len(samples)-1]; last.RaftDB == 0 || last.Disk == 0 || last.Live != 64*int64(len("soak000000")+256) {
		t.Errorf("last sample %+v", last)
	}
	svg, err := os.ReadFile(svgs[0])
	if err != nil {
		t.Fatal(err)
	}
	svgElements(t, svg)
}
