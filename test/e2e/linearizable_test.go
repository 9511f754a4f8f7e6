//go:build linux

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

const (
	// linWorkload is how long the workload and the nemesis run in the
	// normal suite; BAGKEEPER_SOAK_DURATION (a Go duration, such as 10m)
	// replaces it.
	linWorkload = 40 * time.Second
	// linClients is the number of concurrent clients.
	linClients = 4
	// linOpTimeout bounds one client operation.
	linOpTimeout = 5 * time.Second
)

// linKeys are the registers of the workload: two keys of two bags of the
// remote side of a relation (a remote unit's bag needs no unit of this
// application, so the nemesis cannot make one invalid). A few keys keep the
// check fast: each is checked on its own.
var linKeys = []struct{ owner, key string }{{"pg/0", "x"}, {"pg/0", "y"}, {"pg/1", "x"}, {"pg/1", "y"}}

// TestLinearizableBagsUnderFaults checks that bag reads and writes are
// linearizable while members crash, stall and lose their disks. Clients
// write keys of bags (each value unique) and read them back, through the
// admin socket of a member chosen at random, while a nemesis kills (-9) and
// restarts members, pauses (SIGSTOP) and resumes them — the leader above
// all — and restarts one on a wiped disk (a new incarnation), letting the
// cluster heal between faults; at most one of the three members is down or
// paused at a time, so a quorum always remains. Porcupine then checks the
// history against a register per key.
//
// A write that fails or times out may still commit: it stays in the history
// with an unknown completion. A read that fails observed nothing and is left
// out. Reads use the API's default consistency (linearizable).
//
// BAGKEEPER_SOAK_DURATION sets the length of the workload (default 40s);
// BAGKEEPER_LINEARIZABLE_SEED replays the nemesis's and the clients' random
// choices (the timing of the processes is not replayed). A violation leaves
// porcupine's visualization and the history as text in the test's artifact
// directory (kept with go test -artifacts).
func TestLinearizableBagsUnderFaults(t *testing.T) {
	dur := linWorkload
	if s := os.Getenv("BAGKEEPER_SOAK_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Fatalf("BAGKEEPER_SOAK_DURATION=%q: want a positive duration such as 10m", s)
		}
		dur = d
	}
	seed := rand.Uint64()
	if s := os.Getenv("BAGKEEPER_LINEARIZABLE_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("BAGKEEPER_LINEARIZABLE_SEED=%q: %v", s, err)
		}
	}
	t.Logf("seed %d (BAGKEEPER_LINEARIZABLE_SEED=%d replays the random choices), workload %v", seed, seed, dur)

	c := newCluster(t)
	pods := c.startCluster(3)
	v := c.waitOneCluster(startTimeout, "before the workload", wantVoters(3))
	rel, err := c.leaderPod(v).ensureRelation(&adminpb.EnsureRelationRequest{Endpoint: "db", Interface: "pgsql", RemoteApp: "pg", RemoteEndpoint: "database"})
	if err != nil {
		t.Fatalf("creating the relation: %v", err)
	}

	h := newHistory()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	stopClients := func() { cancel(); wg.Wait() }
	defer stopClients()
	for i := range linClients {
		cl := &linClient{id: i, c: c, h: h, rel: rel, rng: rand.New(rand.NewPCG(seed, uint64(i)+1))}
		wg.Go(func() { cl.run(ctx) })
	}
	n := &nemesis{t: t, c: c, pods: pods, h: h, rng: rand.New(rand.NewPCG(seed, 0)), done: map[string]int{}}
	healErr := n.run(dur)
	stopClients()
	if healErr != nil {
		// Liveness, not safety: report it, and check what was recorded.
		t.Errorf("the nemesis stopped: %v", healErr)
	}

	ops, faults, dropped := h.snapshot()
	var writes, unknown, reads int
	for _, o := range ops {
		switch {
		case o.unknown:
			unknown++
		case o.write:
			writes++
		default:
			reads++
		}
	}
	t.Logf("history: %d acknowledged writes, %d writes of unknown outcome, %d reads (%d failed reads left out); faults: %v",
		writes, unknown, reads, dropped, n.done)
	if writes < 20 || reads < 20 {
		t.Fatalf("too few operations completed to check anything (%d writes, %d reads)", writes, reads)
	}

	res, err := checkHistory(ops, faults, max(time.Minute, dur), t.ArtifactDir())
	if err != nil {
		t.Error(err)
	}
	t.Logf("porcupine: %s in %v", res.result, res.took.Round(time.Millisecond))
	switch res.result {
	case porcupine.Ok:
	case porcupine.Unknown:
		t.Fatalf("porcupine could not decide within its timeout (seed %d); visualization: %s", seed, res.viz)
	default:
		var why string
		for _, s := range res.stale {
			why += "\n  " + s
		}
		t.Fatalf("bag reads and writes are not linearizable (seed %d)%s\nvisualization: %s (go test -artifacts keeps it)", seed, why, res.viz)
	}
}

// history records the operations of concurrent clients and the nemesis's
// faults, with monotonic timestamps.
type history struct {
	start time.Time

	mu           sync.Mutex
	ops          []histOp
	processes    int
	droppedReads int
	faults       []porcupine.Annotation
}

func newHistory() *history { return &history{start: time.Now()} }

// now is the current history timestamp (time.Since uses the monotonic
// clock).
func (h *history) now() int64 { return int64(time.Since(h.start)) }

// newProcess returns a process number no client used yet.
func (h *history) newProcess() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.processes++
	return h.processes - 1
}

func (h *history) add(o histOp) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, o)
}

// dropRead counts a read that failed: it observed nothing and is left out.
func (h *history) dropRead() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.droppedReads++
}

func (h *history) annotate(a porcupine.Annotation) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.faults = append(h.faults, a)
}

func (h *history) snapshot() ([]histOp, []porcupine.Annotation, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.ops), slices.Clone(h.faults), h.droppedReads
}

// linClient is one client of the workload: it writes or reads one key of a
// bag at a time through a running member chosen at random.
type linClient struct {
	id  int
	c   *cluster
	h   *history
	rel int64
	rng *rand.Rand
}

func (cl *linClient) run(ctx context.Context) {
	process := cl.h.newProcess()
	for seq := 0; ctx.Err() == nil; seq++ {
		pods := cl.c.runningPods()
		if len(pods) == 0 {
			cl.think(ctx)
			continue
		}
		p := pods[cl.rng.IntN(len(pods))]
		k := linKeys[cl.rng.IntN(len(linKeys))]
		op := histOp{process: process, key: k.owner + ":" + k.key, member: p.name}
		if cl.rng.IntN(2) == 0 {
			op.write, op.value = true, fmt.Sprintf("c%d-%d", cl.id, seq)
			op.call = cl.h.now()
			err := p.setBag(linOpTimeout, cl.rel, k.owner, map[string]string{k.key: op.value})
			op.ret = cl.h.now()
			if err != nil {
				// It may have committed, or still commit: the
				// completion is unknown, and this process may not
				// issue another operation. The client goes on as a
				// new process.
				op.unknown, op.note = true, status.Code(err).String()
				process = cl.h.newProcess()
			}
			cl.h.add(op)
		} else {
			op.call = cl.h.now()
			val, noRelation, err := cl.read(p, k.owner, k.key)
			op.ret = cl.h.now()
			if err != nil {
				cl.h.dropRead()
			} else {
				op.value = val
				if noRelation {
					op.note = "relation not found"
				}
				cl.h.add(op)
			}
		}
		cl.think(ctx)
	}
}

// read returns a key of a bag as the member answers it, "" when unset. A
// member whose state does not have the relation yet (it was created before
// the workload) observed the state before it: every key unset (noRelation).
func (cl *linClient) read(p *pod, owner, key string) (val string, noRelation bool, err error) {
	err = p.adminCall(linOpTimeout, func(ctx context.Context, c adminpb.AdminClient) error {
		r, err := c.GetBags(ctx, &adminpb.GetBagsRequest{RelationId: cl.rel, Owner: owner})
		if status.Code(err) == codes.NotFound {
			noRelation = true
			return nil
		}
		if err != nil {
			return err
		}
		for _, b := range r.GetBags() {
			if b.GetOwner() == owner {
				val = b.GetData()[key]
			}
		}
		return nil
	})
	return val, noRelation, err
}

// think waits up to 20ms between operations (part of the workload).
func (cl *linClient) think(ctx context.Context) {
	t := time.NewTimer(time.Duration(cl.rng.IntN(20)) * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// nemesis injects one fault at a time into a 3-member cluster and waits for
// the cluster to heal after each.
type nemesis struct {
	t    *testing.T
	c    *cluster
	pods []*pod
	h    *history
	rng  *rand.Rand
	done map[string]int // faults injected, by kind
}

const (
	faultKill  = "kill"
	faultPause = "pause"
	faultWipe  = "wipe"
)

// run injects faults until d has passed and every kind of fault was
// injected at least once, each after a quiet period of normal operation.
// It returns an error if the cluster does not heal after a fault.
func (n *nemesis) run(d time.Duration) error {
	end := time.Now().Add(d)
	kinds := []string{faultKill, faultPause, faultWipe}
	for round := 0; ; round++ {
		for _, i := range n.rng.Perm(len(kinds)) {
			n.sleep(n.between(500*time.Millisecond, 3*time.Second))
			if round > 0 && !time.Now().Before(end) {
				return nil
			}
			if err := n.inject(kinds[i]); err != nil {
				return err
			}
		}
	}
}

func (n *nemesis) inject(kind string) error {
	// The leader now, for the faults that aim at it.
	var leader *pod
	if v, problem := n.c.observeCluster(); problem == "" {
		for _, p := range n.pods {
			if v.selfOf(p) == v.leader {
				leader = p
			}
		}
	}
	leaderOdds := map[string]float64{faultKill: 0.5, faultPause: 0.67, faultWipe: 0.34}[kind]
	target := n.pick(leader, leaderOdds)
	role := "follower"
	if target == leader {
		role = "leader"
	} else if leader == nil {
		role = "leader unknown"
	}

	var desc string
	start := n.h.now()
	switch kind {
	case faultKill:
		down := n.between(0, 3*time.Second)
		desc = fmt.Sprintf("kill -9 %s (%s), restart after %v", target.name, role, down)
		n.logf("%s", desc)
		target.kill()
		n.sleep(down)
		target.start()
	case faultPause:
		hold := n.between(200*time.Millisecond, 4*time.Second)
		desc = fmt.Sprintf("SIGSTOP %s (%s), SIGCONT after %v", target.name, role, hold)
		n.logf("%s", desc)
		target.pause()
		n.sleep(hold)
		target.resume()
	case faultWipe:
		down := n.between(0, 2*time.Second)
		desc = fmt.Sprintf("kill -9 %s (%s), wipe its volume, restart after %v", target.name, role, down)
		n.logf("%s", desc)
		target.kill()
		target.wipe()
		n.sleep(down)
		target.start()
	}
	undone := n.h.now()
	n.done[kind]++
	err := n.heal(desc)
	healed := n.h.now()
	details := fmt.Sprintf("fault lifted at %s, healed at %s", stamp(undone), stamp(healed))
	if err != nil {
		details = fmt.Sprintf("fault lifted at %s, not healed by %s", stamp(undone), stamp(healed))
	}
	n.h.annotate(porcupine.Annotation{Tag: "nemesis", Start: start, End: undone, Description: desc, Details: details,
		BackgroundColor: map[string]string{faultKill: "#f4cccc", faultPause: "#fff2cc", faultWipe: "#d9d2e9"}[kind]})
	if err == nil {
		n.logf("healed %v after the fault was lifted", time.Duration(healed-undone).Round(time.Millisecond))
	}
	return err
}

// pick returns the leader with probability odds (when known), otherwise
// another pod at random.
func (n *nemesis) pick(leader *pod, odds float64) *pod {
	aimAtLeader := n.rng.Float64() < odds
	var others []*pod
	for _, p := range n.pods {
		if p != leader {
			others = append(others, p)
		}
	}
	other := others[n.rng.IntN(len(others))]
	if aimAtLeader && leader != nil {
		return leader
	}
	return other
}

// heal waits until every pod runs and is ready, and they form one cluster
// of three voters.
func (n *nemesis) heal(after string) error {
	return poll(startTimeout, "the cluster to heal after: "+after, func() (bool, string) {
		for _, p := range n.pods {
			if !p.running() {
				return false, p.name + " is not running" + exitNote(p)
			}
			if code, body := p.readyz(); code != http.StatusOK {
				return false, fmt.Sprintf("%s: /readyz %d %s", p.name, code, body)
			}
		}
		v, problem := n.c.observeCluster()
		if problem != "" {
			return false, problem
		}
		for _, chk := range []viewCheck{wantVoters(3), wantMembers(3)} {
			if p := chk(v); p != "" {
				return false, p + "\n  view: " + v.String()
			}
		}
		return true, ""
	})
}

// between returns a random duration in [lo, hi), in milliseconds.
func (n *nemesis) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(n.rng.Int64N(int64((hi-lo)/time.Millisecond)))*time.Millisecond
}

// sleep waits: the nemesis's randomized pauses are part of the workload,
// not a synchronisation.
func (n *nemesis) sleep(d time.Duration) { time.Sleep(d) }

func (n *nemesis) logf(format string, args ...any) {
	n.t.Helper()
	n.t.Logf("%s nemesis: %s", stamp(n.h.now()), fmt.Sprintf(format, args...))
}
