// Package model keeps the Promela model of the unit-claim, takeover and
// membership protocol (claims.pml) and the code from drifting apart: spin's
// random simulations of the model print every command the model applies
// ("OP" lines) and the state after it ("ST" lines); the test applies the
// same commands to the real state machine and requires the same results
// and the same units, holders, epochs, lease and waiting claimants. See
// docs/architecture.md, "The model".
package model

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/state/statetest"
	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

const (
	app   = "web"
	none  = 255 // the model's "no unit", "no ordinal"
	lease = time.Minute
)

// seeds is how many random simulations of each pod kind are replayed
// (MODEL_SEEDS overrides it).
var seeds = 40

func init() {
	if n, err := strconv.Atoi(os.Getenv("MODEL_SEEDS")); err == nil && n > 0 {
		seeds = n
	}
}

// TestModelAgreesWithTheStateMachine replays spin's random simulations of
// claims.pml on the real state machine. MODEL_DEFINES adds spin -D flags
// (a mutant, say, to see the test fail).
func TestModelAgreesWithTheStateMachine(t *testing.T) {
	needTools(t, "spin")
	for _, kind := range []string{"deployment", "statefulset"} {
		t.Run(kind, func(t *testing.T) {
			outs := simulate(t, kind)
			steps, calm := 0, 0
			for i, out := range outs {
				n, c := replay(t, kind, i+1, out)
				steps += n
				if c {
					calm++
				}
			}
			if calm == 0 {
				t.Errorf("no simulation reached its calm")
			}
			t.Logf("%d commands of %d simulations (%d to their calm) agree with the state machine", steps, seeds, calm)
		})
	}
}

// TestModelWitnessAgreesWithTheStateMachine replays on the state machine a
// run through a branch of claimUnit that random simulations seldom take:
// a pod whose own unit was released (it was paused) claims it back before a
// unit released longer ago. pan finds the run (WITNESS_SAMEPOD makes
// taking that branch an "error"), spin prints it.
func TestModelWitnessAgreesWithTheStateMachine(t *testing.T) {
	needTools(t, "spin", "gcc")
	model, err := os.ReadFile("claims.pml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "claims.pml"), model, 0o644); err != nil {
		t.Fatal(err)
	}
	flags := []string{"-DFAULTS=2", "-DWITNESS_SAMEPOD"}
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil && name != "./pan" {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("spin", append(append([]string{"-a"}, flags...), "claims.pml")...)
	run("gcc", "-O1", "-w", "-DSAFETY", "-o", "pan", "pan.c")
	if out := run("./pan", "-m500000", "-c1"); !strings.Contains(out, "assertion violated  !(witnessed)") {
		t.Fatalf("pan found no run through the branch:\n%s", out)
	}
	out := run("spin", append(append([]string{"-t", "-B", "-T"}, flags...), "claims.pml")...)
	n, _ := replay(t, "deployment", 0, out, "!(witnessed)")
	t.Logf("%d commands of the witness run agree with the state machine", n)
}

// simulate runs spin's random simulations, seeds 1 to seeds, a few at a
// time, and returns what each printed. Each simulation injects up to 20
// faults before its calm, then runs until nothing is left to do.
func simulate(t *testing.T, kind string) []string {
	outs := make([]string, seeds)
	errs := make([]error, seeds)
	sem := make(chan struct{}, max(1, runtime.GOMAXPROCS(0)))
	var wg sync.WaitGroup
	model, err := filepath.Abs("claims.pml")
	if err != nil {
		t.Fatal(err)
	}
	for i := range outs {
		// spin writes its preprocessed model where it runs: one directory each.
		dir := t.TempDir()
		args := []string{fmt.Sprintf("-n%d", i+1), "-B", "-T", "-u5000000", "-DFAULTS=20", "-DLATE_CALM"}
		if kind == "statefulset" {
			args = append(args, "-DSTATEFULSET")
		}
		args = append(args, strings.Fields(os.Getenv("MODEL_DEFINES"))...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			cmd := exec.Command("spin", append(args, model)...)
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			outs[i] = string(out)
			if err != nil {
				errs[i] = fmt.Errorf("spin %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return outs
}

// replayer applies what the model printed to a real store.
type replayer struct {
	t     *testing.T
	kind  string
	s     *statetest.Store
	seen  map[int]int64 // unit -> its Released time when the reaper looked (unix ns)
	epoch map[int]uint64
	last  string // the last OP line, for messages
}

// replay applies one simulation's commands; it returns how many, and
// whether the simulation reached its calm (every unit held). A violated
// assertion fails the test unless it is the expected one (a witness run).
func replay(t *testing.T, kind string, seed int, out string, expected ...string) (int, bool) {
	t.Helper()
	r := &replayer{t: t, kind: kind, s: statetest.New(t, app), seen: map[int]int64{}, epoch: map[int]uint64{}}
	ops, calm := 0, false
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.Contains(line, "assertion violated") || strings.Contains(line, "Error:"):
			if len(expected) > 0 && strings.Count(out, "text of failed assertion") == 1 && strings.Contains(out, "text of failed assertion: assert("+expected[0]+")") {
				continue // the one expected: where the witness run ends
			}
			t.Fatalf("seed %d: the model violates an invariant: %s\n%s", seed, line, tail(out))
		case strings.HasPrefix(line, "OP "):
			r.last = line
			r.op(seed, fields(line[3:]), strings.Fields(line)[1])
			ops++
		case strings.HasPrefix(line, "ST "):
			r.compare(seed, fields(line[3:]))
			r.invariants(seed)
		case strings.HasPrefix(line, "CALM "):
			calm = true
		}
	}
	if ops == 0 {
		t.Fatalf("seed %d: the model applied no command:\n%s", seed, tail(out))
	}
	return ops, calm
}

func tail(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return strings.Join(lines[max(0, len(lines)-20):], "\n")
}

// fields parses "k=v k=v ..." (the first word, the op's name, has no "=").
func fields(s string) map[string]string {
	f := map[string]string{}
	for _, w := range strings.Fields(s) {
		if k, v, ok := strings.Cut(w, "="); ok {
			f[k] = v
		}
	}
	return f
}

func num(t *testing.T, f map[string]string, k string) int {
	t.Helper()
	v, err := strconv.Atoi(f[k])
	if err != nil {
		t.Fatalf("field %s=%q: %v", k, f[k], err)
	}
	return v
}

func unitName(n int) string { return state.UnitName(app, int64(n)) }
func member(m int) string   { return fmt.Sprintf("web-member/inc%d", m) }

func (r *replayer) pod(p int) string {
	if r.kind == "statefulset" {
		return fmt.Sprintf("%s-%d", app, p)
	}
	return fmt.Sprintf("%s-5d8f9c-%d", app, p)
}

// apply runs cmd at the next millisecond of the store's clock.
func (r *replayer) apply(cmd *storepb.Command) (*storepb.Result, error) {
	r.s.Advance(time.Millisecond)
	return r.s.Apply(context.Background(), cmd)
}

func fenced(unit, m int, epoch uint64, op *storepb.Op) *storepb.Command {
	cmd := state.NewCommand(op)
	cmd.Fence = &storepb.Fence{Unit: unitName(unit), MemberId: member(m), Epoch: epoch}
	return cmd
}

// The model's results (R_OK ...) as the state machine's errors.
var results = []error{nil, state.ErrFenced, state.ErrConflict, state.ErrNotFound, state.ErrNotLeader}

func (r *replayer) expect(seed int, err error, want int) {
	r.t.Helper()
	if want < 0 || want >= len(results) {
		r.t.Fatalf("seed %d: %s: unknown result %d", seed, r.last, want)
	}
	w := results[want]
	if (w == nil) != (err == nil) || (w != nil && !errors.Is(err, w)) {
		r.t.Fatalf("seed %d: %s: the model's result is %v, the state machine's %v", seed, r.last, w, err)
	}
}

func (r *replayer) op(seed int, f map[string]string, name string) {
	t := r.t
	t.Helper()
	switch name {
	case "claim": // sidecar.(*Sidecar).claim
		ord := int64(num(t, f, "ord"))
		if ord == none {
			ord = -1
		}
		m := num(t, f, "m")
		res, err := r.apply(state.NewCommand(state.ClaimUnitOp(member(m), r.pod(num(t, f, "pod")), ord, uint32(num(t, f, "scale")))))
		if err != nil {
			t.Fatalf("seed %d: %s: the state machine refused the claim: %v", seed, r.last, err)
		}
		got := res.GetOps()[0]
		if num(t, f, "wait") == 1 {
			if !got.GetWaiting() {
				t.Fatalf("seed %d: %s: the model waits, the state machine gave %q", seed, r.last, got.GetUnit())
			}
		} else if want := unitName(num(t, f, "res")); got.GetWaiting() || got.GetUnit() != want {
			t.Fatalf("seed %d: %s: the model claims %s, the state machine gave %q (waiting %v)", seed, r.last, want, got.GetUnit(), got.GetWaiting())
		}
	case "commit": // agent.(*Agent).applyFenced: a hook's commit
		u, m := num(t, f, "unit"), num(t, f, "m")
		ep := uint64(num(t, f, "epoch"))
		_, err := r.apply(fenced(u, m, ep, state.SetStatusOp(unitName(u), "active", fmt.Sprintf("hook of member %d", m), nil)))
		r.expect(seed, err, num(t, f, "res"))
		if err == nil {
			// Commits for one unit apply in claim order.
			if ep < r.epoch[u] {
				t.Fatalf("seed %d: %s: a commit under claim %d applied after one under claim %d", seed, r.last, ep, r.epoch[u])
			}
			r.epoch[u] = ep
		}
	case "lease": // agent.(*Agent).tendLease
		u, m := num(t, f, "unit"), num(t, f, "m")
		_, err := r.apply(fenced(u, m, uint64(num(t, f, "epoch")), state.ClaimLeaseOp(unitName(u), member(m), int64(lease))))
		r.expect(seed, err, num(t, f, "res"))
	case "expire": // the lease runs out
		l := r.s.State().Lease()
		if l.Unit == "" || !l.HeldBy(l.Unit, r.s.Now()) {
			t.Fatalf("seed %d: the model's lease runs out, the state machine's is %+v at %s", seed, l, r.s.Now())
		}
		r.s.SetNow(l.Expires)
	case "release": // sidecar.(*Sidecar).reapOnce, sidecar.(*Sidecar).shutdown
		u := num(t, f, "unit")
		_, err := r.apply(state.NewCommand(state.ReleaseUnitOp(unitName(u), member(num(t, f, "expect")), "model")))
		r.expect(seed, err, num(t, f, "res"))
	case "seen": // sidecar.(*Sidecar).reapOnce looks at a released unit
		u, ok := r.s.State().Unit(unitName(num(t, f, "unit")))
		if !ok || u.State != state.UnitReleased {
			t.Fatalf("seed %d: %s: the state machine's unit is not released: %+v", seed, r.last, u)
		}
		r.seen[num(t, f, "unit")] = u.Released.UnixNano()
	case "remove": // sidecar.(*Sidecar).reapOnce (mode 1), sidecar.(*adminServer).RemoveUnit (0: --force, 2)
		u := num(t, f, "unit")
		before := map[int]int64{0: 0, 1: r.seen[u], 2: math.MaxInt64}[num(t, f, "mode")]
		_, err := r.apply(state.NewCommand(state.RemoveUnitOp(unitName(u), before, "model")))
		r.expect(seed, err, num(t, f, "res"))
	case "forget": // sidecar.(*Sidecar).reapOnce
		if _, err := r.apply(state.NewCommand(state.ForgetClaimantOp(member(num(t, f, "m"))))); err != nil {
			t.Fatalf("seed %d: %s: %v", seed, r.last, err)
		}
	default:
		t.Fatalf("seed %d: unknown op in %q", seed, r.last)
	}
}

// compare requires the state machine's units, lease and claimants to be
// what the model printed after the last op.
func (r *replayer) compare(seed int, f map[string]string) {
	t := r.t
	st := r.s.State()
	for n := 0; ; n++ {
		v, ok := f[fmt.Sprintf("u%d", n)]
		if !ok {
			break
		}
		var w [5]int
		if _, err := fmt.Sscanf(v, "%d,%d,%d,%d,%d", &w[0], &w[1], &w[2], &w[3], &w[4]); err != nil {
			t.Fatalf("seed %d: unit %d=%q: %v", seed, n, v, err)
		}
		u, exists := st.Unit(unitName(n))
		if w[0] == 0 {
			if exists {
				t.Fatalf("seed %d: after %s: the model has no unit %d, the state machine has %+v", seed, r.last, n, u)
			}
			continue
		}
		want := fmt.Sprintf("%v member=%s pod=%s epoch=%d ordinal=%v", state.UnitState(w[0]), member(w[1]), r.pod(w[2]), w[3], w[4] == 1)
		got := "none"
		if exists {
			got = fmt.Sprintf("%v member=%s pod=%s epoch=%d ordinal=%v", u.State, u.Member, u.Pod, u.Epoch, u.ByOrdinal)
		}
		if got != want {
			t.Fatalf("seed %d: after %s: unit %s is %s in the model, %s in the state machine", seed, r.last, unitName(n), want, got)
		}
	}
	var lu, lvalid, lep int
	if _, err := fmt.Sscanf(f["lease"], "%d,%d,%d", &lu, &lvalid, &lep); err != nil {
		t.Fatalf("seed %d: lease=%q: %v", seed, f["lease"], err)
	}
	l := st.Lease()
	wantUnit := ""
	if lu != none {
		wantUnit = unitName(lu)
	}
	if l.Unit != wantUnit || l.HeldBy(l.Unit, r.s.Now()) != (lvalid == 1) || l.Epoch != uint64(lep) {
		t.Fatalf("seed %d: after %s: the model's lease is %q running=%v epoch %d, the state machine's %+v (now %s)", seed, r.last, wantUnit, lvalid == 1, lep, l, r.s.Now())
	}
	want := map[string]bool{}
	for m, c := range f["cl"] {
		if c == '1' {
			want[member(m)] = true
		}
	}
	got := map[string]bool{}
	for _, c := range st.Claimants() {
		got[c.Member] = true
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("seed %d: after %s: waiting claimants %v in the model, %v in the state machine", seed, r.last, want, got)
	}
}

// invariants checks the model's invariants on the real state.
func (r *replayer) invariants(seed int) {
	t := r.t
	st := r.s.State()
	live := 0
	for _, u := range st.Units() {
		if u.State != state.UnitRemoved {
			live++
		}
	}
	if r.kind == "deployment" && live > 2 {
		t.Fatalf("seed %d: after %s: %d units, over the declared scale 2", seed, r.last, live)
	}
	if l := st.Lease(); l.HeldBy(l.Unit, r.s.Now()) {
		if u, ok := st.Unit(l.Unit); !ok || u.State == state.UnitRemoved {
			t.Fatalf("seed %d: after %s: the lease runs for %s, which is not a unit", seed, r.last, l.Unit)
		}
	}
}

// needTools skips the test, saying why, when a tool it runs is missing
// (CI installs them: the skip is for a machine without spin).
func needTools(t *testing.T, tools ...string) {
	t.Helper()
	why := map[string]string{
		"spin": "spin is not installed (Debian: apt-get install spin): the model of the claim protocol is not replayed against the state machine",
		"gcc":  "gcc is not installed: spin's verifier cannot be built",
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skip(why[tool])
		}
	}
}
