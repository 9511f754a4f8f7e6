package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Failover and hand-off trials.
//
// During a trial a prober issues Puts open-loop: a new Put starts every
// -probe-interval whether or not earlier ones have finished (up to
// maxProbesInFlight at once), each retrying inside Writer.Put until it is
// acknowledged or its own timeout ends. Because new Puts keep starting, a
// Put that is stuck on the dead leader does not delay the measurement, and
// the time at which the cluster accepts writes again is observed to within
// about one probe interval plus one commit.
//
// Definitions (sent is the instant just before the signal, as returned by
// Target.KillLeader or Target.StopLeader):
//
//   - first commit: the earliest acknowledgement, minus sent, among Puts that
//     were started at or after sent. Puts started before the signal do not
//     count even if they are acknowledged afterwards, because the old leader
//     may have committed them before it went away. This is what an operator
//     experiences: "after I stopped the leader, how long until a write that I
//     issue succeeds?"
//   - longest write stall: the longest interval without any acknowledged Put
//     (whenever it was started), from sent until the first acknowledgement
//     of a Put started after the signalled process had exited. After a
//     graceful stop the old leader may still commit for a while and the gap
//     come later, during the hand-off itself; the stall shows that gap.

// maxProbesInFlight bounds the prober's concurrent Puts.
const maxProbesInFlight = 256

// probe is one Put issued by the prober.
type probe struct {
	start, end time.Time
	err        error
}

// ok reports whether the probe's Put was acknowledged.
func (p probe) ok() bool { return p.err == nil }

// trialResult is the outcome of one failover or hand-off trial; see the
// definitions above.
type trialResult struct {
	FirstCommit time.Duration
	Stall       time.Duration
}

// analyzeTrial computes a trial's result from all probes. sent is the
// instant just before the signal, exited the instant the harness saw the
// signalled process gone.
func analyzeTrial(sent, exited time.Time, probes []probe) (trialResult, error) {
	if exited.Before(sent) {
		return trialResult{}, fmt.Errorf("process exit (%s) before the signal (%s)", exited.Format(time.StampMicro), sent.Format(time.StampMicro))
	}
	var first, windowEnd time.Time
	for _, p := range probes {
		if !p.ok() {
			continue
		}
		if !p.start.Before(sent) && (first.IsZero() || p.end.Before(first)) {
			first = p.end
		}
		if !p.start.Before(exited) && (windowEnd.IsZero() || p.end.Before(windowEnd)) {
			windowEnd = p.end
		}
	}
	if first.IsZero() {
		return trialResult{}, errors.New("no write started after the signal was acknowledged")
	}
	if windowEnd.IsZero() {
		return trialResult{}, errors.New("no write started after the process exited was acknowledged")
	}
	var acks []time.Time
	for _, p := range probes {
		if p.ok() && p.end.After(sent) && !p.end.After(windowEnd) {
			acks = append(acks, p.end)
		}
	}
	slices.SortFunc(acks, func(a, b time.Time) int { return a.Compare(b) })
	var stall time.Duration
	prev := sent
	for _, a := range acks {
		stall = max(stall, a.Sub(prev))
		prev = a
	}
	return trialResult{FirstCommit: first.Sub(sent), Stall: stall}, nil
}

// prober issues Puts through one Writer at a fixed interval and records
// them; see the comment at the top of this file.
type prober struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup // the issuing loop and every in-flight Put

	mu       sync.Mutex
	probes   []probe
	inflight map[int]time.Time // start of every probe not finished yet, by number
	changed  chan struct{}     // closed and replaced whenever a probe finishes

	skipped atomic.Int64 // ticks without a new probe: too many in flight
}

// startProber starts issuing Puts of 256-byte values through w every
// interval until stop is called or ctx ends, at most maxProbesInFlight at
// once. Each Put is bounded by putTimeout.
func startProber(ctx context.Context, w Writer, interval, putTimeout time.Duration, keyPrefix string) *prober {
	return startProberN(ctx, w, interval, putTimeout, keyPrefix, maxProbesInFlight)
}

// startProberN is startProber with at most maxInFlight Puts at once.
func startProberN(ctx context.Context, w Writer, interval, putTimeout time.Duration, keyPrefix string, maxInFlight int) *prober {
	ctx, cancel := context.WithCancel(ctx)
	p := &prober{cancel: cancel, changed: make(chan struct{}), inflight: map[int]time.Time{}}
	value := make([]byte, 256)
	_, _ = rand.NewChaCha8(seedFor(keyPrefix, 0)).Read(value)
	sem := make(chan struct{}, maxInFlight)
	p.wg.Go(func() {
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		for seq := 0; ; seq++ {
			select {
			case sem <- struct{}{}:
				key := fmt.Sprintf("%s/%08d", keyPrefix, seq)
				p.wg.Go(func() {
					defer func() { <-sem }()
					putCtx, cancel := context.WithTimeout(ctx, putTimeout)
					p.mu.Lock()
					start := time.Now()
					p.inflight[seq] = start
					p.mu.Unlock()
					err := w.Put(putCtx, key, value)
					end := time.Now()
					cancel()
					p.record(seq, probe{start: start, end: end, err: err})
				})
			default: // at capacity: skip this tick
				p.skipped.Add(1)
			}
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
		}
	})
	return p
}

// record stores finished probe number seq and wakes waitFor.
func (p *prober) record(seq int, pr probe) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.inflight, seq)
	p.probes = append(p.probes, pr)
	close(p.changed)
	p.changed = make(chan struct{})
}

// waitFor waits until cond holds for the probes finished so far, or ctx
// ends.
func (p *prober) waitFor(ctx context.Context, cond func([]probe) bool) error {
	for {
		p.mu.Lock()
		done := cond(p.probes)
		changed := p.changed
		p.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// waitSettledBefore waits until every probe started before t has
// finished, or ctx ends.
func (p *prober) waitSettledBefore(ctx context.Context, t time.Time) error {
	for {
		p.mu.Lock()
		pending := false
		for _, start := range p.inflight {
			if start.Before(t) {
				pending = true
				break
			}
		}
		changed := p.changed
		p.mu.Unlock()
		if !pending {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// stop cancels in-flight Puts, waits for them and returns every probe
// recorded. It may be called more than once.
func (p *prober) stop() []probe {
	p.cancel()
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.probes)
}

// ackedSince returns a condition that holds once a probe started at or
// after t has been acknowledged.
func ackedSince(t time.Time) func([]probe) bool {
	return func(ps []probe) bool {
		for _, p := range ps {
			if p.ok() && !p.start.Before(t) {
				return true
			}
		}
		return false
	}
}

// runTrial runs one failover or hand-off trial: it starts a prober, waits
// until the cluster acknowledges a write, calls disturb (KillLeader or
// StopLeader), waits until a write started after the process exited has
// been acknowledged and analyses the probes. It does not restore the
// cluster.
func runTrial(ctx context.Context, env *Env, trial int, disturb func(context.Context) (time.Time, error)) (trialResult, error) {
	cfg := env.Config
	ctx, cancel := context.WithTimeout(ctx, cfg.TrialTimeout)
	defer cancel()
	w, err := env.Target.NewWriter(ctx)
	if err != nil {
		return trialResult{}, fmt.Errorf("new writer: %w", err)
	}
	defer w.Close()
	pr := startProber(ctx, w, cfg.ProbeInterval, cfg.TrialTimeout, fmt.Sprintf("bench/trial/%d-%d", time.Now().UnixNano(), trial))
	defer pr.stop()

	if err := pr.waitFor(ctx, ackedSince(time.Time{})); err != nil {
		return trialResult{}, fmt.Errorf("cluster not writable before the signal: %w", err)
	}
	sent, err := disturb(ctx)
	if err != nil {
		return trialResult{}, err
	}
	exited := time.Now()
	if err := pr.waitFor(ctx, ackedSince(exited)); err != nil {
		return trialResult{}, fmt.Errorf("no write acknowledged after the signal: %w", err)
	}
	return analyzeTrial(sent, exited, pr.stop())
}

// failoverExperiment measures unplanned failover: SIGKILL to the leader.
func failoverExperiment(ctx context.Context, env *Env) ([]Row, error) {
	return trialExperiment(ctx, env, "failover: kill -9 leader → next commit", "kill -9", env.Target.KillLeader)
}

// handoffExperiment measures graceful hand-off: SIGTERM to the leader.
func handoffExperiment(ctx context.Context, env *Env) ([]Row, error) {
	return trialExperiment(ctx, env, "hand-off: SIGTERM leader → next commit", "SIGTERM", env.Target.StopLeader)
}

// trialExperiment runs -trials trials with disturb, restoring the cluster
// after each, and summarises them in one row.
func trialExperiment(ctx context.Context, env *Env, what, action string, disturb func(context.Context) (time.Time, error)) ([]Row, error) {
	cfg := env.Config
	var firsts, stalls []time.Duration
	var failures []string
	for i := 1; i <= cfg.Trials; i++ {
		res, err := runTrial(ctx, env, i, disturb)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%s: %w", what, ctx.Err())
			}
			env.Progressf("%s: trial %d/%d failed: %v", action, i, cfg.Trials, err)
			failures = append(failures, fmt.Sprintf("trial %d: %s", i, shortErr(err)))
		} else {
			env.Progressf("%s: trial %d/%d: first commit after %s, longest write stall %s", action, i, cfg.Trials, fmtDuration(res.FirstCommit), fmtDuration(res.Stall))
			firsts = append(firsts, res.FirstCommit)
			stalls = append(stalls, res.Stall)
		}
		env.Progressf("%s: restoring 3 members", action)
		t0 := time.Now()
		if err := env.Target.Restore(ctx); err != nil {
			return nil, fmt.Errorf("%s: restore after trial %d: %w", what, i, err)
		}
		env.Progressf("%s: restored in %s", action, fmtDuration(time.Since(t0)))
	}
	row := Row{What: what, Target: env.Target.Name()}
	if len(firsts) > 0 {
		f, s := summarize(firsts), summarize(stalls)
		row.Value = fmt.Sprintf("median %s, max %s", fmtDuration(f.P50), fmtDuration(f.Max))
		row.Note = fmt.Sprintf("%d trials: %s; longest write stall median %s, max %s",
			len(firsts), fmtDurations(firsts), fmtDuration(s.P50), fmtDuration(s.Max))
	}
	if len(failures) > 0 {
		row.Note = joinNonEmpty("; ", row.Note, fmt.Sprintf("%d of %d trials failed (%s)", len(failures), cfg.Trials, failures[0]))
	}
	if len(firsts) == 0 {
		return []Row{row}, fmt.Errorf("%s: every trial failed", what)
	}
	return []Row{row}, nil
}
