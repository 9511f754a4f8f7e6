package raftstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bagkeeper/bagkeeper/raftstore/peerpb"
	"github.com/bagkeeper/bagkeeper/raftstore/transport"
)

// Every call that must run on the raft leader — a command, a join, a
// leave, a read index — goes through onLeader, the one place that decides
// where it runs and for how long each attempt may take:
//
//   - on this member, if it leads; otherwise over the peer API on the member
//     it knows as the leader;
//   - each attempt has a deadline derived from the election timeout, so a
//     leader that stopped answering without closing its connections (a
//     paused process, a frozen VM) cannot hold a call for longer;
//   - an attempt is cancelled as soon as this member sees the leadership
//     change (a new leader, or none), and the call is tried again on the new
//     leader at once;
//   - the calls are idempotent (commands carry their client session), so a
//     retry never applies twice;
//   - when this member knows no leader, or the leader did not answer, the
//     next attempt goes through another member instead, which passes it on
//     to the leader it knows (once): a member cut off from the leader but
//     not from the others still gets its calls through.
//
// The whole call ends when ctx ends.

// attemptTimeout bounds one attempt of a call on the leader. A large
// command takes longer: it is sent, written on the leader and sent to
// every follower before it commits, so each MiB adds half a second. (A
// paused leader is left as soon as another is elected, whatever this
// says: see onLeader.)
func (n *Node) attemptTimeout(size int) time.Duration {
	return max(4*n.cfg.ElectionTimeout, 2*time.Second) + time.Duration(size)*(time.Second/2)/(1<<20)
}

// leaderCall is one call to be made on the leader.
type leaderCall struct {
	// what names the call in errors ("apply", "join web-1/x", ...).
	what string
	// size is how many bytes the call carries (it scales its deadline).
	size int
	// local runs the call on this member, which leads.
	local func(ctx context.Context) error
	// remote runs the call on the leader through c.
	remote func(ctx context.Context, c peerpb.PeerClient) error
}

// onLeader runs call on the leader, trying again on the next leader until
// it succeeds, fails for good, or ctx ends.
func (n *Node) onLeader(ctx context.Context, call leaderCall) error {
	backoff := 5 * time.Millisecond
	var last error
	sent := false
	// failed counts the failures since the leader last changed: after an
	// odd number, the attempt goes through another member (the others in
	// turn), after an even one to the leader directly.
	failed := 0
	// unanswered counts the attempts through another member that were not
	// answered in time either (after one to the leader directly that was
	// not): each doubles the deadline of the attempts after it (up to
	// maxAttemptPatience doublings). On a machine whose CPU is taken a
	// commit can take longer than one attempt's deadline, and a call whose
	// every attempt was cut short would never commit: each retry is a new
	// entry behind the others. A leader that only this member cannot reach
	// is answered for through the other members, within the first
	// deadline; a leader that stops is left as soon as another is elected
	// (attempt).
	unanswered := 0
	for attempt := 1; ; attempt++ {
		changed := n.leaderChanged()
		relay := 0
		if failed%2 == 1 {
			relay = failed/2 + 1
		}
		err := n.attempt(ctx, call, changed, relay, min(unanswered, maxAttemptPatience))
		if err == nil {
			return nil
		}
		if !retryable(err) {
			return err
		}
		if relay > 0 && errors.Is(err, errAttemptTimeout) {
			unanswered++
		}
		last = err
		failed++
		if errors.Is(err, errLeaderMoved) {
			failed = 0 // the new leader, directly
		}
		// Only a call that never left this member for want of a leader, or
		// that no member took (a dial that failed, a member that knew no
		// leader either), is known not to have reached one.
		sent = sent || !notDelivered(err)
		// A leadership change is the reason to try again at once; otherwise
		// back off a little (no leader yet, a refused connection).
		wait := backoff
		select {
		case <-changed:
			wait = 0
		default:
			backoff = min(2*backoff, 200*time.Millisecond)
		}
		select {
		case <-ctx.Done():
			e := &NotCommittedError{What: call.what, Attempts: attempt, Last: last, Err: ctx.Err(), MaySucceed: sent}
			if !sent {
				e.Voters, e.Reachable = n.reachableVoters()
			}
			return e
		case <-n.ctx.Done():
			return raft.ErrRaftShutdown
		case <-changed:
		case <-time.After(wait):
		}
	}
}

// maxAttemptPatience is how many times an attempt's deadline may double
// after attempts the leader did not answer in time (onLeader): 16 ×
// attemptTimeout, 32 s at the defaults.
const maxAttemptPatience = 4

// attempt makes one attempt, cancelled when changed is closed: to the
// leader, or, if relay > 0 or no leader is known, through another member,
// with attemptTimeout doubled patience times.
func (n *Node) attempt(ctx context.Context, call leaderCall, changed <-chan struct{}, relay, patience int) error {
	if n.IsLeader() {
		return call.local(ctx)
	}
	id, addr := n.Leader()
	target := n.addressOf(id, addr)
	if addr == "" || relay > 0 {
		r, raddr, ok := n.relayPeer(id, max(relay, 1))
		switch {
		case ok:
			id, target = r, raddr
		case addr == "":
			return errNoLeader
		}
	}
	c, err := n.peers.get(target)
	if err != nil {
		return err
	}
	timeout := n.attemptTimeout(call.size) << patience
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	moved := make(chan struct{})
	go func() {
		select {
		case <-changed:
			close(moved)
			cancel()
		case <-actx.Done():
		}
	}()
	err = call.remote(actx, c)
	if err == nil {
		return nil
	}
	select {
	case <-moved:
		return fmt.Errorf("%w (the call went to %s)", errLeaderMoved, id)
	default:
	}
	if ctx.Err() == nil && actx.Err() != nil {
		return fmt.Errorf("%w: %s did not answer within %s", errAttemptTimeout, id, timeout)
	}
	return err
}

// notDelivered says whether err is an attempt that reached no leader: no
// leader was known here, the connection to the member it went to could
// not be made, or that member knew no leader either.
func notDelivered(err error) bool {
	if errors.Is(err, errNoLeader) {
		return true
	}
	s, ok := status.FromError(err)
	if !ok || s.Code() != codes.Unavailable {
		return false
	}
	msg := s.Message()
	return strings.Contains(msg, "Error while dialing") || strings.Contains(msg, errNoLeader.Error()) || strings.Contains(msg, "no raft leader (")
}

var (
	// errNoLeader: no leader is known; retried.
	errNoLeader = errors.New("no raft leader is known")
	// errLeaderMoved: leadership changed while a call was on its way; retried.
	errLeaderMoved = errors.New("leadership changed")
	// errAttemptTimeout: the leader did not answer one attempt in time; retried.
	errAttemptTimeout = errors.New("the leader did not answer")
)

// NotCommittedError is a call on the leader that ran out of time. If
// MaySucceed, an attempt reached a leader and may still commit; otherwise
// no leader was ever known, and nothing was committed.
type NotCommittedError struct {
	What       string
	Attempts   int
	Last       error
	Err        error // the context's error
	MaySucceed bool
	// Voters and Reachable count the configuration's voters and how many
	// answered, when no leader was known.
	Voters, Reachable int
}

func (e *NotCommittedError) Error() string {
	if !e.MaySucceed {
		if e.Voters > 0 {
			return fmt.Sprintf("%s: no raft leader (%d of %d voters reachable; a leader needs %d); not committed", e.What, e.Reachable, e.Voters, e.Voters/2+1)
		}
		return fmt.Sprintf("%s: no raft leader is known; not committed", e.What)
	}
	return fmt.Sprintf("%s: no answer from the leader in time (%d attempts; last: %v); it may or may not have been committed", e.What, e.Attempts, e.Last)
}

func (e *NotCommittedError) Unwrap() error { return e.Err }

// reachableVoters counts the voters of the configuration and how many of
// them answer now (this member included, if it votes), within a short time.
func (n *Node) reachableVoters() (voters, reachable int) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	members, err := n.ProbeMembers(ctx, 300*time.Millisecond)
	if err != nil {
		return 0, 0
	}
	for _, m := range members {
		if m.Server.Suffrage == raft.Voter {
			voters++
			if m.Info != nil {
				reachable++
			}
		}
	}
	return voters, reachable
}

// retryable reports whether a call on the leader failed in a way that a
// retry (on the same or a new leader) may cure.
func retryable(err error) bool {
	switch {
	case errors.Is(err, errNoLeader),
		errors.Is(err, errLeaderMoved),
		errors.Is(err, errAttemptTimeout),
		errors.Is(err, raft.ErrNotLeader),
		errors.Is(err, raft.ErrLeadershipLost),
		errors.Is(err, raft.ErrLeadershipTransferInProgress),
		errors.Is(err, raft.ErrAbortedByRestore),
		errors.Is(err, raft.ErrEnqueueTimeout):
		return true
	}
	if s, ok := status.FromError(err); ok {
		switch s.Code() {
		case codes.Unavailable, codes.Aborted:
			return true
		}
	}
	return false
}

// relayPeer returns the k-th member (counting from 1, round and round) of
// the configuration that is neither this member nor leader, to pass a call
// on to the leader.
func (n *Node) relayPeer(leader raft.ServerID, k int) (raft.ServerID, string, bool) {
	cfg, err := n.Configuration()
	if err != nil {
		return "", "", false
	}
	var others []raft.Server
	for _, s := range cfg.Servers {
		if s.ID != n.id && s.ID != leader {
			others = append(others, s)
		}
	}
	if len(others) == 0 {
		return "", "", false
	}
	s := others[(k-1)%len(others)]
	return s.ID, n.addressOf(s.ID, s.Address), true
}

// leaderWatch tells waiters when this member sees the leadership change.
type leaderWatch struct {
	mu sync.Mutex
	ch chan struct{}
}

func newLeaderWatch() *leaderWatch { return &leaderWatch{ch: make(chan struct{})} }

// next returns a channel closed at the next leadership change.
func (w *leaderWatch) next() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ch
}

func (w *leaderWatch) changed() {
	w.mu.Lock()
	defer w.mu.Unlock()
	close(w.ch)
	w.ch = make(chan struct{})
}

// leaderChanged returns a channel closed when this member next sees the
// leadership change.
func (n *Node) leaderChanged() <-chan struct{} { return n.leaders.next() }

// watchLeader turns raft's leader and state observations into leaderWatch
// signals until ctx ends.
//
// Each change of leader is logged once, at INFO, on every member: with
// the members' logs side by side an operator sees who led when.
func (n *Node) watchLeader(ctx context.Context, obs <-chan raft.Observation) {
	var last raft.ServerID
	for {
		select {
		case <-ctx.Done():
			return
		case o := <-obs:
			switch d := o.Data.(type) {
			case raft.LeaderObservation:
				n.leaders.changed()
				if d.LeaderID == last {
					continue
				}
				switch {
				case d.LeaderID == "":
					n.log.Info("raft leader lost; an election follows", "previous", string(last))
				case d.LeaderID == n.id:
					n.log.Info("raft leader changed: this member leads", "leader", string(d.LeaderID), "previous", string(last))
				default:
					addr, _ := transport.SplitMemberAddress(d.LeaderAddr)
					n.log.Info("raft leader changed", "leader", string(d.LeaderID), "address", addr, "previous", string(last))
				}
				last = d.LeaderID
				// A voter's raft timeout depends on whether it names a
				// leader (roleTimeouts).
				n.roleChanged()
			case raft.RaftState:
				n.leaders.changed()
				n.roleChanged()
			}
		}
	}
}

// raftStatus maps an error of a call on the leader to the gRPC status the
// member that sent the call sees: retryable conditions are Unavailable.
func raftStatus(err error) error {
	if retryable(err) {
		return status.Error(codes.Unavailable, err.Error())
	}
	if errors.Is(err, raft.ErrRaftShutdown) {
		return status.Error(codes.Unavailable, "member is shutting down")
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Internal, err.Error())
}
