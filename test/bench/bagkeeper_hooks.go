package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

var bagkeeperHookRuns = flag.Int("bagkeeper-hook-runs", 30, "config changes for the hook measurement (each runs config-changed on every unit); 0 skips it")

// hookCharm is the charm of the hook measurement: config-changed reads
// bags 100 times with relation-get and writes 20 keys with relation-set,
// the shape of a busy relation hook, and for comparison execs a static
// hello-world Go binary 120 times from the same kind of bash loop (the
// hello loop first on odd config values, last on even ones). It appends
// the times of the two loops to a file of its unit in the charm directory
// (see parseCallTimes). It declares the peer endpoint the target's Start
// relates (bkRelationEndpoint): a sidecar with a charm relates only the
// charm's endpoints. HELLO stands for the hello-world binary's path.
var hookCharm = map[string]string{
	"metadata.yaml": "name: bench\npeers:\n  cluster:\n    interface: bench-peers\n  " + bkRelationEndpoint + ":\n    interface: " + bkRelationEndpoint + "\n",
	"config.yaml":   "options:\n  n:\n    type: int\n    default: 0\n",
	"dispatch": `#!/bin/bash
set -e
[ "$JUJU_HOOK_NAME" = config-changed ] || exit 0
n=$(config-get n)
rel=$(relation-ids cluster)
tools() {
	for i in $(seq 1 100); do
		relation-get -r "$rel" - "bench/$((i % 3))" > /dev/null
	done
	for i in $(seq 1 20); do
		relation-set -r "$rel" "k$i=$n"
	done
}
hello() {
	for i in $(seq 1 120); do
		HELLO -r "$rel" - "bench/$((i % 3))" > /dev/null
	done
}
if [ $((n % 2)) = 1 ]; then
	t0=$EPOCHREALTIME; hello; t1=$EPOCHREALTIME; tools; t2=$EPOCHREALTIME
	echo "tools $t1 $t2 hello $t0 $t1" >> "$JUJU_CHARM_DIR/calls-${JUJU_UNIT_NAME%/*}-${JUJU_UNIT_NAME#*/}.log"
else
	t0=$EPOCHREALTIME; tools; t1=$EPOCHREALTIME; hello; t2=$EPOCHREALTIME
	echo "tools $t0 $t1 hello $t1 $t2" >> "$JUJU_CHARM_DIR/calls-${JUJU_UNIT_NAME%/*}-${JUJU_UNIT_NAME#*/}.log"
fi
`,
}

// hookHello is the hello-world program hookCharm execs.
const hookHello = "package main\n\nimport \"os\"\n\nfunc main() { os.Stdout.Write([]byte(\"hello\\n\")) }\n"

var hookCommitted = regexp.MustCompile(`msg="hook committed".* hook=config-changed .*run_ms=([0-9.]+) commit_ms=([0-9.]+)`)

// measureHooks runs a separate cluster whose sidecars run the unit agent
// with hookCharm, changes the charm config again and again, and reports
// the hook's run time (its 120 tool calls, each an exec of jujuc and a
// round trip to the agent) and the time to commit its writes (one raft
// command with the 20 keys and the event cursor).
func (b *bagkeeperTarget) measureHooks(ctx context.Context, env *Env) ([]Row, error) {
	dir := filepath.Join(env.Dir, "hooks")
	charmDir := filepath.Join(dir, "charm")
	if err := os.MkdirAll(charmDir, 0o755); err != nil {
		return nil, err
	}
	hello, err := buildHookHello(filepath.Join(dir, "hello"))
	if err != nil {
		return nil, err
	}
	for name, content := range hookCharm {
		content = strings.ReplaceAll(content, "HELLO", hello)
		if err := os.WriteFile(filepath.Join(charmDir, name), []byte(content), 0o755); err != nil {
			return nil, err
		}
	}
	cfgFile := filepath.Join(dir, "config.yaml")
	writeConfig := func(n int) error {
		tmp := cfgFile + ".tmp"
		if err := os.WriteFile(tmp, []byte(fmt.Sprintf("n: %d\n", n)), 0o644); err != nil {
			return err
		}
		return os.Rename(tmp, cfgFile)
	}
	if err := writeConfig(0); err != nil {
		return nil, err
	}
	jujuc := filepath.Join(filepath.Dir(b.bin), "jujuc")
	if _, err := os.Stat(jujuc); err != nil {
		return nil, fmt.Errorf("hook measurement needs jujuc next to the bagkeeper binary: %w", err)
	}
	h := &bagkeeperTarget{
		bin: b.bin, version: b.version, defaults: b.defaults, via: b.via,
		attemptTimeout: b.attemptTimeout, startTimeout: b.startTimeout, lastHost: b.lastHost + 20, http: b.http,
		extraArgs: func(m *bkMember) []string {
			return []string{"--charm-dir=" + charmDir, "--charm-config=" + cfgFile, "--hook-tool=" + jujuc, "--update-status-interval=1h"}
		},
	}
	env.Progressf("hooks: starting a cluster that runs the unit agent")
	sctx, cancel := context.WithTimeout(ctx, b.startTimeout)
	err = h.Start(sctx, dir)
	cancel()
	defer h.stopCluster()
	if err != nil {
		return nil, err
	}
	// Each config change runs config-changed on all three units; wait
	// until each has committed the new value before the next.
	for n := 1; n <= *bagkeeperHookRuns; n++ {
		if err := writeConfig(n); err != nil {
			return nil, err
		}
		if err := h.waitHookValue(ctx, strconv.Itoa(n)); err != nil {
			return nil, fmt.Errorf("config change %d: %w", n, err)
		}
		if n%10 == 0 {
			env.Progressf("hooks: %d of %d config changes", n, *bagkeeperHookRuns)
		}
	}
	var commit, tools, hellos []time.Duration
	for _, m := range h.members {
		_, c, err := parseHookTimes(m.logPath)
		if err != nil {
			return nil, err
		}
		commit = append(commit, c...)
	}
	logs, err := filepath.Glob(filepath.Join(charmDir, "calls-*.log"))
	if err != nil {
		return nil, err
	}
	for _, log := range logs {
		t, hl, err := parseCallTimes(log)
		if err != nil {
			return nil, err
		}
		tools, hellos = append(tools, t...), append(hellos, hl...)
	}
	if len(commit) == 0 || len(tools) == 0 {
		return nil, errors.New("no config-changed hook was logged")
	}
	// The first config-changed of each unit ran in its install phase.
	name := b.Name()
	calls := fmt.Sprintf("%d hooks on 3 units, all three running the hook at once", len(tools))
	t50, h50 := percentile(tools, 50), percentile(hellos, 50)
	return []Row{
		{What: "hook: 100 relation-get and 20 relation-set calls from a bash loop", Target: name, P50: fmtDuration(t50), P99: fmtDuration(percentile(tools, 99)),
			Value: fmt.Sprintf("%s a call, %.2f× hello-world", fmtDuration(t50/120), float64(t50)/float64(h50)),
			Note:  calls + "; each call an exec of jujuc and a round trip to the agent"},
		{What: "hook: the same bash loop exec'ing a static hello-world Go binary 120 times", Target: name, P50: fmtDuration(h50), P99: fmtDuration(percentile(hellos, 99)),
			Value: fmtDuration(h50/120) + " a call",
			Note:  calls + "; in the same hook as the tool calls, before them on odd runs and after them on even ones"},
		{What: "hook commit (20 keys and the event cursor in one raft command)", Target: name, P50: fmtDuration(percentile(commit, 50)), P99: fmtDuration(percentile(commit, 99)), Note: fmt.Sprintf("%d hooks on 3 units", len(commit)) + "; 2 of 3 units commit through the leader (forwarded)"},
	}, nil
}

// buildHookHello builds hookHello, static and stripped, in dir and returns
// the binary's path.
func buildHookHello(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	for name, text := range map[string]string{"go.mod": "module hello\n\ngo 1.26\n", "main.go": hookHello} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			return "", err
		}
	}
	bin := filepath.Join(dir, "hello")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build hello: %w\n%s", err, out)
	}
	return bin, nil
}

// parseCallTimes reads the loop times a unit's config-changed hooks
// appended: lines "tools START END hello START END", in seconds since the
// epoch, as bash's EPOCHREALTIME gives them.
func parseCallTimes(path string) (tools, hello []time.Duration, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) != 6 || f[0] != "tools" || f[3] != "hello" {
			return nil, nil, fmt.Errorf("%s: bad line %q", path, line)
		}
		var t [4]float64
		for i, s := range []string{f[1], f[2], f[4], f[5]} {
			if t[i], err = strconv.ParseFloat(s, 64); err != nil {
				return nil, nil, fmt.Errorf("%s: %w", path, err)
			}
		}
		sec := func(d float64) time.Duration { return time.Duration(d * float64(time.Second)) }
		tools, hello = append(tools, sec(t[1]-t[0])), append(hello, sec(t[3]-t[2]))
	}
	return tools, hello, nil
}

// waitHookValue waits until every unit's bag holds the config value.
func (h *bagkeeperTarget) waitHookValue(ctx context.Context, want string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		done := 0
		if resp, err := h.members[0].admin.GetBags(ctx, &adminpb.GetBagsRequest{RelationId: -1}); err == nil {
			for _, bg := range resp.GetBags() {
				if strings.HasPrefix(bg.GetOwner(), "bench/") && bg.GetData()["k20"] == want {
					done++
				}
			}
		}
		if done == 3 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("only %d of 3 units committed value %s", done, want)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// parseHookTimes reads the config-changed run and commit times a
// sidecar logged.
func parseHookTimes(logPath string) (run, commit []time.Duration, err error) {
	f, err := os.Open(logPath)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := hookCommitted.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		r, _ := strconv.ParseFloat(m[1], 64)
		c, _ := strconv.ParseFloat(m[2], 64)
		run = append(run, time.Duration(r*float64(time.Millisecond)))
		commit = append(commit, time.Duration(c*float64(time.Millisecond)))
	}
	return run, commit, sc.Err()
}
