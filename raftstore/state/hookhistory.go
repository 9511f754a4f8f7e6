package state

// Failed hooks: the details of the hook a unit is failing (SetHookError's
// later fields), the unit's hook history (RecordHook) and the retry
// requests of operators (RequestHookRetry).

import (
	"time"

	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

const (
	// MaxHookHistory is how many hooks a unit's history keeps; apply drops
	// the oldest past it.
	MaxHookHistory = 20
	// MaxHookOutputTail bounds the output kept of a failed hook.
	MaxHookOutputTail = 4 << 10
	// maxHookRecordText bounds the text fields of a history record.
	maxHookRecordText = 4 << 10
)

// HookRecord is one hook a unit ran.
type HookRecord struct {
	// Hook is the hook's full name; Relation (endpoint:id) and RemoteUnit
	// are set for a relation hook.
	Hook       string
	Relation   string
	RemoteUnit string
	OK         bool
	ExitCode   int
	// Error says why it failed.
	Error string
	// Started is by the clock of the agent that ran it.
	Started  time.Time
	Duration time.Duration
	// Member is the raft member whose agent ran it.
	Member string
}

// HookFailure describes a failed hook for SetHookErrorOp: the output tail,
// exit status, attempt and when the agent tries it again.
type HookFailure struct {
	OutputTail  []byte
	ExitCode    int
	Attempt     int
	NextAttempt time.Time
}

// FailedHookOp records that a unit's hook failed, with its details.
func FailedHookOp(unit, hook, message string, f HookFailure) *storepb.Op {
	op := SetHookErrorOp(unit, hook, message)
	e := op.GetSetHookError()
	e.OutputTail, e.ExitCode, e.Attempt, e.NextAttemptUnixNano = f.OutputTail, int32(f.ExitCode), uint32(max(f.Attempt, 0)), unixNano(f.NextAttempt)
	return op
}

// RecordHookOp appends r to unit's hook history.
func RecordHookOp(unit string, r HookRecord) *storepb.Op {
	return &storepb.Op{Op: &storepb.Op_RecordHook{RecordHook: &storepb.RecordHook{Unit: unit, Record: hookRecordPB(r)}}}
}

// RequestHookRetryOp asks the agent holding unit to run its failed hook
// again now.
func RequestHookRetryOp(unit string) *storepb.Op {
	return &storepb.Op{Op: &storepb.Op_RequestHookRetry{RequestHookRetry: &storepb.RequestHookRetry{Unit: unit}}}
}

func hookRecordPB(r HookRecord) *storepb.HookRecord {
	return &storepb.HookRecord{Hook: r.Hook, Relation: r.Relation, RemoteUnit: r.RemoteUnit, Ok: r.OK, ExitCode: int32(r.ExitCode), Error: r.Error,
		StartedUnixNano: unixNano(r.Started), DurationNanos: int64(r.Duration), MemberId: r.Member}
}

func hookRecordFromPB(p *storepb.HookRecord) HookRecord {
	return HookRecord{Hook: p.GetHook(), Relation: p.GetRelation(), RemoteUnit: p.GetRemoteUnit(), OK: p.GetOk(), ExitCode: int(p.GetExitCode()), Error: p.GetError(),
		Started: fromUnixNano(p.GetStartedUnixNano()), Duration: time.Duration(p.GetDurationNanos()), Member: p.GetMemberId()}
}

func (t *txn) recordHook(o *storepb.RecordHook) (*storepb.OpResult, *CommandError) {
	if _, err := t.liveUnit(o.GetUnit()); err != nil {
		return nil, err
	}
	r := o.GetRecord()
	if r.GetHook() == "" {
		return nil, opErr(storepb.ErrorCode_INVALID, "a hook record needs the hook's name")
	}
	for _, s := range []string{r.GetHook(), r.GetRelation(), r.GetRemoteUnit(), r.GetError(), r.GetMemberId()} {
		if len(s) > maxHookRecordText {
			return nil, opErr(storepb.ErrorCode_TOO_LARGE, "hook record field of %d bytes is over the %d byte limit", len(s), maxHookRecordText)
		}
	}
	e := t.extra(o.GetUnit())
	keep := e.History
	if len(keep) >= MaxHookHistory {
		keep = keep[len(keep)-MaxHookHistory+1:]
	}
	// A new slice: the old one is shared with earlier versions of the state.
	h := make([]HookRecord, 0, len(keep)+1)
	e.History = append(append(h, keep...), hookRecordFromPB(r))
	t.extraTxn().Insert([]byte(o.GetUnit()), e)
	return &storepb.OpResult{}, nil
}

func (t *txn) requestHookRetry(o *storepb.RequestHookRetry) (*storepb.OpResult, *CommandError) {
	if _, err := t.liveUnit(o.GetUnit()); err != nil {
		return nil, err
	}
	e := t.extra(o.GetUnit())
	if e.HookError == "" {
		return nil, opErr(storepb.ErrorCode_CONFLICT, "unit %s has no failed hook to retry", o.GetUnit())
	}
	e.RetryRequests++
	t.extraTxn().Insert([]byte(o.GetUnit()), e)
	return &storepb.OpResult{}, nil
}
