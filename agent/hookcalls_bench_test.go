package agent

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/bagkeeper/bagkeeper/agent/hooktools"
	"github.com/bagkeeper/bagkeeper/agent/toolpb"
	"github.com/bagkeeper/bagkeeper/raftstore/state"
)

// hookCallsLoop is the hook of BenchmarkHookCalls: $2 called $1 times
// from one bash loop, with the rest of the arguments, as a charm's hook
// calls a tool again and again. It fails at the first call that fails.
const hookCallsLoop = `set -e
n=$1 cmd=$2
shift 2
for ((i = 0; i < n; i++)); do
	"$cmd" "$@" >/dev/null
done
`

// BenchmarkHookCalls measures what a tool call costs inside a hook: a
// bash loop calling relation-get (then relation-set) 100 times against a
// real agent serving a hook context, next to the same bash loop exec'ing
// a static hello-world Go binary, and /bin/true (not Go: what bash's own
// fork and exec cost), 100 times. The loops take turns so that all see
// the same machine. The tool is built as make build builds it. For each
// loop it reports the median per call of the wall time, its ratio to
// hello-world's, the CPU time of bash and the commands it ran, their
// minor page faults, and the CPU time of this process, which is the
// agent's. Then, apart, the parts of a relation-get:
//
//   - jujuc's package initialisation (GODEBUG=inittrace=1);
//   - the agent's handler alone (hooktools.Run on the hook context, in
//     process);
//   - a call through the socket and the agent's gRPC server, from a
//     grpc-go client in this process, on a new connection each time, as
//     jujuc makes it;
//
// and hello-world exec'd from Go (os/exec, as BenchmarkStartup in
// cmd/jujuc execs it) rather than from bash. For 20 loops of each (add
// -cpuprofile to profile the agent's side):
//
//	go test -run '^$' -bench HookCalls -benchtime 20x ./agent
func BenchmarkHookCalls(b *testing.B) {
	const calls = 100
	bashPath, err := exec.LookPath("bash")
	if err != nil {
		b.Skip("no bash")
	}
	jujuc := buildReleaseJujuc(b)
	ta := startToolAgent(b, func(c *Config) { c.ToolBinary = jujuc })
	ta.store.Must(state.UpdateBagOp(ta.rel, "app/1", map[string]string{
		"egress-subnets": "10.1.2.3/32", "ingress-address": "10.1.2.3", "private-address": "10.1.2.3",
	}))
	// The hook's snapshot is the store's state now (with app/1's bag).
	ta.hc.st = ta.store.State()

	helloDir := filepath.Dir(buildHelloTB(b))
	dir := b.TempDir()
	script := filepath.Join(dir, "loop.sh")
	if err := os.WriteFile(script, []byte(hookCallsLoop), 0o755); err != nil {
		b.Fatal(err)
	}
	// The hook's environment, with the tools, then hello, on PATH.
	env := envList(ta.hookEnv(ta.hc), ta.cfg.ToolsDir+":"+helloDir)
	rel := strconv.FormatInt(ta.rel, 10)
	loops := []struct {
		name string
		args []string
	}{
		{"hello", []string{"hello", "-r", rel, "-", "app/1"}},
		{"/bin/true", []string{"/bin/true", "-r", rel, "-", "app/1"}}, // not bash's builtin
		{"relation-get", []string{"relation-get", "-r", rel, "-", "app/1"}},
		{"relation-set", []string{"relation-set", "-r", rel, "k=v"}},
	}
	// Each command once, checked.
	for _, l := range loops {
		if _, err := runLoopCost(bashPath, script, dir, env, 1, l.args); err != nil {
			b.Fatalf("%s: %v", l.name, err)
		}
	}
	if got := ta.run(b, dir, nil, nil, "relation-get", "-r", rel, "-", "app/1"); got.code != 0 ||
		got.stdout != "egress-subnets: 10.1.2.3/32\ningress-address: 10.1.2.3\nprivate-address: 10.1.2.3\n" {
		b.Fatalf("relation-get: %+v", got)
	}

	perCall := make([][]loopCost, len(loops))
	i := 0
	for b.Loop() {
		for j := range loops {
			l := (i + j) % len(loops) // rotate the order
			c, err := runLoopCost(bashPath, script, dir, env, calls, loops[l].args)
			if err != nil {
				b.Fatalf("%s: %v", loops[l].name, err)
			}
			perCall[l] = append(perCall[l], c)
		}
		i++
	}
	b.StopTimer()

	med := make([]loopCost, len(loops))
	for l := range loops {
		med[l] = medianCost(perCall[l])
	}
	hello := med[0].wall
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(hello), "hello-ms/call")
	b.ReportMetric(ms(med[2].wall), "relation-get-ms/call")
	b.ReportMetric(float64(med[2].wall)/float64(hello), "get-ratio")
	b.ReportMetric(float64(med[3].wall)/float64(hello), "set-ratio")

	goExec := timeGoExec(b, filepath.Join(helloDir, "hello"), env)
	initMs := jujucInitTime(b, filepath.Join(ta.cfg.ToolsDir, "relation-get"), env, "-r", rel, "-", "app/1")
	handler := timeHandler(b, ta, rel)
	rpc := timeRPC(b, ta, rel)
	var sb strings.Builder
	// Ten lines at most: go test cuts a benchmark's log there (without -v).
	fmt.Fprintf(&sb, "%d loops of %d calls from one bash loop each, median per call:\n", len(perCall[0]), calls)
	fmt.Fprintf(&sb, "  %-13s %9s %8s %14s %12s %12s\n", "", "wall", "/ hello", "CPU bash+child", "page faults", "agent CPU")
	for l := range loops {
		fmt.Fprintf(&sb, "  %-13s %6.3f ms %7.2f× %11.3f ms %12.0f %9.3f ms\n", loops[l].name,
			ms(med[l].wall), float64(med[l].wall)/float64(hello), ms(med[l].cpu), med[l].faults, ms(med[l].self))
	}
	fmt.Fprintf(&sb, "hello exec'd from Go (os/exec), not bash: %.3f ms median\n", ms(goExec))
	fmt.Fprintf(&sb, "parts of a relation-get: jujuc package init (inittrace) %.3f ms; agent handler alone (hooktools.Run) %.3f ms;\n", initMs, ms(handler))
	fmt.Fprintf(&sb, "  dial + Run through the socket and the agent's gRPC server, from grpc-go in process, %.3f ms", ms(rpc))
	b.Log(sb.String())
}

// loopCost is what one call of a loop cost, on average over the loop:
// wall time, the CPU time of bash and its children (the commands it ran),
// their minor page faults, and this process's CPU time (the agent's).
type loopCost struct {
	wall, cpu, self time.Duration
	faults          float64
}

// medianCost is the median of each field of cs, taken apart.
func medianCost(cs []loopCost) loopCost {
	field := func(f func(loopCost) float64) float64 {
		v := make([]float64, len(cs))
		for i, c := range cs {
			v[i] = f(c)
		}
		slices.Sort(v)
		return v[(len(v)-1)/2]
	}
	return loopCost{
		wall:   time.Duration(field(func(c loopCost) float64 { return float64(c.wall) })),
		cpu:    time.Duration(field(func(c loopCost) float64 { return float64(c.cpu) })),
		self:   time.Duration(field(func(c loopCost) float64 { return float64(c.self) })),
		faults: field(func(c loopCost) float64 { return c.faults }),
	}
}

// runLoopCost runs the loop script once with n calls and returns the cost
// of a call.
func runLoopCost(bash, script, dir string, env []string, n int, args []string) (loopCost, error) {
	var before syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &before); err != nil {
		return loopCost{}, err
	}
	cmd := exec.Command(bash, append([]string{script, strconv.Itoa(n)}, args...)...)
	cmd.Dir, cmd.Env = dir, env
	start := time.Now()
	out, err := cmd.CombinedOutput()
	wall := time.Since(start)
	if err != nil {
		return loopCost{}, fmt.Errorf("%v: %s", err, out)
	}
	var after syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &after); err != nil {
		return loopCost{}, err
	}
	// bash's usage as wait4 reports it includes the children it waited
	// for.
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	d := time.Duration(n)
	return loopCost{
		wall:   wall / d,
		cpu:    (tvDuration(ru.Utime) + tvDuration(ru.Stime)) / d,
		faults: float64(ru.Minflt) / float64(n),
		self:   (tvDuration(after.Utime) + tvDuration(after.Stime) - tvDuration(before.Utime) - tvDuration(before.Stime)) / d,
	}, nil
}

func tvDuration(tv syscall.Timeval) time.Duration { return time.Duration(tv.Nano()) }

// timeGoExec returns the median time of exec'ing path from Go, as
// BenchmarkStartup in cmd/jujuc does, for comparison with bash's loop.
func timeGoExec(tb testing.TB, path string, env []string) time.Duration {
	var ds []time.Duration
	for range 100 {
		cmd := exec.Command(path)
		cmd.Env = env
		start := time.Now()
		if err := cmd.Run(); err != nil {
			tb.Fatal(err)
		}
		ds = append(ds, time.Since(start))
	}
	return percentile(ds, 50)
}

// buildReleaseJujuc builds cmd/jujuc as make build does.
func buildReleaseJujuc(tb testing.TB) string {
	out := filepath.Join(tb.TempDir(), "jujuc")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, "../cmd/jujuc")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("building jujuc: %v\n%s", err, b)
	}
	return out
}

// jujucInitTime returns the milliseconds the tool spends initialising
// packages, as GODEBUG=inittrace=1 reports them.
func jujucInitTime(tb testing.TB, tool string, env []string, args ...string) float64 {
	cmd := exec.Command(tool, args...)
	cmd.Env = append(slices.Clone(env), "GODEBUG=inittrace=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("%s: %v\n%s", tool, err, out)
	}
	var total float64
	for _, line := range strings.Split(string(out), "\n") {
		// "init os @0.65 ms, 0.025 ms clock, 416 bytes, 9 allocs"
		f := strings.Fields(line)
		if len(f) > 6 && f[0] == "init" && f[6] == "clock," {
			ms, err := strconv.ParseFloat(f[4], 64)
			if err != nil {
				tb.Fatalf("cannot parse %q: %v", line, err)
			}
			total += ms
		}
	}
	return total
}

// timeHandler returns the median time of the agent's relation-get handler
// alone.
func timeHandler(tb testing.TB, ta *toolAgent, rel string) time.Duration {
	req := hooktools.Request{Command: "relation-get", Args: []string{"-r", rel, "-", "app/1"}, Dir: "/", ClientFiles: true}
	var ds []time.Duration
	for range 1000 {
		start := time.Now()
		resp, err := hooktools.Run(ta.hc, req)
		ds = append(ds, time.Since(start))
		if err != nil || resp.Code != 0 {
			tb.Fatalf("relation-get: %v %+v", err, resp)
		}
	}
	return percentile(ds, 50)
}

// timeRPC returns the median time of a relation-get call through the
// socket from a grpc-go client, on a new connection each time.
func timeRPC(tb testing.TB, ta *toolAgent, rel string) time.Duration {
	req := &toolpb.RunRequest{ContextId: ta.hc.id, Dir: "/", Command: "relation-get", Args: []string{"-r", rel, "-", "app/1"}, ClientFiles: true}
	var ds []time.Duration
	for range 300 {
		start := time.Now()
		conn, err := grpc.NewClient("unix://"+ta.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			tb.Fatal(err)
		}
		resp, err := toolpb.NewHookToolsClient(conn).Run(context.Background(), req)
		conn.Close()
		ds = append(ds, time.Since(start))
		if err != nil || resp.GetCode() != 0 {
			tb.Fatalf("relation-get: %v %+v", err, resp)
		}
	}
	return percentile(ds, 50)
}

// percentile returns the p-th percentile of d (nearest rank).
func percentile(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(i-1, 0)]
}
