package sidecar

// The admin API of failed hooks: RetryHook (bagkeeper unit retry) and
// ShowUnit (bagkeeper show-unit).

import (
	"context"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

// unitPB is u as the admin API lists it.
func unitPB(st *state.State, u *state.Unit) *adminpb.Unit {
	since := u.Claimed
	switch u.State {
	case state.UnitReleased:
		since = u.Released
	case state.UnitRemoved:
		since = u.Removed
	}
	e := st.UnitExtra(u.Name)
	pu := &adminpb.Unit{Name: u.Name, State: u.State.String(), Member: u.Member, Pod: u.Pod, SinceUnixNano: since.UnixNano(), Reason: u.Reason, HookError: e.HookError}
	if e.HookError != "" {
		pu.HookErrorAttempt, pu.HookErrorNextAttemptUnixNano = uint32(e.HookErrorAttempt), unixNanoOrZero(e.HookErrorNextAttempt)
	}
	if ws, ok := st.Status(u.Name); ok {
		pu.WorkloadStatus, pu.WorkloadMessage = ws.Status, ws.Message
	}
	return pu
}

func unixNanoOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// text makes hook output fit a protobuf string.
func text(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

func (a *adminServer) RetryHook(ctx context.Context, req *adminpb.RetryHookRequest) (*adminpb.RetryHookResponse, error) {
	unit := req.GetUnit()
	if unit == "" {
		return nil, status.Error(codes.InvalidArgument, "no unit given")
	}
	// What this member knows of the failure, to say which hook runs
	// again; the leader decides whether there is one.
	e := a.n.State().UnitExtra(unit)
	res, err := a.n.Apply(ctx, state.NewCommand(state.RequestHookRetryOp(unit)))
	if err != nil {
		return nil, commandStatus(err)
	}
	a.log.Info("hook retry requested by an operator", "unit", unit, "hook", e.HookError, "attempt", e.HookErrorAttempt)
	return &adminpb.RetryHookResponse{Hook: e.HookError, Attempt: uint32(e.HookErrorAttempt), Index: res.GetIndex()}, nil
}

func (a *adminServer) ShowUnit(ctx context.Context, req *adminpb.ShowUnitRequest) (*adminpb.ShowUnitResponse, error) {
	st, notReady, err := a.read(ctx, req.GetStale())
	if err != nil {
		return nil, err
	}
	u, ok := st.Unit(req.GetUnit())
	if !ok {
		return nil, status.Errorf(codes.NotFound, "unit %q does not exist in %s", req.GetUnit(), st.App())
	}
	resp := &adminpb.ShowUnitResponse{Unit: unitPB(st, u), Index: st.Index(), NotReadyReason: notReady}
	resp.Leader = st.Lease().HeldBy(u.Name, time.Now())
	if u.State == state.UnitActive {
		resp.Lost = a.holderLost(ctx, u.Member)
	}
	e := st.UnitExtra(u.Name)
	if e.HookError != "" {
		resp.HookFailure = &adminpb.HookFailure{Hook: e.HookError, Message: text(e.HookErrorMessage), ExitCode: int32(e.HookErrorExitCode), Attempt: uint32(e.HookErrorAttempt),
			SinceUnixNano: unixNanoOrZero(e.HookErrorSince), NextAttemptUnixNano: unixNanoOrZero(e.HookErrorNextAttempt), OutputTail: text(e.HookErrorOutputTail)}
	}
	for _, h := range e.History {
		resp.History = append(resp.History, &adminpb.HookRecord{Hook: h.Hook, Relation: h.Relation, RemoteUnit: h.RemoteUnit, Ok: h.OK, ExitCode: int32(h.ExitCode), Error: text(h.Error),
			StartedUnixNano: unixNanoOrZero(h.Started), DurationNanos: int64(h.Duration), Member: h.Member})
	}
	for _, r := range st.Relations() {
		if b, ok := st.Bag(r.ID, u.Name); ok {
			resp.Bags = append(resp.Bags, &adminpb.Bag{RelationId: r.ID, Relation: r.Key(), Owner: b.Owner, Data: b.Data.Map(), Revision: b.Revision})
		}
	}
	resp.CharmState = st.CharmState(u.Name).Map()
	if resp.Leader {
		ls, _ := st.LeaderSettings()
		resp.LeaderSettings = ls.Map()
	}
	for _, p := range e.Ports {
		resp.Ports = append(resp.Ports, &adminpb.OpenPort{Endpoint: p.Endpoint, Range: p.String()})
	}
	resp.WorkloadVersion = e.WorkloadVersion
	return resp, nil
}

// holderLost says whether member does not answer, or is no member of the
// group any more (as status reports a lost unit).
func (a *adminServer) holderLost(ctx context.Context, member string) bool {
	members, err := a.n.ProbeMembers(ctx, probeTimeout(ctx))
	if err != nil {
		return false
	}
	for _, m := range members {
		if string(m.Server.ID) == member {
			return m.Info == nil
		}
	}
	return true
}
