package raftstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/bagkeeper/bagkeeper/raftstore/peerpb"
	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

// peerServer serves the peer API. Authentication (same application, join
// token, TLS) has already happened in the connection handshake.
type peerServer struct {
	peerpb.UnimplementedPeerServer
	n *Node
}

func (s *peerServer) Info(ctx context.Context, req *peerpb.InfoRequest) (*peerpb.InfoResponse, error) {
	s.n.noteLeaderCommit(raft.ServerID(req.GetLeaderId()), req.GetLeaderCommitIndex())
	return s.n.selfInfo(!req.GetBrief()), nil
}

// info is what this member says of itself to a peer that asks.
func (n *Node) info() *peerpb.InfoResponse { return n.selfInfo(true) }

// selfInfo is info; without full, it leaves out what a probe does not
// read: the state hashes, the configuration and the last log term.
func (n *Node) selfInfo(full bool) *peerpb.InfoResponse {
	leaderID, leaderAddr := n.Leader()
	r := &peerpb.InfoResponse{
		ServerId:      string(n.id),
		App:           n.cfg.App,
		Address:       n.cfg.Advertise,
		Pod:           n.dir.Identity.Pod,
		Incarnation:   n.dir.Identity.Incarnation,
		HasState:      n.hasState(),
		RaftState:     n.raft.State().String(),
		LeaderId:      string(leaderID),
		LeaderAddress: string(leaderAddr),
		AppliedIndex:  n.raft.AppliedIndex(),
		CommitIndex:   n.raft.CommitIndex(),
		LastIndex:     n.raft.LastIndex(),
		Term:          n.raft.CurrentTerm(),
		Version:       n.cfg.Version,
		LogStore:      string(n.stores.kind),

		BootstrapEligible: n.cfg.BootstrapExpect > 0 && !n.cfg.NoBootstrap,
	}
	st := n.fsm.State()
	r.ClusterId = st.ClusterID()
	r.Generation, _, _ = st.Generation()
	switch {
	case n.IsLeader():
		r.LastContactNanos = 0
	case n.raft.LastContact().IsZero():
		r.LastContactNanos = -1
	default:
		r.LastContactNanos = int64(time.Since(n.raft.LastContact()))
	}
	if p := n.proposal.Load(); p != nil {
		r.BootstrapProposal = *p
	}
	if !full {
		return r
	}
	// Raft tells the last log term only among its stats, which it gathers
	// through its main loop: a probe, answered often, does without it.
	r.LastLogTerm = lastLogTerm(n.raft)
	r.StateHashes = n.hashes.list()
	if cfg, err := n.Configuration(); err == nil {
		for _, sv := range cfg.Servers {
			r.Configuration = append(r.Configuration, &peerpb.Server{Id: string(sv.ID), Address: string(sv.Address), Suffrage: sv.Suffrage.String()})
		}
	}
	return r
}

func (s *peerServer) Apply(ctx context.Context, req *peerpb.ApplyRequest) (*peerpb.ApplyResponse, error) {
	n := s.n
	var cmd storepb.Command
	if err := proto.Unmarshal(req.GetCommand(), &cmd); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "undecodable command: %v", err)
	}
	if err := state.CheckVersion(&cmd); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "%v (the leader runs bagkeeper %s): upgrade the leader first", err, n.cfg.Version)
	}
	var res *storepb.Result
	err := s.relay(ctx, req.GetHops(), leaderCall{
		what: "command",
		size: len(req.GetCommand()),
		local: func(ctx context.Context) error {
			if err := n.servable(); err != nil {
				// Let the caller try the next leader.
				return status.Error(codes.Unavailable, err.Error())
			}
			r, err := n.propose(ctx, &cmd)
			res = r
			return err
		},
		remote: func(ctx context.Context, c peerpb.PeerClient) error {
			resp, err := c.Apply(ctx, &peerpb.ApplyRequest{Command: req.GetCommand(), Hops: req.GetHops() + 1, From: req.GetFrom()})
			if err != nil {
				return err
			}
			res = &storepb.Result{}
			return proto.Unmarshal(resp.GetResult(), res)
		},
	})
	if err != nil {
		return nil, raftStatus(err)
	}
	if from := req.GetFrom(); from != "" {
		// The writer waits until it applied its write: a non-voter's
		// batch would hold it up to --raft-nonvoter-append-interval.
		n.paced.release(raft.ServerID(from))
	}
	n.nudge()
	b, err := proto.Marshal(res)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &peerpb.ApplyResponse{Result: b}, nil
}

// checkGeneration refuses a member whose state belongs to another group,
// or to this group before a recovery.
func (n *Node) checkGeneration(req *peerpb.JoinRequest) error {
	st := n.fsm.State()
	if req.GetClusterId() == "" || st.ClusterID() == "" || req.GetServerId() == string(n.id) {
		// No state to judge, or this member itself (whose request may
		// predate the generation it just started).
		return nil
	}
	if req.GetClusterId() != st.ClusterID() {
		return status.Errorf(codes.FailedPrecondition, "member %s holds the state of another group (cluster %s, this one is %s): move its data dir away and restart it to join as a new member", req.GetServerId(), req.GetClusterId(), st.ClusterID())
	}
	if gen, plan, since := st.Generation(); req.GetGeneration() < gen {
		return status.Errorf(codes.FailedPrecondition, "%s: member %s holds the state of generation %d of this group, which was recovered since (generation %d, plan %s, %s): move its data dir away and restart it to join as a new member",
			errOutdated, req.GetServerId(), req.GetGeneration(), gen, plan, since.UTC().Format(time.RFC3339))
	}
	return nil
}

// maxProcesses bounds what newProcess keeps: past it, it starts again
// (each member's next join then drops its connections once more).
const maxProcesses = 4096

// newProcess reports whether a join of member id comes from a process of
// it this member has not heard join before: one that started since (or
// one of an earlier build, which does not say).
func (n *Node) newProcess(id raft.ServerID, process string) bool {
	if process == "" {
		return true
	}
	n.processesMu.Lock()
	defer n.processesMu.Unlock()
	if n.processes[id] == process {
		return false
	}
	if len(n.processes) >= maxProcesses {
		clear(n.processes)
	}
	n.processes[id] = process
	return true
}

// errOutdated starts the message of a join refused for an old generation.
const errOutdated = "outdated member"

// lastLogTerm returns the term of the last entry of r's log.
func lastLogTerm(r *raft.Raft) uint64 {
	t, _ := strconv.ParseUint(r.Stats()["last_log_term"], 10, 64)
	return t
}

// relay runs a call that reached this member on the leader: here if this
// member leads, or, for a call that has not been relayed yet, on the
// leader this member knows (a caller's view of the leader may be a moment
// old). A relayed call is not relayed again.
func (s *peerServer) relay(ctx context.Context, hops uint32, call leaderCall) error {
	if s.n.IsLeader() {
		return call.local(ctx)
	}
	if hops > 0 {
		return status.Error(codes.Unavailable, "not the leader")
	}
	return s.n.onLeader(ctx, call)
}

func (s *peerServer) Join(ctx context.Context, req *peerpb.JoinRequest) (*peerpb.JoinResponse, error) {
	n := s.n
	if req.GetApp() != n.cfg.App {
		return nil, status.Errorf(codes.FailedPrecondition, "member %s serves application %q; this cluster serves %q", req.GetServerId(), req.GetApp(), n.cfg.App)
	}
	if req.GetServerId() == "" {
		return nil, status.Error(codes.InvalidArgument, "join without a server id")
	}
	if _, _, err := net.SplitHostPort(req.GetAddress()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "join from %s: address %q is not host:port", req.GetServerId(), req.GetAddress())
	}
	if err := n.checkGeneration(req); err != nil {
		return nil, err
	}
	joined := time.Now()
	n.book.learn(raft.ServerID(req.GetServerId()), raft.ServerAddress(req.GetAddress()))
	// A member joins as its process starts: what raft dialed to it before
	// went to its former process, which may be gone with its address
	// still answering to its name (a replaced pod's DNS name). A join
	// again from the same process (a retry) drops nothing: that would
	// fail the append under way to it, whose answer raft then never
	// hears.
	if n.newProcess(raft.ServerID(req.GetServerId()), req.GetProcess()) {
		n.abandonRaft(raft.ServerID(req.GetServerId()), raft.ServerAddress(req.GetAddress()), joined, "the member joined again")
	}
	var resp *peerpb.JoinResponse
	err := s.relay(ctx, req.GetHops(), leaderCall{
		what: "join of " + req.GetServerId(),
		local: func(ctx context.Context) error {
			outcome, err := n.admit(raft.ServerID(req.GetServerId()), raft.ServerAddress(req.GetAddress()))
			resp = &peerpb.JoinResponse{Outcome: outcome, LeaderId: string(n.id)}
			return err
		},
		remote: func(ctx context.Context, c peerpb.PeerClient) error {
			fwd := proto.Clone(req).(*peerpb.JoinRequest)
			fwd.Hops++
			r, err := c.Join(ctx, fwd)
			resp = r
			return err
		},
	})
	if err != nil {
		return nil, asStatus(err)
	}
	return resp, nil
}

func (s *peerServer) Leave(ctx context.Context, req *peerpb.LeaveRequest) (*peerpb.LeaveResponse, error) {
	id := raft.ServerID(req.GetServerId())
	err := s.relay(ctx, req.GetHops(), s.n.removeCall(id, req.GetHops()+1))
	if err != nil {
		return nil, asStatus(err)
	}
	return &peerpb.LeaveResponse{}, nil
}

// removeCall removes member id from the configuration, on the leader; a
// request it sends has taken hops already.
//
// A removal is idempotent across the call's attempts: once an attempt may
// have reached a leader (its answer lost when leadership moved, say), a
// later attempt that finds id no member any more reports success, not
// "not a member".
func (n *Node) removeCall(id raft.ServerID, hops uint32) leaderCall {
	var mayHaveRemoved atomic.Bool
	done := func(err error) error {
		if err == nil {
			return nil
		}
		if s, ok := status.FromError(err); ok && s.Code() == codes.NotFound && mayHaveRemoved.Load() {
			return nil
		}
		if !notDelivered(err) {
			mayHaveRemoved.Store(true)
		}
		return err
	}
	return leaderCall{
		what: "removal of " + string(id),
		local: func(ctx context.Context) error {
			if err := done(n.removeOnLeader(ctx, id)); err != nil {
				return err
			}
			n.noteLeft(id)
			return nil
		},
		remote: func(ctx context.Context, c peerpb.PeerClient) error {
			_, err := c.Leave(ctx, &peerpb.LeaveRequest{ServerId: string(id), Hops: hops})
			return done(err)
		},
	}
}

// removeOnLeader removes member id; this member leads. The leader cannot
// remove itself: it hands leadership over, and the caller retries on the
// next leader. A voter is removed only while a quorum of healthy voters
// remains.
func (n *Node) removeOnLeader(ctx context.Context, id raft.ServerID) error {
	if id == n.id {
		if err := n.await(n.raft.LeadershipTransfer()); err != nil {
			return status.Errorf(codes.Unavailable, "handing leadership over before removing %s: %v", id, err)
		}
		return status.Errorf(codes.Unavailable, "leadership handed over so that %s can be removed; retry", id)
	}
	if err := n.checkRemovable(ctx, id); err != nil {
		return err
	}
	n.membership.Lock()
	defer n.membership.Unlock()
	if n.isVoter(id) && n.voterCount()-1 < n.cfg.Voters {
		// A voter leaving (a pod replaced in a rolling update) takes a
		// caught-up non-voter's promotion first, so the voters never thin
		// out faster than their replacements arrive.
		promoted, err := n.promoteReplacement(ctx, id)
		switch {
		case err == nil:
			n.log.Info("promoted a replacement for a leaving voter", "leaving", string(id), "promoted", string(promoted))
		case ctx.Err() != nil:
			// The call was given up (its sender saw the leadership move,
			// say): do not remove a voter without having tried to replace
			// it; the retry does both.
			return status.FromContextError(ctx.Err()).Err()
		default:
			n.log.Warn("no replacement promoted for a leaving voter", "leaving", string(id), "err", err)
		}
	}
	if err := n.await(n.raft.RemoveServer(id, 0, 10*time.Second)); err != nil {
		return raftStatus(err)
	}
	n.log.Info("member removed from the configuration", "removed", string(id))
	return nil
}

// asStatus passes gRPC statuses through and maps other errors as
// raftStatus does.
func asStatus(err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	return raftStatus(err)
}

// checkRemovable refuses to remove a voter when the healthy voters left
// would be fewer than a quorum of the smaller voter set.
func (n *Node) checkRemovable(ctx context.Context, id raft.ServerID) error {
	// Health right now, not as of the last round (which, just after an
	// election, has not happened yet).
	if cfg, err := n.Configuration(); err == nil {
		n.pollHealth(ctx, cfg, time.Second)
	}
	health := n.MemberHealth()
	if health == nil {
		// Leadership moved while health was polled: the call is tried
		// again on the new leader, not answered "not a member".
		return raft.ErrNotLeader
	}
	voters, healthy, found := 0, 0, false
	for _, m := range health {
		if m.ID == id {
			found = true
			if !m.Voter {
				return nil
			}
			continue
		}
		if m.Voter {
			voters++
			if m.Healthy {
				healthy++
			}
		}
	}
	if !found {
		return status.Errorf(codes.NotFound, "%s is not a member", id)
	}
	if healthy < voters/2+1 {
		return status.Errorf(codes.FailedPrecondition, "removing voter %s would leave %d healthy voters of %d, fewer than a quorum; bring members back first", id, healthy, voters)
	}
	return nil
}

func (n *Node) isVoter(id raft.ServerID) bool {
	cfg, err := n.Configuration()
	if err != nil {
		return false
	}
	for _, s := range cfg.Servers {
		if s.ID == id {
			return s.Suffrage == raft.Voter
		}
	}
	return false
}

func (n *Node) voterCount() int {
	cfg, err := n.Configuration()
	if err != nil {
		return 0
	}
	c := 0
	for _, s := range cfg.Servers {
		if s.Suffrage == raft.Voter {
			c++
		}
	}
	return c
}

// promoteReplacement makes a non-voter a voter now, without waiting for
// its stabilization time: one that answers and has caught up with the
// commit index (within MaxLag). It runs on the leader.
func (n *Node) promoteReplacement(ctx context.Context, leaving raft.ServerID) (raft.ServerID, error) {
	cfg, cfgIndex, err := n.latestConfiguration()
	if err != nil {
		return "", err
	}
	commit := n.raft.CommitIndex()
	var why []string
	for _, s := range cfg.Servers {
		if s.Suffrage == raft.Voter || s.ID == leaving || PodOf(s.ID) == PodOf(leaving) {
			continue
		}
		info, err := n.infoOf(ctx, n.addressOf(s.ID, s.Address), time.Second)
		switch {
		case err != nil:
			why = append(why, fmt.Sprintf("%s: %v", s.ID, err))
			continue
		case info.GetServerId() != string(s.ID):
			why = append(why, fmt.Sprintf("%s: %s answers there", s.ID, info.GetServerId()))
			continue
		case info.GetAppliedIndex()+n.cfg.Autopilot.MaxLag < commit:
			why = append(why, fmt.Sprintf("%s: applied %d of %d", s.ID, info.GetAppliedIndex(), commit))
			continue
		}
		if err := n.await(n.raft.AddVoter(s.ID, s.Address, cfgIndex, 10*time.Second)); err != nil {
			return "", err
		}
		return s.ID, nil
	}
	if len(why) == 0 {
		return "", errors.New("there is no non-voter")
	}
	return "", fmt.Errorf("no caught-up non-voter answers (%s)", strings.Join(why, "; "))
}

// RemoveMember removes a member from the configuration, from any member:
// the request goes to the leader, which first hands leadership over if it
// is the one to go. A voter is removed only while a quorum of healthy
// voters remains.
func (n *Node) RemoveMember(ctx context.Context, id raft.ServerID) error {
	err := n.onLeader(ctx, n.removeCall(id, 0))
	if s, ok := status.FromError(err); ok && (s.Code() == codes.NotFound || s.Code() == codes.FailedPrecondition) {
		if strings.Contains(s.Message(), wouldLoseQuorum) {
			return &quorumRefusal{s.Message()}
		}
		return fmt.Errorf("%s", s.Message())
	}
	return err
}

// wouldLoseQuorum is what the leader's refusal to remove a voter says
// (checkRemovable).
const wouldLoseQuorum = "fewer than a quorum"

// quorumRefusal: the leader refused to remove a voter because too few
// healthy voters would remain, as it judged their health then.
type quorumRefusal struct{ msg string }

func (e *quorumRefusal) Error() string { return e.msg }

// admit adds a joining member as a non-voter, or learns where a member
// moved. It runs on the leader. A newer incarnation of the same pod
// supersedes the old entry: the old one can never come back (its disk is
// gone). A new member at an address the configuration lists for another
// member takes it over if that member is gone; raft refuses duplicate
// addresses.
//
// A member that moved keeps the address it joined with in the
// configuration: raft reaches members at what the address book says (see
// addressbook.go), not at their configured address. Changing a member's
// address in place would make hashicorp/raft rewrite the peer its
// replication goroutine reads without a lock (a data race upstream, seen
// under -race); removing and adding a member never does.
func (n *Node) admit(id raft.ServerID, addr raft.ServerAddress) (string, error) {
	n.membership.Lock()
	defer n.membership.Unlock()
	cfg, err := n.Configuration()
	if err != nil {
		return "", raftStatus(err)
	}
	if ago, ok := n.leftRecently(id, cfg); ok {
		return "", status.Errorf(codes.FailedPrecondition, "%s left the group %s ago and is not taken back within %s of leaving (a join its shutdown sent late); restarted, it may join again after that", id, ago.Round(time.Millisecond), leftHold)
	}
	for _, s := range cfg.Servers {
		if s.ID != id {
			continue
		}
		if s.Address == addr {
			return "already-member", nil
		}
		n.book.learn(id, addr)
		n.log.Info("member moved; raft reaches it at its new address", "peer", string(id), "configured_address", string(s.Address), "address", string(addr))
		return "address-learned", nil
	}
	for _, s := range cfg.Servers {
		superseded := PodOf(s.ID) == PodOf(id)
		if s.Address != addr && !superseded {
			continue
		}
		if s.ID == n.id {
			return "", status.Errorf(codes.FailedPrecondition, "%s cannot join: the leader %s is alive at the same address or in the same pod", id, n.id)
		}
		reason := "its address now belongs to " + string(id)
		if superseded {
			reason = "superseded by a newer incarnation of the same pod, " + string(id)
		} else if moved, ok := n.book.lookup(s.ID); ok && moved != addr {
			// The address was that member's when it joined; it moved since
			// and may well be alive. It joins again at once, at its new
			// address, once removed: remove it only while a quorum stays.
			if err := n.checkRemovable(context.Background(), s.ID); err != nil {
				return "", status.Errorf(codes.Unavailable, "%s cannot join yet: its address %s is still configured for %s, which moved to %s and cannot be removed now: %v", id, addr, s.ID, moved, err)
			}
			reason = "its configured address now belongs to " + string(id) + "; it moved to " + string(moved) + " and joins again there"
		}
		if err := n.await(n.raft.RemoveServer(s.ID, 0, 10*time.Second)); err != nil {
			return "", raftStatus(err)
		}
		n.log.Info("member removed", "removed", string(s.ID), "suffrage", s.Suffrage.String(), "reason", reason)
	}
	if err := n.await(n.raft.AddNonvoter(id, addr, 0, 10*time.Second)); err != nil {
		return "", raftStatus(err)
	}
	n.log.Info("member joined as non-voter", "peer", string(id), "address", string(addr))
	return "added", nil
}

// leave asks the leader to remove this member.
//
// A refusal because too few healthy voters would remain is tried again
// until the time is up: right after this member handed leadership over,
// the new leader may not have heard from every voter yet (a voter that
// answers late, a pod that has just been promoted), and a member that
// gave up would stay a voter until autopilot finds it dead.
func (n *Node) leave(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.LeaveTimeout)
	defer cancel()
	for waited := false; ; waited = true {
		err := n.RemoveMember(ctx, n.id)
		var qr *quorumRefusal
		if err == nil {
			break
		}
		if !errors.As(err, &qr) {
			return err
		}
		if !waited {
			n.log.Info("leaving waits until enough healthy voters remain", "refused", qr.msg)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
	n.log.Info("left the cluster")
	return nil
}

// maxPeerMessage bounds a peer API message: the largest is a forwarded
// command.
const maxPeerMessage = state.MaxCommandSize + 1<<20

// peerWindow is the HTTP/2 flow-control window of a peer API connection
// and of each call on it. Setting it turns gRPC's dynamic window off: that
// one pings the other side after data arrives to estimate the bandwidth,
// one more round trip on each call of an idle member (the leader's health
// poll each second). Peers are in one cluster network, where 4 MiB in
// flight fills the link.
const peerWindow = 4 << 20

// peerWindowDial and peerWindowServe set peerWindow on either side.
var (
	peerWindowDial  = []grpc.DialOption{grpc.WithInitialWindowSize(peerWindow), grpc.WithInitialConnWindowSize(peerWindow)}
	peerWindowServe = []grpc.ServerOption{grpc.InitialWindowSize(peerWindow), grpc.InitialConnWindowSize(peerWindow)}
)

// peerClients caches one gRPC connection per peer address. Connections
// resolve the address again whenever they reconnect.
type peerClients struct {
	dial  func(ctx context.Context, addr string) (net.Conn, error)
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

func newPeerClients(dial func(ctx context.Context, addr string) (net.Conn, error)) *peerClients {
	return &peerClients{dial: dial, conns: map[string]*grpc.ClientConn{}}
}

func (p *peerClients) get(addr string) (peerpb.PeerClient, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return nil, raft.ErrRaftShutdown
	}
	if c, ok := p.conns[addr]; ok {
		return peerpb.NewPeerClient(c), nil
	}
	c, err := grpc.NewClient("passthrough:///"+addr, append(peerWindowDial,
		grpc.WithContextDialer(p.dial),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxPeerMessage), grpc.MaxCallSendMsgSize(maxPeerMessage)),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// Peers come and go (a pod starting, restarting, moving): retry
		// connecting quickly. Calls fail fast while a peer is unreachable
		// (their callers retry, maybe elsewhere); Info probes wait for the
		// connection within their short deadline (see infoOf).
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: time.Second,
		}),
	)...)
	if err != nil {
		return nil, fmt.Errorf("peer %s: %w", addr, err)
	}
	p.conns[addr] = c
	return peerpb.NewPeerClient(c), nil
}

func (p *peerClients) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// leftHold is how long a leader refuses the join of a member that left
// through it: a stopping member's join loop may have sent a join just
// before its leave (it saw itself removed and asked to come back), and a
// late join would add the departed member back as a non-voter for good.
const leftHold = time.Minute

// noteLeft records that id left the group through this leader.
func (n *Node) noteLeft(id raft.ServerID) {
	n.membership.Lock()
	defer n.membership.Unlock()
	now := n.cfg.Now()
	if n.left == nil {
		n.left = map[raft.ServerID]time.Time{}
	}
	for k, at := range n.left {
		if now.Sub(at) > leftHold {
			delete(n.left, k)
		}
	}
	n.left[id] = now
}

// leftRecently reports whether id, not in cfg, left through this leader
// less than leftHold ago, and how long ago. Called with membership held.
func (n *Node) leftRecently(id raft.ServerID, cfg raft.Configuration) (time.Duration, bool) {
	at, ok := n.left[id]
	if !ok {
		return 0, false
	}
	for _, s := range cfg.Servers {
		if s.ID == id {
			return 0, false
		}
	}
	ago := n.cfg.Now().Sub(at)
	return ago, ago < leftHold
}

// peerStreamWorkers is how many long-lived goroutines serve the peer API's
// calls (a call that finds none free gets a goroutine of its own, as
// without them). Every member answers Info probes and health polls from
// many others; a goroutine started for each call grew its stack afresh
// each time (copied frame by frame). How often depends on the runtime's
// initial stack size, which follows the average stack in use, so it
// changed from one build to the next: an idle non-voter of 100 members
// used 0.30 % of a core on one build and 0.45–0.50 % on the next, which
// changed nothing it runs; with workers, 0.34–0.38 % on both
// (BENCHMARKS.md, 2026-12-07, night).
const peerStreamWorkers = 4
