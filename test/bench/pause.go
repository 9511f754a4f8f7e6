package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

// The pause experiment: a leader that stops answering without closing its
// connections (SIGSTOP: a frozen process or VM), while a client writes
// through a follower, which forwards to the leader. The prober of the
// failover trials issues the writes, every one to the same follower, and
// the client itself never gives up on an attempt: what is measured is how
// soon the follower's forwarding finds the new leader. The time runs from
// just before the SIGSTOP to the first acknowledgement of a write started
// after it; such a write can only have been committed by a new leader,
// since the old one is frozen.

// pauseTrials is the number of pause trials.
var pauseTrials = flag.Int("pause-trials", 10, "pause trials per target (SIGSTOP to the leader while a client writes through a follower)")

// pauseMaxInFlight bounds the pause prober's concurrent puts: enough for
// every put started during a stall of 20 s at a put every 5 ms, so that
// puts stuck on the frozen leader never keep new ones from starting.
const pauseMaxInFlight = 4096

// PauseMeasurer is implemented by targets that take part in the pause
// experiment.
type PauseMeasurer interface {
	// ElectionTimeout returns the target's election timeout, and a line
	// on its timing for the notes.
	ElectionTimeout() (time.Duration, string)
	// PreparePause finds the leader and a follower of the running,
	// healthy cluster.
	PreparePause(ctx context.Context) (*pauseSetup, error)
}

// pauseSetup is one trial's cast.
type pauseSetup struct {
	Leader, Follower string
	// Writer sends every put to Follower and retries there, without a
	// deadline of its own per attempt, until the put's context ends.
	Writer Writer
	// Pause sends SIGSTOP to the leader and returns the instant just
	// before.
	Pause func() (time.Time, error)
	// Resume sends SIGCONT to the paused leader and waits until the
	// cluster is healthy.
	Resume func(ctx context.Context) error
	// LeaderNow returns whom Follower sees as the leader.
	LeaderNow func(ctx context.Context) (string, error)
	// Retries returns how often the writer had to send a put again after
	// the follower answered with an error.
	Retries func() int64
}

// pauseResult is the outcome of one pause trial.
type pauseResult struct {
	// FirstCommit runs from the SIGSTOP to the first acknowledgement of a
	// write started at or after it.
	FirstCommit time.Duration
	// InFlight writes were started before the SIGSTOP and had not finished
	// when it was sent; InFlightDone runs from the SIGSTOP until the last
	// of them finished, and InFlightFailed of them failed.
	InFlight, InFlightFailed int
	InFlightDone             time.Duration
	// Skipped probes: the prober had too many puts in flight to start one
	// (the first commit may then be late).
	Skipped int
}

// analyzePause computes a pause trial's result from its probes.
func analyzePause(sent time.Time, probes []probe) (pauseResult, error) {
	var r pauseResult
	var first time.Time
	for _, p := range probes {
		switch {
		case !p.start.Before(sent):
			if p.ok() && (first.IsZero() || p.end.Before(first)) {
				first = p.end
			}
		case p.end.After(sent):
			r.InFlight++
			r.InFlightDone = max(r.InFlightDone, p.end.Sub(sent))
			if !p.ok() {
				r.InFlightFailed++
			}
		}
	}
	if first.IsZero() {
		return r, errors.New("no write started after the SIGSTOP was acknowledged")
	}
	r.FirstCommit = first.Sub(sent)
	return r, nil
}

// pauseExperiment runs -pause-trials pause trials on targets that
// implement PauseMeasurer.
func pauseExperiment(ctx context.Context, env *Env) ([]Row, error) {
	pm, ok := env.Target.(PauseMeasurer)
	if !ok || *pauseTrials < 1 {
		return nil, nil
	}
	cfg := env.Config
	what := "pause: SIGSTOP leader → first commit through a follower"
	election, timing := pm.ElectionTimeout()
	var firsts, inflight []time.Duration
	var failures []string
	promoted, inflightFailed, skipped := 0, 0, 0
	var retries int64
	for i := 1; i <= *pauseTrials; i++ {
		res, newLeader, setup, err := runPauseTrial(ctx, env, pm, i)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s: %w", what, ctx.Err())
		}
		if err != nil {
			env.Progressf("pause: trial %d/%d failed: %v", i, *pauseTrials, err)
			failures = append(failures, fmt.Sprintf("trial %d: %s", i, shortErr(err)))
		} else {
			env.Progressf("pause: trial %d/%d: %s paused; first commit through %s after %s (%.1f× the election timeout); new leader %s; %d writes in flight at the pause done after %s",
				i, *pauseTrials, setup.Leader, setup.Follower, fmtDuration(res.FirstCommit), ratio(res.FirstCommit, election), newLeader, res.InFlight, fmtDuration(res.InFlightDone))
			firsts = append(firsts, res.FirstCommit)
			if res.InFlight > 0 {
				inflight = append(inflight, res.InFlightDone)
			}
			inflightFailed += res.InFlightFailed
			skipped += res.Skipped
			if newLeader == setup.Follower {
				promoted++
			}
		}
		if setup != nil {
			retries += setup.Retries()
		}
		if setup == nil && err != nil {
			return nil, fmt.Errorf("%s: trial %d: %w", what, i, err)
		}
	}
	row := Row{What: what, Target: env.Target.Name()}
	if len(firsts) > 0 {
		s := summarize(firsts)
		row.P50, row.P99 = fmtDuration(s.P50), fmtDuration(s.P99)
		row.Value = fmt.Sprintf("max %s; p50 %.1f×, p99 %.1f×, max %.1f× the election timeout (%s); target ≤ 2×: p50 %s, p99 %s",
			fmtDuration(s.Max), ratio(s.P50, election), ratio(s.P99, election), ratio(s.Max, election), fmtDuration(election),
			passFail(s.P50 <= 2*election), passFail(s.P99 <= 2*election))
		inf := "no write was in flight at a pause"
		if len(inflight) > 0 {
			si := summarize(inflight)
			inf = fmt.Sprintf("writes in flight at the pause finished median %s, max %s after it (%d of them failed)", fmtDuration(si.P50), fmtDuration(si.Max), inflightFailed)
		}
		row.Note = fmt.Sprintf("%d trials: %s; the follower written to became the leader in %d of them; %s; %d puts sent again after an error from the follower; a put every %s, each to the same follower; %s",
			len(firsts), fmtDurations(firsts), promoted, inf, retries, cfg.ProbeInterval, timing)
	}
	if skipped > 0 {
		row.Note = joinNonEmpty("; ", row.Note, fmt.Sprintf("%d puts not started because %d were in flight: the first commit may be late", skipped, pauseMaxInFlight))
	}
	if len(failures) > 0 {
		row.Note = joinNonEmpty("; ", row.Note, fmt.Sprintf("%d of %d trials failed (%s)", len(failures), *pauseTrials, failures[0]))
	}
	if len(firsts) == 0 {
		return []Row{row}, fmt.Errorf("%s: every trial failed", what)
	}
	return []Row{row}, nil
}

// ratio returns d in units of unit.
func ratio(d, unit time.Duration) float64 {
	if unit <= 0 {
		return 0
	}
	return float64(d) / float64(unit)
}

// runPauseTrial runs one trial and resumes the paused leader. It returns
// the setup (nil if none was made) so that the caller can report on it.
func runPauseTrial(ctx context.Context, env *Env, pm PauseMeasurer, trial int) (res pauseResult, newLeader string, setup *pauseSetup, err error) {
	cfg := env.Config
	tctx, cancel := context.WithTimeout(ctx, cfg.TrialTimeout)
	defer cancel()
	setup, err = pm.PreparePause(tctx)
	if err != nil {
		return res, "", nil, err
	}
	defer setup.Writer.Close()
	pr := startProberN(tctx, setup.Writer, cfg.ProbeInterval, cfg.TrialTimeout, fmt.Sprintf("bench/pause/%d-%d", time.Now().UnixNano(), trial), pauseMaxInFlight)
	paused := false
	defer func() {
		pr.stop()
		if !paused {
			return
		}
		// Resume even when the trial's time is up, within a time of its own.
		rctx, rcancel := context.WithTimeout(ctx, cfg.TrialTimeout)
		defer rcancel()
		t0 := time.Now()
		if rerr := setup.Resume(rctx); rerr != nil {
			err = errors.Join(err, fmt.Errorf("resume %s: %w", setup.Leader, rerr))
			return
		}
		env.Progressf("pause: %s resumed, cluster healthy after %s", setup.Leader, fmtDuration(time.Since(t0)))
	}()
	if err := pr.waitFor(tctx, ackedSince(time.Time{})); err != nil {
		return res, "", setup, fmt.Errorf("cluster not writable through %s before the pause: %w", setup.Follower, err)
	}
	sent, err := setup.Pause()
	if err != nil {
		return res, "", setup, err
	}
	paused = true
	if err := pr.waitFor(tctx, ackedSince(sent)); err != nil {
		return res, "", setup, fmt.Errorf("no write through %s acknowledged after the pause: %w", setup.Follower, err)
	}
	if err := pr.waitSettledBefore(tctx, sent); err != nil {
		return res, "", setup, fmt.Errorf("writes in flight at the pause did not finish: %w", err)
	}
	res, err = analyzePause(sent, pr.stop())
	if err != nil {
		return res, "", setup, err
	}
	res.Skipped = int(pr.skipped.Load())
	newLeader, err = setup.LeaderNow(tctx)
	if err != nil {
		return res, "", setup, fmt.Errorf("who leads after the pause: %w", err)
	}
	if newLeader == setup.Leader {
		return res, newLeader, setup, fmt.Errorf("%s still leads according to %s although it is paused", newLeader, setup.Follower)
	}
	return res, newLeader, setup, nil
}

// pinnedRetryBackoff is how long a pinned writer waits before it sends a
// put again after an error.
const pinnedRetryBackoff = 5 * time.Millisecond

// retryPinned calls put until it succeeds, fails for good or ctx ends,
// counting the retries.
func retryPinned(ctx context.Context, retries *atomic.Int64, permanent func(error) bool, put func(context.Context) error) error {
	for {
		err := put(ctx)
		if err == nil {
			return nil
		}
		if permanent(err) || ctx.Err() != nil {
			return err
		}
		retries.Add(1)
		if err := sleepCtx(ctx, pinnedRetryBackoff); err != nil {
			return fmt.Errorf("%w (last error: %v)", err, ctx.Err())
		}
	}
}

// ElectionTimeout implements PauseMeasurer.
func (b *bagkeeperTarget) ElectionTimeout() (time.Duration, string) {
	parse := func(flag string) time.Duration {
		d, err := time.ParseDuration(strings.TrimSuffix(b.settingOf(flag), " (assumed)"))
		if err != nil {
			return 0
		}
		return d
	}
	e := parse("raft-election-timeout")
	what := "bagkeeper's defaults"
	if *bagkeeperArgs != "" {
		what = "bagkeeper's settings"
	}
	return e, fmt.Sprintf("%s: election timeout %s, heartbeat timeout %s, leader lease %s (a voter stands for election 1–1.5 heartbeat timeouts after its leader's last word, and the other voters grant its votes once they have not heard from the leader for a heartbeat timeout)",
		what, fmtDuration(e), fmtDuration(parse("raft-heartbeat-timeout")), b.settingOf("raft-leader-lease-timeout"))
}

// PreparePause implements PauseMeasurer.
func (b *bagkeeperTarget) PreparePause(ctx context.Context) (*pauseSetup, error) {
	if err := b.waitHealthy(ctx); err != nil {
		return nil, err
	}
	leader, err := b.findLeader(ctx)
	if err != nil {
		return nil, err
	}
	follower := firstOther(b.members, leader)
	conn, err := dialAdmin(follower.socket)
	if err != nil {
		return nil, err
	}
	w := &bkPinnedWriter{admin: adminpb.NewAdminClient(conn), close: conn.Close, relationID: b.relationID}
	return &pauseSetup{
		Leader: leader.pod, Follower: follower.pod, Writer: w,
		Pause: func() (time.Time, error) {
			sent := time.Now()
			return sent, leader.proc.Signal(syscall.SIGSTOP)
		},
		Resume: func(ctx context.Context) error {
			if err := leader.proc.Signal(syscall.SIGCONT); err != nil {
				return err
			}
			return b.waitHealthy(ctx)
		},
		LeaderNow: func(ctx context.Context) (string, error) {
			sctx, cancel := context.WithTimeout(ctx, b.attemptTimeout)
			defer cancel()
			st, err := w.admin.Status(sctx, &adminpb.StatusRequest{SkipProbe: true})
			if err != nil {
				return "", err
			}
			return b.podOf(ctx, st.GetLeader()), nil
		},
		Retries: w.retries.Load,
	}, nil
}

// podOf returns the pod name of the member with raft id id, or id if no
// running member says it has it.
func (b *bagkeeperTarget) podOf(ctx context.Context, id string) string {
	for i, s := range b.statusAll(ctx, true) {
		if s.err == nil && s.resp.GetSelf() == id {
			return b.members[i].pod
		}
	}
	return id
}

// bkPinnedWriter sends every SetBag to one member, without a deadline per
// attempt, and sends it again after an error until the put's context ends.
type bkPinnedWriter struct {
	admin      adminpb.AdminClient
	close      func() error
	relationID int64
	retries    atomic.Int64

	mu     sync.Mutex
	recent []string
}

// Put implements Writer, keeping the writer's last bkKeepKeys keys as
// bkWriter does.
func (w *bkPinnedWriter) Put(ctx context.Context, key string, value []byte) error {
	req := &adminpb.SetBagRequest{RelationId: w.relationID, Owner: bkApp, Set: map[string]string{key: printable(value)}}
	w.mu.Lock()
	w.recent = append(w.recent, key)
	if len(w.recent) > bkKeepKeys {
		req.Delete = []string{w.recent[0]}
		w.recent = slices.Delete(w.recent, 0, 1)
	}
	w.mu.Unlock()
	return retryPinned(ctx, &w.retries, func(err error) bool {
		switch status.Code(err) {
		case codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition, codes.PermissionDenied, codes.Unimplemented, codes.ResourceExhausted:
			return true
		}
		return false
	}, func(ctx context.Context) error {
		_, err := w.admin.SetBag(ctx, req)
		return err
	})
}

// Close implements Writer.
func (w *bkPinnedWriter) Close() error { return w.close() }

// ElectionTimeout implements PauseMeasurer.
func (e *etcdTarget) ElectionTimeout() (time.Duration, string) {
	return etcdElectionMS * time.Millisecond, fmt.Sprintf("etcd: election timeout %d ms, heartbeat %d ms (its defaults), pre-vote off; a put a follower forwards to a frozen leader waits for etcd's request timeout (5 s + 2 election timeouts)", etcdElectionMS, etcdHeartbeatMS)
}

// PreparePause implements PauseMeasurer.
func (e *etcdTarget) PreparePause(ctx context.Context) (*pauseSetup, error) {
	if err := e.waitHealthy(ctx); err != nil {
		return nil, err
	}
	leader, err := e.findLeader(ctx)
	if err != nil {
		return nil, err
	}
	follower := firstOther(e.members, leader)
	conn, err := dialEtcd(follower.clientAddr)
	if err != nil {
		return nil, err
	}
	kv, maint := pb.NewKVClient(conn), pb.NewMaintenanceClient(conn)
	var retries atomic.Int64
	w := &funcWriter{
		put: func(ctx context.Context, key string, value []byte) error {
			return retryPinned(ctx, &retries, func(err error) bool {
				switch status.Code(err) {
				case codes.InvalidArgument, codes.PermissionDenied, codes.Unauthenticated, codes.Unimplemented:
					return true
				}
				return false
			}, func(ctx context.Context) error {
				_, err := kv.Put(ctx, &pb.PutRequest{Key: []byte(key), Value: value})
				return err
			})
		},
		close: conn.Close,
	}
	return &pauseSetup{
		Leader: leader.name, Follower: follower.name, Writer: w,
		Pause: func() (time.Time, error) {
			sent := time.Now()
			return sent, leader.proc.Signal(syscall.SIGSTOP)
		},
		Resume: func(ctx context.Context) error {
			if err := leader.proc.Signal(syscall.SIGCONT); err != nil {
				return err
			}
			return e.waitHealthy(ctx)
		},
		LeaderNow: func(ctx context.Context) (string, error) {
			sctx, cancel := context.WithTimeout(ctx, e.attemptTimeout)
			defer cancel()
			st, err := maint.Status(sctx, &pb.StatusRequest{})
			if err != nil {
				return "", err
			}
			for i, s := range e.statusAll(ctx) {
				if s.err == nil && s.resp.GetHeader().GetMemberId() == st.Leader {
					return e.members[i].name, nil
				}
			}
			return fmt.Sprintf("%x", st.Leader), nil
		},
		Retries: retries.Load,
	}, nil
}

// funcWriter is a Writer made of functions.
type funcWriter struct {
	put   func(ctx context.Context, key string, value []byte) error
	close func() error
}

func (w *funcWriter) Put(ctx context.Context, key string, value []byte) error {
	return w.put(ctx, key, value)
}

func (w *funcWriter) Close() error { return w.close() }

// firstOther is the first of members that is not leader.
func firstOther[M comparable](members []M, leader M) M {
	for _, m := range members {
		if m != leader {
			return m
		}
	}
	var none M
	return none
}
