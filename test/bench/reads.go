package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

// The reads experiment (bagkeeper only): GetBags latency of a small bag,
// stale (the member's own copy) against linearizable (the default: the
// leader confirms with a quorum that it still leads, and the member that
// answers waits until it has applied the leader's commit index), through
// the leader and through a follower, with 1 and with 16 concurrent
// readers, on an otherwise idle cluster.

// Flags of the reads experiment.
var (
	readReaders  = intList{1, 16}
	readBagKeys  = flag.Int("read-bag-keys", 16, "reads: keys in the bag that is read")
	readBagValue = flag.Int("read-bag-value", 256, "reads: bytes per value in the bag that is read")
)

func init() {
	flag.Var(&readReaders, "read-readers", "reads: comma-separated numbers of concurrent readers")
}

// readsExperiment measures GetBags on a bagkeeper target.
func readsExperiment(ctx context.Context, env *Env) ([]Row, error) {
	b, ok := env.Target.(*bagkeeperTarget)
	if !ok {
		return nil, nil
	}
	return b.measureReads(ctx, env)
}

// measureReads fills a bag of its own and measures every combination of
// route, mode and readers.
func (b *bagkeeperTarget) measureReads(ctx context.Context, env *Env) ([]Row, error) {
	cfg := env.Config
	rel, err := b.ensureRelation(ctx, "reads")
	if err != nil {
		return nil, fmt.Errorf("reads: %w", err)
	}
	set := map[string]string{}
	for i := range *readBagKeys {
		set[fmt.Sprintf("read%04d", i)] = strings.Repeat(string(rune('a'+i%26)), *readBagValue)
	}
	w, err := b.newWriter("leader")
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, cfg.OpTimeout)
	err = w.setBag(pctx, &adminpb.SetBagRequest{RelationId: rel, Owner: bkApp, Set: set})
	cancel()
	w.Close()
	if err != nil {
		return nil, fmt.Errorf("reads: fill the bag: %w", err)
	}
	hctx, cancel := context.WithTimeout(ctx, b.startTimeout)
	err = b.waitHealthy(hctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("reads: %w", err)
	}
	bagSize := fmtBytes(int64(*readBagKeys * (len("read0000") + *readBagValue)))
	var rows []Row
	for _, route := range []string{"leader", "follower"} {
		for _, n := range readReaders {
			if n < 1 {
				continue
			}
			for _, stale := range []bool{true, false} {
				var m *bkMember
				if route == "leader" {
					m, err = b.findLeader(ctx)
				} else {
					m, err = b.findFollower(ctx)
				}
				if err != nil {
					return rows, fmt.Errorf("reads: %w", err)
				}
				mode := "linearizable (default)"
				if stale {
					mode = "stale"
				}
				what := fmt.Sprintf("GetBags latency, %s, %d reader%s, via the %s", mode, n, plural(n), route)
				req := &adminpb.GetBagsRequest{RelationId: rel, Owner: bkApp, Stale: stale}
				res, err := b.runReads(ctx, m, n, req, cfg.Warmup, cfg.Duration, cfg.OpTimeout)
				if err != nil {
					return rows, fmt.Errorf("%s: %w", what, err)
				}
				s := summarize(res.Latencies)
				row := Row{
					What: what, Target: b.Name(),
					P50: fmtDuration(s.P50), P99: fmtDuration(s.P99),
					Value: fmtRate(res.Throughput(), "reads"),
					Note:  fmt.Sprintf("%d reads of a bag of %d keys (%s) from %s in %s, max %s", s.N, *readBagKeys, bagSize, m.pod, fmtDuration(res.Wall), fmtDuration(s.Max)),
				}
				if res.Errors > 0 {
					row.Note += fmt.Sprintf("; %d failed reads, first: %s", res.Errors, shortErr(res.FirstErr))
				}
				env.Progressf("%s: p50 %s, p99 %s, %s", what, row.P50, row.P99, row.Value)
				rows = append(rows, row)
			}
		}
	}
	return rows, nil
}

// runReads has n readers, each with its own connection to m's admin
// socket, send req one after the other: unmeasured for warmup, then
// measured for duration.
func (b *bagkeeperTarget) runReads(ctx context.Context, m *bkMember, n int, req *adminpb.GetBagsRequest, warmup, duration, opTimeout time.Duration) (loadResult, error) {
	clients := make([]adminpb.AdminClient, 0, n)
	for range n {
		conn, err := dialAdmin(m.socket)
		if err != nil {
			return loadResult{}, err
		}
		defer conn.Close()
		clients = append(clients, adminpb.NewAdminClient(conn))
	}
	run := func(d time.Duration) loadResult {
		type result struct {
			lat      []time.Duration
			errs     int
			firstErr error
		}
		results := make([]result, n)
		start := time.Now()
		deadline := start.Add(d)
		var wg sync.WaitGroup
		for i, c := range clients {
			wg.Go(func() {
				r := &results[i]
				for time.Now().Before(deadline) && ctx.Err() == nil {
					rctx, cancel := context.WithTimeout(ctx, opTimeout)
					t0 := time.Now()
					resp, err := c.GetBags(rctx, req)
					lat := time.Since(t0)
					cancel()
					if err == nil && len(resp.GetBags()) != 1 {
						err = fmt.Errorf("GetBags returned %d bags, want 1", len(resp.GetBags()))
					}
					if err != nil {
						if ctx.Err() != nil {
							return
						}
						r.errs++
						if r.firstErr == nil {
							r.firstErr = err
						}
						continue
					}
					r.lat = append(r.lat, lat)
				}
			})
		}
		wg.Wait()
		out := loadResult{Wall: time.Since(start)}
		for _, r := range results {
			out.Latencies = append(out.Latencies, r.lat...)
			out.Errors += r.errs
			if out.FirstErr == nil {
				out.FirstErr = r.firstErr
			}
		}
		return out
	}
	if warmup > 0 {
		run(warmup)
	}
	res := run(duration)
	if err := ctx.Err(); err != nil {
		return res, err
	}
	if len(res.Latencies) == 0 {
		return res, errors.Join(errors.New("no read succeeded"), res.FirstErr)
	}
	return res, nil
}
