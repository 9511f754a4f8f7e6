package state

import (
	"encoding/json"
	"time"

	iradix "github.com/hashicorp/go-immutable-radix/v2"

	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

// Actions are Juju's actions (actions.yaml): queued for one unit by an
// operator, run by that unit's agent between hooks, one at a time in the
// order they were queued. Each has a number for an id, given in order and
// never reused (Juju 3 shows tasks by number too).
//
// Life of an action: pending -> running -> completed | failed; a pending
// one may also end failed or cancelled without running. Start is
// committed, fenced with the unit's claim, before the action's process
// starts, so an agent that finds its unit's action running from an
// earlier life knows it may have run, and fails it instead of running it
// again.

// ExecAction is the action `bagkeeper exec` queues, as Juju 3 queues
// juju-exec for `juju exec`: its parameters are the command ("command", a
// string run with /bin/sh -c) and how long it may run ("timeout", in
// nanoseconds). It is no action of the charm's (actions.yaml reserves the
// juju- prefix); the agent runs the command in its unit's hook context.
const ExecAction = "juju-exec"

// Action statuses.
const (
	ActionPending   = "pending"
	ActionRunning   = "running"
	ActionCompleted = "completed"
	ActionFailed    = "failed"
	ActionCancelled = "cancelled"
)

// Limits of actions, enforced when applied.
const (
	// MaxActionParams bounds the JSON of an action's parameters.
	MaxActionParams = 64 << 10
	// MaxActionResults bounds the JSON of an action's results (action-set).
	MaxActionResults = 256 << 10
	// MaxActionMessage bounds an action's message (action-fail) and one
	// log line (action-log).
	MaxActionMessage = 4 << 10
	// MaxActionLogLines bounds the log of one action.
	MaxActionLogLines = 1000
	// MaxActionsKept is how many actions the store keeps: past it, the
	// oldest finished ones are forgotten as new ones are queued.
	MaxActionsKept = 1000
	// MaxActionsQueued bounds the actions not finished yet.
	MaxActionsQueued = 200
)

// ActionLogLine is one action-log message.
type ActionLogLine struct {
	Time    time.Time
	Message string
}

// Action is one action queued for a unit.
type Action struct {
	ID   int64
	Unit string
	Name string
	// ParamsJSON and ResultsJSON are JSON objects (ResultsJSON may be
	// empty).
	ParamsJSON  []byte
	Status      string
	Message     string
	ResultsJSON []byte
	Log         []ActionLogLine
	Enqueued    time.Time
	Started     time.Time
	Completed   time.Time
	// Member and Pod ran it (set when started).
	Member string
	Pod    string
}

// Finished reports whether the action has ended.
func (a *Action) Finished() bool {
	switch a.Status {
	case ActionCompleted, ActionFailed, ActionCancelled:
		return true
	}
	return false
}

// Action returns the action with the given id.
func (s *State) Action(id int64) (*Action, bool) {
	return s.actions.Get(numKey(id))
}

// Actions returns every action kept, ordered by id.
func (s *State) Actions() []*Action {
	var out []*Action
	walk(s.actions, func(_ []byte, a *Action) bool {
		out = append(out, a)
		return true
	})
	return out
}

// NextAction returns the unit's action to run or resolve next: the first
// of its actions, in id order, that is running (left by an earlier life of
// its agent) or pending.
func (s *State) NextAction(unit string) (*Action, bool) {
	var next *Action
	walk(s.actions, func(_ []byte, a *Action) bool {
		if a.Unit == unit && (a.Status == ActionPending || a.Status == ActionRunning) {
			next = a
			return false
		}
		return true
	})
	return next, next != nil
}

// EnqueueActionOp queues action name for unit with its parameters (a JSON
// object).
func EnqueueActionOp(unit, name string, paramsJSON []byte) *storepb.Op {
	return &storepb.Op{Op: &storepb.Op_EnqueueAction{EnqueueAction: &storepb.EnqueueAction{Unit: unit, Name: name, ParamsJson: paramsJSON}}}
}

// StartActionOp marks a pending action running, by member in pod.
func StartActionOp(id int64, member, pod string) *storepb.Op {
	return &storepb.Op{Op: &storepb.Op_StartAction{StartAction: &storepb.StartAction{Id: id, MemberId: member, Pod: pod}}}
}

// LogActionOp appends log lines to a running action.
func LogActionOp(id int64, lines []ActionLogLine) *storepb.Op {
	return &storepb.Op{Op: &storepb.Op_LogAction{LogAction: &storepb.LogAction{Id: id, Lines: logLinesToPB(lines)}}}
}

// FinishActionOp ends an action with status, message and results (a JSON
// object, or empty), appending the log lines not committed yet.
func FinishActionOp(id int64, status, message string, resultsJSON []byte, lines []ActionLogLine) *storepb.Op {
	return &storepb.Op{Op: &storepb.Op_FinishAction{FinishAction: &storepb.FinishAction{Id: id, Status: status, Message: message, ResultsJson: resultsJSON, Lines: logLinesToPB(lines)}}}
}

func logLinesToPB(lines []ActionLogLine) []*storepb.ActionLogLine {
	out := make([]*storepb.ActionLogLine, 0, len(lines))
	for _, l := range lines {
		out = append(out, &storepb.ActionLogLine{TimeUnixNano: unixNano(l.Time), Message: l.Message})
	}
	return out
}

func logLinesFromPB(lines []*storepb.ActionLogLine) []ActionLogLine {
	out := make([]ActionLogLine, 0, len(lines))
	for _, l := range lines {
		out = append(out, ActionLogLine{Time: fromUnixNano(l.GetTimeUnixNano()), Message: l.GetMessage()})
	}
	return out
}

func (t *txn) actionTxn() *iradix.Txn[*Action] {
	if t.actions == nil {
		t.actions = t.base.actions.Txn()
	}
	return t.actions
}

func (t *txn) actionRoot() *iradix.Node[*Action] {
	if t.actions != nil {
		return t.actions.Root()
	}
	return t.base.actions.Root()
}

// getAction returns a copy of an action for modification.
func (t *txn) getAction(id int64) (*Action, *CommandError) {
	var a *Action
	var ok bool
	if t.actions != nil {
		a, ok = t.actions.Get(numKey(id))
	} else {
		a, ok = t.base.actions.Get(numKey(id))
	}
	if !ok {
		return nil, opErr(storepb.ErrorCode_NOT_FOUND, "action %d not found", id)
	}
	c := *a
	c.Log = append([]ActionLogLine(nil), a.Log...)
	return &c, nil
}

func checkJSONObject(what string, data []byte, limit int) *CommandError {
	if len(data) > limit {
		return opErr(storepb.ErrorCode_TOO_LARGE, "%s of %d bytes are over the %d byte limit", what, len(data), limit)
	}
	if len(data) == 0 {
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil || m == nil {
		return opErr(storepb.ErrorCode_INVALID, "%s are not a JSON object", what)
	}
	return nil
}

func (t *txn) enqueueAction(o *storepb.EnqueueAction) (*storepb.OpResult, *CommandError) {
	u, err := t.liveUnit(o.GetUnit())
	if err != nil {
		return nil, err
	}
	if !validActionName(o.GetName()) {
		return nil, opErr(storepb.ErrorCode_INVALID, "invalid action name %q", o.GetName())
	}
	if err := checkJSONObject("action parameters", o.GetParamsJson(), MaxActionParams); err != nil {
		return nil, err
	}
	var last int64
	count, open := 0, 0
	var oldestDone []int64
	it := t.actionRoot().Iterator()
	for _, a, ok := it.Next(); ok; _, a, ok = it.Next() {
		count++
		last = a.ID
		if a.Finished() {
			oldestDone = append(oldestDone, a.ID)
		} else {
			open++
		}
	}
	if open >= MaxActionsQueued {
		return nil, opErr(storepb.ErrorCode_TOO_LARGE, "%d actions are queued or running already, the most there may be", open)
	}
	// Forget the oldest finished actions past the number kept. The newest
	// action is never forgotten here, so ids keep growing.
	for i := 0; count >= MaxActionsKept && i < len(oldestDone); i++ {
		t.actionTxn().Delete(numKey(oldestDone[i]))
		count--
	}
	params := o.GetParamsJson()
	if len(params) == 0 {
		params = []byte("{}")
	}
	a := &Action{ID: last + 1, Unit: u.Name, Name: o.GetName(), ParamsJSON: params, Status: ActionPending, Enqueued: t.now}
	t.actionTxn().Insert(numKey(a.ID), a)
	return &storepb.OpResult{ActionId: a.ID}, nil
}

// validActionName is Juju's rule for action names: lower-case letters,
// digits and hyphens, starting and ending with a letter or digit.
func validActionName(name string) bool {
	if name == "" || len(name) > 255 {
		return false
	}
	for i, c := range name {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0 && i < len(name)-1:
		default:
			return false
		}
	}
	return true
}

func (t *txn) startAction(o *storepb.StartAction) (*storepb.OpResult, *CommandError) {
	a, err := t.getAction(o.GetId())
	if err != nil {
		return nil, err
	}
	if a.Status != ActionPending {
		return nil, opErr(storepb.ErrorCode_CONFLICT, "action %d is %s, not pending", a.ID, a.Status)
	}
	a.Status, a.Started, a.Member, a.Pod = ActionRunning, t.now, o.GetMemberId(), o.GetPod()
	t.actionTxn().Insert(numKey(a.ID), a)
	return &storepb.OpResult{ActionId: a.ID}, nil
}

// appendLog adds lines to a's log, within its bounds.
func appendLog(a *Action, lines []*storepb.ActionLogLine) *CommandError {
	for _, l := range lines {
		if len(l.GetMessage()) > MaxActionMessage {
			return opErr(storepb.ErrorCode_TOO_LARGE, "action log message of %d bytes is over the %d byte limit", len(l.GetMessage()), MaxActionMessage)
		}
	}
	if len(a.Log)+len(lines) > MaxActionLogLines {
		return opErr(storepb.ErrorCode_TOO_LARGE, "action %d would have %d log messages, over the limit of %d", a.ID, len(a.Log)+len(lines), MaxActionLogLines)
	}
	a.Log = append(a.Log, logLinesFromPB(lines)...)
	return nil
}

func (t *txn) logAction(o *storepb.LogAction) (*storepb.OpResult, *CommandError) {
	a, err := t.getAction(o.GetId())
	if err != nil {
		return nil, err
	}
	if a.Status != ActionRunning {
		return nil, opErr(storepb.ErrorCode_CONFLICT, "action %d is %s, not running", a.ID, a.Status)
	}
	if err := appendLog(a, o.GetLines()); err != nil {
		return nil, err
	}
	t.actionTxn().Insert(numKey(a.ID), a)
	return &storepb.OpResult{ActionId: a.ID}, nil
}

func (t *txn) finishAction(o *storepb.FinishAction) (*storepb.OpResult, *CommandError) {
	a, err := t.getAction(o.GetId())
	if err != nil {
		return nil, err
	}
	switch st := o.GetStatus(); {
	case a.Finished():
		return nil, opErr(storepb.ErrorCode_CONFLICT, "action %d is %s already", a.ID, a.Status)
	case st == ActionCompleted && a.Status != ActionRunning:
		return nil, opErr(storepb.ErrorCode_CONFLICT, "action %d is %s: only a running action completes", a.ID, a.Status)
	case st == ActionCancelled && a.Status != ActionPending:
		return nil, opErr(storepb.ErrorCode_CONFLICT, "action %d is %s: only a pending action is cancelled", a.ID, a.Status)
	case st != ActionCompleted && st != ActionFailed && st != ActionCancelled:
		return nil, opErr(storepb.ErrorCode_INVALID, "invalid final action status %q", st)
	}
	if len(o.GetMessage()) > MaxActionMessage {
		return nil, opErr(storepb.ErrorCode_TOO_LARGE, "action message of %d bytes is over the %d byte limit", len(o.GetMessage()), MaxActionMessage)
	}
	if err := checkJSONObject("action results", o.GetResultsJson(), MaxActionResults); err != nil {
		return nil, err
	}
	if err := appendLog(a, o.GetLines()); err != nil {
		return nil, err
	}
	a.Status, a.Message, a.ResultsJSON, a.Completed = o.GetStatus(), o.GetMessage(), o.GetResultsJson(), t.now
	t.actionTxn().Insert(numKey(a.ID), a)
	return &storepb.OpResult{ActionId: a.ID}, nil
}

// failUnitActions fails the pending and running actions of a removed
// unit: nothing will ever run them.
func (t *txn) failUnitActions(unit string) {
	it := t.actionRoot().Iterator()
	var ids []int64
	for _, a, ok := it.Next(); ok; _, a, ok = it.Next() {
		if a.Unit == unit && !a.Finished() {
			ids = append(ids, a.ID)
		}
	}
	for _, id := range ids {
		a, _ := t.getAction(id)
		a.Status, a.Message, a.Completed = ActionFailed, "the unit was removed before the action finished", t.now
		t.actionTxn().Insert(numKey(id), a)
	}
}

func actionToPB(a *Action) *storepb.ActionRecord {
	return &storepb.ActionRecord{
		Id: a.ID, Unit: a.Unit, Name: a.Name, ParamsJson: a.ParamsJSON, Status: a.Status, Message: a.Message,
		ResultsJson: a.ResultsJSON, Log: logLinesToPB(a.Log),
		EnqueuedUnixNano: unixNano(a.Enqueued), StartedUnixNano: unixNano(a.Started), CompletedUnixNano: unixNano(a.Completed),
		MemberId: a.Member, Pod: a.Pod,
	}
}

func actionFromPB(r *storepb.ActionRecord) *Action {
	return &Action{
		ID: r.GetId(), Unit: r.GetUnit(), Name: r.GetName(), ParamsJSON: r.GetParamsJson(), Status: r.GetStatus(), Message: r.GetMessage(),
		ResultsJSON: r.GetResultsJson(), Log: logLinesFromPB(r.GetLog()),
		Enqueued: fromUnixNano(r.GetEnqueuedUnixNano()), Started: fromUnixNano(r.GetStartedUnixNano()), Completed: fromUnixNano(r.GetCompletedUnixNano()),
		Member: r.GetMemberId(), Pod: r.GetPod(),
	}
}

// writeActions puts one snapshot record per action.
func writeActions(s *State, put func(*storepb.SnapshotRecord) error) error {
	var err error
	walk(s.actions, func(_ []byte, a *Action) bool {
		err = put(&storepb.SnapshotRecord{Record: &storepb.SnapshotRecord_Action{Action: actionToPB(a)}})
		return err == nil
	})
	return err
}
