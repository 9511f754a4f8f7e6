package raftstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bagkeeper/bagkeeper/raftstore/peerpb"
	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
	"github.com/bagkeeper/bagkeeper/raftstore/transport"
	"github.com/bagkeeper/bagkeeper/test/wait"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// bbolt and raft's log cache leave none; these come from grpc's
		// and net/http's background pools, which outlive a test by design.
		goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		// A future raft dropped on shutdown is never answered: await
		// leaves its waiter behind by design (see future.go).
		goleak.IgnoreAnyFunction("github.com/bagkeeper/bagkeeper/raftstore.(*Node).await.func1"),
	)
}

// testCluster runs raftstore nodes in this process over the real transport
// on loopback addresses.
type testCluster struct {
	t    *testing.T
	app  string
	root string

	// logStore, if set, is every node's log store (unless an option
	// names another).
	logStore LogStore

	// logs keeps the tail of the members' logs (see testWriter).
	logs *logTail

	mu     sync.Mutex
	nodes  map[string]*testNode // by pod
	nextIP int
}

type testNode struct {
	pod  string
	dir  string
	ip   string
	node *Node
	ln   *transport.Listener
}

func newTestCluster(t *testing.T, app string) *testCluster {
	c := &testCluster{t: t, app: app, root: t.TempDir(), nodes: map[string]*testNode{}, nextIP: 10, logs: &logTail{}}
	// Registered first, so run last: after every node stopped.
	t.Cleanup(func() {
		if t.Failed() && !testing.Verbose() {
			t.Logf("the members' last log lines:\n%s", c.logs.String())
		}
	})
	t.Cleanup(c.stopAll)
	return c
}

// ip hands out a fresh loopback address.
func (c *testCluster) ip() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nextIP++
	return fmt.Sprintf("127.0.%d.%d", 10+c.nextIP/250, c.nextIP%250+1)
}

// discover returns the current address of every running node.
func (c *testCluster) discover(context.Context) ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, n := range c.nodes {
		if n.ln != nil {
			out = append(out, n.ln.Advertise())
		}
	}
	sort.Strings(out)
	return out, nil
}

type nodeOpt func(*Config)

// atAddr makes start listen on addr instead of a fresh address.
func atAddr(addr string) nodeOpt { return func(c *Config) { c.Advertise = addr } }

func withExpect(n int) nodeOpt { return func(c *Config) { c.BootstrapExpect = n } }

// start starts pod on a new address, reusing its data dir if it has one.
func (c *testCluster) start(pod string, opts ...nodeOpt) *testNode {
	c.t.Helper()
	dir := filepath.Join(c.root, pod)
	var pre Config
	for _, o := range opts {
		o(&pre)
	}
	bind := c.ip() + ":0"
	if pre.Advertise != "" {
		bind = pre.Advertise
	}
	ln, err := transport.Listen(bind, "", transport.Config{App: c.app})
	if err != nil {
		c.t.Fatal(err)
	}
	ip, _, _ := net.SplitHostPort(ln.Advertise())
	cfg := Config{
		App: c.app, Pod: pod, DataDir: dir, Advertise: ln.Advertise(),
		RaftLayer: ln.RaftLayer(), GRPCListener: ln.GRPCListener(), Dial: ln.Dialer(),
		Discover:           c.discover,
		JoinInterval:       50 * time.Millisecond,
		HeartbeatTimeout:   200 * time.Millisecond,
		ElectionTimeout:    200 * time.Millisecond,
		LeaderLeaseTimeout: 150 * time.Millisecond,
		Autopilot: AutopilotConfig{
			Interval: 100 * time.Millisecond, Stabilization: 300 * time.Millisecond,
			UnhealthyAfter: time.Second, DeadVoterAfter: 3 * time.Second, DeadNonvoterAfter: 3 * time.Second,
		},
		Logger:   slog.New(slog.NewTextHandler(testWriter{c.t, c.logs}, &slog.HandlerOptions{Level: slog.LevelInfo})).With("pod", pod),
		LogStore: c.logStore,
	}
	for _, o := range opts {
		o(&cfg)
	}
	cfg.Advertise = ln.Advertise()
	n, err := Open(cfg)
	if err != nil {
		ln.Close()
		c.t.Fatalf("starting %s: %v", pod, err)
	}
	tn := &testNode{pod: pod, dir: dir, ip: ip, node: n, ln: ln}
	c.mu.Lock()
	c.nodes[pod] = tn
	c.mu.Unlock()
	return tn
}

// stop shuts pod down; graceful hands leadership over first.
func (c *testCluster) stop(pod string) {
	c.mu.Lock()
	n := c.nodes[pod]
	delete(c.nodes, pod)
	c.mu.Unlock()
	if n == nil {
		return
	}
	_ = n.node.Shutdown(context.Background(), false)
	n.ln.Close()
}

// crash stops pod abruptly: connections drop, nothing is handed over.
func (c *testCluster) crash(pod string) {
	c.mu.Lock()
	n := c.nodes[pod]
	delete(c.nodes, pod)
	c.mu.Unlock()
	n.ln.Close() // cut the network first, so nothing is handed over
	_ = n.node.raft.Shutdown().Error()
	_ = n.node.Shutdown(context.Background(), false)
}

func (c *testCluster) wipe(pod string) {
	if err := os.RemoveAll(filepath.Join(c.root, pod)); err != nil {
		c.t.Fatal(err)
	}
}

func (c *testCluster) stopAll() {
	c.mu.Lock()
	pods := make([]string, 0, len(c.nodes))
	for p := range c.nodes {
		pods = append(pods, p)
	}
	c.mu.Unlock()
	for _, p := range pods {
		c.stop(p)
	}
}

func (c *testCluster) node(pod string) *testNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[pod]
}

func (c *testCluster) running() []*testNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*testNode
	for _, n := range c.nodes {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].pod < out[j].pod })
	return out
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	wait.Until(t, timeout, what, cond)
}

// leader waits for exactly one leader among running nodes, agreed by all.
func (c *testCluster) leader(timeout time.Duration) *testNode {
	c.t.Helper()
	var l *testNode
	eventually(c.t, timeout, "one leader", func() error {
		l = nil
		for _, n := range c.running() {
			if n.node.IsLeader() {
				if l != nil {
					return fmt.Errorf("two leaders: %s and %s", l.pod, n.pod)
				}
				l = n
			}
		}
		if l == nil {
			return errors.New("no leader")
		}
		if l.node.State().App() == "" {
			return errors.New("leader has not initialised the cluster")
		}
		return nil
	})
	return l
}

// config returns the leader's configuration as "id=suffrage" strings.
// follower returns a running member other than l.
func (c *testCluster) follower(l *testNode) *testNode {
	c.t.Helper()
	for _, n := range c.running() {
		if n != l {
			return n
		}
	}
	c.t.Fatal("no member other than the leader runs")
	return nil
}

func (c *testCluster) voters(n *testNode) (voters, nonvoters []string) {
	cfg, err := n.node.Configuration()
	if err != nil {
		return nil, nil
	}
	for _, s := range cfg.Servers {
		if s.Suffrage == raft.Voter {
			voters = append(voters, string(s.ID))
		} else {
			nonvoters = append(nonvoters, string(s.ID))
		}
	}
	sort.Strings(voters)
	sort.Strings(nonvoters)
	return voters, nonvoters
}

// testWriter passes the members' logs to the test's log with -v, and
// otherwise keeps their tail, printed if the test fails.
type testWriter struct {
	t    *testing.T
	tail *logTail
}

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	if testing.Verbose() {
		w.t.Log(string(p))
		return len(p), nil
	}
	return w.tail.Write(p)
}

// logTailSize is how much of the members' logs a failed test prints.
const logTailSize = 64 << 10

// logTail keeps (at least) the last logTailSize bytes written to it.
type logTail struct {
	mu  sync.Mutex
	buf []byte
}

func (l *logTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	if len(l.buf) > 2*logTailSize { // trimmed now and then, not at every line
		l.buf = append(l.buf[:0], l.buf[len(l.buf)-logTailSize:]...)
	}
	return len(p), nil
}

func (l *logTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.buf[max(0, len(l.buf)-logTailSize):])
}

func applyCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestEmptyNodesBootstrapExactlyOneCluster(t *testing.T) {
	for round := 0; round < 3; round++ {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			c := newTestCluster(t, "app")
			var wg sync.WaitGroup
			for _, p := range []string{"app-0", "app-1", "app-2"} {
				wg.Add(1)
				go func() { defer wg.Done(); c.start(p, withExpect(3)) }()
			}
			wg.Wait()
			l := c.leader(10 * time.Second)
			eventually(t, 5*time.Second, "all members agree on one configuration", func() error {
				want, _ := c.voters(l)
				if len(want) != 3 {
					return fmt.Errorf("leader has voters %v", want)
				}
				for _, n := range c.running() {
					got, _ := c.voters(n)
					if !slices.Equal(got, want) {
						return fmt.Errorf("%s has voters %v, leader %v", n.pod, got, want)
					}
					if n.node.State().ClusterID() != l.node.State().ClusterID() {
						return fmt.Errorf("%s is in cluster %q, leader in %q", n.pod, n.node.State().ClusterID(), l.node.State().ClusterID())
					}
				}
				return nil
			})
		})
	}
}

func TestFollowerWriteIsForwardedAndReadBack(t *testing.T) {
	c := newTestCluster(t, "app")
	for _, p := range []string{"app-0", "app-1", "app-2"} {
		c.start(p, withExpect(3))
	}
	l := c.leader(10 * time.Second)
	follower := c.follower(l)
	res, err := follower.node.Apply(applyCtx(t), state.NewCommand(state.ClaimUnitOp(string(follower.node.ID()), follower.pod, -1, 0), state.EnsureRelationOp("peers", "p", true, "", "")))
	if err != nil {
		t.Fatal(err)
	}
	unit, rel := res.GetOps()[0].GetUnit(), res.GetOps()[1].GetRelationId()
	if _, err := follower.node.Apply(applyCtx(t), state.NewCommand(state.UpdateBagOp(rel, unit, map[string]string{"k": "v"}))); err != nil {
		t.Fatal(err)
	}
	// Read-your-writes: the follower's own state has it as soon as Apply returns.
	if b, ok := follower.node.State().Bag(rel, unit); !ok || b.Data.Value("k") != "v" {
		t.Fatalf("follower does not read its own write: %v", b)
	}
	// A refused command comes back as a CommandError and changes nothing.
	_, err = follower.node.Apply(applyCtx(t), state.NewCommand(state.UpdateBagOp(rel, "app/99", map[string]string{"k": "v"})))
	if !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("got %v, want ErrNotFound", err)
	}
}

func TestWipedMemberRejoinsAsNewIncarnationAndOldOneIsRemoved(t *testing.T) {
	for _, victim := range []string{"follower", "leader"} {
		t.Run(victim, func(t *testing.T) {
			c := newTestCluster(t, "app")
			for _, p := range []string{"app-0", "app-1", "app-2"} {
				c.start(p, withExpect(3))
			}
			l := c.leader(10 * time.Second)
			rel := mustApply(t, l.node, state.EnsureRelationOp("peers", "p", true, "", "")).GetOps()[0].GetRelationId()
			unit := mustApply(t, l.node, state.ClaimUnitOp(string(l.node.ID()), l.pod, -1, 0)).GetOps()[0].GetUnit()
			for i := 0; i < 50; i++ {
				mustApply(t, l.node, state.UpdateBagOp(rel, unit, map[string]string{fmt.Sprint("k", i): fmt.Sprint(i)}))
			}
			want := l.node.State().Bags(rel)
			target := l
			if victim == "follower" {
				for _, n := range c.running() {
					if n != l {
						target = n
						break
					}
				}
			}
			oldID := target.node.ID()
			c.crash(target.pod)
			c.wipe(target.pod)
			back := c.start(target.pod)
			if back.node.ID() == oldID {
				t.Fatal("wiped member came back with its old raft id")
			}
			eventually(t, 15*time.Second, "voters back at target without the old incarnation", func() error {
				l := c.leader(5 * time.Second)
				voters, nonvoters := c.voters(l)
				if len(voters) != 3 || !slices.Contains(voters, string(back.node.ID())) || slices.Contains(append(voters, nonvoters...), string(oldID)) {
					return fmt.Errorf("voters %v nonvoters %v", voters, nonvoters)
				}
				return nil
			})
			got := back.node.State().Bags(rel)
			if len(got) != len(want) || !maps.Equal(got[0].Data.Map(), want[0].Data.Map()) {
				t.Fatalf("rejoined member has bags %v, want %v", got, want)
			}
		})
	}
}

func TestWholeClusterRestartsOnNewAddresses(t *testing.T) {
	c := newTestCluster(t, "app")
	for _, p := range []string{"app-0", "app-1", "app-2"} {
		c.start(p, withExpect(3))
	}
	l := c.leader(10 * time.Second)
	rel := mustApply(t, l.node, state.EnsureRelationOp("peers", "p", true, "", "")).GetOps()[0].GetRelationId()
	mustApply(t, l.node, state.UpdateBagOp(rel, "app", map[string]string{"k": "v"}))
	ids := map[string]raft.ServerID{}
	for _, n := range c.running() {
		ids[n.pod] = n.node.ID()
		c.crash(n.pod)
	}
	for _, p := range []string{"app-0", "app-1", "app-2"} {
		c.start(p, withExpect(3))
	}
	l = c.leader(15 * time.Second)
	for _, n := range c.running() {
		if n.node.ID() != ids[n.pod] {
			t.Fatalf("%s changed identity with its disk intact", n.pod)
		}
	}
	eventually(t, 10*time.Second, "the leader to know the new addresses", func() error {
		members, err := l.node.ListMembers()
		if err != nil {
			return err
		}
		for _, m := range members {
			n := c.node(PodOf(m.Server.ID))
			if n == nil || string(m.Server.Address) != n.ln.Advertise() {
				return fmt.Errorf("%s still at %s", m.Server.ID, m.Server.Address)
			}
		}
		return nil
	})
	mustApply(t, l.node, state.UpdateBagOp(rel, "app", map[string]string{"k2": "v2"}))
	for _, n := range c.running() {
		if b, _ := n.node.State().Bag(rel, "app"); b == nil || b.Data.Value("k") != "v" {
			eventually(t, 5*time.Second, "bag replicated to "+n.pod, func() error {
				if b, _ := n.node.State().Bag(rel, "app"); b == nil || b.Data.Value("k2") != "v2" {
					return errors.New("missing")
				}
				return nil
			})
		}
	}
}

func mustApply(t *testing.T, n *Node, ops ...*storepb.Op) *storepb.Result {
	t.Helper()
	res, err := n.Apply(applyCtx(t), state.NewCommand(ops...))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func withNoBootstrap() nodeOpt { return func(c *Config) { c.NoBootstrap = true } }

func TestMembersBarredFromBootstrapOnlyJoin(t *testing.T) {
	c := newTestCluster(t, "app")
	// Pods 3 and 4 of a StatefulSet scaled up while pods 0-2 are away: they
	// must not start a cluster of their own, even seeing each other and a
	// third empty pod.
	late := c.start("app-3", withExpect(3), withNoBootstrap())
	c.start("app-4", withExpect(3), withNoBootstrap())
	c.start("app-0", withExpect(3))
	// Give them many rounds to (wrongly) bootstrap.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		for _, n := range c.running() {
			if n.node.hasState() {
				t.Fatalf("%s bootstrapped although only one eligible member exists", n.pod)
			}
		}
		<-time.After(50 * time.Millisecond)
	}
	c.start("app-1", withExpect(3))
	c.start("app-2", withExpect(3))
	l := c.leader(10 * time.Second)
	eventually(t, 10*time.Second, "barred members joined as non-voters", func() error {
		voters, nonvoters := c.voters(l)
		if len(voters) != 3 || len(nonvoters) != 2 || !slices.Contains(nonvoters, string(late.node.ID())) {
			return fmt.Errorf("voters %v nonvoters %v", voters, nonvoters)
		}
		for _, v := range voters {
			if p := PodOf(raft.ServerID(v)); p == "app-3" || p == "app-4" {
				return fmt.Errorf("barred pod %s bootstrapped as a voter", p)
			}
		}
		return nil
	})
}

// TestWipedMemberAtTheSameAddressCannotVoteForTheOldOne is the vote-amnesia
// trap: a member comes back with an empty disk at the very address it had.
// A stale member that missed a committed write asks for votes; the empty
// newcomer would grant any vote, and were that counted as the old member's,
// the stale member would win and the write would be lost. Raft connections
// name the member they are meant for, so the newcomer cannot answer for the
// old one.
func TestWipedMemberAtTheSameAddressCannotVoteForTheOldOne(t *testing.T) {
	c := newTestCluster(t, "app")
	for _, p := range []string{"app-0", "app-1", "app-2"} {
		c.start(p, withExpect(3))
	}
	l := c.leader(10 * time.Second)
	rel := mustApply(t, l.node, state.EnsureRelationOp("peers", "p", true, "", "")).GetOps()[0].GetRelationId()
	// Pick the stale member and the one to wipe among the followers, so the
	// leader (which holds the write) is the third.
	var stale, wiped *testNode
	for _, n := range c.running() {
		switch {
		case n == l:
		case stale == nil:
			stale = n
		default:
			wiped = n
		}
	}
	staleAddr, wipedAddr := stale.ln.Advertise(), wiped.ln.Advertise()
	c.crash(stale.pod)
	mustApply(t, l.node, state.UpdateBagOp(rel, "app", map[string]string{"committed": "while app-stale was down"}))
	leaderPod, leaderAddr := l.pod, l.ln.Advertise()
	c.crash(l.pod)
	c.crash(wiped.pod)
	c.wipe(wiped.pod)
	c.start(wiped.pod, atAddr(wipedAddr))
	back := c.start(stale.pod, atAddr(staleAddr))
	// With the leader down, the stale member must not win an election: its
	// only other voter is gone, and the newcomer is not it.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if back.node.IsLeader() {
			t.Fatal("a stale member was elected with the vote of a wiped newcomer at the old address")
		}
		<-time.After(20 * time.Millisecond)
	}
	c.start(leaderPod, atAddr(leaderAddr))
	c.leader(15 * time.Second)
	eventually(t, 15*time.Second, "the committed write on every member", func() error {
		for _, n := range c.running() {
			b, ok := n.node.State().Bag(rel, "app")
			if !ok || b.Data.Value("committed") == "" {
				return fmt.Errorf("%s lost the committed write", n.pod)
			}
		}
		return nil
	})
}

// TestForwardedWriteDoesNotWaitForTheCommitTimeout: a follower's write
// returns once its own state has applied it; the leader's nudge brings the
// commit index over at once instead of a commit timeout later.
func TestForwardedWriteDoesNotWaitForTheCommitTimeout(t *testing.T) {
	c := newTestCluster(t, "app")
	slowCommit := func(cfg *Config) { cfg.CommitTimeout = 3 * time.Second }
	for _, p := range []string{"app-0", "app-1", "app-2"} {
		c.start(p, withExpect(3), slowCommit)
	}
	l := c.leader(10 * time.Second)
	f := c.follower(l)
	rel := mustApply(t, f.node, state.EnsureRelationOp("peers", "p", true, "", "")).GetOps()[0].GetRelationId()
	start := time.Now()
	for i := 0; i < 5; i++ {
		mustApply(t, f.node, state.UpdateBagOp(rel, "app", map[string]string{"n": fmt.Sprint(i)}))
	}
	// Five writes that each waited for the commit timeout would take 15s.
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("5 forwarded writes took %s: they waited for the commit timeout", took)
	}
}

// TestRemoveMemberKeepsAQuorum: an operator removes members that are gone
// for good (a StatefulSet scaled down); the leader hands over first if it
// is the one to go; a removal that would leave no quorum is refused.
func TestRemoveMemberKeepsAQuorum(t *testing.T) {
	c := newTestCluster(t, "app")
	for _, p := range []string{"app-0", "app-1", "app-2", "app-3", "app-4"} {
		opts := []nodeOpt{withExpect(5)}
		c.start(p, append(opts, func(cfg *Config) {
			cfg.Voters = 5
			// The removals here are the operator's: autopilot, which removes
			// dead members after a few seconds by default in these tests,
			// must not get there first on a slow run.
			cfg.Autopilot.DeadVoterAfter, cfg.Autopilot.DeadNonvoterAfter = time.Minute, time.Minute
		})...)
	}
	l := c.leader(10 * time.Second)
	ctx := applyCtx(t)
	// Remove the leader itself, through a follower.
	follower := c.follower(l)
	oldLeader := l.node.ID()
	if err := follower.node.RemoveMember(ctx, oldLeader); err != nil {
		t.Fatal(err)
	}
	c.stop(l.pod)
	l = c.leader(10 * time.Second)
	voters, _ := c.voters(l)
	if len(voters) != 4 || slices.Contains(voters, string(oldLeader)) {
		t.Fatalf("after removing the leader: voters %v", voters)
	}
	// One of the four voters dies; removing it keeps a quorum of the rest.
	deadOne := func() *testNode {
		for _, n := range c.running() {
			if n != l {
				c.crash(n.pod)
				// The leader may change meanwhile (a slow run): ask whoever
				// leads, and only an entry for n counts.
				eventually(t, 10*time.Second, "the leader to see "+n.pod+" dead", func() error {
					for _, r := range c.running() {
						if !r.node.IsLeader() {
							continue
						}
						for _, m := range r.node.MemberHealth() {
							if m.ID == n.node.ID() {
								if m.Healthy {
									return errors.New("still healthy")
								}
								return nil
							}
						}
						return fmt.Errorf("not in the view of the leader %s", r.pod)
					}
					return errors.New("no leader")
				})
				l = c.leader(10 * time.Second)
				return n
			}
		}
		return nil
	}
	d := deadOne()
	if err := l.node.RemoveMember(applyCtx(t), d.node.ID()); err != nil {
		t.Fatal(err)
	}
	// Three voters; one more dies: removing a HEALTHY one now would leave
	// one healthy voter of two, no quorum.
	deadOne()
	healthy := c.follower(l)
	err := l.node.RemoveMember(applyCtx(t), healthy.node.ID())
	if err == nil || !strings.Contains(err.Error(), "fewer than a quorum") {
		t.Fatalf("removing a healthy voter with no quorum left: %v", err)
	}
	if err := l.node.RemoveMember(ctx, "app-9/none"); err == nil || !strings.Contains(err.Error(), "not a member") {
		t.Fatalf("removing an unknown member: %v", err)
	}
}

// TestLeavingVotersArePromptlyReplaced: pods without an ordinal leave on a
// graceful stop; in a rolling replacement the voters must not thin out
// faster than the new pods are promoted, even with a long stabilization
// time — down to the last old voter, which is also the leader.
func TestLeavingVotersArePromptlyReplaced(t *testing.T) {
	c := newTestCluster(t, "app")
	slowPromotion := func(cfg *Config) { cfg.Autopilot.Stabilization = time.Hour }
	old := []string{"web-a", "web-b", "web-c"}
	for _, p := range old {
		c.start(p, withExpect(3), slowPromotion)
	}
	l := c.leader(10 * time.Second)
	// Leave the leader for last.
	sort.Slice(old, func(i, j int) bool { return old[j] == l.pod })
	for i, p := range old {
		n := c.start(fmt.Sprintf("web-new%d", i), slowPromotion)
		eventually(t, 10*time.Second, n.pod+" caught up", func() error {
			if n.node.State().App() == "" {
				return errors.New("not yet")
			}
			return nil
		})
		leaving := c.node(p)
		c.mu.Lock()
		delete(c.nodes, p)
		c.mu.Unlock()
		if err := leaving.node.Shutdown(applyCtx(t), true); err != nil {
			t.Fatal(err)
		}
		leaving.ln.Close()
		l := c.leader(10 * time.Second)
		voters, _ := c.voters(l)
		if len(voters) != 3 {
			t.Fatalf("after %s left: voters %v", p, voters)
		}
	}
}

func TestCaughtUpWaitsForTheStateMachineNotForRaft(t *testing.T) {
	c := newTestCluster(t, "app")
	for _, p := range []string{"app-0", "app-1", "app-2"} {
		c.start(p, withExpect(3))
	}
	l := c.leader(10 * time.Second)
	f := c.follower(l).node
	res := mustApply(t, l.node, state.EnsureRelationOp("peers", "p", true, "", ""))
	rel := res.GetOps()[0].GetRelationId()
	eventually(t, 10*time.Second, "the follower caught up", func() error {
		if ci := f.raft.CommitIndex(); !f.CaughtUp(ci) || ci < res.GetIndex() {
			return fmt.Errorf("state machine at %d, commit index %d", f.StateIndex(), ci)
		}
		return nil
	})

	// Hold the follower's state machine back, as a long replay does.
	release, held := make(chan struct{}), make(chan struct{}, 1)
	var releaseOnce sync.Once
	unhold := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unhold) // before the nodes stop, should the test fail
	hold := func(*raft.Log) {
		select {
		case held <- struct{}{}:
		default:
		}
		<-release
	}
	f.fsm.beforeApply.Store(&hold)
	var last *storepb.Result
	for i := range 20 {
		last = mustApply(t, l.node, state.UpdateBagOp(rel, "app", map[string]string{"k": fmt.Sprint(i)}))
	}
	<-held
	eventually(t, 10*time.Second, "raft to hand the entries to the held state machine", func() error {
		if ai := f.raft.AppliedIndex(); ai < last.GetIndex() {
			return fmt.Errorf("raft applied index %d < %d", ai, last.GetIndex())
		}
		return nil
	})
	// raft counts the entries as applied; the state machine has not got them.
	if f.CaughtUp(last.GetIndex()) {
		t.Fatalf("caught up at %d while the state machine is held at %d", last.GetIndex(), f.StateIndex())
	}
	if b, _ := f.State().Bag(rel, "app"); b != nil && b.Data.Value("k") == "19" {
		t.Fatal("the held state machine has the last write")
	}
	f.fsm.beforeApply.Store(nil)
	unhold()
	eventually(t, 10*time.Second, "the state machine to apply them", func() error {
		if !f.CaughtUp(last.GetIndex()) {
			return fmt.Errorf("state machine at %d of %d", f.StateIndex(), last.GetIndex())
		}
		return nil
	})
	if b, _ := f.State().Bag(rel, "app"); b == nil || b.Data.Value("k") != "19" {
		t.Fatalf("caught up but the bag is %v", b)
	}

	// An entry the state machine never sees (a barrier, like a new
	// leader's no-op) does not hold it back.
	if err := l.node.raft.Barrier(5 * time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the follower to learn the barrier's commit", func() error {
		if ci := f.raft.CommitIndex(); ci <= last.GetIndex() || !f.CaughtUp(ci) {
			return fmt.Errorf("commit index %d, state machine at %d", ci, f.StateIndex())
		}
		return nil
	})
}

// A removal that reaches a member which no longer leads by the time it
// checks the member's health (leadership moved after the call was routed
// to it) is tried again on the next leader, not answered "not a member".
func TestARemovalOnAMemberThatLostTheLeadIsTriedAgain(t *testing.T) {
	c, l, f, _ := threeVoters(t)
	other := l.node.ID()
	err := f.node.removeOnLeader(applyCtx(t), other)
	if err == nil || !retryable(err) || strings.Contains(err.Error(), "not a member") {
		t.Fatalf("a removal checked on a member that does not lead: %v (want an error that sends it to the leader)", err)
	}
	if voters, _ := c.voters(l); !slices.Contains(voters, string(other)) {
		t.Fatalf("%s was removed: voters %v", other, voters)
	}
}

// A member restarted from its own snapshot, whose last entries before the
// snapshot are not commands (a configuration, here), is caught up without
// waiting for another command: raft does not hand entries a snapshot
// covers to the state machine again.
func TestRestartedFromItsSnapshotIsCaughtUpWithoutNewCommands(t *testing.T) {
	c := newTestCluster(t, "app")
	for _, p := range []string{"app-0", "app-1", "app-2"} {
		c.start(p, withExpect(3))
	}
	l := c.leader(10 * time.Second)
	f := c.follower(l)
	mustApply(t, l.node, state.EnsureRelationOp("peers", "p", true, "", ""))
	// A configuration entry after the last command: the follower's
	// address, re-added unchanged.
	added := l.node.raft.AddVoter(f.node.ID(), raft.ServerAddress(f.node.Advertise()), 0, 5*time.Second)
	if err := added.Error(); err != nil {
		t.Fatal(err)
	}
	// The configuration's own index: the leader's log may have grown past
	// it meanwhile (a barrier after the cluster's own writes, which the
	// state machine never sees).
	cfgIndex := added.Index()
	eventually(t, 10*time.Second, "the follower to apply the configuration", func() error {
		if f.node.StateIndex() < cfgIndex {
			return fmt.Errorf("state machine at %d, configuration at %d", f.node.StateIndex(), cfgIndex)
		}
		return nil
	})
	if err := f.node.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	stateIndex := f.node.State().Index()
	addr := f.node.Advertise()
	c.stop(f.pod)
	f = c.start(f.pod, atAddr(addr))
	eventually(t, 10*time.Second, "the restarted follower to be caught up", func() error {
		ci := f.node.raft.CommitIndex()
		if ci < cfgIndex || !f.node.CaughtUp(ci) {
			return fmt.Errorf("commit index %d, state machine at %d", ci, f.node.StateIndex())
		}
		return nil
	})
	if got := f.node.State().Index(); got != stateIndex {
		t.Fatalf("a command was applied meanwhile (state index %d, was %d): the test proves nothing", got, stateIndex)
	}
}

// TestAMemberThatLeftIsNotTakenBackByALateJoin: a stopping member's join
// loop may send a join just before its leave is done (it saw itself
// removed and asked to come back); the leader that removed it must not add
// it back as a non-voter for good.
func TestAMemberThatLeftIsNotTakenBackByALateJoin(t *testing.T) {
	c := newTestCluster(t, "app")
	for _, p := range []string{"web-a", "web-b", "web-c"} {
		c.start(p, withExpect(3))
	}
	l := c.leader(10 * time.Second)
	leaving := c.follower(l)
	id, addr := leaving.node.ID(), leaving.node.Advertise()
	c.mu.Lock()
	delete(c.nodes, leaving.pod)
	c.mu.Unlock()
	if err := leaving.node.Shutdown(applyCtx(t), true); err != nil {
		t.Fatal(err)
	}
	leaving.ln.Close()
	voters, nonvoters := c.voters(l)
	if slices.Contains(voters, string(id)) || slices.Contains(nonvoters, string(id)) {
		t.Fatalf("%s still a member after leaving: voters %v, non-voters %v", id, voters, nonvoters)
	}
	// The late join arrives.
	_, err := (&peerServer{n: l.node}).Join(applyCtx(t), &peerpb.JoinRequest{ServerId: string(id), Address: addr, App: "app"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "left the group") {
		t.Fatalf("a late join of the member that left: %v", err)
	}
	voters, nonvoters = c.voters(l)
	if slices.Contains(voters, string(id)) || slices.Contains(nonvoters, string(id)) {
		t.Fatalf("%s was taken back: voters %v, non-voters %v", id, voters, nonvoters)
	}
	// Another member's join is not affected.
	n := c.start("web-d")
	eventually(t, 10*time.Second, "web-d to join", func() error {
		_, nv := c.voters(l)
		v, _ := c.voters(l)
		if !slices.Contains(append(v, nv...), string(n.node.ID())) {
			return errors.New("not a member yet")
		}
		return nil
	})
}

// syncBuffer is a bytes.Buffer for a logger that several goroutines use.
type syncBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestAMemberWaitingForPeersSaysWhatItProbedAndWarns(t *testing.T) {
	c := newTestCluster(t, "web")
	// Something that listens but is no peer port (an HTTP port given by
	// mistake), and a name that does not resolve.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			defer conn.Close()
		}
	}()
	var logs syncBuffer
	var mu sync.Mutex
	clock := time.Now()
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	c.start("web-0", withExpect(2), func(cfg *Config) {
		cfg.Discover = func(context.Context) ([]string, error) {
			return []string{ln.Addr().String(), "nosuchhost.invalid:7400"}, nil
		}
		cfg.Now = now
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	wait.Until(t, 20*time.Second, "an info line with what was probed", func() error {
		l := logs.String()
		if !strings.Contains(l, `level=INFO msg="waiting for bootstrap peers"`) || !strings.Contains(l, "unanswered=") ||
			!strings.Contains(l, "nosuchhost.invalid:7400: dial peer nosuchhost.invalid:7400") || !strings.Contains(l, ln.Addr().String()+": ") {
			return fmt.Errorf("logs:\n%s", l)
		}
		return nil
	})
	mu.Lock()
	clock = clock.Add(waitWarnAfter + time.Minute)
	mu.Unlock()
	wait.Until(t, 20*time.Second, "a warning once it has waited long", func() error {
		if l := logs.String(); !strings.Contains(l, `level=WARN msg="waiting for bootstrap peers"`) || !strings.Contains(l, "waiting_for=1m30s") {
			return fmt.Errorf("logs:\n%s", l)
		}
		return nil
	})
}
