package raftstore

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bagkeeper/bagkeeper/raftstore/peerpb"
	"github.com/bagkeeper/bagkeeper/raftstore/transport"
)

// runCluster finds the cluster: it bootstraps one (bootstrap-expect), joins
// one, or — for a member that already has state — tells the leader where it
// is now. It also keeps the address book fresh so that raft can reach
// members whose addresses changed.
//
// Nothing here ever removes a member: discovery answers may be empty or
// wrong for a while, and that must never cost anything (invariant 2).
func (n *Node) runCluster(ctx context.Context) {
	for {
		n.clusterStep(ctx)
		wait := n.cfg.JoinInterval
		if n.registered.Load() && n.hasLeader() {
			// Settled: only refresh addresses now and then.
			wait = 5 * n.cfg.JoinInterval
		}
		wait += time.Duration(rand.Int64N(int64(wait/4) + 1))
		select {
		case <-ctx.Done():
			return
		case <-n.cfg.DiscoverChanged:
		case <-time.After(wait):
		}
	}
}

func (n *Node) hasLeader() bool {
	_, addr := n.Leader()
	return addr != ""
}

// peerInfo is one answer to an Info probe.
type peerInfo struct {
	addr string // where it was reached
	info *peerpb.InfoResponse
}

func (n *Node) clusterStep(ctx context.Context) {
	if n.stopping.Load() {
		// Stopping (and perhaps leaving): never ask to come back.
		return
	}
	var servers []raft.Server
	if cfg, err := n.Configuration(); err == nil {
		servers = cfg.Servers
	}
	addrs := n.candidateAddrs(ctx, servers)
	if servers != nil && n.registered.Load() && n.hasLeader() {
		addrs = probedThisRound(addrs, servers, n.id, n.book.entries(), n.probeRound.Add(1))
	}
	infos := n.probe(ctx, addrs)
	n.refreshBook(infos)
	if !n.hasState() {
		n.bootstrapOrJoin(ctx, infos)
		return
	}
	n.proposal.Store(nil)
	if !n.inConfiguration() {
		// Removed while away (for example found dead while partitioned):
		// ask to come back as a non-voter.
		n.registered.Store(false)
	}
	if !n.registered.Load() {
		n.register(ctx, infos)
	}
}

// refreshBook rebuilds the address book from this round's answers (see
// rebuildBook).
func (n *Node) refreshBook(infos []peerInfo) {
	var servers []raft.Server
	if cfg, err := n.Configuration(); err == nil {
		servers = cfg.Servers
	}
	book, twice := rebuildBook(n.book.entries(), servers, n.id, raft.ServerAddress(n.cfg.Advertise), infos)
	for id, addrs := range twice {
		n.logThrottledAt(slog.LevelWarn, "twice:"+string(id), "more than one process answers as the same member (a data dir copied and run twice?): raft reaches it at one of them only; stop all but one",
			"peer", string(id), "addresses", addrs, "reached_at", string(book[id]))
	}
	n.book.replace(book)
}

// rebuildBook returns the address book for the members of the
// configuration (servers): where the book had them (had; their configured
// address if it had not), overridden by where members answered this round.
// This member (self) is where it advertises itself now, whatever the
// configuration still says. An id that answered from more than one
// address (twice: the addresses, sorted) stays where the book had it if
// that is one of them, else goes to the first: the book does not swing
// between them from round to round.
func rebuildBook(had map[raft.ServerID]raft.ServerAddress, servers []raft.Server, self raft.ServerID, selfAddr raft.ServerAddress, infos []peerInfo) (book map[raft.ServerID]raft.ServerAddress, twice map[raft.ServerID][]string) {
	book = map[raft.ServerID]raft.ServerAddress{}
	for _, s := range servers {
		if a, ok := had[s.ID]; ok {
			book[s.ID] = a
		} else {
			book[s.ID] = s.Address
		}
	}
	book[self] = selfAddr
	answered := map[raft.ServerID][]raft.ServerAddress{}
	for _, p := range infos {
		// Prefer the address the member advertises (a stable DNS name where
		// there is one) over the one discovery reached it at (maybe an IP).
		id, addr := raft.ServerID(p.info.GetServerId()), raft.ServerAddress(p.info.GetAddress())
		if addr == "" {
			addr = raft.ServerAddress(p.addr)
		}
		if !slices.Contains(answered[id], addr) {
			answered[id] = append(answered[id], addr)
		}
	}
	taken := map[raft.ServerAddress]raft.ServerID{}
	for id, addrs := range answered {
		for _, a := range addrs {
			taken[a] = id
		}
		slices.Sort(addrs)
		at := addrs[0]
		if len(addrs) > 1 {
			if twice == nil {
				twice = map[raft.ServerID][]string{}
			}
			for _, a := range addrs {
				twice[id] = append(twice[id], string(a))
			}
			if slices.Contains(addrs, had[id]) {
				at = had[id]
			}
		}
		book[id] = at
	}
	// An address that now answers as someone else is stale.
	for id, addr := range book {
		if owner, ok := taken[addr]; ok && owner != id {
			delete(book, id)
		}
	}
	return book, twice
}

// nonVoterProbeSpread is how many rounds a settled non-voter takes to
// probe every address once (probedThisRound).
const nonVoterProbeSpread = 10

// probedThisRound returns which of addrs a settled member probes in its
// round'th round. A voter probes them all: it may lead next, and a leader
// must know where every member is. A non-voter never leads or votes: it
// needs the voters' addresses (where it forwards to the leader), probed
// every round, and the others only for what it shows (status); it probes a
// different tenth of those each round, so that each is probed every
// nonVoterProbeSpread rounds (about a minute). Every member probing every
// other one each round made an idle group of N members answer N² Info
// calls every 5–6 s, which at 100 members cost each of them 1 % of a core.
func probedThisRound(addrs []string, servers []raft.Server, self raft.ServerID, book map[raft.ServerID]raft.ServerAddress, round uint64) []string {
	voter := map[string]bool{}
	nonVoter := false
	for _, s := range servers {
		if s.Suffrage != raft.Voter {
			if s.ID == self {
				nonVoter = true
			}
			continue
		}
		voter[string(s.Address)] = true
		if a, ok := book[s.ID]; ok { // it moved (its join or Info said so)
			voter[string(a)] = true
		}
	}
	if !nonVoter {
		return addrs
	}
	var out []string
	others := 0
	for _, a := range addrs { // sorted (candidateAddrs)
		if voter[a] {
			out = append(out, a)
			continue
		}
		if uint64(others)%nonVoterProbeSpread == round%nonVoterProbeSpread {
			out = append(out, a)
		}
		others++
	}
	return out
}

// candidateAddrs returns discovered addresses plus the addresses of
// servers (the local configuration's), without this member's own.
func (n *Node) candidateAddrs(ctx context.Context, servers []raft.Server) []string {
	set := map[string]bool{}
	if n.cfg.Discover != nil {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		addrs, err := n.cfg.Discover(dctx)
		cancel()
		if err != nil {
			n.logThrottledAt(slog.LevelWarn, "discovery", "discovery answered with errors (it only feeds joins; nothing is removed because of it)", "err", err)
		}
		for _, a := range addrs {
			set[a] = true
		}
	}
	for _, s := range servers {
		set[string(s.Address)] = true
	}
	delete(set, n.cfg.Advertise)
	out := make([]string, 0, len(set))
	for a := range set {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

// probe asks every address for Info, concurrently, and returns the answers
// from members other than this one. It asks for brief answers (no
// configuration, no state hashes): nothing here reads them, and every
// member answers some every round.
func (n *Node) probe(ctx context.Context, addrs []string) []peerInfo {
	var mu sync.Mutex
	var out []peerInfo
	unanswered := map[string]string{}
	defer func() { n.lastProbe.Store(&probeReport{addrs: addrs, unanswered: unanswered}) }()
	var wg sync.WaitGroup
	for _, a := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			info, err := n.infoWith(ctx, a, time.Second, &peerpb.InfoRequest{Brief: true})
			if err != nil {
				mu.Lock()
				unanswered[a] = shortProbeError(err)
				mu.Unlock()
				if refusedByPeer(err) {
					// A misconfiguration that only an operator can fix.
					n.logThrottledAt(slog.LevelWarn, "refused:"+a, "peer refused this member's connection", "address", a, "err", err)
				} else {
					n.log.Debug("probe", "address", a, "err", err)
				}
				return
			}
			if info.GetServerId() == string(n.id) {
				return
			}
			mu.Lock()
			out = append(out, peerInfo{addr: a, info: info})
			mu.Unlock()
		}()
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool { return out[i].info.GetServerId() < out[j].info.GetServerId() })
	return out
}

func (n *Node) infoOf(ctx context.Context, addr string, timeout time.Duration) (*peerpb.InfoResponse, error) {
	return n.infoWith(ctx, addr, timeout, &peerpb.InfoRequest{})
}

func (n *Node) infoWith(ctx context.Context, addr string, timeout time.Duration, req *peerpb.InfoRequest) (*peerpb.InfoResponse, error) {
	c, err := n.peers.get(addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// Wait (within the timeout) for a connection that is reconnecting,
	// rather than fail with the error of an earlier attempt.
	return c.Info(ctx, req, grpc.WaitForReady(true))
}

func (n *Node) inConfiguration() bool {
	cfg, err := n.Configuration()
	if err != nil {
		return true
	}
	for _, s := range cfg.Servers {
		if s.ID == n.id {
			return true
		}
	}
	// An empty configuration (not yet replicated) is not a removal.
	return len(cfg.Servers) == 0
}

// bootstrapOrJoin runs while this member has no raft state.
func (n *Node) bootstrapOrJoin(ctx context.Context, infos []peerInfo) {
	var existing []peerInfo
	for _, p := range infos {
		if p.info.GetHasState() {
			existing = append(existing, p)
		}
	}
	if len(existing) > 0 {
		// A cluster exists: never bootstrap, join it.
		n.proposal.Store(nil)
		n.register(ctx, existing)
		return
	}
	expect := n.cfg.BootstrapExpect
	if expect == 0 || n.cfg.NoBootstrap {
		n.logWaiting("wait-join", "waiting for a cluster to join", "peers_found", len(infos))
		return
	}
	self := &peerpb.Server{Id: string(n.id), Address: n.cfg.Advertise, Suffrage: raft.Voter.String()}
	candidates := []*peerpb.Server{self}
	for _, p := range infos {
		if p.info.GetBootstrapEligible() {
			candidates = append(candidates, &peerpb.Server{Id: p.info.GetServerId(), Address: p.info.GetAddress(), Suffrage: raft.Voter.String()})
		}
	}
	if len(candidates) < expect {
		n.proposal.Store(nil)
		n.logWaiting("wait-bootstrap", "waiting for bootstrap peers", "found", len(candidates), "expect", expect)
		return
	}
	sort.Slice(candidates, func(i, j int) bool { return candidates[i].GetId() < candidates[j].GetId() })
	proposal := candidates[:expect]
	if !slices.ContainsFunc(proposal, func(s *peerpb.Server) bool { return s.GetId() == self.GetId() }) {
		// Others bootstrap; this member joins them afterwards.
		n.proposal.Store(nil)
		return
	}
	n.proposal.Store(&proposal)
	// Bootstrap only once every member of the proposal proposes exactly
	// the same configuration: identical configurations are what make
	// several members bootstrapping at once form ONE cluster.
	byID := map[string]*peerpb.InfoResponse{}
	for _, p := range infos {
		byID[p.info.GetServerId()] = p.info
	}
	for _, s := range proposal {
		if s.GetId() == self.GetId() {
			continue
		}
		if !sameServers(byID[s.GetId()].GetBootstrapProposal(), proposal) {
			n.logThrottled("wait-agree", "bootstrap proposed, waiting for peers to agree", "proposal", serverIDs(proposal))
			return
		}
	}
	var cfg raft.Configuration
	for _, s := range proposal {
		cfg.Servers = append(cfg.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(s.GetId()), Address: raft.ServerAddress(s.GetAddress())})
	}
	err := n.await(n.raft.BootstrapCluster(cfg))
	switch {
	case err == nil:
		n.log.Info("bootstrapped a new cluster", "voters", serverIDs(proposal))
		n.registered.Store(true)
	case errors.Is(err, raft.ErrCantBootstrap):
		n.registered.Store(true)
	default:
		n.log.Error("bootstrap failed", "err", err)
	}
}

func sameServers(a, b []*peerpb.Server) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].GetId() != b[i].GetId() || a[i].GetAddress() != b[i].GetAddress() {
			return false
		}
	}
	return true
}

func serverIDs(s []*peerpb.Server) []string {
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = x.GetId()
	}
	return out
}

// register sends a join request through the given peers (any member
// forwards it to the leader) until one is accepted. The leader adds a new
// member as a non-voter or records a changed address.
func (n *Node) register(ctx context.Context, peers []peerInfo) {
	req := &peerpb.JoinRequest{ServerId: string(n.id), Address: n.cfg.Advertise, App: n.cfg.App, Pod: n.dir.Identity.Pod, Process: n.process}
	// Which group and generation this member's state is of, as it brought
	// it (a restarted member applies nothing of its log until a leader says
	// what is committed; a new member may be sent the state of the
	// generation just before the one its leader starts).
	req.ClusterId, req.Generation = n.brought.ClusterID, n.brought.Generation
	if n.IsLeader() {
		if _, err := n.admit(n.id, raft.ServerAddress(n.cfg.Advertise)); err != nil {
			n.log.Warn("updating own address", "err", err)
			return
		}
		n.registered.Store(true)
		return
	}
	var lastErr error
	for _, p := range peers {
		if n.stopping.Load() {
			return
		}
		c, err := n.peers.get(p.addr)
		if err != nil {
			lastErr = err
			continue
		}
		jctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		resp, err := c.Join(jctx, req)
		cancel()
		if err != nil {
			if s, ok := status.FromError(err); ok && s.Code() == codes.FailedPrecondition && strings.HasPrefix(s.Message(), errOutdated) {
				if n.outdated.Swap(ptr(s.Message())) == nil {
					n.log.Error("this member's state is from before a recovery of its group: it serves nothing", "err", s.Message())
				}
			}
			lastErr = err
			continue
		}
		n.registered.Store(true)
		n.outdated.Store(nil)
		n.log.Info("registered with the leader", "outcome", resp.GetOutcome(), "leader", resp.GetLeaderId())
		return
	}
	if lastErr != nil {
		n.logThrottled("join", "join not accepted yet", "err", lastErr)
	}
}

// MemberStatus is one configured member and what it says of itself. The
// server's address is where the member is now (the address book's), which
// may differ from the one in the raft configuration.
type MemberStatus struct {
	Server raft.Server
	// Info is the member's own answer, nil if it did not answer.
	Info *peerpb.InfoResponse
	Err  error
}

// ListMembers returns the members of the configuration without asking
// them anything; only this member's own entry has its Info.
func (n *Node) ListMembers() ([]MemberStatus, error) {
	cfg, err := n.Configuration()
	if err != nil {
		return nil, err
	}
	out := make([]MemberStatus, len(cfg.Servers))
	for i, s := range cfg.Servers {
		out[i].Server = s
		out[i].Server.Address = raft.ServerAddress(n.addressOf(s.ID, s.Address))
		if s.ID == n.id {
			out[i].Info = n.info()
		}
	}
	return out, nil
}

// ProbeMembers asks every member of the configuration for its Info,
// concurrently, each within timeout.
func (n *Node) ProbeMembers(ctx context.Context, timeout time.Duration) ([]MemberStatus, error) {
	cfg, err := n.Configuration()
	if err != nil {
		return nil, err
	}
	out := make([]MemberStatus, len(cfg.Servers))
	var wg sync.WaitGroup
	for i, s := range cfg.Servers {
		out[i].Server = s
		out[i].Server.Address = raft.ServerAddress(n.addressOf(s.ID, s.Address))
		if s.ID == n.id {
			out[i].Info = n.info()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i].Info, out[i].Err = n.infoOf(ctx, n.addressOf(s.ID, s.Address), timeout)
		}()
	}
	wg.Wait()
	return out, nil
}

// refusedByPeer reports whether a peer refused the connection in the
// handshake for a reason of configuration: another application, another
// join token, or TLS.
func refusedByPeer(err error) bool {
	var he *transport.HandshakeError
	if errors.As(err, &he) {
		return he.Reason != transport.ReasonIO && he.Reason != transport.ReasonWrongMember && he.Reason != transport.ReasonKindUnavailable
	}
	// Through gRPC the handshake error arrives as text only.
	msg := err.Error()
	for _, s := range []string{"serves application", "join token", "TLS", "does not speak the bagkeeper peer protocol"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// logThrottled logs at info level at most every 10 seconds per key, and at
// debug level in between, so a loop waiting for peers stays readable.
// probeReport is what the last probe round found.
type probeReport struct {
	addrs      []string          // the addresses discovery and the configuration gave
	unanswered map[string]string // address: why it did not answer
}

// waitWarnAfter is how long a member waits for peers before the waiting
// lines turn into warnings: discovery that finds nothing, or addresses that
// never answer as peers, are mistakes only an operator can fix.
const waitWarnAfter = 30 * time.Second

// logWaiting logs, throttled, that this member waits for peers, with the
// addresses it probed and why those that did not answer did not: at info
// level at first, as a warning once it has waited waitWarnAfter.
func (n *Node) logWaiting(key, msg string, args ...any) {
	now := n.cfg.Now()
	n.throttleMu.Lock()
	if n.waitingSince.IsZero() {
		n.waitingSince = now
	}
	waited := now.Sub(n.waitingSince)
	n.throttleMu.Unlock()
	level := slog.LevelInfo
	if waited >= waitWarnAfter {
		level = slog.LevelWarn
		args = append(args, "waiting_for", waited.Round(time.Second).String())
	}
	if r := n.lastProbe.Load(); r != nil {
		if len(r.addrs) == 0 {
			args = append(args, "addresses", "none: discovery found no peer (check --peers, --peers-file, --discovery-dns or --discovery-srv and the headless service)")
		} else {
			args = append(args, "addresses", strings.Join(r.addrs, ","))
		}
		if len(r.unanswered) > 0 {
			var why []string
			for _, a := range slices.Sorted(maps.Keys(r.unanswered)) {
				why = append(why, a+": "+r.unanswered[a])
			}
			args = append(args, "unanswered", strings.Join(why, "; "))
		}
	}
	n.logThrottledAt(level, key, msg, args...)
}

// shortProbeError keeps what an operator needs of a probe's error: the
// innermost reason, without gRPC's wrapping.
func shortProbeError(err error) string {
	msg := status.Convert(err).Message()
	if i := strings.LastIndex(msg, "transport: Error while dialing: "); i >= 0 {
		msg = msg[i+len("transport: Error while dialing: "):]
	}
	msg = strings.TrimSuffix(strings.TrimSuffix(msg, `"`), `\"`)
	if strings.Contains(msg, "while waiting for connections to become ready") {
		msg = "no answer as a peer within the probe's timeout"
	}
	return msg
}

func (n *Node) logThrottled(key, msg string, args ...any) {
	n.logThrottledAt(slog.LevelInfo, key, msg, args...)
}

func (n *Node) logThrottledAt(level slog.Level, key, msg string, args ...any) {
	now := n.cfg.Now()
	n.throttleMu.Lock()
	last, seen := n.throttle[key]
	if !seen || now.Sub(last) >= 10*time.Second {
		n.throttle[key] = now
		n.throttleMu.Unlock()
		n.log.Log(context.Background(), level, msg, args...)
		return
	}
	n.throttleMu.Unlock()
	n.log.Debug(msg, args...)
}

func ptr[T any](v T) *T { return &v }

// Outdated reports whether this member was refused by its group for
// holding the state of a generation before a recovery, and why.
func (n *Node) Outdated() (string, bool) {
	if p := n.outdated.Load(); p != nil {
		return *p, true
	}
	return "", false
}
