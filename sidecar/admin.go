package sidecar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bagkeeper/bagkeeper/agent"
	"github.com/bagkeeper/bagkeeper/raftstore"
	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
	"github.com/bagkeeper/bagkeeper/sidecar/link"
	"github.com/bagkeeper/bagkeeper/sidecar/unixsock"
)

// startAdmin serves the admin API on a Unix socket that only the sidecar's
// user can use (mode 0600, in a directory the sidecar owns).
func (s *Sidecar) startAdmin() error {
	ln, err := unixsock.Listen(s.cfg.AdminSocket, 0o600)
	if err != nil {
		return fmt.Errorf("admin socket %s: %w", s.cfg.AdminSocket, err)
	}
	s.adminLn = ln
	s.adminSrv = grpc.NewServer(grpc.MaxRecvMsgSize(adminpb.MaxRequest), grpc.MaxSendMsgSize(adminpb.MaxReply),
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			ctx, cancel := answerBefore(ctx)
			defer cancel()
			return handler(ctx, req)
		}))
	s.adminAPI = s.newAdminServer()
	adminpb.RegisterAdminServer(s.adminSrv, s.adminAPI)
	go func() { _ = s.adminSrv.Serve(ln) }()
	return nil
}

// adminStore is what the admin API needs of the raft member.
type adminStore interface {
	Status() raftstore.Status
	State() *state.State
	Read(ctx context.Context) (*state.State, error)
	Apply(ctx context.Context, cmd *storepb.Command) (*storepb.Result, error)
	ListMembers() ([]raftstore.MemberStatus, error)
	ProbeMembers(ctx context.Context, timeout time.Duration) ([]raftstore.MemberStatus, error)
	RemoveMember(ctx context.Context, id raft.ServerID) error
	TransferLeadership(ctx context.Context, target raft.ServerID) error
	PlanRecovery(ctx context.Context, survivors []raft.Server) (*raftstore.RecoveryPlan, error)
	StageRecovery(ctx context.Context, survivors []raft.Server, digest string) (*raftstore.RecoveryPlan, string, error)
}

// adminServer serves the admin API: the member's store, and the pod's
// unit and readiness.
// answerBefore returns ctx with its deadline moved a little earlier, so that
// a call that runs out of time still answers with why (no leader, not
// committed, ...) before the client gives up on it and sees only that it
// was cancelled.
func answerBefore(ctx context.Context) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	margin := min(max(time.Until(dl)/5, 50*time.Millisecond), 1500*time.Millisecond)
	return context.WithDeadline(ctx, dl.Add(-margin))
}

type adminServer struct {
	adminpb.UnimplementedAdminServer
	n     adminStore
	unit  func() string
	ready func() (bool, string)
	// links and linksErr report the relations between applications (nil
	// without a relations file).
	links    func() []link.RelationStatus
	linksErr func() string
	log      *slog.Logger
	// actions are the charm's (admin_actions.go).
	actions map[string]*agent.ActionSpec
	// charm is the pod's charm (nil without a unit agent): relations are
	// made only on its endpoints.
	charm *agent.Charm
	// version is this bagkeeper's, recorded in the snapshots it saves.
	version string
}

func streamStatus(ls link.RelationStatus) *adminpb.RelationStream {
	return &adminpb.RelationStream{Connected: ls.Connected, Address: ls.Address, LastError: ls.LastError, SinceUnixNano: ls.Since.UnixNano()}
}

func (s *Sidecar) newAdminServer() *adminServer {
	a := &adminServer{n: s.node, unit: s.Unit, ready: s.Ready, log: s.log, version: s.cfg.Version}
	if s.cfg.Agent != nil {
		if ch, err := agent.LoadCharm(s.cfg.Agent.CharmDir); err == nil {
			a.charm, a.actions = ch, ch.Actions
		}
	}
	if rs := s.relations; rs != nil {
		a.links, a.linksErr = rs.mgr.Status, func() string { return rs.loadErr.Load().(string) }
	}
	return a
}

func (a *adminServer) Status(ctx context.Context, req *adminpb.StatusRequest) (*adminpb.StatusResponse, error) {
	n := a.n
	st := n.State()
	ms := n.Status()
	leaderID := raft.ServerID(ms.LeaderID)
	resp := &adminpb.StatusResponse{
		App: st.App(), ClusterId: st.ClusterID(), Self: ms.ID, Unit: a.unit(),
		Leader: ms.LeaderID, Term: ms.Term, CommitIndex: ms.CommitIndex, AppliedIndex: ms.StateIndex,
	}
	resp.Generation, resp.GenerationPlan, _ = st.Generation()
	if l := st.Lease(); l.Unit != "" && time.Now().Before(l.Expires) {
		resp.LeaderUnit, resp.LeaseExpiresUnixNano = l.Unit, l.Expires.UnixNano()
	}
	resp.Ready, resp.NotReadyReason = a.ready()
	var members []raftstore.MemberStatus
	var err error
	if req.GetSkipProbe() {
		members, err = n.ListMembers()
	} else {
		members, err = n.ProbeMembers(ctx, probeTimeout(ctx))
	}
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "reading the raft configuration: %v", err)
	}
	for _, m := range members {
		pm := &adminpb.Member{Id: string(m.Server.ID), Address: string(m.Server.Address), Suffrage: m.Server.Suffrage.String(), Leader: m.Server.ID == leaderID}
		if m.Info != nil {
			pm.Reachable = true
			pm.RaftState = m.Info.GetRaftState()
			pm.AppliedIndex = m.Info.GetAppliedIndex()
			pm.LastContactNanos = m.Info.GetLastContactNanos()
			pm.Version = m.Info.GetVersion()
			pm.ClusterId, pm.Generation = m.Info.GetClusterId(), m.Info.GetGeneration()
			pm.LogStore = m.Info.GetLogStore()
		} else if m.Err != nil {
			pm.Error = status.Convert(m.Err).Message()
		}
		if d, ok := st.Diverged(string(m.Server.ID)); ok {
			pm.Diverged = fmt.Sprintf("at raft index %d: hash %x, most members have %x", d.Index, d.Hash, d.Expected)
		}
		resp.Members = append(resp.Members, pm)
	}
	for _, u := range st.Units() {
		resp.Units = append(resp.Units, unitPB(st, u))
	}
	for _, c := range st.Claimants() {
		resp.Waiting = append(resp.Waiting, &adminpb.Claimant{Member: c.Member, Pod: c.Pod, SinceUnixNano: c.Since.UnixNano()})
	}
	streams := map[string]link.RelationStatus{}
	if a.links != nil {
		for _, ls := range a.links() {
			streams[ls.Key] = ls
		}
		resp.RelationsFileError = a.linksErr()
	}
	for _, rel := range st.Relations() {
		pr := &adminpb.Relation{Id: rel.ID, Key: rel.Key(), Interface: rel.Interface, Peer: rel.Peer, RemoteApp: rel.RemoteApp, RemoteEndpoint: rel.RemoteEndpoint, Bags: int32(len(st.Bags(rel.ID))),
			Offered: rel.Offered, RemoteSource: rel.RemoteSource, RemoteRevision: rel.RemoteRevision}
		key := link.EntryKey(rel)
		if ls, ok := streams[key]; ok && !rel.Peer && !rel.Offered {
			pr.Stream = streamStatus(ls)
			delete(streams, key)
		}
		resp.Relations = append(resp.Relations, pr)
	}
	// Declared relations the provider has not accepted yet: no relation
	// exists, but the stream trying to make it does.
	for _, ls := range streams {
		resp.Relations = append(resp.Relations, &adminpb.Relation{Id: -1, Key: ls.Endpoint + " (not made yet)", RemoteApp: ls.App, RemoteEndpoint: ls.Offer, Stream: streamStatus(ls)})
	}
	slices.SortStableFunc(resp.Relations[len(st.Relations()):], func(a, b *adminpb.Relation) int { return strings.Compare(a.GetKey(), b.GetKey()) })
	return resp, nil
}

// maxProbeTimeout bounds how long Status waits for a member's answer.
const maxProbeTimeout = 2 * time.Second

// probeTimeout is how long Status may wait for the other members: at most
// maxProbeTimeout, and three quarters of what is left of the caller's
// deadline, so that a member that does not answer is reported as such
// instead of the whole answer arriving too late.
func probeTimeout(ctx context.Context) time.Duration {
	t := maxProbeTimeout
	if dl, ok := ctx.Deadline(); ok {
		t = min(t, time.Until(dl)*3/4)
	}
	return max(t, time.Millisecond)
}

// read returns the state a read answers from: a linearizable read, or
// with stale this member's copy as it is and why it may be behind.
func (a *adminServer) read(ctx context.Context, stale bool) (st *state.State, notReady string, err error) {
	if stale {
		if ok, why := a.ready(); !ok {
			notReady = why
		}
		return a.n.State(), notReady, nil
	}
	if st, err = a.n.Read(ctx); err != nil {
		return nil, "", commandStatus(err)
	}
	return st, "", nil
}

func (a *adminServer) GetBags(ctx context.Context, req *adminpb.GetBagsRequest) (*adminpb.GetBagsResponse, error) {
	st, notReady, err := a.read(ctx, req.GetStale())
	if err != nil {
		return nil, err
	}
	resp := &adminpb.GetBagsResponse{Index: st.Index(), NotReadyReason: notReady}
	rels := st.Relations()
	if req.GetRelationId() >= 0 {
		r, err := namedRelation(st, req.GetRelationId(), req.GetEndpoint())
		if err != nil {
			return nil, err
		}
		rels = []*state.Relation{r}
	}
	for _, r := range rels {
		for _, b := range st.Bags(r.ID) {
			if req.GetOwner() != "" && b.Owner != req.GetOwner() {
				continue
			}
			resp.Bags = append(resp.Bags, &adminpb.Bag{RelationId: r.ID, Relation: r.Key(), Owner: b.Owner, Data: b.Data.Map(), Revision: b.Revision})
		}
	}
	if o := req.GetOwner(); o != "" && len(resp.Bags) == 0 {
		// An owner with no bag at all: a unit or the application of this
		// group has none yet; anything else is a mistake.
		if _, ok := st.Unit(o); !ok && o != st.App() {
			return nil, status.Errorf(codes.NotFound, "%s has no bag here: it is neither a unit of %s nor an application in its relations", o, st.App())
		}
	}
	return resp, nil
}

// namedRelation returns relation id, which must be on endpoint when that
// is given (the caller named it endpoint:id).
func namedRelation(st *state.State, id int64, endpoint string) (*state.Relation, error) {
	r, ok := st.Relation(id)
	if !ok {
		return nil, status.Errorf(codes.NotFound, "relation %d not found", id)
	}
	if endpoint != "" && r.Endpoint != endpoint {
		return nil, status.Errorf(codes.InvalidArgument, "relation %d is %s, not on endpoint %q", id, r.Key(), endpoint)
	}
	return r, nil
}

func (a *adminServer) SetBag(ctx context.Context, req *adminpb.SetBagRequest) (*adminpb.SetBagResponse, error) {
	if ep := req.GetEndpoint(); ep != "" {
		// A relation's endpoint never changes: this member's copy can
		// tell, once it has the relation.
		st := a.n.State()
		if _, ok := st.Relation(req.GetRelationId()); !ok {
			var err error
			if st, err = a.n.Read(ctx); err != nil {
				return nil, commandStatus(err)
			}
		}
		if _, err := namedRelation(st, req.GetRelationId(), ep); err != nil {
			return nil, err
		}
	}
	res, err := a.n.Apply(ctx, state.NewCommand(state.UpdateBagOp(req.GetRelationId(), req.GetOwner(), req.GetSet(), req.GetDelete()...)))
	if err != nil {
		return nil, commandStatus(err)
	}
	return &adminpb.SetBagResponse{Index: res.GetIndex()}, nil
}

func (a *adminServer) EnsureRelation(ctx context.Context, req *adminpb.EnsureRelationRequest) (*adminpb.EnsureRelationResponse, error) {
	if ch := a.charm; ch != nil {
		ep := req.GetEndpoint()
		_, peer := ch.Peers[ep]
		switch {
		case !ch.Endpoints[ep]:
			return nil, status.Errorf(codes.InvalidArgument, "the charm %s has no endpoint %q (its endpoints: %s)", ch.Name, ep, strings.Join(slices.Sorted(maps.Keys(ch.Endpoints)), ", "))
		case peer != req.GetPeer() && peer:
			return nil, status.Errorf(codes.InvalidArgument, "%q is a peer endpoint of the charm %s: give --peer", ep, ch.Name)
		case peer != req.GetPeer():
			return nil, status.Errorf(codes.InvalidArgument, "%q is not a peer endpoint of the charm %s", ep, ch.Name)
		}
	}
	res, err := a.n.Apply(ctx, state.NewCommand(state.EnsureRelationOp(req.GetEndpoint(), req.GetInterface(), req.GetPeer(), req.GetRemoteApp(), req.GetRemoteEndpoint())))
	if err != nil {
		return nil, commandStatus(err)
	}
	return &adminpb.EnsureRelationResponse{RelationId: res.GetOps()[0].GetRelationId()}, nil
}

func (a *adminServer) RemoveUnit(ctx context.Context, req *adminpb.RemoveUnitRequest) (*adminpb.RemoveUnitResponse, error) {
	onlyReleased := int64(math.MaxInt64) // released at any time: not active
	if req.GetForce() {
		onlyReleased = 0
	}
	if _, err := a.n.Apply(ctx, state.NewCommand(state.RemoveUnitOp(req.GetUnit(), onlyReleased, "removed by an operator"))); err != nil {
		var ce *state.CommandError
		if errors.As(err, &ce) && ce.Code == storepb.ErrorCode_CONFLICT {
			if u, ok := a.n.State().Unit(req.GetUnit()); ok && u.State == state.UnitActive {
				return nil, status.Errorf(codes.FailedPrecondition, "unit %s is active: pod %s (member %s) holds it and runs its hooks; stop that pod first (its unit is then released), or give --force to remove it anyway (the pod then holds no unit until it restarts); nothing was removed", u.Name, u.Pod, u.Member)
			}
		}
		return nil, commandStatus(err)
	}
	a.log.Info("unit removed by an operator", "unit", req.GetUnit(), "force", req.GetForce())
	return &adminpb.RemoveUnitResponse{}, nil
}

func (a *adminServer) TransferLeadership(ctx context.Context, req *adminpb.TransferLeadershipRequest) (*adminpb.TransferLeadershipResponse, error) {
	target := req.GetMember()
	prev := a.n.Status().LeaderID
	if err := a.n.TransferLeadership(ctx, raft.ServerID(target)); err != nil {
		if s, ok := status.FromError(err); ok && (s.Code() == codes.NotFound || s.Code() == codes.FailedPrecondition) {
			return nil, status.Errorf(s.Code(), "%s; leadership stays with %s", s.Message(), prev)
		}
		return nil, commandStatus(err)
	}
	a.log.Info("raft leadership transferred by an operator", "from", prev, "to", target)
	// Answer with the new leader once this member knows it.
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		now := a.n.Status().LeaderID
		if now != "" && (target == "" && now != prev || now == target) {
			return &adminpb.TransferLeadershipResponse{Previous: prev, Leader: now}, nil
		}
		select {
		case <-ctx.Done():
			return &adminpb.TransferLeadershipResponse{Previous: prev, Leader: now}, nil
		case <-t.C:
		}
	}
}

func (a *adminServer) RemoveRelation(ctx context.Context, req *adminpb.RemoveRelationRequest) (*adminpb.RemoveRelationResponse, error) {
	st, err := a.n.Read(ctx)
	if err != nil {
		return nil, commandStatus(err)
	}
	r, err := namedRelation(st, req.GetRelationId(), req.GetEndpoint())
	if err != nil {
		return nil, err
	}
	managed := r.Offered || r.RemoteSource != ""
	if a.links != nil {
		for _, ls := range a.links() {
			managed = managed || ls.Key == link.EntryKey(r)
		}
	}
	switch {
	case r.Peer:
		return nil, status.Errorf(codes.FailedPrecondition, "%s is a peer relation: it lasts as long as the application (the unit agent makes it from metadata.yaml); nothing was removed", r.Key())
	case managed:
		return nil, status.Errorf(codes.FailedPrecondition, "%s is a relation with %s made through the relations file: take it out of that file (on this application's side or the other's) to end it; nothing was removed", r.Key(), r.RemoteApp)
	}
	res, err := a.n.Apply(ctx, state.NewCommand(state.RemoveRelationOp(r.ID)))
	if err != nil {
		return nil, commandStatus(err)
	}
	a.log.Info("relation removed by an operator", "relation", r.Key(), "remote_app", r.RemoteApp)
	return &adminpb.RemoveRelationResponse{Index: res.GetIndex()}, nil
}

func (a *adminServer) PlanRecovery(ctx context.Context, req *adminpb.PlanRecoveryRequest) (*adminpb.RecoveryPlan, error) {
	plan, err := a.n.PlanRecovery(ctx, survivorsOf(req.GetSurvivors()))
	if err != nil {
		return nil, recoveryStatus(err)
	}
	return planPB(plan), nil
}

func (a *adminServer) StageRecovery(ctx context.Context, req *adminpb.StageRecoveryRequest) (*adminpb.StageRecoveryResponse, error) {
	plan, role, err := a.n.StageRecovery(ctx, survivorsOf(req.GetSurvivors()), req.GetDigest())
	if err != nil {
		return nil, recoveryStatus(err)
	}
	return &adminpb.StageRecoveryResponse{Plan: planPB(plan), Role: role}, nil
}

func survivorsOf(ss []*adminpb.Survivor) []raft.Server {
	out := make([]raft.Server, 0, len(ss))
	for _, s := range ss {
		out = append(out, raft.Server{ID: raft.ServerID(s.GetId()), Address: raft.ServerAddress(s.GetAddress()), Suffrage: raft.Voter})
	}
	return out
}

func planPB(p *raftstore.RecoveryPlan) *adminpb.RecoveryPlan {
	out := &adminpb.RecoveryPlan{Id: p.ID(), Digest: p.Digest, ClusterId: p.ClusterID, Generation: p.Generation, Leader: string(p.Leader)}
	for _, s := range p.Survivors {
		out.Survivors = append(out.Survivors, &adminpb.PlannedSurvivor{Id: string(s.ID), Address: string(s.Address), LastLogTerm: s.LastLogTerm, LastIndex: s.LastIndex, Role: s.Role})
	}
	return out
}

// recoveryStatus reports a refused recovery as FailedPrecondition.
func recoveryStatus(err error) error {
	var r *raftstore.RefusedError
	if errors.As(err, &r) {
		return status.Error(codes.FailedPrecondition, r.Error())
	}
	return status.Error(codes.InvalidArgument, err.Error())
}

func (a *adminServer) RemoveMember(ctx context.Context, req *adminpb.RemoveMemberRequest) (*adminpb.RemoveMemberResponse, error) {
	if req.GetId() == "" {
		return nil, status.Error(codes.InvalidArgument, "no member id given")
	}
	if err := a.n.RemoveMember(ctx, raft.ServerID(req.GetId())); err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	a.log.Info("member removed by an operator", "removed", req.GetId())
	return &adminpb.RemoveMemberResponse{}, nil
}

// commandStatus maps an error of the store onto the gRPC status the CLI
// shows (raftstore's one table of errors).
func commandStatus(err error) error { return raftstore.GRPCStatus(err) }
