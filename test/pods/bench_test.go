package pods

import (
	"context"
	"flag"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

var benchFlag = flag.Bool("pods.bench", false, "run TestPodsBench: the numbers for BENCHMARKS.md")

// TestPodsBench prints the container numbers for BENCHMARKS.md: the image's
// size; each sidecar's RSS and idle CPU in its container, with the chart's
// limits, read from the container's cgroup; and the time from the start of
// a wiped pod (persistence off: an empty data dir) to ready with every bag,
// with TLS and with a join token.
//
//	go test -count=1 -v -run TestPodsBench ./test/pods/ -pods.bench
func TestPodsBench(t *testing.T) {
	if !*benchFlag {
		t.Skip("the numbers for BENCHMARKS.md: run with -pods.bench")
	}
	needDocker(t)
	size, err := strconv.ParseInt(dockerT(t, "image", "inspect", "-f", "{{.Size}}", imageRef()), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("BENCH image %s: %.1f MB (%d bytes)", imageRef(), float64(size)/1e6, size)
	for _, tlsOn := range []bool{true, false} {
		name := "join token"
		if tlsOn {
			name = "TLS"
		}
		t.Run(name, func(t *testing.T) {
			a := startApp(t, fmt.Sprintf("tls.enabled=%v", tlsOn), "persistence.enabled=false")
			defer a.use(t)()
			if tlsOn {
				a.idleUsage(t, 30*time.Second)
			}
			var times []time.Duration
			for i := 0; i < 5; i++ {
				p := a.runningPods()[i%len(a.runningPods())]
				p.stop()
				start := time.Now()
				if err := p.start(); err != nil {
					t.Fatal(err)
				}
				p.waitReady()
				d := time.Since(start)
				a.check(t) // every bag there, from every pod
				times = append(times, d)
			}
			sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
			var parts []string
			for _, d := range times {
				parts = append(parts, d.Round(10*time.Millisecond).String())
			}
			t.Logf("BENCH wiped pod, %s: start of its pause container to ready with every bag: median %v (%s)",
				name, times[len(times)/2].Round(10*time.Millisecond), strings.Join(parts, ", "))
		})
	}
}

// idleUsage samples every sidecar's cgroup over d while nothing is written:
// RSS at the end, CPU over the window.
func (a *app) idleUsage(t *testing.T, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
	defer cancel()
	leader, _ := a.leaderPod(ctx)
	type sample struct {
		cpu  time.Duration
		when time.Time
	}
	first := map[*pod]sample{}
	for _, p := range a.runningPods() {
		first[p] = sample{cgroupCPU(t, p.sidecar()), time.Now()}
	}
	time.Sleep(d) // the measurement window, not a wait for a condition
	limit := a.sidecarSpec().Resources.Limits
	for _, p := range a.runningPods() {
		used := cgroupCPU(t, p.sidecar()) - first[p].cpu
		pct := 100 * used.Seconds() / time.Since(first[p].when).Seconds()
		rss := cgroupRSS(t, p.sidecar())
		vmRSS := "?"
		for _, line := range strings.Split(dockerT(t, "exec", p.sidecar(), "cat", "/proc/1/status"), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
				n, _ := strconv.ParseFloat(f[1], 64)
				vmRSS = fmt.Sprintf("%.1f MiB", n/1024)
			}
		}
		role := "follower"
		if p == leader {
			role = "leader"
		}
		stats := dockerT(t, "stats", "--no-stream", "--format", "{{.MemUsage}} {{.CPUPerc}}", p.sidecar())
		t.Logf("BENCH idle sidecar %s (%s, limits %v): RSS %s (process VmRSS; cgroup anonymous memory %.1f MiB), CPU %.2f%% of a core over %v (docker stats: %s)",
			p.name, role, limit, vmRSS, float64(rss)/(1<<20), pct, d, stats)
	}
}

// cgroupCPU is the CPU time a container has used (cgroup v1 or v2).
func cgroupCPU(t *testing.T, name string) time.Duration {
	out := dockerT(t, "exec", name, "/bin/sh", "-c", "cat /sys/fs/cgroup/cpuacct/cpuacct.usage 2>/dev/null || grep usage_usec /sys/fs/cgroup/cpu.stat")
	if f := strings.Fields(out); len(f) == 2 {
		n, _ := strconv.ParseInt(f[1], 10, 64)
		return time.Duration(n) * time.Microsecond
	}
	n, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil {
		t.Fatalf("cpu usage of %s: %q", name, out)
	}
	return time.Duration(n)
}

// cgroupRSS is a container's anonymous memory (cgroup v1 total_rss, v2 anon).
func cgroupRSS(t *testing.T, name string) int64 {
	out := dockerT(t, "exec", name, "/bin/sh", "-c", "cat /sys/fs/cgroup/memory/memory.stat 2>/dev/null || cat /sys/fs/cgroup/memory.stat")
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && (f[0] == "total_rss" || f[0] == "anon") {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	t.Fatalf("no rss in %s's memory.stat", name)
	return 0
}
