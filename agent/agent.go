// Package agent is the unit agent: it decides which hook to run next from
// the replicated state (resolver.go), runs it (runner.go) in a hook context
// whose writes are committed in one raft command together with the event
// cursor (context.go), and serves the hook tools on a local Unix socket
// (server.go). It holds the application leadership lease while its member
// leads the raft group (leader.go).
package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

// Store is what the agent needs of the raft member.
type Store interface {
	State() *state.State
	Changed() <-chan struct{}
	Apply(ctx context.Context, cmd *storepb.Command) (*storepb.Result, error)
	IsLeader() bool
}

// Config configures an Agent.
type Config struct {
	Store Store
	// Unit returns the unit this pod holds ("" while it holds none).
	Unit func() string
	// Ready reports whether the member has caught up with the cluster;
	// no hook runs before it has (nil: always).
	Ready func() (bool, string)
	// Member is this pod's raft member id (it holds the lease).
	Member string
	// Pod identifies this pod instance (a new value = a replaced pod).
	Pod string

	Charm *Charm
	// ConfigFile holds the operator's charm config settings (YAML); it is
	// re-read whenever ConfigChanged fires.
	ConfigFile    string
	ConfigChanged <-chan struct{}

	// Listener serves the hook tools: a Unix socket at Socket (the path
	// hooks are given). The caller creates and closes it. ToolsDir holds
	// the tool symlinks, pointing at ToolBinary.
	Listener   net.Listener
	Socket     string
	ToolsDir   string
	ToolBinary string
	// AllowedUIDs may use the socket besides the agent's own user (and
	// root).
	AllowedUIDs []int
	// allowUID, if set, decides instead which users may use the socket
	// (tests).
	allowUID func(uid int) bool

	// Runner runs hooks (default: a local runner in this process).
	Runner Runner
	// Metrics count the hooks run (nil: none).
	Metrics *Metrics
	// RunnerStopping is called when a remote runner says its container is
	// stopping (the pod is going away); it returns once the stop hook has
	// run through that runner. Nil: the call is answered at once.
	RunnerStopping func(ctx context.Context)

	// Address is the pod's address as charms see it (private-address).
	Address string

	ModelName        string
	ModelUUID        string
	AvailabilityZone string
	JujuVersion      string

	UpdateStatusEvery time.Duration
	// RetryDelay is the first pause before a failed hook is retried; it
	// doubles up to MaxRetryDelay.
	RetryDelay    time.Duration
	MaxRetryDelay time.Duration
	// LeaseDuration is how long the leader's lease lasts (renewed every
	// sixth of it, so that is-leader's promise outlives a pod replacement).
	// Default 60s.
	LeaseDuration time.Duration

	// SecretsKey seals and opens secret content (nil: secrets disabled;
	// see secrets.go).
	SecretsKey *SecretsKey

	Logger *slog.Logger
	Now    func() time.Time
}

// Agent is one unit's agent.
type Agent struct {
	cfg  Config
	log  *slog.Logger
	node Store

	cfgMu     sync.Mutex
	cfgValues map[string]any
	cfgHash   string

	held    atomic.Pointer[heldUnit]
	running atomic.Pointer[hookContext]
	srv     *server
	// kick wakes the hook loop (config changed).
	kick chan struct{}
	// cursorRaw and cursor are the hook loop's last decoded cursor, if
	// cursorRead (see cursorOf); only the hook loop touches them.
	cursorRaw  []byte
	cursor     Cursor
	cursorRead bool
	// quiet remembers the relations the hook loop found quiet (see
	// quietMemo); only the hook loop touches it.
	quiet *quietMemo
	// addressAt is where ensureAddress last found every bag of the unit
	// holding its address; only the hook loop touches it.
	addressAt addressMark
}

// addressMark is what ensureAddress checked: the unit, the relations,
// and the index of the latest change to the unit's bags.
type addressMark struct {
	unit      string
	relations any
	bags      uint64
}

// cursorOf returns the unit's cursor in st. The hook loop reads it after
// every entry its member applies, and a unit in many relations has a
// large cursor (94 KB with 1000 relations, 2.6 ms to decode: see
// BenchmarkDecodeCursorAtScale), which changes only when the unit's own
// hooks commit: the last decoding is reused while the stored bytes are the
// same. Nothing changes a decoded cursor in place (see dueHooks).
func (a *Agent) cursorOf(st *state.State, unit string) (Cursor, error) {
	raw := st.Cursor(unit)
	if a.cursorRead && bytes.Equal(raw, a.cursorRaw) {
		return a.cursor, nil
	}
	c, err := DecodeCursor(raw)
	if err != nil {
		return c, err
	}
	a.cursorRaw, a.cursor, a.cursorRead = raw, c, true
	return c, nil
}

// New checks the configuration and returns an agent.
func New(cfg Config) (*Agent, error) {
	if cfg.Store == nil || cfg.Unit == nil || cfg.Charm == nil || cfg.Listener == nil {
		return nil, errors.New("agent: store, unit, charm and listener are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.RetryDelay <= 0 {
		cfg.RetryDelay = 5 * time.Second
	}
	if cfg.MaxRetryDelay < cfg.RetryDelay {
		cfg.MaxRetryDelay = max(5*time.Minute, cfg.RetryDelay)
	}
	if cfg.LeaseDuration <= 0 {
		cfg.LeaseDuration = time.Minute
	}
	if cfg.LeaseDuration < 2*LeaseGuarantee {
		return nil, fmt.Errorf("agent: the lease must last at least %s so that is-leader can promise %s", 2*LeaseGuarantee, LeaseGuarantee)
	}
	if cfg.JujuVersion == "" {
		cfg.JujuVersion = "3.6.0"
	}
	if cfg.Runner == nil {
		cfg.Runner = LocalRunner{Logger: cfg.Logger}
	}
	a := &Agent{cfg: cfg, log: cfg.Logger, node: cfg.Store, kick: make(chan struct{}, 1)}
	if err := a.reloadConfig(); err != nil {
		return nil, err
	}
	srv, err := a.serve()
	if err != nil {
		return nil, err
	}
	a.srv = srv
	return a, nil
}

// Close stops serving the hook tools (after Run and Stop).
func (a *Agent) Close() { a.srv.close() }

// unit is the unit whose hooks the agent runs now, "" between units.
func (a *Agent) unit() string {
	if h := a.held.Load(); h != nil {
		return h.name
	}
	return ""
}

// logger logs with the unit whose hooks the agent runs now.
func (a *Agent) logger() *slog.Logger {
	if h := a.held.Load(); h != nil {
		return h.log
	}
	return a.log
}

func (a *Agent) now() time.Time { return a.cfg.Now() }
func (a *Agent) config() map[string]any {
	a.cfgMu.Lock()
	defer a.cfgMu.Unlock()
	out := make(map[string]any, len(a.cfgValues))
	for k, v := range a.cfgValues {
		out[k] = v
	}
	return out
}

func (a *Agent) configHash() string {
	a.cfgMu.Lock()
	defer a.cfgMu.Unlock()
	return a.cfgHash
}

// reloadConfig reads the operator's settings again. A bad file, or one
// that vanished, keeps the previous config (and is logged): a typo or a
// deleted ConfigMap must not reset every unit to the charm's defaults. A
// file missing at start is warned about, and the defaults apply until it
// appears.
func (a *Agent) reloadConfig() error {
	settings, err := ReadConfigFile(a.cfg.ConfigFile)
	a.cfgMu.Lock()
	defer a.cfgMu.Unlock()
	if errors.Is(err, ErrNoConfigFile) && a.cfgValues == nil {
		a.logger().Warn("the charm config file does not exist; the charm's defaults apply until it appears", "file", a.cfg.ConfigFile)
		settings, err = nil, nil
	}
	var values map[string]any
	if err == nil {
		values, err = a.cfg.Charm.EffectiveConfig(settings)
	}
	if err != nil {
		if a.cfgValues == nil {
			return err
		}
		if errors.Is(err, ErrNoConfigFile) {
			a.logger().Error("the charm config file vanished; the previous config stays in effect until it is back", "file", a.cfg.ConfigFile)
			return nil
		}
		a.logger().Error("charm config not reloaded; the previous config stays in effect", "err", err)
		return nil
	}
	a.cfgValues, a.cfgHash = values, ConfigHash(values)
	return nil
}

func (a *Agent) knownBinding(name string) bool {
	if name == "" {
		return a.cfg.Address != "" // the default binding
	}
	if _, ok := a.cfg.Charm.Peers[name]; ok {
		return true
	}
	for _, r := range a.node.State().Relations() {
		if r.Endpoint == name {
			return true
		}
	}
	return a.cfg.Charm.Endpoints[name]
}

// apply commits ops through raft for the unit whose hooks run now,
// waiting up to 30 seconds.
func (a *Agent) apply(ops ...*storepb.Op) (*storepb.Result, error) {
	return a.applyCtx(context.Background(), ops...)
}

// applyCtx commits ops for the unit whose hooks run now, fenced with the
// unit's current claim, within ctx and at most 30 seconds.
func (a *Agent) applyCtx(ctx context.Context, ops ...*storepb.Op) (*storepb.Result, error) {
	unit := a.unit()
	if unit == "" {
		return nil, errNotHeld
	}
	return a.applyFenced(ctx, a.fence(a.node.State(), unit), ops...)
}

// applyFenced commits ops as one command fenced with f.
func (a *Agent) applyFenced(ctx context.Context, f *storepb.Fence, ops ...*storepb.Op) (*storepb.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := state.NewCommand(ops...)
	cmd.Fence = f
	res, err := a.node.Apply(ctx, cmd)
	if errors.Is(err, state.ErrFenced) {
		return res, fmt.Errorf("%w: %w", errNotHeld, err)
	}
	return res, err
}

func isNotLeader(err error) bool { return errors.Is(err, state.ErrNotLeader) }

// Run runs the agent until ctx ends: it waits until the pod holds a unit
// and has caught up, then runs that unit's hooks (runUnit). When the pod
// stops holding the unit — another pod took it over, or the leader released
// it while this pod was unreachable — the unit's hooks stop at once, and
// the agent waits for whatever unit the pod holds next, whose life goes on
// from that unit's own cursor.
func (a *Agent) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); a.leaseLoop(ctx) }()
	go func() { defer wg.Done(); a.configLoop(ctx) }()
	defer wg.Wait()
	for ctx.Err() == nil {
		unit, err := a.waitForUnit(ctx)
		if err != nil {
			return nil
		}
		a.held.Store(&heldUnit{name: unit, log: a.log.With("unit", unit)})
		err = a.runUnit(ctx, unit)
		if err != nil {
			return err
		}
		if ctx.Err() == nil {
			// Not held any more. (When the agent stops, the unit stays
			// known: Stop runs its stop hook.)
			a.held.Store(nil)
		}
	}
	return nil
}

// heldUnit is the unit whose hooks the agent runs.
type heldUnit struct {
	name string
	log  *slog.Logger
}

// errNotHeld: this member no longer holds the unit whose hooks it ran.
var errNotHeld = errors.New("unit no longer held by this member")

// runUnit runs unit's hooks until ctx ends or the unit is no longer held by
// this member; an error ends the agent.
func (a *Agent) runUnit(ctx context.Context, unit string) error {
	log := a.logger()
	a.ensurePeerRelations(ctx)
	// The member that leads takes the lease before its first hook, so the
	// leader's install phase says leader-elected.
	a.tendLease()
	// failed is the hook that failed last, with the cursor it was decided
	// on: as in Juju, it runs again, and nothing else runs until it has
	// succeeded (unless its cursor moved on meanwhile).
	var failed *Hook
	var failedAt []byte
	// resuming: no hook has run yet in this agent's life; a hook recorded
	// as running then was interrupted, and runs before any action.
	resuming := true
	for ctx.Err() == nil {
		changed := a.node.Changed()
		st := a.node.State()
		if u, ok := st.Unit(unit); ok && u.State == state.UnitRemoved {
			a.teardown(ctx)
			<-ctx.Done()
			return nil
		}
		if why := a.notHeld(st, unit); why != "" {
			log.Warn("this pod no longer holds the unit: its hooks stop here", "why", why)
			return nil
		}
		a.ensureAddress(ctx)
		st = a.node.State()
		cur, err := a.cursorOf(st, unit)
		if err != nil {
			return err
		}
		if a.cfg.Ready != nil {
			// A member that fell behind (cut off, replaying, unable to
			// write) decides no hook from its stale state.
			if ready, why := a.cfg.Ready(); !ready {
				log.Debug("no hook while the member is not ready", "why", why)
				a.wait(ctx, changed, cur)
				continue
			}
		}
		// ---- actions (actions.go): the unit's queued actions run between
		// hooks, once the charm is installed.
		if cur.Installed && !(resuming && cur.Running != nil) && a.runNextAction(ctx, st, unit) {
			continue
		}
		// ---- end of actions ----
		if a.quiet == nil {
			a.quiet = newQuietMemo()
		}
		v := View{State: st, Unit: unit, Pod: a.cfg.Pod, ConfigHash: a.configHash(), Now: a.now(), UpdateStatusEvery: a.cfg.UpdateStatusEvery, quiet: a.quiet}
		h, ok := Next(v, cur)
		if failed != nil && bytes.Equal(failedAt, st.Cursor(unit)) {
			h, ok = *failed, true
		}
		failed, failedAt = nil, nil
		if r := cur.Running; r != nil && (!ok || h.ID() != *r) {
			// A hook was interrupted (its pod died with it): as in Juju,
			// it runs again before any other, if it is still due.
			// In a new pod it runs before the pod-churn sequence, which
			// follows it.
			dv := v
			if cur.Started && cur.Churn == "" {
				dv.Pod = cur.Pod
			}
			if rh, due := Due(dv, cur, *r); due {
				log.Info("running first the hook that was interrupted", "hook", r.String())
				h, ok = rh, true
			}
		}
		resuming = false
		if !ok {
			a.wait(ctx, changed, cur)
			continue
		}
		if r := cur.Running; r == nil || *r != h.ID() {
			// Record the hook before running it. (Usually the previous
			// hook's commit recorded it already: see recordNext.)
			if st, err = a.recordRunning(ctx, st, cur, h); err != nil {
				if ctx.Err() != nil {
					break
				}
				log.Warn("could not record the hook about to run; deciding again", "hook", h.FullName(), "err", err)
				select {
				case <-ctx.Done():
				case <-time.After(a.cfg.RetryDelay):
				}
				continue
			}
		}
		a.recordNext(v, &h)
		if err := a.runHook(ctx, context.Background(), h, st); err != nil {
			if ctx.Err() != nil {
				break
			}
			if errors.Is(err, errNotHeld) {
				// Removed, released or taken over meanwhile: the top of the
				// loop says which, and acts on it.
				log.Warn("the hook's changes were refused: this pod no longer holds the unit", "hook", h.FullName(), "err", err)
				continue
			}
			// Retry requests committed from now on are for this failure.
			seen := a.node.State().UnitExtra(unit).RetryRequests
			attempt := a.failedAttempt(h)
			delay := a.retryDelay(attempt)
			log.Error("hook failed; retrying", "hook", h.FullName(), "err", err, "attempt", attempt, "retry_in", delay.String())
			a.setHookError(h, err, attempt, a.now().Add(delay))
			failed, failedAt = &h, st.Cursor(unit)
			a.waitToRetry(ctx, unit, h, delay, seen)
			continue
		}
	}
	return nil
}

// failedAttempt is which attempt of consecutive failures of h the one that
// just failed is: one more than the state records for h, else 1.
func (a *Agent) failedAttempt(h Hook) int {
	if e := a.node.State().UnitExtra(a.unit()); e.HookError == h.FullName() && e.HookErrorAttempt > 0 {
		return e.HookErrorAttempt + 1
	}
	return 1
}

// retryDelay is the pause after a hook's attempt-th consecutive failure:
// RetryDelay, doubling after each failure up to MaxRetryDelay.
func (a *Agent) retryDelay(attempt int) time.Duration {
	d := a.cfg.RetryDelay
	for i := 1; i < attempt && d < a.cfg.MaxRetryDelay; i++ {
		d *= 2
	}
	return min(d, a.cfg.MaxRetryDelay)
}

// waitToRetry waits out the backoff of failed hook h, ending early when an
// operator asks for a retry (the unit's retry counter moves past seen:
// bagkeeper unit retry) or when this member no longer holds the unit.
func (a *Agent) waitToRetry(ctx context.Context, unit string, h Hook, delay time.Duration, seen uint64) {
	timer := time.NewTimer(delay)
	defer timer.Stop()
	for {
		changed := a.node.Changed()
		st := a.node.State()
		if n := st.UnitExtra(unit).RetryRequests; n != seen {
			a.logger().Info("retrying the failed hook now, as an operator asked", "hook", h.FullName())
			return
		}
		if a.notHeld(st, unit) != "" {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
			return
		case <-changed:
		}
	}
}

// recordRunning commits the record that h is about to run (Cursor.Running)
// and returns the state holding it.
func (a *Agent) recordRunning(ctx context.Context, st *state.State, cur Cursor, h Hook) (*state.State, error) {
	unit := a.unit()
	rec := cur.clone()
	id := h.ID()
	rec.Running = &id
	if _, err := a.applyFenced(ctx, a.fence(st, unit), state.AdvanceCursorOp(unit, st.Cursor(unit), rec.Encode())); err != nil {
		return nil, err
	}
	return a.node.State(), nil
}

// recordNext sets the record of h's commit (h.Next.Running) to the hook due
// after h as the unit's state stands now, so that the next hook is
// recorded before it runs without a commit of its own; nil when none is.
func (a *Agent) recordNext(v View, h *Hook) {
	h.Next.Running = nil
	if next, ok := Next(v, h.Next); ok {
		id := next.ID()
		h.Next.Running = &id
	}
}

// notHeld says why unit is not held by this member in st, or "" if it is.
func (a *Agent) notHeld(st *state.State, unit string) string {
	u, ok := st.Unit(unit)
	switch {
	case !ok:
		return "the unit does not exist"
	case u.State != state.UnitActive:
		return fmt.Sprintf("the unit was %s (%s)", u.State, u.Reason)
	case u.Member != a.cfg.Member:
		return fmt.Sprintf("the unit was taken over by %s (pod %s) at %s", u.Member, u.Pod, u.Claimed.UTC().Format(time.RFC3339))
	}
	return ""
}

// fence is the claim under which this member makes commands for unit, as
// of st: a command fenced so is refused once another member took the unit
// over.
func (a *Agent) fence(st *state.State, unit string) *storepb.Fence {
	f := &storepb.Fence{Unit: unit, MemberId: a.cfg.Member}
	if u, ok := st.Unit(unit); ok {
		f.Epoch = u.Epoch
	}
	return f
}

// wait blocks until something may have made a hook due.
func (a *Agent) wait(ctx context.Context, changed <-chan struct{}, cur Cursor) {
	var timer <-chan time.Time
	if a.cfg.UpdateStatusEvery > 0 {
		due := time.Unix(0, cur.UpdateStatus).Add(a.cfg.UpdateStatusEvery)
		timer = time.After(max(due.Sub(a.now()), time.Millisecond))
	}
	select {
	case <-ctx.Done():
	case <-changed:
	case <-a.kick:
	case <-timer:
	case <-time.After(10 * time.Second):
		// Leadership promises expire with time alone; look again now and then.
	}
}

// waitForUnit waits until the pod holds a unit, held by this member in the
// replicated state, and the member has caught up (a member restarted on
// its old disk holds its unit in the state it restored; hooks wait until
// that state is current).
func (a *Agent) waitForUnit(ctx context.Context) (string, error) {
	for {
		changed := a.node.Changed()
		if unit := a.cfg.Unit(); unit != "" && a.notHeld(a.node.State(), unit) == "" {
			if a.cfg.Ready == nil {
				return unit, nil
			}
			if ok, _ := a.cfg.Ready(); ok {
				return unit, nil
			}
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-changed:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// ensurePeerRelations creates the peer relations of metadata.yaml.
func (a *Agent) ensurePeerRelations(ctx context.Context) {
	for ep, iface := range a.cfg.Charm.Peers {
		for ctx.Err() == nil {
			if _, err := a.apply(state.EnsureRelationOp(ep, iface, true, "", "")); err == nil {
				break
			} else {
				a.logger().Warn("creating peer relation", "endpoint", ep, "err", err)
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}
	}
}

// ensureAddress keeps the unit's address keys in each of its bags: seeded
// when the unit enters a relation, updated when its pod moves (the only
// change a move makes), put back if something else changed them. It
// looks at the bags only when the relations or the unit's bags changed
// since it last found them right: it runs after every entry the member
// applies, and at a thousand relations the look cost a follower half its
// CPU under a stream of writes to other bags.
func (a *Agent) ensureAddress(ctx context.Context) {
	if a.cfg.Address == "" {
		return
	}
	st := a.node.State()
	unit := a.unit()
	mark := addressMark{unit: unit, relations: st.RelationsVersion(), bags: st.BagsChangedAt(unit)}
	if mark == a.addressAt {
		return
	}
	want := map[string]string{"private-address": a.cfg.Address, "ingress-address": a.cfg.Address, "egress-subnets": hostCIDR(a.cfg.Address)}
	var ops []*storepb.Op
	for _, r := range st.Relations() {
		b, _ := st.Bag(r.ID, unit)
		stale := false
		for k, v := range want {
			if b == nil || b.Data.Value(k) != v {
				stale = true
			}
		}
		if stale {
			ops = append(ops, state.UpdateBagOp(r.ID, unit, want))
		}
	}
	if len(ops) == 0 {
		a.addressAt = mark
		return
	}
	if _, err := a.apply(ops...); err != nil && ctx.Err() == nil {
		a.logger().Warn("updating the unit's address in its bags", "err", err)
	}
}

// runHook runs one hook and commits its writes with the cursor advance
// within commitCtx (a hook that ran to the end commits even while the
// agent is being stopped).
func (a *Agent) runHook(ctx, commitCtx context.Context, h Hook, st *state.State) (err error) {
	id := a.unit() + "-" + h.FullName() + "-" + randomID()
	defer func(start time.Time) { a.cfg.Metrics.observe(h.Name, err == nil, a.now().Sub(start)) }(a.now())
	hc := newHookContext(a, id, a.unit(), h, st)
	a.running.Store(hc)
	defer a.running.Store(nil)
	env := a.hookEnv(hc)
	start := a.now()
	a.logger().Info("running hook", "hook", h.FullName(), "relation", relKey(h), "remote_unit", h.RemoteUnit)
	res := a.cfg.Runner.Run(ctx, HookRun{ContextID: id, Hook: h.FullName(), Dir: a.cfg.Charm.Dir, Env: env})
	a.running.Store(nil)
	ran := a.now()
	run := hookRun{started: start, took: ran.Sub(start), exitCode: res.ExitCode, tail: res.OutputTail}
	if res.Err != nil {
		return &hookFailure{fmt.Errorf("hook %s: %w", h.FullName(), res.Err), run}
	}
	if res.ExitCode != 0 {
		return &hookFailure{fmt.Errorf("hook %s exited with status %d", h.FullName(), res.ExitCode), run}
	}
	ops := a.dropGoneRelations(hc.ops(), h)
	// The cursor moves only from where the hook was decided: a hook decided
	// on a stale state (another agent of this unit got ahead) never commits.
	// Its entry in the unit's hook history goes with it.
	writes := len(ops)
	ops = append(ops, state.RecordHookOp(a.unit(), a.hookRecord(h, run, nil)))
	ops = append(ops, state.AdvanceCursorOp(a.unit(), st.Cursor(a.unit()), h.Next.Encode()))
	if st.UnitExtra(a.unit()).HookError != "" {
		ops = append(ops, state.SetHookErrorOp(a.unit(), "", ""))
	}
	if _, err := a.applyFenced(commitCtx, a.fence(st, a.unit()), ops...); err != nil {
		if errors.Is(err, errNotHeld) {
			return &hookFailure{fmt.Errorf("hook %s: its changes were not committed: %w", h.FullName(), err), run}
		}
		if isNotLeader(err) {
			return &hookFailure{fmt.Errorf("hook %s: its application data was not committed: this unit is no longer the leader", h.FullName()), run}
		}
		return &hookFailure{fmt.Errorf("hook %s: committing its changes: %w", h.FullName(), err), run}
	}
	a.logger().Info("hook committed", "hook", h.FullName(), "writes", writes,
		"run_ms", float64(ran.Sub(start).Microseconds())/1000, "commit_ms", float64(a.now().Sub(ran).Microseconds())/1000)
	return nil
}

// dropGoneRelations leaves out writes to relations that no longer exist:
// a hook of a removed relation (departed, broken) may still write to it,
// as in Juju, but what it writes goes with the relation.
func (a *Agent) dropGoneRelations(ops []*storepb.Op, h Hook) []*storepb.Op {
	st := a.node.State()
	out := ops[:0]
	for _, op := range ops {
		if ub := op.GetUpdateBag(); ub != nil {
			if _, ok := st.Relation(ub.GetRelationId()); !ok {
				a.logger().Info("writes to a removed relation dropped", "hook", h.FullName(), "relation", ub.GetRelationId(), "owner", ub.GetOwner())
				continue
			}
		}
		out = append(out, op)
	}
	return out
}

// hookRun is how a hook ran, for its record.
type hookRun struct {
	started  time.Time
	took     time.Duration
	exitCode int
	tail     []byte
}

// hookFailure is the error of a hook that failed, with how it ran.
type hookFailure struct {
	err error
	run hookRun
}

func (f *hookFailure) Error() string { return f.err.Error() }
func (f *hookFailure) Unwrap() error { return f.err }

// hookRecord is h's entry in the unit's hook history.
func (a *Agent) hookRecord(h Hook, run hookRun, err error) state.HookRecord {
	r := state.HookRecord{Hook: h.FullName(), Relation: relKey(h), RemoteUnit: h.RemoteUnit, OK: err == nil, ExitCode: run.exitCode,
		Started: run.started, Duration: run.took, Member: a.cfg.Member}
	if err != nil {
		r.Error = clip(err.Error(), maxRecordedError)
	}
	return r
}

// maxRecordedError bounds the error kept in a hook's history entry.
const maxRecordedError = 1 << 10

// clip cuts s to at most n bytes, at a character boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

// setHookError records h's failure — its output tail, exit status, attempt
// and when it runs again — with its entry in the unit's hook history.
func (a *Agent) setHookError(h Hook, err error, attempt int, next time.Time) {
	run := hookRun{started: a.now()}
	var hf *hookFailure
	if errors.As(err, &hf) {
		run = hf.run
	}
	tail := run.tail
	if len(tail) > state.MaxHookOutputTail {
		tail = tail[len(tail)-state.MaxHookOutputTail:]
	}
	f := state.HookFailure{OutputTail: tail, ExitCode: run.exitCode, Attempt: attempt, NextAttempt: next}
	if _, aerr := a.apply(state.FailedHookOp(a.unit(), h.FullName(), err.Error(), f), state.RecordHookOp(a.unit(), a.hookRecord(h, run, err))); aerr != nil {
		a.logger().Warn("recording the hook error", "err", aerr)
	}
}

func relKey(h Hook) string {
	if h.Relation == nil {
		return ""
	}
	return h.Relation.Key()
}

func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// configLoop re-reads the charm config when its file changes.
func (a *Agent) configLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.cfg.ConfigChanged:
		}
		before := a.configHash()
		if err := a.reloadConfig(); err != nil {
			a.logger().Error("charm config", "err", err)
			continue
		}
		if a.configHash() != before {
			a.logger().Info("charm config changed")
			select {
			case a.kick <- struct{}{}:
			default:
			}
		}
	}
}

// teardown runs the hooks of a unit that was removed while its pod runs:
// stop, relation-broken for each relation it took part in (never for peer
// relations), then remove. Nothing is committed: the unit is gone.
func (a *Agent) teardown(ctx context.Context) {
	st := a.node.State()
	a.logger().Warn("this unit was removed; running its last hooks", "unit", a.unit())
	run := func(h Hook) {
		h.StoreView = true
		hc := newHookContext(a, a.unit()+"-"+h.FullName()+"-"+randomID(), a.unit(), h, st)
		a.running.Store(hc)
		res := a.cfg.Runner.Run(ctx, HookRun{ContextID: hc.id, Hook: h.FullName(), Dir: a.cfg.Charm.Dir, Env: a.hookEnv(hc)})
		a.running.Store(nil)
		if res.Err != nil || res.ExitCode != 0 {
			a.logger().Warn("hook of a removed unit failed", "hook", h.FullName(), "exit_code", res.ExitCode, "err", res.Err)
		}
	}
	run(Hook{Name: HookStop})
	for _, r := range st.Relations() {
		if !r.Peer {
			run(Hook{Name: HookRelationBroken, Relation: r, RemoteApp: r.RemoteApp})
		}
	}
	run(Hook{Name: "remove"})
}

// Stop runs the stop hook (the pod is going away). Call it after Run has
// returned. The stop hook's writes commit like any hook's; the cursor does
// not move, so a unit whose pod comes back resumes where it was. The
// leadership lease is kept: it belongs to the unit, and a pod that comes
// back holding the unit renews it; if none does, it lapses and another
// unit is elected.
func (a *Agent) Stop(ctx context.Context) {
	unit := a.unit()
	if unit == "" {
		return
	}
	st := a.node.State()
	cur, err := DecodeCursor(st.Cursor(unit))
	if err == nil && cur.Started {
		if err := a.runHook(ctx, ctx, Hook{Name: HookStop, Next: cur}, st); err != nil {
			a.logger().Warn("stop hook failed", "err", err)
		}
	}
}
