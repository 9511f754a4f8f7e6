package main

import (
	"context"
	"errors"
	"flag"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestAnalyzeTrial(t *testing.T) {
	base := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(msec float64) time.Time { return base.Add(ms(msec)) }
	fail := errors.New("unavailable")
	sent := at(100)
	exited := at(101)
	probes := []probe{
		{start: at(90), end: at(95)},              // before the signal
		{start: at(98), end: at(1200)},            // started before, acked after: not a "first commit"
		{start: at(100), end: at(102), err: fail}, // failed
		{start: at(105), end: at(1900)},           // started after, but acked later than the next one
		{start: at(1500), end: at(1502)},          // the first ack of a put started after the signal
		{start: at(1600), end: at(1603)},
	}
	got, err := analyzeTrial(sent, exited, probes)
	if err != nil {
		t.Fatal(err)
	}
	if want := ms(1402); got.FirstCommit != want {
		t.Errorf("FirstCommit = %v, want %v", got.FirstCommit, want)
	}
	// Acks after the signal up to the first ack of a put started after
	// the exit: 1200, 1502; gaps from sent: 1100, 302.
	if want := ms(1100); got.Stall != want {
		t.Errorf("Stall = %v, want %v", got.Stall, want)
	}
}

func TestAnalyzeTrialStartAtSignalCounts(t *testing.T) {
	base := time.Now()
	got, err := analyzeTrial(base, base, []probe{{start: base, end: base.Add(ms(3))}})
	if err != nil {
		t.Fatal(err)
	}
	if got.FirstCommit != ms(3) || got.Stall != ms(3) {
		t.Errorf("got %+v, want 3 ms and 3 ms", got)
	}
}

func TestAnalyzeTrialStallAfterEarlyCommit(t *testing.T) {
	// After a graceful stop the old leader may still commit a put started
	// after the signal; the hand-off gap comes later.
	base := time.Now()
	at := func(msec float64) time.Time { return base.Add(ms(msec)) }
	probes := []probe{
		{start: at(1), end: at(3)},
		{start: at(6), end: at(8)},
		{start: at(11), end: at(250)}, // waited for the hand-off
		{start: at(260), end: at(262)},
	}
	got, err := analyzeTrial(at(0), at(200), probes)
	if err != nil {
		t.Fatal(err)
	}
	if got.FirstCommit != ms(3) || got.Stall != ms(242) {
		t.Errorf("got %+v, want first commit 3 ms, stall 242 ms", got)
	}
}

func TestAnalyzeTrialErrors(t *testing.T) {
	base := time.Now()
	at := func(msec float64) time.Time { return base.Add(ms(msec)) }
	fail := errors.New("x")
	tests := []struct {
		name         string
		sent, exited time.Time
		probes       []probe
		want         string
	}{
		{"nothing after the signal", at(10), at(10), []probe{{start: at(1), end: at(20)}}, "started after the signal"},
		{"only failures", at(10), at(10), []probe{{start: at(11), end: at(20), err: fail}}, "started after the signal"},
		{"nothing after the exit", at(10), at(30), []probe{{start: at(11), end: at(20)}}, "after the process exited"},
		{"exit before signal", at(10), at(5), nil, "before the signal"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := analyzeTrial(tc.sent, tc.exited, tc.probes)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// fakeCluster is an in-memory stand-in for a cluster: after a disturbance
// it rejects a fixed number of writes, then accepts them again.
type fakeCluster struct {
	mu           sync.Mutex
	down         bool
	failuresLeft int
	recoveredAt  time.Time
	keys         map[string]int // key -> len(value)
	failEvery    int            // if > 0, every failEvery-th put fails
	puts         int
}

var errFakeDown = errors.New("fake cluster: no leader")

func (c *fakeCluster) put(key string, value []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.puts++
	if c.failEvery > 0 && c.puts%c.failEvery == 0 {
		return errFakeDown
	}
	if c.down {
		if c.failuresLeft > 0 {
			c.failuresLeft--
			return errFakeDown
		}
		c.down = false
		c.recoveredAt = time.Now()
	}
	if c.keys == nil {
		c.keys = make(map[string]int)
	}
	c.keys[key] = len(value)
	return nil
}

type fakeWriter struct{ c *fakeCluster }

func (w fakeWriter) Put(ctx context.Context, key string, value []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return w.c.put(key, value)
}

func (fakeWriter) Close() error { return nil }

type fakeTarget struct {
	c        *fakeCluster
	restores int
}

func (*fakeTarget) Name() string                                { return "fake" }
func (*fakeTarget) Describe() string                            { return "in memory" }
func (*fakeTarget) Start(context.Context, string) error         { return nil }
func (f *fakeTarget) NewWriter(context.Context) (Writer, error) { return fakeWriter{f.c}, nil }
func (f *fakeTarget) Restore(context.Context) error             { f.restores++; return nil }
func (*fakeTarget) Stop() error                                 { return nil }

func (f *fakeTarget) KillLeader(context.Context) (time.Time, error) {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	f.c.down, f.c.failuresLeft = true, 5
	return time.Now(), nil
}

func (f *fakeTarget) StopLeader(ctx context.Context) (time.Time, error) { return f.KillLeader(ctx) }

func testConfig(t *testing.T) *Config {
	t.Helper()
	cfg := registerFlags(flag.NewFlagSet("test", flag.ContinueOnError))
	cfg.ProbeInterval = time.Millisecond
	cfg.TrialTimeout = 20 * time.Second
	cfg.Trials = 3
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func testEnv(t *testing.T, tg Target) *Env {
	return &Env{Config: testConfig(t), Target: tg, Dir: t.TempDir(), Progressf: t.Logf}
}

func TestRunTrialWithFake(t *testing.T) {
	f := &fakeTarget{c: &fakeCluster{}}
	env := testEnv(t, f)
	var sent time.Time
	res, err := runTrial(context.Background(), env, 1, func(ctx context.Context) (time.Time, error) {
		var err error
		sent, err = f.KillLeader(ctx)
		return sent, err
	})
	if err != nil {
		t.Fatal(err)
	}
	f.c.mu.Lock()
	recovered := f.c.recoveredAt
	f.c.mu.Unlock()
	if recovered.IsZero() {
		t.Fatal("the fake cluster never recovered")
	}
	if min := recovered.Sub(sent); res.FirstCommit < min {
		t.Errorf("FirstCommit = %v, but the cluster accepted writes only %v after the signal", res.FirstCommit, min)
	}
	if res.Stall < res.FirstCommit {
		t.Errorf("Stall %v < FirstCommit %v although no write succeeded in between", res.Stall, res.FirstCommit)
	}
}

func TestTrialExperimentRestoresAfterEachTrial(t *testing.T) {
	f := &fakeTarget{c: &fakeCluster{}}
	env := testEnv(t, f)
	rows, err := failoverExperiment(context.Background(), env)
	if err != nil {
		t.Fatal(err)
	}
	if f.restores != env.Config.Trials {
		t.Errorf("Restore called %d times, want %d", f.restores, env.Config.Trials)
	}
	if len(rows) != 1 || !strings.HasPrefix(rows[0].Value, "median ") || !strings.Contains(rows[0].Note, "3 trials: ") {
		t.Errorf("rows = %+v", rows)
	}
}

func TestRunTrialTimesOutWhenNeverWritable(t *testing.T) {
	f := &fakeTarget{c: &fakeCluster{down: true, failuresLeft: 1 << 30}}
	env := testEnv(t, f)
	env.Config.TrialTimeout = 50 * time.Millisecond
	_, err := runTrial(context.Background(), env, 1, f.KillLeader)
	if err == nil || !strings.Contains(err.Error(), "not writable before the signal") {
		t.Errorf("err = %v, want a not-writable error", err)
	}
}

func TestRunTrialDisturbError(t *testing.T) {
	f := &fakeTarget{c: &fakeCluster{}}
	boom := errors.New("boom")
	_, err := runTrial(context.Background(), testEnv(t, f), 1, func(context.Context) (time.Time, error) { return time.Time{}, boom })
	if !errors.Is(err, boom) {
		t.Errorf("err = %v, want %v", err, boom)
	}
}
