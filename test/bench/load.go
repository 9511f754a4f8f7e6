package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"
)

// loadSpec describes one closed-loop write load: Writers workers, each with
// its own Writer, each doing sequential Puts of random ValueSize-byte values
// to keys never written before.
type loadSpec struct {
	Writers   int
	ValueSize int
	// Duration is how long workers keep starting new Puts; used when Ops
	// is 0.
	Duration time.Duration
	// Ops, if > 0, is the total number of Puts, split evenly across the
	// workers (rounded up), instead of a duration.
	Ops int
	// OpTimeout bounds each Put, retries included.
	OpTimeout time.Duration
	// KeyPrefix makes the keys of this load distinct from other loads'.
	KeyPrefix string
}

// loadResult is the outcome of one load.
type loadResult struct {
	Latencies []time.Duration // one per acknowledged Put
	Errors    int             // Puts that failed (after their own retries)
	FirstErr  error
	Wall      time.Duration // from the start until the last worker finished
}

// Throughput returns acknowledged Puts per second of wall time.
func (r loadResult) Throughput() float64 {
	if r.Wall <= 0 {
		return 0
	}
	return float64(len(r.Latencies)) / r.Wall.Seconds()
}

// runLoad runs spec against writers (one per worker; len(writers) must be
// spec.Writers) and records the latency of every acknowledged Put. It
// returns an error only if ctx ends.
func runLoad(ctx context.Context, writers []Writer, spec loadSpec) (loadResult, error) {
	if len(writers) != spec.Writers || spec.Writers < 1 {
		return loadResult{}, fmt.Errorf("load: %d writers for %d workers", len(writers), spec.Writers)
	}
	perWorker := 0
	if spec.Ops > 0 {
		perWorker = (spec.Ops + spec.Writers - 1) / spec.Writers
	}
	type workerResult struct {
		lat      []time.Duration
		errs     int
		firstErr error
		end      time.Time
	}
	results := make([]workerResult, spec.Writers)
	start := time.Now()
	deadline := start.Add(spec.Duration)
	var wg sync.WaitGroup
	for i := range spec.Writers {
		wg.Go(func() {
			res := &results[i]
			rng := rand.NewChaCha8(seedFor(spec.KeyPrefix, i))
			value := make([]byte, spec.ValueSize)
			for n := 0; ; n++ {
				if perWorker > 0 && n >= perWorker || perWorker == 0 && !time.Now().Before(deadline) {
					break
				}
				if ctx.Err() != nil {
					break
				}
				_, _ = rng.Read(value)
				key := fmt.Sprintf("%s/w%03d/%08d", spec.KeyPrefix, i, n)
				opCtx, cancel := context.WithTimeout(ctx, spec.OpTimeout)
				t0 := time.Now()
				err := writers[i].Put(opCtx, key, value)
				d := time.Since(t0)
				cancel()
				if err != nil {
					if ctx.Err() != nil {
						break
					}
					res.errs++
					if res.firstErr == nil {
						res.firstErr = err
					}
					continue
				}
				res.lat = append(res.lat, d)
			}
			res.end = time.Now()
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return loadResult{}, fmt.Errorf("load interrupted: %w", err)
	}
	var out loadResult
	last := start
	for _, r := range results {
		out.Latencies = append(out.Latencies, r.lat...)
		out.Errors += r.errs
		if out.FirstErr == nil {
			out.FirstErr = r.firstErr
		}
		if r.end.After(last) {
			last = r.end
		}
	}
	out.Wall = last.Sub(start)
	return out, nil
}

// seedFor derives a deterministic ChaCha8 seed from a load's key prefix and
// a worker index, so that runs write the same byte streams.
func seedFor(prefix string, worker int) [32]byte {
	return sha256.Sum256([]byte(prefix + "/" + strconv.Itoa(worker)))
}

// latencyExperiment measures commit latency and throughput for every
// combination of -writers and -sizes, each after a warm-up with the same
// writers, on the running cluster.
func latencyExperiment(ctx context.Context, env *Env) ([]Row, error) {
	cfg := env.Config
	var rows []Row
	for _, nw := range cfg.Writers {
		for _, size := range cfg.Sizes {
			what := fmt.Sprintf("put latency, %d writer%s, %s values", nw, plural(nw), fmtBytes(int64(size)))
			row, err := measureLoad(ctx, env, what, nw, size)
			if row.What != "" {
				rows = append(rows, row)
			}
			if err == nil && row.p50 > 0 {
				latencyCurve = append(latencyCurve, latencyPoint{Target: row.Target, Writers: nw, Size: size, P50: row.p50, Rate: row.rate})
			}
			if err != nil {
				return rows, err
			}
		}
	}
	return rows, nil
}

// measureLoad runs one warm-up and one measured load with the target's
// writers and turns the result into a table row.
func measureLoad(ctx context.Context, env *Env, what string, nw, size int) (Row, error) {
	return measureLoadWith(ctx, env, what, fmt.Sprintf("w%d-s%d", nw, size), nw, size, env.Target.NewWriter)
}

// measureLoadWith is measureLoad with writers made by newWriter and keys
// under tag, for targets that measure a differently configured client as
// an extra row.
func measureLoadWith(ctx context.Context, env *Env, what, tag string, nw, size int, newWriter func(context.Context) (Writer, error)) (Row, error) {
	cfg := env.Config
	writers := make([]Writer, 0, nw)
	defer func() {
		for _, w := range writers {
			_ = w.Close()
		}
	}()
	for range nw {
		w, err := newWriter(ctx)
		if err != nil {
			return Row{}, fmt.Errorf("%s: new writer: %w", what, err)
		}
		writers = append(writers, w)
	}
	spec := loadSpec{
		Writers:   nw,
		ValueSize: size,
		OpTimeout: cfg.OpTimeout,
		Duration:  cfg.Warmup,
		KeyPrefix: "bench/warm/" + tag,
	}
	if cfg.Warmup > 0 {
		env.Progressf("%s: warming up for %s", what, cfg.Warmup)
		if _, err := runLoad(ctx, writers, spec); err != nil {
			return Row{}, fmt.Errorf("%s: warm-up: %w", what, err)
		}
	}
	spec.Duration, spec.Ops, spec.KeyPrefix = cfg.Duration, cfg.Ops, "bench/load/"+tag
	if cfg.Ops > 0 {
		env.Progressf("%s: measuring %d puts", what, cfg.Ops)
	} else {
		env.Progressf("%s: measuring for %s", what, cfg.Duration)
	}
	res, err := runLoad(ctx, writers, spec)
	if err != nil {
		return Row{}, fmt.Errorf("%s: %w", what, err)
	}
	s := summarize(res.Latencies)
	env.Progressf("%s: p50 %s, p99 %s, %s", what, fmtDuration(s.P50), fmtDuration(s.P99), fmtRate(res.Throughput(), "commits"))
	row := Row{
		What:   what,
		Target: env.Target.Name(),
		P50:    fmtDuration(s.P50),
		P99:    fmtDuration(s.P99),
		Value:  fmtRate(res.Throughput(), "commits"),
		Note:   fmt.Sprintf("%d puts in %s, max %s", s.N, fmtDuration(res.Wall), fmtDuration(s.Max)),
		p50:    s.P50,
		rate:   res.Throughput(),
	}
	if res.Errors > 0 {
		row.Note += fmt.Sprintf("; %d failed puts, first: %s", res.Errors, shortErr(res.FirstErr))
	}
	if s.N == 0 {
		return row, errors.New(what + ": no put was acknowledged")
	}
	return row, nil
}

// plural returns "s" unless n is 1.
func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
