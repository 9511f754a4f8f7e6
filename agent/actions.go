package agent

// Actions (Juju's actions.yaml): the operator queues an action for a unit
// in the store (raftstore/state/actions.go); the unit's agent runs its
// unit's actions between hooks, one at a time, in the order they were
// queued, through the same Runner as hooks. Before the action's process
// starts, its start is committed, fenced with the unit's claim; the end
// (status, message, results, the log not committed yet) is committed
// together with the action's buffered writes (state-set, relation-set, ...)
// when the process has exited. An agent that finds its unit's action
// running from an earlier life (its pod died, or another pod took the unit
// over) fails it with a message saying so, and never runs it again.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/bagkeeper/bagkeeper/agent/hooktools"
	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

// ActionAbortedMessage is the message of an action whose unit's agent
// stopped while it ran (its pod was killed, say): the action may have done
// part of its work, and is not run again.
const ActionAbortedMessage = "the unit's agent stopped while the action was running (its pod died or was replaced); the action was not run again"

// MaxActionOutput bounds what is kept of an action's stdout and of its
// stderr, each, in its results.
const MaxActionOutput = 16 << 10

// actionRun is the action a hookContext runs.
type actionRun struct {
	id         int64
	name       string
	paramsJSON []byte

	mu      sync.Mutex
	results map[string]any
	message string
	failed  bool
	// unlogged holds the action-log lines not committed yet; logged counts
	// every line, committed or not.
	unlogged []state.ActionLogLine
	logged   int
}

var _ hooktools.ActionContext = (*hookContext)(nil)

// ActionParams returns the action's parameters, numbers as int64 where
// they are whole, else float64.
func (c *hookContext) ActionParams() (map[string]any, error) {
	if c.action == nil {
		return nil, hooktools.ErrNotAction
	}
	return decodeParams(c.action.paramsJSON)
}

func decodeParams(data []byte) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return nil, fmt.Errorf("action parameters: %w", err)
	}
	if m == nil {
		m = map[string]any{}
	}
	return plainNumbers(m).(map[string]any), nil
}

func plainNumbers(v any) any {
	switch v := v.(type) {
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return i
		}
		f, _ := v.Float64()
		return f
	case map[string]any:
		for k, x := range v {
			v[k] = plainNumbers(x)
		}
	case []any:
		for i, x := range v {
			v[i] = plainNumbers(x)
		}
	}
	return v
}

func (c *hookContext) UpdateActionResults(keys []string, value string) error {
	r := c.action
	if r == nil {
		return hooktools.ErrNotAction
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	next := deepCopy(r.results)
	hooktools.SetActionResult(next, keys, value)
	b, err := json.Marshal(next)
	if err != nil {
		return err
	}
	// Room is kept for the output (base64 at worst) and return code the
	// agent adds.
	if limit := state.MaxActionResults - 2*base64.StdEncoding.EncodedLen(MaxActionOutput) - 1024; len(b) > limit {
		return fmt.Errorf("action results would be %d bytes, over the %d byte limit", len(b), limit)
	}
	r.results = next
	return nil
}

func deepCopy(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok {
			v = deepCopy(sub)
		}
		out[k] = v
	}
	return out
}

// LogActionMessage commits the message at once, so that it shows while
// the action runs; one that could not be committed goes with the end.
func (c *hookContext) LogActionMessage(message string) error {
	r := c.action
	if r == nil {
		return hooktools.ErrNotAction
	}
	if len(message) > state.MaxActionMessage {
		return fmt.Errorf("action log message of %d bytes is over the %d byte limit", len(message), state.MaxActionMessage)
	}
	r.mu.Lock()
	if r.logged >= state.MaxActionLogLines {
		r.mu.Unlock()
		return fmt.Errorf("the action's log is full: it holds at most %d messages", state.MaxActionLogLines)
	}
	r.logged++
	line := state.ActionLogLine{Time: c.a.now(), Message: message}
	lines := append(r.unlogged, line)
	r.unlogged = nil
	r.mu.Unlock()
	if _, err := c.apply(state.LogActionOp(r.id, lines)); err != nil {
		c.log.Warn("action log message not committed yet; it will be with the action's end", "err", err)
		r.mu.Lock()
		r.unlogged = append(lines, r.unlogged...)
		r.mu.Unlock()
	}
	c.Log("INFO", message)
	return nil
}

func (c *hookContext) SetActionMessage(message string) error {
	r := c.action
	if r == nil {
		return hooktools.ErrNotAction
	}
	if len(message) > state.MaxActionMessage {
		return fmt.Errorf("action message of %d bytes is over the %d byte limit", len(message), state.MaxActionMessage)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.message = message
	return nil
}

func (c *hookContext) SetActionFailed() error {
	r := c.action
	if r == nil {
		return hooktools.ErrNotAction
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
	return nil
}

// runNextAction runs, or resolves, the next action of unit as of st, if
// it has one; it reports whether it had one (the caller then decides
// again from the state that follows). Errors are logged here.
func (a *Agent) runNextAction(ctx context.Context, st *state.State, unit string) bool {
	act, ok := st.NextAction(unit)
	if !ok {
		return false
	}
	log := a.logger().With("action", act.Name, "action_id", act.ID)
	fence := a.fence(st, unit)
	var err error
	switch {
	case act.Status == state.ActionRunning:
		// Started by an earlier life of this unit's agent, which stopped
		// before committing its end: it may have run in part, or whole.
		msg := ActionAbortedMessage
		if act.Pod != "" {
			msg += fmt.Sprintf(" (it started at %s in pod %s)", act.Started.UTC().Format(time.RFC3339), act.Pod)
		}
		log.Warn("an action was running when this unit's agent last stopped; it is failed, not run again", "pod", act.Pod, "started", act.Started)
		_, err = a.applyFenced(ctx, fence, state.FinishActionOp(act.ID, state.ActionFailed, msg, nil, nil))
	case act.Name == state.ExecAction:
		err = a.runAction(ctx, st, act, fence, log)
	case a.cfg.Charm.Actions[act.Name] == nil:
		_, err = a.applyFenced(ctx, fence, state.FinishActionOp(act.ID, state.ActionFailed,
			fmt.Sprintf("the charm has no action %q (its actions.yaml changed since the action was queued?)", act.Name), nil, nil))
	default:
		err = a.runAction(ctx, st, act, fence, log)
	}
	if err != nil && ctx.Err() == nil && !errors.Is(err, errNotHeld) {
		log.Error("action", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	return true
}

// runAction starts a pending action, runs it and commits its end.
func (a *Agent) runAction(ctx context.Context, st *state.State, act *state.Action, fence *storepb.Fence, log *slog.Logger) error {
	unit := act.Unit
	dispatch := "actions/" + act.Name
	isExec := act.Name == state.ExecAction
	var cmd execParams
	if isExec {
		// bagkeeper exec (exec.go): a command instead of the charm's code.
		var err error
		if cmd, err = parseExecParams(act.ParamsJSON); err != nil {
			_, err := a.applyFenced(ctx, fence, state.FinishActionOp(act.ID, state.ActionFailed, err.Error(), nil, nil))
			return err
		}
		dispatch = state.ExecAction
	} else if path, err := hookPath(a.cfg.Charm.Dir, dispatch); err == nil && path == "" {
		_, err := a.applyFenced(ctx, fence, state.FinishActionOp(act.ID, state.ActionFailed, fmt.Sprintf("action not implemented on unit %q", unit), nil, nil))
		return err
	}
	if _, err := a.applyFenced(ctx, fence, state.StartActionOp(act.ID, a.cfg.Member, a.cfg.Pod)); err != nil {
		return fmt.Errorf("starting the action: %w", err)
	}
	h := Hook{Name: act.Name + "-action"}
	if isExec {
		h.Name = state.ExecAction
	}
	// The action sees the unit's relations as its last hook left them.
	if cur, err := DecodeCursor(st.Cursor(unit)); err == nil {
		h.Next = cur
	}
	id := unit + "-" + h.FullName() + "-" + randomID()
	hc := newHookContext(a, id, unit, h, st)
	run := &actionRun{id: act.ID, name: act.Name, paramsJSON: act.ParamsJSON, results: map[string]any{}}
	env := a.hookEnv(hc)
	// As Juju: an action has no JUJU_HOOK_NAME; dispatch learns it from
	// JUJU_DISPATCH_PATH (ops: "actions/<name>" is the <name>_action event).
	delete(env, "JUJU_HOOK_NAME")
	hr := HookRun{ContextID: id, Hook: dispatch, Dir: a.cfg.Charm.Dir, Env: env}
	if isExec {
		// A command runs in the unit's hook context, but not in an
		// action's: no JUJU_ACTION_*, no dispatch path, and the action
		// tools refuse (exec.go).
		delete(env, "JUJU_DISPATCH_PATH")
		hr.Command, hr.Timeout = cmd.Command, cmd.timeout()
		log.Info("running a command (bagkeeper exec)", "timeout", hr.Timeout)
	} else {
		hc.action = run
		env["JUJU_DISPATCH_PATH"] = dispatch
		env["JUJU_ACTION_NAME"] = act.Name
		env["JUJU_ACTION_UUID"] = strconv.FormatInt(act.ID, 10)
		env["JUJU_ACTION_TAG"] = "action-" + strconv.FormatInt(act.ID, 10)
		log.Info("running action")
	}
	a.running.Store(hc)
	start := a.now()
	res := a.cfg.Runner.Run(ctx, hr)
	a.running.Store(nil)
	ran := a.now()

	run.mu.Lock()
	results := deepCopy(run.results)
	status, message := state.ActionCompleted, ""
	if run.failed {
		status, message = state.ActionFailed, run.message
	}
	lines := run.unlogged
	run.mu.Unlock()
	switch {
	case res.Err != nil && ctx.Err() != nil:
		status, message = state.ActionFailed, "the unit's agent stopped while the action was running (its pod is stopping): "+res.Err.Error()
	case res.Err != nil:
		status, message = state.ActionFailed, res.Err.Error()
	case res.ExitCode != 0:
		status, message = state.ActionFailed, fmt.Sprintf("exit status %d", res.ExitCode)
	}
	if res.Err == nil {
		results["return-code"] = res.ExitCode
	}
	addOutput(results, "stdout", res.Stdout)
	addOutput(results, "stderr", res.Stderr)
	resultsJSON, err := json.Marshal(results)
	if err != nil {
		return err
	}
	finish := state.FinishActionOp(act.ID, status, message, resultsJSON, lines)
	var ops []*storepb.Op
	if res.Err == nil && res.ExitCode == 0 {
		// As a hook's, the action's writes commit only if it exited 0.
		ops = a.dropGoneRelations(hc.ops(), h)
	}
	for attempt := 0; ; attempt++ {
		_, err = a.applyFenced(context.Background(), fence, append(ops, finish)...)
		if err == nil || errors.Is(err, errNotHeld) || ctx.Err() != nil {
			break
		}
		var refused *state.CommandError
		switch {
		case errors.As(err, &refused) && len(ops) > 0:
			// Its writes were refused (a deposed leader's application
			// data, say): the action fails, and says why.
			why := err.Error()
			if isNotLeader(err) {
				why = "this unit is no longer the leader"
			}
			log.Warn("the action's writes were refused", "err", err)
			ops = nil
			finish = state.FinishActionOp(act.ID, state.ActionFailed, "the action's changes were not committed: "+why, resultsJSON, lines)
			continue
		case errors.As(err, &refused) && resultsJSON != nil:
			// Its results were refused (output that grew past the limit
			// once encoded, say): the action fails without them.
			log.Warn("the action's results were refused", "err", err)
			resultsJSON, lines = nil, nil
			finish = state.FinishActionOp(act.ID, state.ActionFailed, "the action's results were not committed: "+err.Error(), nil, nil)
			continue
		case errors.As(err, &refused):
			return fmt.Errorf("the action's end was refused: %w", err)
		}
		log.Warn("committing the action's end; retrying", "err", err, "attempt", attempt)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	if err != nil {
		return fmt.Errorf("the action's end was not committed: %w", err)
	}
	// Someone may wait for the end through another member: let the
	// followers learn of it now.
	if n, ok := a.node.(interface{ NudgeFollowers() }); ok {
		n.NudgeFollowers()
	}
	log.Info("action committed", "status", status, "writes", len(ops),
		"run_ms", float64(ran.Sub(start).Microseconds())/1000, "commit_ms", float64(a.now().Sub(ran).Microseconds())/1000)
	return nil
}

// addOutput puts an action's output in its results as Juju does: as
// text, or base64 with an "-encoding" key when it is not UTF-8.
func addOutput(results map[string]any, key string, out []byte) {
	if len(out) == 0 {
		return
	}
	if utf8.Valid(out) {
		results[key] = string(out)
		return
	}
	results[key] = base64.StdEncoding.EncodeToString(out)
	results[key+"-encoding"] = "base64"
}

// actionCapture keeps an action's stdout and stderr while they are logged
// as a hook's output is.
type actionCapture struct {
	reader         *io.PipeReader
	stdout, stderr *limitedBuffer
}

// captureActionOutput sets cmd up to keep its output if h runs an action
// or a command (exec.go); it returns nil for a hook. The returned function
// closes the log pipe once the process has exited.
func captureActionOutput(cmd *exec.Cmd, h HookRun) (*actionCapture, func()) {
	if h.Env["JUJU_ACTION_NAME"] == "" && h.Command == "" {
		return nil, func() {}
	}
	pr, pw := io.Pipe()
	c := &actionCapture{reader: pr, stdout: &limitedBuffer{max: MaxActionOutput}, stderr: &limitedBuffer{max: MaxActionOutput}}
	cmd.Stdout = io.MultiWriter(pw, c.stdout)
	cmd.Stderr = io.MultiWriter(pw, c.stderr)
	return c, func() { _ = pw.Close() }
}

// result is the output kept (a zero result for nil).
func (c *actionCapture) result() HookResult {
	if c == nil {
		return HookResult{}
	}
	return HookResult{Stdout: c.stdout.bytes(), Stderr: c.stderr.bytes()}
}

// limitedBuffer keeps the first max bytes written to it.
type limitedBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - len(b.buf); room > 0 {
		b.buf = append(b.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (b *limitedBuffer) bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf)
}
