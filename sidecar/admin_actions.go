package sidecar

import (
	"context"
	"encoding/json"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bagkeeper/bagkeeper/agent"
	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

// The admin API's actions: queue an action of the charm for a unit, and
// read actions (see agent/actions.go for how they run).

// charmActions reads the actions of the pod's charm for the admin API; a
// sidecar without a charm (or whose charm cannot be read, which its agent
// reports) knows none.

func (a *adminServer) EnqueueAction(ctx context.Context, req *adminpb.EnqueueActionRequest) (*adminpb.EnqueueActionResponse, error) {
	st, err := a.n.Read(ctx)
	if err != nil {
		return nil, commandStatus(err)
	}
	unit := req.GetUnit()
	if u, ok := st.Unit(unit); !ok || u.State == state.UnitRemoved {
		return nil, status.Errorf(codes.NotFound, "unit %q not found", unit)
	}
	if req.GetName() == state.ExecAction {
		return a.enqueueExec(ctx, st, req)
	}
	spec := a.actions[req.GetName()]
	if spec == nil {
		return nil, status.Errorf(codes.NotFound, "action %q not defined on unit %q", req.GetName(), unit)
	}
	var params map[string]any
	if len(req.GetParamsJson()) > 0 {
		if err := json.Unmarshal(req.GetParamsJson(), &params); err != nil || params == nil {
			return nil, status.Errorf(codes.InvalidArgument, "the parameters are not a JSON object")
		}
	}
	js, err := spec.ValidateParams(params)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	res, err := a.n.Apply(ctx, state.NewCommand(state.EnqueueActionOp(unit, req.GetName(), js)))
	if err != nil {
		return nil, commandStatus(err)
	}
	id := res.GetOps()[0].GetActionId()
	a.log.Info("action queued", "unit", unit, "action", req.GetName(), "action_id", id)
	return &adminpb.EnqueueActionResponse{Id: id, Index: res.GetIndex()}, nil
}

// enqueueExec queues bagkeeper exec's command (agent/exec.go): not an
// action of the charm's, so no schema applies; the unit must be active,
// held by a pod that will run it.
func (a *adminServer) enqueueExec(ctx context.Context, st *state.State, req *adminpb.EnqueueActionRequest) (*adminpb.EnqueueActionResponse, error) {
	unit := req.GetUnit()
	if u, _ := st.Unit(unit); u.State != state.UnitActive {
		return nil, status.Errorf(codes.FailedPrecondition, "unit %q is %s, not active: no pod holds it to run the command", unit, u.State)
	}
	if err := agent.CheckExecParams(req.GetParamsJson()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	res, err := a.n.Apply(ctx, state.NewCommand(state.EnqueueActionOp(unit, state.ExecAction, req.GetParamsJson())))
	if err != nil {
		return nil, commandStatus(err)
	}
	id := res.GetOps()[0].GetActionId()
	a.log.Info("command queued (exec)", "unit", unit, "action_id", id)
	return &adminpb.EnqueueActionResponse{Id: id, Index: res.GetIndex()}, nil
}

func (a *adminServer) GetAction(ctx context.Context, req *adminpb.GetActionRequest) (*adminpb.Action, error) {
	// A waiting caller (actions run, which queued the action through this
	// member, so that the member holds it) is answered from the member's
	// own state as it changes: the end it waits for is there as soon as
	// the member has applied it. Otherwise the read is linearizable.
	st := a.n.State()
	if _, ok := st.Action(req.GetId()); !ok || !req.GetWait() {
		var err error
		if st, err = a.n.Read(ctx); err != nil {
			return nil, commandStatus(err)
		}
	}
	changes, _ := a.n.(interface{ Changed() <-chan struct{} })
	for {
		var changed <-chan struct{}
		if changes != nil {
			changed = changes.Changed()
		}
		act, ok := st.Action(req.GetId())
		if !ok {
			return nil, status.Errorf(codes.NotFound, "action %d not found", req.GetId())
		}
		if !req.GetWait() || act.Finished() || len(act.Log) > int(req.GetLogLines()) {
			return actionPB(act), nil
		}
		if changed == nil {
			changed = make(chan struct{})
		}
		select {
		case <-ctx.Done():
			return actionPB(act), nil
		case <-changed:
		case <-time.After(time.Second):
		}
		st = a.n.State()
	}
}

func (a *adminServer) ListActions(ctx context.Context, req *adminpb.ListActionsRequest) (*adminpb.ListActionsResponse, error) {
	st, err := a.n.Read(ctx)
	if err != nil {
		return nil, commandStatus(err)
	}
	if u := req.GetUnit(); u != "" {
		if _, ok := st.Unit(u); !ok {
			return nil, status.Errorf(codes.NotFound, "unit %q not found", u)
		}
	}
	resp := &adminpb.ListActionsResponse{}
	for _, act := range st.Actions() {
		if req.GetUnit() == "" || act.Unit == req.GetUnit() {
			resp.Actions = append(resp.Actions, actionPB(act))
		}
	}
	return resp, nil
}

func actionPB(act *state.Action) *adminpb.Action {
	out := &adminpb.Action{
		Id: act.ID, Unit: act.Unit, Name: act.Name, ParamsJson: act.ParamsJSON, Status: act.Status, Message: act.Message,
		ResultsJson: act.ResultsJSON, EnqueuedUnixNano: nanos(act.Enqueued), StartedUnixNano: nanos(act.Started),
		CompletedUnixNano: nanos(act.Completed), Pod: act.Pod,
	}
	for _, l := range act.Log {
		out.Log = append(out.Log, &adminpb.ActionLogLine{TimeUnixNano: nanos(l.Time), Message: l.Message})
	}
	return out
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}
