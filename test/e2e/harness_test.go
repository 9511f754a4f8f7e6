//go:build linux

package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
	"github.com/bagkeeper/bagkeeper/test/wait"
)

const (
	peerPort = 7400
	httpPort = 7401

	// startTimeout bounds how long a cluster may take to form or heal
	// after a fault. Failing waits report what they last saw.
	startTimeout = 30 * time.Second
)

// fastFlags are the timing flags every pod runs with: a raft group on
// loopback that heals and promotes within about a second. Raft's own
// timeouts stay at the product defaults: a suite of many processes on a
// small machine must not mistake a busy CPU for a dead leader.
var fastFlags = []string{
	"--raft-heartbeat-timeout", "500ms",
	"--raft-election-timeout", "500ms",
	"--raft-leader-lease-timeout", "400ms",
	"--join-interval", "100ms",
	"--autopilot-interval", "200ms",
	"--unhealthy-after", "1s",
	"--promote-after", "1s",
}

// cluster is one application's pods, their shared discovery file and the
// test they belong to.
type cluster struct {
	t         *testing.T
	app       string
	token     string
	dir       string // data dirs and logs
	sockDir   string // admin sockets: a short path, sockets are limited to 108 bytes
	peersFile string
	prefix    string // "127.a.b."
	flags     []string

	mu        sync.Mutex
	nextHost  int
	pods      []*pod
	discovery *[]string // overrides the peers file content when set
}

// newCluster prepares (but starts nothing of) a cluster of application
// "web". flags are given to every pod after the defaults, so they override.
func newCluster(t *testing.T, flags ...string) *cluster {
	t.Helper()
	c := &cluster{t: t, app: "web", token: randHex(16), dir: t.TempDir()}
	sock, err := os.MkdirTemp("", "bk")
	if err != nil {
		t.Fatal(err)
	}
	c.sockDir = sock
	c.peersFile = filepath.Join(c.dir, "peers")
	c.prefix = allocSubnet(t)
	c.flags = append([]string{}, fastFlags...)
	if ls := os.Getenv("BAGKEEPER_E2E_LOG_STORE"); ls != "" {
		c.flags = append(c.flags, "--log-store", ls) // before the test's flags, which may name another
	}
	c.flags = append(c.flags, flags...)
	c.writePeers()
	t.Cleanup(func() {
		c.mu.Lock()
		pods := append([]*pod(nil), c.pods...)
		c.mu.Unlock()
		for _, p := range pods {
			if pr := p.process(); pr != nil {
				pr.kill()
			}
		}
		// The kernel kills a hook when its agent dies, but not what the
		// hook started; nothing a pod ran may outlive the test.
		endProcessesIn(t, c.dir)
		if t.Failed() {
			c.dumpLogs()
		}
		os.RemoveAll(c.sockDir)
	})
	return c
}

// allocSubnet returns a "127.a.b." prefix no other cluster of this run uses.
func allocSubnet(t *testing.T) string {
	loopback.Lock()
	defer loopback.Unlock()
	loopback.third++
	if loopback.third > 254 {
		t.Fatal("out of loopback subnets")
	}
	return fmt.Sprintf("127.%d.%d.", loopback.second, loopback.third)
}

// newHost returns an address of this cluster's subnet that nobody used
// before in this run and whose two ports are free.
func (c *cluster) newHost() string {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.nextHost < 250 {
		c.nextHost++
		h := c.prefix + strconv.Itoa(c.nextHost)
		if portsFree(h) {
			return h
		}
	}
	c.t.Fatalf("no free address left in %s0/24", c.prefix)
	return ""
}

func portsFree(host string) bool {
	for _, port := range []int{peerPort, httpPort} {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return false
		}
		ln.Close()
	}
	return true
}

// pod is one simulated Kubernetes pod: a name, an address, a volume (the
// data dir) and, while it runs, a bagkeeper process.
type pod struct {
	c       *cluster
	name    string
	host    string
	dataDir string
	sock    string
	extra   []string
	// app and token, when set, replace the cluster's; an outsider is a
	// pod that must not become a member, left out of runningPods.
	app, token string
	outsider   bool

	mu     sync.Mutex
	proc   *process
	starts int
	paused bool
	logs   []string
}

// use makes the cluster's helpers report to t (a subtest) until the
// returned function restores the previous test.
func (c *cluster) use(t *testing.T) func() {
	prev := c.t
	c.t = t
	return func() { c.t = prev }
}

// newPod creates a pod with a fresh address and an empty volume. It is not
// started.
func (c *cluster) newPod(name string, extra ...string) *pod {
	c.t.Helper()
	p := &pod{
		c: c, name: name, host: c.newHost(),
		dataDir: filepath.Join(c.dir, "volumes", name),
		sock:    filepath.Join(c.sockDir, name+".sock"),
		extra:   extra,
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, q := range c.pods {
		if q.name == name {
			c.t.Fatalf("pod name %s used twice", name)
		}
	}
	c.pods = append(c.pods, p)
	return p
}

// startCluster starts n pods <app>-0 … <app>-(n-1) at once with
// --bootstrap-expect n and waits until they form one cluster with n voters
// and every pod is ready.
func (c *cluster) startCluster(n int, extra ...string) []*pod {
	c.t.Helper()
	pods := make([]*pod, n)
	for i := range pods {
		pods[i] = c.newPod(fmt.Sprintf("%s-%d", c.app, i), append([]string{"--bootstrap-expect", strconv.Itoa(n)}, extra...)...)
	}
	c.startAll(pods)
	c.waitReady(pods...)
	c.waitOneCluster(startTimeout, "the initial cluster", wantVoters(n), wantMembers(n))
	return pods
}

// startAll starts pods as close to the same moment as possible.
func (c *cluster) startAll(pods []*pod) {
	c.t.Helper()
	c.mu.Lock()
	for _, p := range pods {
		p.mu.Lock()
		p.starts++ // reserve the log name; started below
		p.mu.Unlock()
	}
	c.mu.Unlock()
	// Discovery lists everyone from the start, as a headless service with
	// published not-ready addresses does.
	c.writePeersWith(pods...)
	var wg sync.WaitGroup
	errs := make([]error, len(pods))
	gate := make(chan struct{})
	for i, p := range pods {
		wg.Go(func() {
			<-gate
			errs[i] = p.spawn()
		})
	}
	close(gate)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			c.t.Fatal(err)
		}
	}
}

func (p *pod) addr() string     { return net.JoinHostPort(p.host, strconv.Itoa(peerPort)) }
func (p *pod) httpAddr() string { return net.JoinHostPort(p.host, strconv.Itoa(httpPort)) }

func (p *pod) process() *process {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.proc
}

func (p *pod) running() bool {
	pr := p.process()
	return pr != nil && !pr.exited()
}

func (p *pod) args() []string {
	app, token := p.c.app, p.c.token
	if p.app != "" {
		app = p.app
	}
	if p.token != "" {
		token = p.token
	}
	args := []string{"run",
		"--app", app,
		"--pod-name", p.name,
		"--data-dir", p.dataDir,
		"--bind", p.addr(),
		"--http-bind", p.httpAddr(),
		"--admin-socket", p.sock,
		"--peers-file", p.c.peersFile,
		"--join-token", token,
		"--log-format", "text",
	}
	args = append(args, p.c.flags...)
	return append(args, p.extra...)
}

// start starts the pod's process and publishes its address in the peers
// file.
func (p *pod) start() {
	p.c.t.Helper()
	if p.running() {
		p.c.t.Fatalf("%s is already running", p.name)
	}
	p.mu.Lock()
	p.starts++
	p.mu.Unlock()
	if err := p.spawn(); err != nil {
		p.c.t.Fatal(err)
	}
	p.c.writePeers()
}

func (p *pod) spawn() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	logPath := filepath.Join(p.c.dir, fmt.Sprintf("%s.%d.log", p.name, p.starts))
	pr, err := startProcess(p.name, logPath, p.args()...)
	if err != nil {
		return err
	}
	p.proc = pr
	p.logs = append(p.logs, logPath)
	return nil
}

// kill kills the pod's process with SIGKILL (a crash, an OOM kill, a node
// lost) and removes its address from discovery.
func (p *pod) kill() {
	if pr := p.process(); pr != nil {
		pr.kill()
	}
	p.c.writePeers()
}

// pause stops the pod's process with SIGSTOP, as a hung node, a long
// stall of the VM or a frozen container would: it keeps its sockets and its
// place in discovery, and answers nothing until resume.
func (p *pod) pause() {
	if pr := p.process(); pr != nil {
		p.mu.Lock()
		p.paused = true
		p.mu.Unlock()
		pr.signal(syscall.SIGSTOP)
	}
}

// isPaused reports whether the pod is paused now.
func (p *pod) isPaused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

// resume lets a paused pod's process run again (SIGCONT).
func (p *pod) resume() {
	if pr := p.process(); pr != nil {
		pr.signal(syscall.SIGCONT)
		p.mu.Lock()
		p.paused = false
		p.mu.Unlock()
	}
}

// stop stops the pod gracefully (SIGTERM, as Kubernetes does) and waits
// for the process to exit; the exit must be clean.
func (p *pod) stop() {
	p.c.t.Helper()
	pr := p.process()
	if pr == nil {
		return
	}
	pr.signal(syscall.SIGTERM)
	if !pr.wait(20 * time.Second) {
		p.c.t.Fatalf("%s did not stop within 20s of SIGTERM", p.name)
	}
	if code := pr.exitCode(); code != 0 {
		p.c.t.Errorf("%s exited with status %d after SIGTERM (want 0)", p.name, code)
	}
	p.c.writePeers()
}

// wipe deletes the pod's volume. The pod must not run.
func (p *pod) wipe() {
	p.c.t.Helper()
	if p.running() {
		p.c.t.Fatalf("wipe %s: the pod is running", p.name)
	}
	if err := os.RemoveAll(p.dataDir); err != nil {
		p.c.t.Fatal(err)
	}
}

// move gives the pod a new address (the next start uses it).
func (p *pod) move() {
	p.c.t.Helper()
	if p.running() {
		p.c.t.Fatalf("move %s: the pod is running", p.name)
	}
	p.host = p.c.newHost()
}

// lastLog returns the content of the newest log of the pod.
func (p *pod) lastLog() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.logs) == 0 {
		return ""
	}
	b, _ := os.ReadFile(p.logs[len(p.logs)-1])
	return string(b)
}

// allLogs returns every log of the pod, oldest first.
func (p *pod) allLogs() string {
	p.mu.Lock()
	logs := append([]string(nil), p.logs...)
	p.mu.Unlock()
	var b strings.Builder
	for _, l := range logs {
		data, _ := os.ReadFile(l)
		b.Write(data)
	}
	return b.String()
}

// runningPods returns the pods whose process runs, outsiders excepted.
func (c *cluster) runningPods() []*pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*pod
	for _, p := range c.pods {
		if p.running() && !p.outsider {
			out = append(out, p)
		}
	}
	return out
}

// writePeers publishes the addresses of the running pods (or the override
// set with setDiscovery) in the peers file, atomically.
func (c *cluster) writePeers() {
	c.writePeersWith()
}

func (c *cluster) writePeersWith(starting ...*pod) {
	c.mu.Lock()
	var addrs []string
	if c.discovery != nil {
		addrs = append(addrs, *c.discovery...)
	} else {
		seen := map[string]bool{}
		for _, p := range append(append([]*pod(nil), c.pods...), starting...) {
			if (p.running() || contains(starting, p)) && !seen[p.addr()] {
				seen[p.addr()] = true
				addrs = append(addrs, p.addr())
			}
		}
	}
	c.mu.Unlock()
	sort.Strings(addrs)
	content := strings.Join(addrs, "\n")
	if content != "" {
		content += "\n"
	}
	tmp := c.peersFile + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		c.t.Fatal(err)
	}
	if err := os.Rename(tmp, c.peersFile); err != nil {
		c.t.Fatal(err)
	}
}

func contains(ps []*pod, p *pod) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// setDiscovery makes the peers file list exactly addrs (nil: back to the
// running pods).
func (c *cluster) setDiscovery(addrs []string) {
	c.mu.Lock()
	if addrs == nil {
		c.discovery = nil
	} else {
		a := append([]string{}, addrs...)
		c.discovery = &a
	}
	c.mu.Unlock()
	c.writePeers()
}

// dumpLogs prints the tail of every pod's logs (on failure), leaving out
// raft's repetitive complaints about unreachable peers. If the environment
// names a directory in BAGKEEPER_E2E_KEEP_LOGS, the whole logs are copied
// there too.
func (c *cluster) dumpLogs() {
	c.mu.Lock()
	pods := append([]*pod(nil), c.pods...)
	c.mu.Unlock()
	keep := os.Getenv("BAGKEEPER_E2E_KEEP_LOGS")
	for _, p := range pods {
		p.mu.Lock()
		logs := append([]string(nil), p.logs...)
		p.mu.Unlock()
		for _, l := range logs {
			c.t.Logf("---- %s (last lines) ----\n%s", filepath.Base(l), tailLines(l, 60))
			if keep != "" {
				dir := filepath.Join(keep, strings.ReplaceAll(c.t.Name(), "/", "_"))
				if err := os.MkdirAll(dir, 0o755); err == nil {
					if b, err := os.ReadFile(l); err == nil {
						_ = os.WriteFile(filepath.Join(dir, filepath.Base(l)), b, 0o644)
					}
				}
			}
		}
	}
}

// logNoise marks log lines that say only that a peer is unreachable.
var logNoise = []string{`msg="failed to heartbeat to"`, `msg="failed to appendEntries to"`, `msg="failed to contact"`, `msg="unable to get address for server`}

func tailLines(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	defer f.Close()
	var lines []string
	skipped := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
next:
	for sc.Scan() {
		for _, noise := range logNoise {
			if strings.Contains(sc.Text(), noise) {
				skipped++
				continue next
			}
		}
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	if skipped > 0 {
		lines = append(lines, fmt.Sprintf("(%d lines about unreachable peers left out)", skipped))
	}
	return strings.Join(lines, "\n")
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// ---- talking to a pod ----

// adminCall runs fn against the pod's admin socket.
func (p *pod) adminCall(timeout time.Duration, fn func(ctx context.Context, c adminpb.AdminClient) error) error {
	conn, err := grpc.NewClient("unix://"+p.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err = fn(ctx, adminpb.NewAdminClient(conn))
	if err != nil {
		if pr := p.process(); pr != nil && pr.exited() {
			return fmt.Errorf("%w (process %s)", err, pr.exitStatus())
		}
	}
	return err
}

func (p *pod) status() (*adminpb.StatusResponse, error) {
	return p.statusOf(&adminpb.StatusRequest{})
}

// statusNoProbe is the pod's own view, without asking the other members.
func (p *pod) statusNoProbe() (*adminpb.StatusResponse, error) {
	return p.statusOf(&adminpb.StatusRequest{SkipProbe: true})
}

func (p *pod) statusOf(req *adminpb.StatusRequest) (*adminpb.StatusResponse, error) {
	var st *adminpb.StatusResponse
	err := p.adminCall(5*time.Second, func(ctx context.Context, c adminpb.AdminClient) error {
		var err error
		st, err = c.Status(ctx, req)
		return err
	})
	return st, err
}

func (p *pod) getBags() (*adminpb.GetBagsResponse, error) {
	var r *adminpb.GetBagsResponse
	err := p.adminCall(5*time.Second, func(ctx context.Context, c adminpb.AdminClient) error {
		var err error
		r, err = c.GetBags(ctx, &adminpb.GetBagsRequest{RelationId: -1})
		return err
	})
	return r, err
}

// setBag commits keys of one bag through the pod (forwarded to the leader).
func (p *pod) setBag(timeout time.Duration, rel int64, owner string, set map[string]string) error {
	return p.adminCall(timeout, func(ctx context.Context, c adminpb.AdminClient) error {
		_, err := c.SetBag(ctx, &adminpb.SetBagRequest{RelationId: rel, Owner: owner, Set: set})
		return err
	})
}

func (p *pod) ensureRelation(req *adminpb.EnsureRelationRequest) (int64, error) {
	var id int64
	err := p.adminCall(10*time.Second, func(ctx context.Context, c adminpb.AdminClient) error {
		r, err := c.EnsureRelation(ctx, req)
		id = r.GetRelationId()
		return err
	})
	return id, err
}

var httpClient = &http.Client{Timeout: 2 * time.Second}

// readyz returns the status code and body of the pod's /readyz (0 and the
// error when it does not answer).
func (p *pod) readyz() (int, string) {
	resp, err := httpClient.Get("http://" + p.httpAddr() + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// waitReady waits until every pod's /readyz answers 200.
func (c *cluster) waitReady(pods ...*pod) {
	c.t.Helper()
	names := make([]string, len(pods))
	for i, p := range pods {
		names[i] = p.name
	}
	waitFor(c.t, startTimeout, "/readyz of "+strings.Join(names, ", ")+" to answer 200", func() (bool, string) {
		var bad []string
		for _, p := range pods {
			if code, body := p.readyz(); code != http.StatusOK {
				bad = append(bad, fmt.Sprintf("%s: %d %s%s", p.name, code, body, exitNote(p)))
			}
		}
		return len(bad) == 0, strings.Join(bad, "; ")
	})
}

func exitNote(p *pod) string {
	if pr := p.process(); pr != nil && pr.exited() {
		return " (process " + pr.exitStatus() + ")"
	}
	return ""
}

// ---- the CLI ----

type cliResult struct {
	code           int
	stdout, stderr string
}

func (r cliResult) String() string {
	return fmt.Sprintf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
}

// runCLI runs the bagkeeper binary to completion (at most timeout).
func runCLI(t *testing.T, timeout time.Duration, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bkBin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BAGKEEPER_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("bagkeeper %s did not finish within %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), timeout, out.String(), errb.String())
	}
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("bagkeeper %s: %v", strings.Join(args, " "), err)
		}
		code = ee.ExitCode()
	}
	return cliResult{code: code, stdout: out.String(), stderr: errb.String()}
}

// ---- waiting ----

// waitFor polls cond until it holds or timeout passes; on timeout the test
// fails, naming what it waited for and the last state cond described.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	if err := poll(timeout, what, cond); err != nil {
		t.Fatal(err)
	}
}

// poll is waitFor returning an error; it may be used off the test goroutine.
func poll(timeout time.Duration, what string, cond func() (bool, string)) error {
	return wait.For(timeout, what, func() error {
		if ok, state := cond(); !ok {
			return errors.New(state)
		}
		return nil
	})
}

// holdFor checks cond for the whole of d and fails the test the first
// time it does not hold.
func holdFor(t testing.TB, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	end := time.Now().Add(d)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, state := cond()
		if !ok {
			t.Fatalf("%s stopped holding after %v of %v: %s", what, d-time.Until(end), d, state)
		}
		if time.Now().After(end) {
			return
		}
		<-tick.C
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
