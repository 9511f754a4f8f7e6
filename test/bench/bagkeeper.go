package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

// Flags of the bagkeeper target.
var (
	bagkeeperBin      = flag.String("bagkeeper", "", "bagkeeper binary for the bagkeeper target (default: build ./cmd/bagkeeper of the module the harness runs in)")
	bagkeeperLogStore = flag.String("bagkeeper-log-store", "", "--log-store of the bagkeeper target's sidecars: boltdb, wal or segments (default: the binary's default, read from its --help, passed explicitly)")
	bagkeeperArgs     = flag.String("bagkeeper-args", "", "more flags for every sidecar of the bagkeeper target, space-separated, e.g. \"--pprof --raft-commit-timeout=50ms\" (named in the table's note)")
	bagkeeperVia      = flag.String("bagkeeper-via", "leader", "where the bagkeeper target's writers send SetBag: leader (found with Status, like the etcd client) or follower (which forwards to the leader)")
)

// The bagkeeper cluster.
const (
	// bkMemberCount is the size of the cluster.
	bkMemberCount = 3
	// bkApp is the Juju application the sidecars serve; pods are named
	// bench-0, bench-1, bench-2, StatefulSet style, and hold units
	// bench/0, bench/1, bench/2.
	bkApp = "bench"
	// bkRelationEndpoint is the peer relation the writers write to.
	bkRelationEndpoint = "bench"
	// bkKeepKeys is how many of its own keys a writer keeps in the bag:
	// every put also deletes the writer's key from bkKeepKeys puts
	// earlier, so that the bag stays far below bagkeeper's 16 MiB bag
	// limit however long the load runs, as relation data does in use.
	bkKeepKeys = 16
	// bkMaxRecvMsg is the largest admin API answer the harness accepts
	// (GetBags of all the data in the cluster).
	bkMaxRecvMsg = 1 << 30
	// bkSocketPathMax bounds the admin socket path (Unix socket paths are
	// limited to 108 bytes).
	bkSocketPathMax = 100
)

// bkDefaultFlags are the `bagkeeper run` flags whose defaults matter for
// the numbers, with the value assumed if --help does not say; the target
// reads the real defaults from the binary's --help and passes none of
// these flags, so the cluster runs with what users get.
var bkDefaultFlags = []struct{ flag, label, fallback string }{
	{"raft-heartbeat-timeout", "heartbeat", "500ms"},
	{"raft-election-timeout", "election timeout", "500ms"},
	{"raft-leader-lease-timeout", "leader lease", "400ms"},
	{"raft-commit-timeout", "commit timeout", "20ms"},
	{"raft-nonvoter-append-interval", "non-voter append interval", "100ms"},
	{"raft-snapshot-threshold", "snapshot threshold", "8192"},
	{"raft-trailing-logs", "trailing logs", "10240"},
	{"raft-snapshot-interval", "snapshot check every", "2m0s"},
	{"promote-after", "non-voter promoted after", "5s"},
}

// bagkeeperTarget runs a 3-member bagkeeper cluster: three `bagkeeper run`
// sidecars on distinct loopback addresses, each with its own data
// directory, bootstrapped with --bootstrap-expect 3 and a static peer
// list, with bagkeeper's default raft timing and durability (the log store
// of -bagkeeper-log-store, fsync before acknowledging). Clients speak the
// admin API (gRPC on each sidecar's Unix socket).
type bagkeeperTarget struct {
	bin            string
	version        string
	defaults       map[string]string // flag name → default, from --help
	via            string            // "leader" or "follower"
	logStore       string            // --log-store given to every member; empty for a binary without the flag
	attemptTimeout time.Duration
	startTimeout   time.Duration
	binDir         string // temporary directory of a binary built here; removed by Stop

	dir        string // the directory given to Start
	sockDir    string // short directory of the admin sockets; removed by Stop
	members    []*bkMember
	relationID int64 // the writers' peer relation
	lastHost   int   // last octet of the last loopback address handed out
	http       *http.Client

	// State of the extra measurements (see bagkeeper_extra.go).
	fill  bkFill
	wipes int
	// extraArgs are added to every member's command line (the hook
	// measurement runs the unit agent with a charm).
	extraArgs func(m *bkMember) []string
	// app is the application the sidecars serve (default bkApp).
	app string
}

// appName is the application the sidecars serve.
func (b *bagkeeperTarget) appName() string {
	if b.app != "" {
		return b.app
	}
	return bkApp
}

// bkMember is one sidecar of the bagkeeper cluster. Its slot (index, pod
// name, admin socket) outlives restarts; a wiped member comes back in the
// same slot on a new address, as a StatefulSet pod does.
type bkMember struct {
	index    int
	pod      string
	dataDir  string
	socket   string
	logPath  string
	raftAddr string // host:port of the peer port (raft and the peer API)
	httpAddr string // host:port of /healthz, /readyz, /metrics
	peers    []string
	proc     *process // nil before the first start
	conn     *grpc.ClientConn
	admin    adminpb.AdminClient
}

// newBagkeeperTarget finds or builds the bagkeeper binary and reads its
// version and defaults.
func newBagkeeperTarget(cfg *Config) (Target, error) {
	b := &bagkeeperTarget{
		via:            *bagkeeperVia,
		attemptTimeout: cfg.AttemptTimeout,
		startTimeout:   cfg.StartTimeout,
		lastHost:       10,
		http:           &http.Client{Timeout: cfg.AttemptTimeout},
	}
	if b.via != "leader" && b.via != "follower" {
		return nil, fmt.Errorf("bagkeeper target: -bagkeeper-via must be leader or follower, got %q", b.via)
	}
	if *bagkeeperBin != "" {
		bin, err := exec.LookPath(*bagkeeperBin)
		if err != nil {
			return nil, fmt.Errorf("bagkeeper target: %w", err)
		}
		b.bin = bin
	} else {
		dir, err := os.MkdirTemp("", "bagkeeper-bin-")
		if err != nil {
			return nil, fmt.Errorf("bagkeeper target: %w", err)
		}
		b.binDir = dir
		progressf("[bagkeeper] ", "building bagkeeper")
		if b.bin, err = buildBagkeeper(dir); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("bagkeeper target: %w (or give a binary with -bagkeeper)", err)
		}
	}
	out, err := exec.Command(b.bin, "version").Output()
	if err != nil {
		b.removeBinDir()
		return nil, fmt.Errorf("bagkeeper target: %s version: %w", b.bin, err)
	}
	b.version = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(out)), "bagkeeper"))
	help, _ := exec.Command(b.bin, "run", "--help").CombinedOutput() // exits 0 or 2 depending on the flag package
	b.defaults = parseHelpDefaults(string(help))
	switch b.logStore = *bagkeeperLogStore; {
	case !strings.Contains(string(help), "--log-store"):
		if b.logStore != "" {
			b.removeBinDir()
			return nil, fmt.Errorf("bagkeeper target: -bagkeeper-log-store %s: %s has no --log-store (it keeps the raft log in raft-boltdb)", b.logStore, b.bin)
		}
	case b.logStore == "":
		b.logStore = b.defaults["log-store"]
	}
	return b, nil
}

// logStoreNote says where the members keep their raft log.
func (b *bagkeeperTarget) logStoreNote() string {
	switch b.logStore {
	case "":
		return "raft log in raft-boltdb (this binary has no --log-store)"
	case "boltdb":
		return "raft log in raft-boltdb (--log-store boltdb: a bbolt transaction, two fsyncs, per append)"
	case "wal":
		return "raft log in raft-wal (--log-store wal: segment files, one fsync per append)"
	case "segments":
		return "raft log in seglog (--log-store segments: segment files, one fdatasync per append)"
	}
	return "raft log in --log-store " + b.logStore
}

// buildBagkeeper builds ./cmd/bagkeeper of the module that contains the
// working directory into dir, with the version set from git describe when
// there is a git checkout, and returns the binary's path.
func buildBagkeeper(dir string) (string, error) {
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	modFile := strings.TrimSpace(string(gomod))
	if modFile == "" || modFile == os.DevNull {
		return "", errors.New("not inside a Go module: run the harness from the bagkeeper module")
	}
	root := filepath.Dir(modFile)
	version := "dev"
	gd := exec.Command("git", "describe", "--always", "--dirty")
	gd.Dir = root
	if out, err := gd.Output(); err == nil && len(strings.TrimSpace(string(out))) > 0 {
		version = strings.TrimSpace(string(out))
	}
	bin := filepath.Join(dir, "bagkeeper")
	// Built as `make build` builds it: static, stripped.
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+version, "-o", bin, "./cmd/bagkeeper")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/bagkeeper in %s: %w\n%s", root, err, out)
	}
	// The hook tools' binary, for the hook measurement.
	jc := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(dir, "jujuc"), "./cmd/jujuc")
	jc.Dir = root
	jc.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := jc.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/jujuc in %s: %w\n%s", root, err, out)
	}
	return bin, nil
}

// parseHelpDefaults reads `bagkeeper run --help` and returns every flag's
// default value, as printed after "(default ...)".
func parseHelpDefaults(help string) map[string]string {
	out := map[string]string{}
	cur := ""
	sc := bufio.NewScanner(strings.NewReader(help))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if name, ok := strings.CutPrefix(line, "--"); ok {
			cur, _, _ = strings.Cut(name, " ")
			continue
		}
		if cur == "" {
			continue
		}
		if i := strings.LastIndex(line, "(default "); i >= 0 && strings.HasSuffix(line, ")") {
			out[cur] = line[i+len("(default ") : len(line)-1]
		}
	}
	return out
}

// defaultOf returns the binary's default for one of bkDefaultFlags.
func (b *bagkeeperTarget) defaultOf(flag string) string {
	if v, ok := b.defaults[flag]; ok {
		return v
	}
	for _, d := range bkDefaultFlags {
		if d.flag == flag {
			return d.fallback + " (assumed)"
		}
	}
	return "?"
}

// settingOf returns the value a sidecar runs with for flag: the one
// -bagkeeper-args gives ("--flag=v" or "--flag v"), else defaultOf.
func (b *bagkeeperTarget) settingOf(flag string) string {
	return flagValue(strings.Fields(*bagkeeperArgs), flag, b.defaultOf(flag))
}

// flagValue is the last value args give flag ("--flag=v", "-flag=v",
// "--flag v"), or def.
func flagValue(args []string, flag, def string) string {
	v := def
	for i, a := range args {
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != flag {
			continue
		}
		switch {
		case hasValue:
			v = value
		case i+1 < len(args):
			v = args[i+1]
		}
	}
	return v
}

// Name implements Target.
func (b *bagkeeperTarget) Name() string { return "bagkeeper " + b.version }

// Describe implements Target.
func (b *bagkeeperTarget) Describe() string {
	var timing []string
	for _, d := range bkDefaultFlags {
		timing = append(timing, d.label+" "+b.defaultOf(d.flag))
	}
	via := "the client sends each put to the member that says it leads (found with Status on every admin socket), as the etcd client sends to the etcd leader; " +
		"on any failure it asks again and retries on another member until the put's deadline; a follower would forward the put to the leader (one more hop)"
	if b.via == "follower" {
		via = "the client sends each put to a follower that knows a leader (found with Status), which forwards it to the leader over the peer API, as a charm on a follower's pod does; " +
			"on any failure it asks again and retries on another member"
	}
	settings := "bagkeeper's default raft settings (" + strings.Join(timing, ", ") + ")"
	if *bagkeeperArgs != "" {
		settings += ", except as these flags say: " + *bagkeeperArgs
	}
	return fmt.Sprintf("%d sidecars on distinct 127.0.0.x addresses (TCP peer port, plaintext with --insecure), --bootstrap-expect %d with a static --peers list; "+
		"%s; %s, fsynced before a put is acknowledged; "+
		"a put is one admin API SetBag (gRPC over the member's Unix socket) setting one new key of the application's bag of a peer relation, "+
		"acknowledged once the receiving member has applied it; every put also deletes the writer's key from %d puts earlier so the bag stays small; %s",
		bkMemberCount, bkMemberCount, settings, b.logStoreNote(), bkKeepKeys, via)
}

// Start implements Target.
func (b *bagkeeperTarget) Start(ctx context.Context, dir string) error {
	if len(b.members) > 0 {
		return errors.New("bagkeeper: already started")
	}
	b.dir = dir
	sockDir, err := shortTempDir("bk")
	if err != nil {
		return fmt.Errorf("bagkeeper: admin socket directory: %w", err)
	}
	b.sockDir = sockDir
	for i := range bkMemberCount {
		m := &bkMember{
			index:   i,
			pod:     fmt.Sprintf("%s-%d", b.appName(), i),
			dataDir: filepath.Join(dir, fmt.Sprintf("m%d", i)),
			socket:  filepath.Join(sockDir, fmt.Sprintf("m%d.sock", i)),
			logPath: filepath.Join(dir, fmt.Sprintf("m%d.log", i)),
		}
		if err := b.assignAddresses(m); err != nil {
			return err
		}
		conn, err := dialAdmin(m.socket)
		if err != nil {
			return fmt.Errorf("bagkeeper %s: %w", m.pod, err)
		}
		m.conn, m.admin = conn, adminpb.NewAdminClient(conn)
		b.members = append(b.members, m)
	}
	peers := b.peerAddrs()
	for _, m := range b.members {
		m.peers = peers
		if err := b.startMember(m); err != nil {
			return err
		}
	}
	if err := b.waitHealthy(ctx); err != nil {
		return err
	}
	id, err := b.ensureRelation(ctx, bkRelationEndpoint)
	if err != nil {
		return err
	}
	b.relationID = id
	return nil
}

// shortTempDir creates a new temporary directory whose path leaves room
// for a socket name within the Unix socket path limit: under the system's
// temporary directory, or under /tmp if that path is too long.
func shortTempDir(prefix string) (string, error) {
	for _, parent := range []string{os.TempDir(), "/tmp"} {
		if len(parent)+len(prefix)+len("/123456789/m0.sock") > bkSocketPathMax {
			continue
		}
		return os.MkdirTemp(parent, prefix)
	}
	return "", fmt.Errorf("no temporary directory with a path short enough for Unix sockets (TMPDIR=%q)", os.TempDir())
}

// assignAddresses gives m a new loopback address with free ports for its
// peer port and HTTP server.
func (b *bagkeeperTarget) assignAddresses(m *bkMember) error {
	b.lastHost++
	if b.lastHost > 254 {
		return errors.New("bagkeeper: out of 127.0.0.x addresses")
	}
	return m.listenOn(fmt.Sprintf("127.0.0.%d", b.lastHost))
}

// listenOn gives m a raft and an HTTP address on host, at ports that were
// free a moment ago.
func (m *bkMember) listenOn(host string) error {
	ports, err := freePortsOn(host, 2)
	if err != nil {
		return fmt.Errorf("bagkeeper %s: %w", m.pod, err)
	}
	m.raftAddr = net.JoinHostPort(host, strconv.Itoa(ports[0]))
	m.httpAddr = net.JoinHostPort(host, strconv.Itoa(ports[1]))
	return nil
}

// freePortsOn returns n distinct TCP ports on host that were free a moment
// ago.
func freePortsOn(host string, n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("find a free port on %s: %w", host, err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// peerAddrs returns the peer-port addresses of all members now.
func (b *bagkeeperTarget) peerAddrs() []string {
	out := make([]string, len(b.members))
	for i, m := range b.members {
		out[i] = m.raftAddr
	}
	return out
}

// startMember starts (or restarts, on whatever its data directory holds)
// one sidecar.
func (b *bagkeeperTarget) startMember(m *bkMember) error {
	args := []string{
		"run",
		"--app=" + b.appName(),
		"--pod-name=" + m.pod,
		"--data-dir=" + m.dataDir,
		"--bind=" + m.raftAddr,
		"--advertise=" + m.raftAddr,
		"--http-bind=" + m.httpAddr,
		"--admin-socket=" + m.socket,
		"--peers=" + strings.Join(m.peers, ","),
		"--bootstrap-expect=" + strconv.Itoa(bkMemberCount),
		"--insecure",
		"--log-format=text",
	}
	if b.logStore != "" {
		args = append(args, "--log-store="+b.logStore)
	}
	args = append(args, strings.Fields(*bagkeeperArgs)...)
	if b.extraArgs != nil {
		args = append(args, b.extraArgs(m)...)
	}
	p, err := startProcess("bagkeeper "+m.pod, m.logPath, []string{"BAGKEEPER_"}, nil, b.bin, args...)
	if err != nil {
		return fmt.Errorf("bagkeeper: %w", err)
	}
	m.proc = p
	return nil
}

// dialAdmin creates a gRPC client connection to an admin socket. It
// reconnects quickly after the sidecar restarts and accepts answers as
// large as all the data of the cluster.
func dialAdmin(socket string) (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient("unix://"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(bkMaxRecvMsg)),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  10 * time.Millisecond,
				Multiplier: 1.6,
				Jitter:     0.2,
				MaxDelay:   250 * time.Millisecond,
			},
			MinConnectTimeout: time.Second,
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("dial admin socket %s: %w", socket, err)
	}
	return conn, nil
}

// ensureRelation creates the peer relation with the given endpoint unless
// it exists, through any member (followers forward), and returns its id.
func (b *bagkeeperTarget) ensureRelation(ctx context.Context, endpoint string) (int64, error) {
	var lastErr error
	for {
		for _, m := range b.members {
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			resp, err := m.admin.EnsureRelation(actx, &adminpb.EnsureRelationRequest{Endpoint: endpoint, Interface: endpoint, Peer: true})
			cancel()
			if err == nil {
				return resp.GetRelationId(), nil
			}
			lastErr = err
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("bagkeeper: create peer relation %q: %w (last error: %v)", endpoint, ctx.Err(), lastErr)
		case <-time.After(healthPoll):
		}
	}
}

// bkStatus is one member's answer to Status.
type bkStatus struct {
	resp *adminpb.StatusResponse
	err  error
}

// isLeader reports whether the member says it is the leader itself.
func (s bkStatus) isLeader() bool {
	return s.err == nil && s.resp.GetLeader() != "" && s.resp.GetLeader() == s.resp.GetSelf()
}

// knowsLeader reports whether the member answered and knows a leader.
func (s bkStatus) knowsLeader() bool {
	return s.err == nil && s.resp.GetLeader() != ""
}

// statusAll asks every member for its status in parallel; with skipProbe
// each answers from its own view only (fast, no member details), as an
// etcd member answers Maintenance.Status.
func (b *bagkeeperTarget) statusAll(ctx context.Context, skipProbe bool) []bkStatus {
	out := make([]bkStatus, len(b.members))
	var wg sync.WaitGroup
	for i, m := range b.members {
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, b.attemptTimeout)
			defer cancel()
			resp, err := m.admin.Status(sctx, &adminpb.StatusRequest{SkipProbe: skipProbe})
			out[i] = bkStatus{resp: resp, err: err}
		})
	}
	wg.Wait()
	return out
}

// readyz asks m's /readyz; it returns whether the answer was 200 and the
// body (the reason when not ready).
func (b *bagkeeperTarget) readyz(ctx context.Context, m *bkMember) (bool, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+m.httpAddr+"/readyz", nil)
	if err != nil {
		return false, err.Error()
	}
	resp, err := b.http.Do(req)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	return resp.StatusCode == http.StatusOK, strings.TrimSpace(string(body))
}

// healthy reports whether all members run and are ready, agree on a leader
// that confirms itself, form a configuration of exactly these members, all
// voters, and have applied everything the leader had committed; if not, it
// says why.
func (b *bagkeeperTarget) healthy(ctx context.Context) (bool, string) {
	sts := b.statusAll(ctx, false)
	leader := -1
	self := map[string]bool{}
	for i, s := range sts {
		if s.err != nil {
			return false, fmt.Sprintf("%s: %v", b.members[i].pod, s.err)
		}
		self[s.resp.GetSelf()] = true
		if s.isLeader() {
			leader = i
		}
	}
	if leader < 0 {
		return false, "no leader"
	}
	lr := sts[leader].resp
	for i, s := range sts {
		if s.resp.GetLeader() != lr.GetLeader() {
			return false, fmt.Sprintf("%s sees leader %q, %s is leader", b.members[i].pod, s.resp.GetLeader(), b.members[leader].pod)
		}
	}
	if len(lr.GetMembers()) != len(b.members) {
		return false, fmt.Sprintf("the configuration has %d members, want %d", len(lr.GetMembers()), len(b.members))
	}
	for _, m := range lr.GetMembers() {
		switch {
		case !self[m.GetId()]:
			return false, fmt.Sprintf("configured member %s is not running", m.GetId())
		case m.GetSuffrage() != "Voter":
			return false, fmt.Sprintf("%s is a %s", m.GetId(), m.GetSuffrage())
		case !m.GetReachable():
			return false, fmt.Sprintf("%s is unreachable: %s", m.GetId(), m.GetError())
		case m.GetAppliedIndex() < lr.GetCommitIndex():
			return false, fmt.Sprintf("%s applied index %d < leader's commit index %d", m.GetId(), m.GetAppliedIndex(), lr.GetCommitIndex())
		}
	}
	for _, m := range b.members {
		if ok, why := b.readyz(ctx, m); !ok {
			return false, fmt.Sprintf("%s not ready: %s", m.pod, why)
		}
	}
	return true, ""
}

// checkRunning returns an error if a member's process has exited.
func (b *bagkeeperTarget) checkRunning() error {
	for _, m := range b.members {
		if m.proc != nil && m.proc.Exited() {
			return fmt.Errorf("bagkeeper %s exited: %v; log ends with:\n%s", m.pod, m.proc.ExitError(), tailFile(m.logPath, 2048))
		}
	}
	return nil
}

// waitHealthy polls the members until the cluster is healthy, a member
// process exits or ctx ends.
func (b *bagkeeperTarget) waitHealthy(ctx context.Context) error {
	ticker := time.NewTicker(healthPoll)
	defer ticker.Stop()
	for {
		if err := b.checkRunning(); err != nil {
			return err
		}
		ok, why := b.healthy(ctx)
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bagkeeper: cluster not healthy (%s): %w", why, ctx.Err())
		case <-ticker.C:
		}
	}
}

// findLeader returns the running member that confirms it is the leader,
// polling until there is one or ctx ends.
func (b *bagkeeperTarget) findLeader(ctx context.Context) (*bkMember, error) {
	ticker := time.NewTicker(healthPoll)
	defer ticker.Stop()
	for {
		for i, s := range b.statusAll(ctx, true) {
			if s.isLeader() && !b.members[i].proc.Exited() {
				return b.members[i], nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("bagkeeper: find leader: %w", ctx.Err())
		case <-ticker.C:
		}
	}
}

// findFollower returns a running member that is not the leader and knows
// the leader, polling until there is one or ctx ends.
func (b *bagkeeperTarget) findFollower(ctx context.Context) (*bkMember, error) {
	ticker := time.NewTicker(healthPoll)
	defer ticker.Stop()
	for {
		for i, s := range b.statusAll(ctx, true) {
			if s.knowsLeader() && !s.isLeader() && !b.members[i].proc.Exited() {
				return b.members[i], nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("bagkeeper: find follower: %w", ctx.Err())
		case <-ticker.C:
		}
	}
}

// signalLeader finds the leader, sends it sig and waits until it exits.
func (b *bagkeeperTarget) signalLeader(ctx context.Context, sig syscall.Signal) (time.Time, error) {
	m, err := b.findLeader(ctx)
	if err != nil {
		return time.Time{}, err
	}
	sent := time.Now()
	if err := m.proc.Signal(sig); err != nil {
		return time.Time{}, fmt.Errorf("bagkeeper %s: %w", m.pod, err)
	}
	if err := m.proc.Wait(ctx); err != nil {
		_ = m.proc.Kill()
		return time.Time{}, fmt.Errorf("bagkeeper %s did not exit after %s: %w", m.pod, sig, err)
	}
	return sent, nil
}

// KillLeader implements Target.
func (b *bagkeeperTarget) KillLeader(ctx context.Context) (time.Time, error) {
	return b.signalLeader(ctx, syscall.SIGKILL)
}

// StopLeader implements Target. On SIGTERM a bagkeeper sidecar releases
// its unit, hands leadership to another voter and stops.
func (b *bagkeeperTarget) StopLeader(ctx context.Context) (time.Time, error) {
	return b.signalLeader(ctx, syscall.SIGTERM)
}

// Restore implements Target: stopped members restart on their data
// directories and addresses.
func (b *bagkeeperTarget) Restore(ctx context.Context) error {
	for _, m := range b.members {
		if m.proc != nil && m.proc.Exited() {
			if err := b.startMember(m); err != nil {
				return err
			}
		}
	}
	return b.waitHealthy(ctx)
}

// Stop implements Target.
func (b *bagkeeperTarget) Stop() error {
	err := b.stopCluster()
	b.removeBinDir()
	return err
}

// startFresh replaces the running cluster by a new one under dir.
func (b *bagkeeperTarget) startFresh(ctx context.Context, dir string) error {
	if err := b.stopCluster(); err != nil {
		return err
	}
	b.members, b.relationID, b.fill = nil, 0, bkFill{}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bagkeeper: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, b.startTimeout)
	defer cancel()
	return b.Start(ctx, dir)
}

// stopCluster kills every member and waits for them to exit, closes the
// admin connections and removes the admin sockets' directory.
func (b *bagkeeperTarget) stopCluster() error {
	var errs []error
	for _, m := range b.members {
		if m.proc != nil {
			if err := m.proc.Kill(); err != nil {
				errs = append(errs, err)
			}
		}
		if m.conn != nil {
			_ = m.conn.Close()
			m.conn = nil
		}
	}
	if b.sockDir != "" {
		if err := os.RemoveAll(b.sockDir); err != nil {
			errs = append(errs, err)
		}
		b.sockDir = ""
	}
	return errors.Join(errs...)
}

// removeBinDir removes the binary built by newBagkeeperTarget, if any.
func (b *bagkeeperTarget) removeBinDir() {
	if b.binDir != "" {
		os.RemoveAll(b.binDir)
		b.binDir = ""
	}
}

// NewWriter implements Target.
func (b *bagkeeperTarget) NewWriter(ctx context.Context) (Writer, error) {
	return b.newWriter(b.via)
}

// newWriter returns a writer that sends to the leader or to a follower
// (via), with its own connection to every member's admin socket.
func (b *bagkeeperTarget) newWriter(via string) (*bkWriter, error) {
	w := &bkWriter{
		attemptTimeout: b.attemptTimeout,
		relationID:     b.relationID,
		preferFollower: via == "follower",
	}
	w.picker = newPicker(w.discover)
	for _, m := range b.members {
		conn, err := dialAdmin(m.socket)
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("bagkeeper writer: %w", err)
		}
		w.endpoints = append(w.endpoints, bkEndpoint{conn: conn, admin: adminpb.NewAdminClient(conn)})
	}
	return w, nil
}

// bkEndpoint is a writer's connection to one member's admin socket.
type bkEndpoint struct {
	conn  *grpc.ClientConn
	admin adminpb.AdminClient
}

// bkWriter is a Writer for the bagkeeper cluster with one gRPC connection
// per member's admin socket. It sends each SetBag to the member that
// confirmed it is the leader (or, with preferFollower, to a follower that
// knows a leader and forwards); when no member qualifies it sends to any
// member that knows a leader. On any failure it asks the members again
// and retries until the Put's context ends.
type bkWriter struct {
	attemptTimeout time.Duration
	relationID     int64
	preferFollower bool
	endpoints      []bkEndpoint

	*picker

	mu     sync.Mutex
	recent []string // this writer's last bkKeepKeys keys, oldest first
}

// Put implements Writer: it sets key to value (as printable text of the
// same length) in the application's bag of the writers' peer relation,
// deleting the writer's key from bkKeepKeys puts earlier.
func (w *bkWriter) Put(ctx context.Context, key string, value []byte) error {
	req := &adminpb.SetBagRequest{
		RelationId: w.relationID,
		Owner:      bkApp,
		Set:        map[string]string{key: printable(value)},
	}
	if old := w.remember(key); old != "" {
		req.Delete = []string{old}
	}
	return w.setBag(ctx, req)
}

// remember records key as this writer's newest and returns the key that
// thereby falls out of the kept window, or "".
func (w *bkWriter) remember(key string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.recent = append(w.recent, key)
	if len(w.recent) <= bkKeepKeys {
		return ""
	}
	old := w.recent[0]
	w.recent = w.recent[1:]
	return old
}

// setBag sends req until a member acknowledges it or ctx ends.
func (w *bkWriter) setBag(ctx context.Context, req *adminpb.SetBagRequest) error {
	var lastErr error
	for {
		i, err := w.pick(ctx)
		if err != nil {
			return fmt.Errorf("bagkeeper SetBag: %w (last error: %v)", err, lastErr)
		}
		actx, cancel := context.WithTimeout(ctx, w.attemptTimeout)
		_, err = w.endpoints[i].admin.SetBag(actx, req)
		cancel()
		if err == nil {
			return nil
		}
		lastErr = err
		switch status.Code(err) {
		case codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition, codes.PermissionDenied, codes.Unimplemented, codes.ResourceExhausted:
			return fmt.Errorf("bagkeeper SetBag: %w", err)
		}
		w.forget(i)
		if ctx.Err() != nil {
			return fmt.Errorf("bagkeeper SetBag: %w (last error: %v)", ctx.Err(), lastErr)
		}
	}
}

// discover asks all members for their status in parallel. It returns the
// first member of the preferred kind (the confirmed leader, or a follower
// that knows a leader), else a member that knows a leader, else -1.
func (w *bkWriter) discover(ctx context.Context) (target int, preferred bool) {
	type answer struct {
		i int
		s bkStatus
	}
	ctx, cancel := context.WithTimeout(ctx, w.attemptTimeout)
	defer cancel() // abandons the slower Status calls once one qualified
	answers := make(chan answer, len(w.endpoints))
	for i, ep := range w.endpoints {
		go func() {
			resp, err := ep.admin.Status(ctx, &adminpb.StatusRequest{SkipProbe: true})
			answers <- answer{i, bkStatus{resp: resp, err: err}}
		}()
	}
	target = -1
	for range w.endpoints {
		a := <-answers
		if !a.s.knowsLeader() {
			continue
		}
		if a.s.isLeader() != w.preferFollower {
			return a.i, true
		}
		if target < 0 {
			target = a.i
		}
	}
	return target, false
}

// Close implements Writer.
func (w *bkWriter) Close() error {
	var errs []error
	for _, ep := range w.endpoints {
		if err := ep.conn.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// printableAlphabet maps random bytes to printable characters.
const printableAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

// printable turns random bytes into a string of the same length made of
// printable ASCII: relation data are strings, and protobuf strings must
// be valid UTF-8.
func printable(b []byte) string {
	out := make([]byte, len(b))
	for i, c := range b {
		out[i] = printableAlphabet[c&63]
	}
	return string(out)
}
