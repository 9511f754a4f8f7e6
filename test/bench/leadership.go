package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

// The leadership measurement (-experiments leadership, bagkeeper only): an
// application of three sidecars running the unit agent with a charm whose
// hooks do nothing. A sampler asks every member, every 20 ms, which unit
// holds the leadership lease and until when. It reports
//
//   - the leaderless time while the leader unit's pod is replaced (kill -9,
//     then a pod of the same name on an empty disk at a new address): the
//     time in which no member knew of a lease with the 30 s is-leader
//     promises still to run (target 0), and the time to the new pod's
//     first renewal;
//   - when the leader's pod is gone for good (kill -9, no replacement): the
//     time from the kill until another unit holds the lease (target: the
//     60 s lease + 1 s at most), and from the end of the old lease to the
//     new leader's claim.

var leadReplacements = flag.Int("leadership-replacements", 3, "leadership: replacements of the leader's pod")

const leadApp = "ldr"

func leadershipExperiment(ctx context.Context, env *Env) ([]Row, error) {
	b, ok := env.Target.(*bagkeeperTarget)
	if !ok {
		return nil, nil
	}
	return b.measureLeadership(ctx, env)
}

// leaseSample is what one sampling round saw.
type leaseSample struct {
	at      time.Time
	holder  string    // "" when no member answered with a holder
	expires time.Time // the latest lease end any member knew for holder
	led     bool      // a member knew of a lease with at least 30 s left
}

// leaseSampler samples the lease as the members see it.
type leaseSampler struct {
	mu      sync.Mutex
	samples []leaseSample
	stop    chan struct{}
	done    chan struct{}
}

func sampleLease(ctx context.Context, t *bagkeeperTarget) *leaseSampler {
	s := &leaseSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			now := time.Now()
			smp := leaseSample{at: now}
			answered := false
			for _, st := range t.statusAll(ctx, true) {
				if st.err != nil {
					continue
				}
				answered = true
				if u := st.resp.GetLeaderUnit(); u != "" {
					exp := time.Unix(0, st.resp.GetLeaseExpiresUnixNano())
					if smp.holder == "" || exp.After(smp.expires) {
						smp.holder, smp.expires = u, exp
					}
					if exp.Sub(now) >= 30*time.Second {
						smp.led = true
					}
				}
			}
			if answered {
				s.mu.Lock()
				s.samples = append(s.samples, smp)
				s.mu.Unlock()
			}
		}
	}()
	return s
}

// since returns the samples taken at or after t.
func (s *leaseSampler) since(t time.Time) []leaseSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []leaseSample
	for _, smp := range s.samples {
		if !smp.at.Before(t) {
			out = append(out, smp)
		}
	}
	return out
}

func (s *leaseSampler) close() {
	close(s.stop)
	<-s.done
}

// leaderless sums the time between consecutive samples in which no member
// knew of a lease with 30 s left, and lists the units seen holding it.
func leaderless(samples []leaseSample) (time.Duration, map[string]bool) {
	var d time.Duration
	holders := map[string]bool{}
	for i, smp := range samples {
		if smp.holder != "" {
			holders[smp.holder] = true
		}
		if !smp.led && i+1 < len(samples) {
			d += samples[i+1].at.Sub(smp.at)
		}
	}
	return d, holders
}

func (b *bagkeeperTarget) measureLeadership(ctx context.Context, env *Env) ([]Row, error) {
	dir := filepath.Join(env.Dir, "leadership")
	charm := filepath.Join(dir, "charm")
	if err := os.MkdirAll(charm, 0o755); err != nil {
		return nil, err
	}
	jujuc := filepath.Join(filepath.Dir(b.bin), "jujuc")
	if _, err := os.Stat(jujuc); err != nil {
		return nil, fmt.Errorf("leadership measurement needs jujuc next to the bagkeeper binary: %w", err)
	}
	if err := os.WriteFile(filepath.Join(charm, "metadata.yaml"), []byte("name: bench-leader\npeers:\n  replicas:\n    interface: bench-peers\n"), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(charm, "dispatch"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		return nil, err
	}
	t := &bagkeeperTarget{bin: b.bin, version: b.version, defaults: b.defaults, via: b.via, app: leadApp,
		attemptTimeout: b.attemptTimeout, startTimeout: b.startTimeout, lastHost: b.lastHost + 100, http: b.http,
		extraArgs: func(m *bkMember) []string {
			return []string{"--charm-dir=" + charm, "--hook-tool=" + jujuc, "--update-status-interval=1h"}
		}}
	defer t.stopCluster()
	if err := os.MkdirAll(filepath.Join(dir, leadApp), 0o755); err != nil {
		return nil, err
	}
	env.Progressf("leadership: starting %s", leadApp)
	sctx, cancel := context.WithTimeout(ctx, b.startTimeout)
	err := t.Start(sctx, filepath.Join(dir, leadApp))
	cancel()
	if err != nil {
		return nil, err
	}
	holderOf := func() (string, *bkMember, time.Time, error) {
		deadline := time.Now().Add(2 * time.Minute)
		for time.Now().Before(deadline) {
			for _, st := range t.statusAll(ctx, true) {
				if st.err != nil || st.resp.GetLeaderUnit() == "" {
					continue
				}
				u := st.resp.GetLeaderUnit()
				for _, m := range t.members {
					if m.pod == podOfUnit(u) {
						return u, m, time.Unix(0, st.resp.GetLeaseExpiresUnixNano()), nil
					}
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		return "", nil, time.Time{}, errors.New("leadership: no unit took the lease within 2 minutes")
	}
	sampler := sampleLease(ctx, t)
	defer sampler.close()

	var gaps, renewals []time.Duration
	var others []string
	for k := 1; k <= *leadReplacements; k++ {
		unit, old, _, err := holderOf()
		if err != nil {
			return nil, err
		}
		env.Progressf("leadership: replacing %s's pod %s (%d of %d)", unit, old.pod, k, *leadReplacements)
		killed := time.Now()
		if err := old.proc.Signal(syscall.SIGKILL); err != nil {
			return nil, err
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_ = old.proc.Wait(wctx)
		cancel()
		old.dataDir = filepath.Join(t.dir, fmt.Sprintf("m%d-r%d", old.index, k))
		if err := t.assignAddresses(old); err != nil {
			return nil, err
		}
		old.peers = t.peerAddrs()
		for _, x := range t.members {
			x.peers = old.peers
		}
		if err := t.startMember(old); err != nil {
			return nil, err
		}
		renewed, err := waitRenewed(ctx, old, unit, killed)
		if err != nil {
			return nil, err
		}
		renewals = append(renewals, renewed.Sub(killed))
		d, holders := leaderless(sampler.since(killed))
		gaps = append(gaps, d)
		for h := range holders {
			if h != unit {
				others = append(others, h)
			}
		}
		if err := waitHooksSettled(ctx, t.members, time.Second, 5*time.Minute); err != nil {
			return nil, err
		}
	}
	name := b.Name()
	note := fmt.Sprintf("%d replacements (kill -9, same pod name, empty disk, new address); leaderless: %s; sampled every 20 ms on every member", len(gaps), fmtDurations(gaps))
	if len(others) > 0 {
		note += fmt.Sprintf("; OTHER UNITS TOOK THE LEASE: %v", others)
	}
	rows := []Row{
		{What: "leadership: leaderless time while the leader's pod is replaced (no member knows a lease with 30 s left)", Target: name,
			Value: fmt.Sprintf("max %s (target 0)", fmtDuration(percentile(gaps, 100))), Note: note},
		{What: "leadership: leader's pod killed → its new pod renews the lease", Target: name,
			Value: fmt.Sprintf("median %s, max %s", fmtDuration(percentile(renewals, 50)), fmtDuration(percentile(renewals, 100))), Note: fmtDurations(renewals)},
	}

	unit, old, _, err := holderOf()
	if err != nil {
		return nil, err
	}
	env.Progressf("leadership: killing %s's pod %s for good; the lease lapses in up to a minute", unit, old.pod)
	killed := time.Now()
	if err := old.proc.Signal(syscall.SIGKILL); err != nil {
		return nil, err
	}
	var lastEnd, taken time.Time
	var next string
	deadline := killed.Add(3 * time.Minute)
	for next == "" && time.Now().Before(deadline) {
		for _, smp := range sampler.since(killed) {
			switch {
			case smp.holder == unit && smp.expires.After(lastEnd):
				lastEnd = smp.expires
			case smp.holder != "" && smp.holder != unit && next == "":
				next, taken = smp.holder, smp.at
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if next == "" {
		return nil, fmt.Errorf("leadership: no other unit took the lease within 3 minutes of %s's kill", unit)
	}
	rows = append(rows, Row{What: "leadership: leader's pod gone for good → another unit holds the lease", Target: name,
		Value: fmt.Sprintf("%s after the kill (target ≤ lease 60 s + 1 s)", fmtDuration(taken.Sub(killed))),
		Note:  fmt.Sprintf("%s took it %s after the old lease ended (sampled every 20 ms)", next, fmtDuration(taken.Sub(lastEnd)))})
	return rows, nil
}

// waitRenewed waits until m, restarted, serves and knows unit's lease
// renewed after since (its end more than 55 s after since: a renewal).
func waitRenewed(ctx context.Context, m *bkMember, unit string, since time.Time) (time.Time, error) {
	deadline := time.Now().Add(2 * time.Minute)
	last := ""
	for time.Now().Before(deadline) {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := m.admin.Status(sctx, &adminpb.StatusRequest{SkipProbe: true})
		cancel()
		switch {
		case err != nil:
			last = err.Error()
		case st.GetLeaderUnit() != unit:
			last = "lease held by " + st.GetLeaderUnit()
		case time.Unix(0, st.GetLeaseExpiresUnixNano()).Sub(since) > 55*time.Second:
			return time.Now(), nil
		default:
			last = "lease not renewed yet"
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Time{}, fmt.Errorf("leadership: %s's new pod %s did not renew the lease within 2 minutes: %s", unit, m.pod, last)
}

// podOfUnit is the pod of a StatefulSet that holds unit "app/N": app-N.
func podOfUnit(unit string) string {
	for i := len(unit) - 1; i >= 0; i-- {
		if unit[i] == '/' {
			return unit[:i] + "-" + unit[i+1:]
		}
	}
	return unit
}
