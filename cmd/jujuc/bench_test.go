package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bagkeeper/bagkeeper/agent/toolpb"
)

// BenchmarkStartup measures what a hook pays per tool call: relation-get,
// exec'd through its symlink, against a grpc-go agent answering a small
// bag, end to end (exec, connect, call, print, exit), next to the exec of a
// static hello-world Go binary. The two are run alternately, so that both
// see the same machine; it reports the median and 99th percentile of each
// and their ratios, and the package initialisation time of each binary
// from GODEBUG=inittrace=1. Run it with, for 500 runs of each:
//
//	go test -run '^$' -bench Startup -benchtime 500x ./cmd/jujuc
func BenchmarkStartup(b *testing.B) {
	hello := buildHello(b)
	tool := toolLink(b, buildStatic(b, ".", "jujuc"), "relation-get")
	const bag = "egress-subnets: 10.1.2.3/32\ningress-address: 10.1.2.3\nprivate-address: 10.1.2.3\n"
	a := startAgent(b, answer(&toolpb.RunResponse{Stdout: []byte(bag)}))
	env := []string{
		"JUJU_CONTEXT_ID=unit-0-hook-1", "JUJU_AGENT_SOCKET_NETWORK=unix",
		"JUJU_AGENT_SOCKET_ADDRESS=" + a.addr, "PATH=/usr/bin:/bin",
	}
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer devNull.Close()

	if out := execOnce(b, env, nil, tool, "-", "app/0"); out != bag {
		b.Fatalf("relation-get printed %q, want %q", out, bag)
	}
	helloInit := initTime(b, env, hello)
	toolInit := initTime(b, env, tool, "-", "app/0")

	var helloTimes, toolTimes []time.Duration
	run := func(times *[]time.Duration, path string, args ...string) {
		cmd := exec.Command(path, args...)
		cmd.Env, cmd.Stdout, cmd.Stderr = env, devNull, devNull
		start := time.Now()
		if err := cmd.Run(); err != nil {
			b.Fatalf("%s: %v", path, err)
		}
		*times = append(*times, time.Since(start))
	}
	i := 0
	for b.Loop() {
		if i%2 == 0 {
			run(&helloTimes, hello)
			run(&toolTimes, tool, "-", "app/0")
		} else {
			run(&toolTimes, tool, "-", "app/0")
			run(&helloTimes, hello)
		}
		i++
	}
	b.StopTimer()

	h50, h99 := percentile(helloTimes, 50), percentile(helloTimes, 99)
	t50, t99 := percentile(toolTimes, 50), percentile(toolTimes, 99)
	b.ReportMetric(us(h50), "hello-p50-µs")
	b.ReportMetric(us(h99), "hello-p99-µs")
	b.ReportMetric(us(t50), "tool-p50-µs")
	b.ReportMetric(us(t99), "tool-p99-µs")
	b.ReportMetric(float64(t50)/float64(h50), "p50-ratio")
	b.ReportMetric(float64(t99)/float64(h99), "p99-ratio")
	b.Logf("%d runs each\n"+
		"               p50        p99\n"+
		"hello     %8.0fµs %8.0fµs   init %.3fms\n"+
		"relation-get %5.0fµs %8.0fµs   init %.3fms\n"+
		"ratio     %9.2f  %9.2f",
		len(toolTimes), us(h50), us(h99), helloInit, us(t50), us(t99), toolInit,
		float64(t50)/float64(h50), float64(t99)/float64(h99))
}

// buildHello builds a static hello-world Go binary.
func buildHello(tb testing.TB) string {
	dir := tb.TempDir()
	files := map[string]string{
		"go.mod":  "module hello\n\ngo 1.26\n",
		"main.go": "package main\n\nimport \"os\"\n\nfunc main() { os.Stdout.Write([]byte(\"hello\\n\")) }\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	return buildStatic(tb, dir, "hello")
}

// execOnce runs path and returns its stdout; extra is added to env.
func execOnce(tb testing.TB, env, extra []string, path string, args ...string) string {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(path, args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = append(slices.Clone(env), extra...), &stdout, &stderr
	if err := cmd.Run(); err != nil {
		tb.Fatalf("%s: %v\n%s", path, err, stderr.Bytes())
	}
	if extra != nil {
		return stderr.String()
	}
	return stdout.String()
}

// initTime returns the milliseconds that path spends initialising packages,
// as GODEBUG=inittrace=1 reports them.
func initTime(tb testing.TB, env []string, path string, args ...string) float64 {
	trace := execOnce(tb, env, []string{"GODEBUG=inittrace=1"}, path, args...)
	var total float64
	for _, line := range strings.Split(trace, "\n") {
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

// percentile returns the p-th percentile of d (nearest rank).
func percentile(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(i-1, 0)]
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
