package agent

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// BenchmarkSecretGet measures what a hook pays for secret-get: the tool
// exec'd through its symlink against a real agent whose hook context holds
// a committed secret (read from the store, opened with the application
// key), end to end, next to the exec of a static hello-world Go binary,
// run alternately. It reports the median and 99th percentile of each and
// their ratios. For 500 runs of each:
//
//	go test -run '^$' -bench SecretGet -benchtime 500x ./agent
func BenchmarkSecretGet(b *testing.B) {
	ta := startToolAgent(b, withKeyTB(b, rawKeyA))
	dir := b.TempDir()
	add := ta.run(b, dir, nil, nil, "secret-add", "username=admin", "password=hunter2")
	if add.code != 0 {
		b.Fatalf("secret-add: %+v", add)
	}
	id := strings.TrimSpace(add.stdout)
	ta.store.Must(ta.hc.ops()...)
	ta.hc.mu.Lock()
	ta.hc.secrets = secretBuffer{}
	ta.hc.mu.Unlock()

	hello := buildHelloTB(b)
	tool := filepath.Join(ta.cfg.ToolsDir, "secret-get")
	env := []string{"JUJU_CONTEXT_ID=" + ta.hc.id, "JUJU_AGENT_SOCKET_ADDRESS=" + ta.socket, "PATH=/usr/bin:/bin"}
	if r := ta.run(b, dir, nil, nil, "secret-get", id, "password"); r.code != 0 || r.stdout != "hunter2\n" {
		b.Fatalf("secret-get: %+v", r)
	}
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer devNull.Close()
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
			run(&toolTimes, tool, id, "password")
		} else {
			run(&toolTimes, tool, id, "password")
			run(&helloTimes, hello)
		}
		i++
	}
	b.StopTimer()
	pct := func(ds []time.Duration, p int) time.Duration {
		s := append([]time.Duration(nil), ds...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return s[(len(s)-1)*p/100]
	}
	h50, h99, t50, t99 := pct(helloTimes, 50), pct(helloTimes, 99), pct(toolTimes, 50), pct(toolTimes, 99)
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) }
	b.ReportMetric(us(h50), "hello-p50-µs")
	b.ReportMetric(us(t50), "secret-get-p50-µs")
	b.ReportMetric(float64(t50)/float64(h50), "p50-ratio")
	b.ReportMetric(float64(t99)/float64(h99), "p99-ratio")
	b.Logf("%d runs each: hello p50 %v p99 %v; secret-get p50 %v p99 %v; ratio p50 %.2f, p99 %.2f",
		len(helloTimes), h50, h99, t50, t99, float64(t50)/float64(h50), float64(t99)/float64(h99))
}

func withKeyTB(tb testing.TB, raw []byte) agentOpt {
	k, err := ParseSecretsKey(raw)
	if err != nil {
		tb.Fatal(err)
	}
	return withKey(k)
}

// buildHelloTB builds a static hello-world Go binary.
func buildHelloTB(tb testing.TB) string {
	dir := tb.TempDir()
	for name, text := range map[string]string{
		"go.mod":  "module hello\n\ngo 1.26\n",
		"main.go": "package main\n\nimport \"os\"\n\nfunc main() { os.Stdout.Write([]byte(\"hello\\n\")) }\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	out := filepath.Join(dir, "hello")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("building hello: %v\n%s", err, b)
	}
	return out
}
