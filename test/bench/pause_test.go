package main

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestAnalyzePause(t *testing.T) {
	base := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(msec float64) time.Time { return base.Add(ms(msec)) }
	fail := errors.New("unavailable")
	sent := at(100)
	probes := []probe{
		{start: at(90), end: at(95)},               // done before the pause
		{start: at(97), end: at(1300)},             // in flight, forwarded again to the new leader
		{start: at(99), end: at(1400), err: fail},  // in flight, failed
		{start: at(100), end: at(1350)},            // started at the pause: counts
		{start: at(105), end: at(1250)},            // the first commit
		{start: at(110), end: at(1200), err: fail}, // failures do not count
	}
	got, err := analyzePause(sent, probes)
	if err != nil {
		t.Fatal(err)
	}
	want := pauseResult{FirstCommit: ms(1150), InFlight: 2, InFlightFailed: 1, InFlightDone: ms(1300)}
	if got != want {
		t.Errorf("analyzePause = %+v, want %+v", got, want)
	}
	if _, err := analyzePause(sent, probes[:3]); err == nil {
		t.Error("no error without a write started after the pause")
	}
}

// fakePauser pauses a fakeCluster: while paused, writes fail a number of
// times, then succeed (a new leader).
type fakePauser struct {
	c       *fakeCluster
	resumes int
}

func (p *fakePauser) ElectionTimeout() (time.Duration, string) {
	return 10 * time.Millisecond, "fake timing"
}

func (p *fakePauser) PreparePause(context.Context) (*pauseSetup, error) {
	var retries atomic.Int64
	leader := "m0"
	return &pauseSetup{
		Leader: "m0", Follower: "m1",
		Writer: &funcWriter{
			put: func(ctx context.Context, key string, value []byte) error {
				return retryPinned(ctx, &retries, func(error) bool { return false }, func(context.Context) error { return p.c.put(key, value) })
			},
			close: func() error { return nil },
		},
		Pause: func() (time.Time, error) {
			p.c.mu.Lock()
			defer p.c.mu.Unlock()
			p.c.down, p.c.failuresLeft = true, 3
			leader = "m1"
			return time.Now(), nil
		},
		Resume:    func(context.Context) error { p.resumes++; return nil },
		LeaderNow: func(context.Context) (string, error) { return leader, nil },
		Retries:   retries.Load,
	}, nil
}

func TestPauseExperimentWithFake(t *testing.T) {
	p := &fakePauser{c: &fakeCluster{}}
	env := testEnv(t, &pauseTarget{fakeTarget: &fakeTarget{c: p.c}, fakePauser: p})
	old := *pauseTrials
	*pauseTrials = 3
	defer func() { *pauseTrials = old }()
	rows, err := pauseExperiment(context.Background(), env)
	if err != nil {
		t.Fatal(err)
	}
	if p.resumes != 3 {
		t.Errorf("Resume called %d times, want 3", p.resumes)
	}
	if len(rows) != 1 {
		t.Fatalf("rows = %+v", rows)
	}
	r := rows[0]
	for _, want := range []string{"the election timeout (10.0 ms)", "target ≤ 2×"} {
		if !strings.Contains(r.Value, want) {
			t.Errorf("value %q lacks %q", r.Value, want)
		}
	}
	for _, want := range []string{"3 trials: ", "became the leader in 3 of them", "fake timing"} {
		if !strings.Contains(r.Note, want) {
			t.Errorf("note %q lacks %q", r.Note, want)
		}
	}
	if r.P50 == "" || r.P99 == "" {
		t.Errorf("no percentiles in %+v", r)
	}
}

// pauseTarget is a fake target that also takes part in the pause
// experiment.
type pauseTarget struct {
	*fakeTarget
	*fakePauser
}

func TestProberWaitSettledBefore(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	var calls atomic.Int64
	w := &funcWriter{
		put: func(ctx context.Context, key string, value []byte) error {
			if calls.Add(1) == 1 {
				started <- struct{}{}
				select {
				case <-release: // the first put hangs until released
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		},
		close: func() error { return nil },
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pr := startProber(ctx, w, time.Millisecond, 20*time.Second, "test")
	defer pr.stop()
	<-started
	cut := time.Now()
	// Puts started after cut finish; the first one is still pending.
	if err := pr.waitFor(ctx, ackedSince(cut)); err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithCancel(ctx)
	cancelShort()
	if err := pr.waitSettledBefore(short, cut); !errors.Is(err, context.Canceled) {
		t.Fatalf("waitSettledBefore with the first put pending = %v, want the context's error", err)
	}
	close(release)
	if err := pr.waitSettledBefore(ctx, cut); err != nil {
		t.Fatal(err)
	}
	res, err := analyzePause(cut, pr.stop())
	if err != nil {
		t.Fatal(err)
	}
	if res.InFlight != 1 || res.InFlightFailed != 0 {
		t.Errorf("analyzePause = %+v, want one write in flight", res)
	}
}
