package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The actions measurement (-experiments actions, bagkeeper only): three
// sidecars running a charm with one action that sets one result, on
// units that are idle (no hook due). It times `bagkeeper actions run` end
// to end, exec'd as an operator runs it in a pod: the process starts,
// queues the action through its sidecar (forwarded to the raft leader),
// the unit's agent commits the start, runs the action, commits its end,
// and the command prints the results and exits. Three times: through the
// pod that holds the unit (as an operator would run it in that pod), on
// the raft leader and on a follower; and through a follower for the
// leader's unit, where the follower must learn of the end the leader's
// agent committed (the agent nudges the followers after an action's end,
// which saves them waiting up to the raft commit timeout for it).

var actionRuns = flag.Int("actions-runs", 50, "actions: `bagkeeper actions run` calls timed through each of the two pods")

const actApp = "act"

func actionsExperiment(ctx context.Context, env *Env) ([]Row, error) {
	b, ok := env.Target.(*bagkeeperTarget)
	if !ok {
		return nil, nil
	}
	return b.measureActions(ctx, env)
}

// actCharm writes a charm whose hooks do nothing and whose action "ping"
// sets one result.
func actCharm(dir string) error {
	files := map[string]string{
		"metadata.yaml": "name: bench-actions\n",
		"actions.yaml":  "ping:\n  description: Sets pong=yes.\n",
		"actions/ping":  "#!/bin/sh\naction-set pong=yes\n",
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			return err
		}
	}
	return nil
}

func (b *bagkeeperTarget) measureActions(ctx context.Context, env *Env) ([]Row, error) {
	n := *actionRuns
	if n < 1 {
		return nil, errors.New("actions: -actions-runs must be at least 1")
	}
	dir := filepath.Join(env.Dir, "actions")
	jujuc := filepath.Join(filepath.Dir(b.bin), "jujuc")
	if _, err := os.Stat(jujuc); err != nil {
		return nil, fmt.Errorf("actions measurement needs jujuc next to the bagkeeper binary: %w", err)
	}
	charm := filepath.Join(dir, "charm")
	if err := os.MkdirAll(filepath.Join(dir, actApp), 0o755); err != nil {
		return nil, err
	}
	if err := actCharm(charm); err != nil {
		return nil, err
	}
	t := &bagkeeperTarget{bin: b.bin, version: b.version, defaults: b.defaults, via: b.via, app: actApp,
		attemptTimeout: b.attemptTimeout, startTimeout: b.startTimeout, lastHost: b.lastHost + 80, http: b.http,
		extraArgs: func(*bkMember) []string {
			return []string{"--charm-dir=" + charm, "--hook-tool=" + jujuc, "--update-status-interval=1h"}
		}}
	defer t.stopCluster()
	env.Progressf("actions: starting %s", actApp)
	sctx, cancel := context.WithTimeout(ctx, b.startTimeout)
	err := t.Start(sctx, filepath.Join(dir, actApp))
	cancel()
	if err != nil {
		return nil, err
	}
	if err := waitHooksSettled(ctx, t.members, 2*time.Second, 2*time.Minute); err != nil {
		return nil, err
	}
	leader, err := t.findLeader(ctx)
	if err != nil {
		return nil, err
	}
	follower, err := t.findFollower(ctx)
	if err != nil {
		return nil, err
	}
	run := func(m, holder *bkMember) (time.Duration, error) {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		unit := fmt.Sprintf("%s/%d", actApp, holder.index)
		start := time.Now()
		out, err := exec.CommandContext(cctx, b.bin, "actions", "run", "--admin-socket", m.socket, unit, "ping").CombinedOutput()
		d := time.Since(start)
		if err != nil || !strings.Contains(string(out), "pong:") {
			return 0, fmt.Errorf("actions run %s through %s: %v\n%s", unit, m.pod, err, out)
		}
		return d, nil
	}
	name := b.Name()
	var rows []Row
	for _, via := range []struct {
		m, holder *bkMember
		what      string
	}{
		{leader, leader, "the raft leader's pod, for its own unit"},
		{follower, follower, "a follower's pod, for its own unit"},
		{follower, leader, "a follower's pod, for the leader's unit"},
	} {
		// The first runs wait for the unit's install sequence, if it is
		// not over.
		for range 3 {
			if _, err := run(via.m, via.holder); err != nil {
				return nil, err
			}
		}
		env.Progressf("actions: %d runs through %s", n, via.what)
		var lat []time.Duration
		for range n {
			d, err := run(via.m, via.holder)
			if err != nil {
				return nil, err
			}
			lat = append(lat, d)
		}
		rows = append(rows, Row{What: "actions: `bagkeeper actions run` round trip on an idle unit, through " + via.what, Target: name,
			P50: fmtDuration(percentile(lat, 50)), P99: fmtDuration(percentile(lat, 99)),
			Note: fmt.Sprintf("%d runs exec'd one after another: queue, start committed, run (sh: action-set), end committed, results printed", len(lat))})
	}
	return rows, nil
}
