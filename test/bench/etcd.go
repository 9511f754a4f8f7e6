package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// etcdBin is the etcd server binary of the etcd target.
var etcdBin = flag.String("etcd", "etcd", "etcd server binary for the etcd target (Debian package etcd-server)")

// etcd's raft timing: its defaults, passed explicitly so that what the
// output says is what ran.
const (
	etcdHeartbeatMS = 100
	etcdElectionMS  = 1000
)

// etcdMemberCount is the size of the etcd cluster.
const etcdMemberCount = 3

// healthPoll is the interval at which the etcd target polls its members
// while waiting for the cluster to become healthy.
const healthPoll = 20 * time.Millisecond

// etcdTarget runs a 3-member etcd cluster on the loopback interface, each
// member a separate etcd process with its own data directory, bootstrapped
// statically, with etcd's default durability (the WAL is fsynced before a
// write is acknowledged) and raft timing. Clients speak etcd's v3 gRPC API.
type etcdTarget struct {
	bin            string
	version        string
	attemptTimeout time.Duration
	members        []*etcdMember
}

// etcdMember is one member of the etcd cluster.
type etcdMember struct {
	name       string
	clientAddr string // host:port of the client (gRPC) listener
	logPath    string
	args       []string
	proc       *process // nil before the first start
	conn       *grpc.ClientConn
	maint      pb.MaintenanceClient
	cluster    pb.ClusterClient
}

// newEtcdTarget finds the etcd binary and its version.
func newEtcdTarget(cfg *Config) (Target, error) {
	bin, err := exec.LookPath(*etcdBin)
	if err != nil {
		return nil, fmt.Errorf("etcd target: %w (install etcd, e.g. Debian's etcd-server package, or set -etcd)", err)
	}
	version, err := etcdVersion(bin)
	if err != nil {
		return nil, fmt.Errorf("etcd target: %w", err)
	}
	return &etcdTarget{bin: bin, version: version, attemptTimeout: cfg.AttemptTimeout}, nil
}

// etcdVersion runs "etcd --version" and returns the server version.
func etcdVersion(bin string) (string, error) {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", bin, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "etcd Version:"); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("%s --version: no version in %q", bin, out)
}

// Name implements Target.
func (e *etcdTarget) Name() string { return "etcd " + e.version }

// Describe implements Target.
func (e *etcdTarget) Describe() string {
	return fmt.Sprintf("%d members on 127.0.0.1 (TCP), heartbeat %d ms, election timeout %d ms (etcd's defaults), "+
		"WAL fsynced before each acknowledgement (default), pre-vote off (the 3.4 default); "+
		"the client sends puts to the leader found with Maintenance.Status, or to a member that knows a leader (which forwards)",
		etcdMemberCount, etcdHeartbeatMS, etcdElectionMS)
}

// Start implements Target.
func (e *etcdTarget) Start(ctx context.Context, dir string) error {
	if len(e.members) > 0 {
		return errors.New("etcd: already started")
	}
	ports, err := freePorts(2 * etcdMemberCount)
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	var peers []string
	for i := range etcdMemberCount {
		peers = append(peers, fmt.Sprintf("m%d=http://127.0.0.1:%d", i, ports[2*i+1]))
	}
	token := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	for i := range etcdMemberCount {
		name := fmt.Sprintf("m%d", i)
		clientURL := fmt.Sprintf("http://127.0.0.1:%d", ports[2*i])
		peerURL := fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1])
		m := &etcdMember{
			name:       name,
			clientAddr: fmt.Sprintf("127.0.0.1:%d", ports[2*i]),
			logPath:    filepath.Join(dir, name+".log"),
			args: []string{
				"--name=" + name,
				"--data-dir=" + filepath.Join(dir, name),
				"--listen-client-urls=" + clientURL,
				"--advertise-client-urls=" + clientURL,
				"--listen-peer-urls=" + peerURL,
				"--initial-advertise-peer-urls=" + peerURL,
				"--initial-cluster=" + strings.Join(peers, ","),
				"--initial-cluster-state=new",
				"--initial-cluster-token=" + token,
				"--heartbeat-interval=" + strconv.Itoa(etcdHeartbeatMS),
				"--election-timeout=" + strconv.Itoa(etcdElectionMS),
				"--logger=zap",
				"--log-outputs=stderr",
			},
		}
		conn, err := dialEtcd(m.clientAddr)
		if err != nil {
			return fmt.Errorf("etcd %s: %w", name, err)
		}
		m.conn = conn
		m.maint = pb.NewMaintenanceClient(conn)
		m.cluster = pb.NewClusterClient(conn)
		e.members = append(e.members, m)
	}
	for _, m := range e.members {
		if err := e.startMember(m); err != nil {
			return err
		}
	}
	if err := e.waitHealthy(ctx); err != nil {
		return err
	}
	return e.checkMembers(ctx)
}

// startMember starts (or restarts, on its existing data) one member.
func (e *etcdTarget) startMember(m *etcdMember) error {
	var env []string
	if runtime.GOARCH != "amd64" {
		env = append(env, "ETCD_UNSUPPORTED_ARCH="+runtime.GOARCH)
	}
	p, err := startProcess("etcd "+m.name, m.logPath, []string{"ETCD_", "ETCDCTL_"}, env, e.bin, m.args...)
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	m.proc = p
	return nil
}

// checkMembers verifies with Cluster.MemberList that the cluster has
// exactly the expected, started members.
func (e *etcdTarget) checkMembers(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := e.members[0].cluster.MemberList(ctx, &pb.MemberListRequest{})
	if err != nil {
		return fmt.Errorf("etcd: member list: %w", err)
	}
	if len(resp.Members) != etcdMemberCount {
		return fmt.Errorf("etcd: member list has %d members, want %d", len(resp.Members), etcdMemberCount)
	}
	for _, mem := range resp.Members {
		if mem.Name == "" || len(mem.ClientURLs) == 0 {
			return fmt.Errorf("etcd: member %x has not started", mem.ID)
		}
	}
	return nil
}

// dialEtcd creates a gRPC client connection to one etcd member. It
// reconnects quickly after the member restarts.
func dialEtcd(addr string) (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
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
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return conn, nil
}

// freePorts returns n distinct TCP ports on 127.0.0.1 that were free a
// moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// memberStatus is one member's answer to Maintenance.Status.
type memberStatus struct {
	resp *pb.StatusResponse
	err  error
}

// isLeader reports whether the member says it is the leader itself.
func (s memberStatus) isLeader() bool {
	return s.err == nil && s.resp.Leader != 0 && s.resp.Leader == s.resp.GetHeader().GetMemberId()
}

// statusAll asks every member for its status in parallel.
func (e *etcdTarget) statusAll(ctx context.Context) []memberStatus {
	out := make([]memberStatus, len(e.members))
	var wg sync.WaitGroup
	for i, m := range e.members {
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, e.attemptTimeout)
			defer cancel()
			resp, err := m.maint.Status(sctx, &pb.StatusRequest{})
			out[i] = memberStatus{resp: resp, err: err}
		})
	}
	wg.Wait()
	return out
}

// healthy reports whether all members run, agree on a leader that
// confirms itself, and have applied everything the leader has committed;
// if not, it says why.
func (e *etcdTarget) healthy(ctx context.Context) (bool, string) {
	sts := e.statusAll(ctx)
	leader := -1
	for i, s := range sts {
		if s.err != nil {
			return false, fmt.Sprintf("%s: %v", e.members[i].name, s.err)
		}
		if s.isLeader() {
			leader = i
		}
	}
	if leader < 0 {
		return false, "no leader"
	}
	want := sts[leader].resp
	for i, s := range sts {
		switch {
		case s.resp.Leader != want.Leader:
			return false, fmt.Sprintf("%s sees leader %x, %s is leader", e.members[i].name, s.resp.Leader, e.members[leader].name)
		case s.resp.RaftAppliedIndex < want.RaftIndex:
			return false, fmt.Sprintf("%s applied index %d < leader's commit index %d", e.members[i].name, s.resp.RaftAppliedIndex, want.RaftIndex)
		}
	}
	return true, ""
}

// waitHealthy polls the members until the cluster is healthy, a member
// process exits or ctx ends.
func (e *etcdTarget) waitHealthy(ctx context.Context) error {
	ticker := time.NewTicker(healthPoll)
	defer ticker.Stop()
	for {
		for _, m := range e.members {
			if m.proc.Exited() {
				return fmt.Errorf("etcd %s exited: %v; log ends with:\n%s", m.name, m.proc.ExitError(), tailFile(m.logPath, 2048))
			}
		}
		ok, why := e.healthy(ctx)
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcd: cluster not healthy (%s): %w", why, ctx.Err())
		case <-ticker.C:
		}
	}
}

// findLeader returns the member that confirms it is the leader, polling
// until there is one or ctx ends.
func (e *etcdTarget) findLeader(ctx context.Context) (*etcdMember, error) {
	ticker := time.NewTicker(healthPoll)
	defer ticker.Stop()
	for {
		for i, s := range e.statusAll(ctx) {
			if s.isLeader() && !e.members[i].proc.Exited() {
				return e.members[i], nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("etcd: find leader: %w", ctx.Err())
		case <-ticker.C:
		}
	}
}

// signalLeader finds the leader, sends it sig and waits until it exits.
func (e *etcdTarget) signalLeader(ctx context.Context, sig syscall.Signal) (time.Time, error) {
	m, err := e.findLeader(ctx)
	if err != nil {
		return time.Time{}, err
	}
	sent := time.Now()
	if err := m.proc.Signal(sig); err != nil {
		return time.Time{}, fmt.Errorf("etcd %s: %w", m.name, err)
	}
	if err := m.proc.Wait(ctx); err != nil {
		_ = m.proc.Kill()
		return time.Time{}, fmt.Errorf("etcd %s did not exit after %s: %w", m.name, sig, err)
	}
	return sent, nil
}

// KillLeader implements Target.
func (e *etcdTarget) KillLeader(ctx context.Context) (time.Time, error) {
	return e.signalLeader(ctx, syscall.SIGKILL)
}

// StopLeader implements Target. etcd transfers leadership when it is
// stopped gracefully.
func (e *etcdTarget) StopLeader(ctx context.Context) (time.Time, error) {
	return e.signalLeader(ctx, syscall.SIGTERM)
}

// Restore implements Target.
func (e *etcdTarget) Restore(ctx context.Context) error {
	for _, m := range e.members {
		if m.proc != nil && m.proc.Exited() {
			if err := e.startMember(m); err != nil {
				return err
			}
		}
	}
	return e.waitHealthy(ctx)
}

// Stop implements Target.
func (e *etcdTarget) Stop() error {
	var errs []error
	for _, m := range e.members {
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
	return errors.Join(errs...)
}

// NewWriter implements Target.
func (e *etcdTarget) NewWriter(ctx context.Context) (Writer, error) {
	w := &etcdWriter{attemptTimeout: e.attemptTimeout}
	w.picker = newPicker(w.discover)
	for _, m := range e.members {
		conn, err := dialEtcd(m.clientAddr)
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("etcd writer: %w", err)
		}
		w.endpoints = append(w.endpoints, etcdEndpoint{
			conn:  conn,
			kv:    pb.NewKVClient(conn),
			maint: pb.NewMaintenanceClient(conn),
		})
	}
	return w, nil
}

// etcdEndpoint is a writer's connection to one member.
type etcdEndpoint struct {
	conn  *grpc.ClientConn
	kv    pb.KVClient
	maint pb.MaintenanceClient
}

// etcdWriter is a Writer for the etcd cluster with one gRPC connection per
// member. It sends each Put to the member that confirmed it is the leader
// (what etcd's own client ends up doing after a failed request); when no
// member confirms that, it sends the Put to a member that knows a leader,
// which forwards it. On any failure it asks the members again and retries
// until the Put's context ends.
type etcdWriter struct {
	attemptTimeout time.Duration
	endpoints      []etcdEndpoint

	*picker // preferred: the target confirmed it is the leader
}

// Put implements Writer.
func (w *etcdWriter) Put(ctx context.Context, key string, value []byte) error {
	var lastErr error
	for {
		i, err := w.pick(ctx)
		if err != nil {
			return fmt.Errorf("etcd put %q: %w (last error: %v)", key, err, lastErr)
		}
		actx, cancel := context.WithTimeout(ctx, w.attemptTimeout)
		_, err = w.endpoints[i].kv.Put(actx, &pb.PutRequest{Key: []byte(key), Value: value})
		cancel()
		if err == nil {
			return nil
		}
		lastErr = err
		switch status.Code(err) {
		case codes.InvalidArgument, codes.PermissionDenied, codes.Unauthenticated, codes.Unimplemented:
			return fmt.Errorf("etcd put %q: %w", key, err)
		}
		w.forget(i)
		if ctx.Err() != nil {
			return fmt.Errorf("etcd put %q: %w (last error: %v)", key, ctx.Err(), lastErr)
		}
	}
}

// discover asks all members for their status in parallel. It returns the
// first member that confirms it is the leader, else a member that reports
// some leader (unconfirmed), else -1.
func (w *etcdWriter) discover(ctx context.Context) (target int, confirmed bool) {
	type answer struct {
		i int
		s memberStatus
	}
	ctx, cancel := context.WithTimeout(ctx, w.attemptTimeout)
	defer cancel() // abandons the slower Status calls once a leader answered
	answers := make(chan answer, len(w.endpoints))
	for i, ep := range w.endpoints {
		go func() {
			resp, err := ep.maint.Status(ctx, &pb.StatusRequest{})
			answers <- answer{i, memberStatus{resp: resp, err: err}}
		}()
	}
	target = -1
	for range w.endpoints {
		a := <-answers
		if a.s.isLeader() {
			return a.i, true
		}
		if a.s.err == nil && a.s.resp.Leader != 0 && target < 0 {
			target = a.i
		}
	}
	return target, false
}

// Close implements Writer.
func (w *etcdWriter) Close() error {
	var errs []error
	for _, ep := range w.endpoints {
		if err := ep.conn.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
