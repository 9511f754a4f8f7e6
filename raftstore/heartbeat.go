package raftstore

import (
	"context"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Heartbeats.
//
// hashicorp/raft's leader sends each follower a heartbeat every tenth to
// fifth of its heartbeat timeout (a pace not configurable apart from that
// timeout), and a follower that hears nothing for a heartbeat timeout
// forgets its leader. Each heartbeat wakes both members; on an idle group
// they are most of what either does, and that pace is more than failure
// detection needs: a voter notices a silent leader by the time since its
// last word, not by the heartbeats it missed (votes.go). The heartbeat
// timeout in a member's raft configuration is its own, so:
//
//   - the leader runs raft with a longer one (leaderHeartbeatTimeout: 2.5 ×
//     the group's or the leader lease, whichever is shorter). Its
//     heartbeats then go out every 100 to 200 ms at the defaults instead of
//     50 to 100: a follower still hears its leader at least twice per
//     heartbeat timeout, and the leader a quorum at least twice per lease.
//     Raft uses the leader's own timeouts (the election timeout is raised
//     with it) for nothing else but the backoff after a failed heartbeat
//     and how long a leadership transfer may take; a leadership
//     verification (linearizable reads) sends its heartbeats at once
//     whatever the pace.
//   - a non-voter, which never stands for election and only needs to go on
//     knowing the leader, is sent at most one heartbeat per gap by the
//     leader's transport (pacedTransport) instead of 5 to 10 a second, and
//     forgets its leader after 2.5 gaps (nonVoterTimeouts); an append it
//     took stands for a heartbeat (the next waits as long after it). The
//     gap is Config.NonvoterHeartbeatInterval when set; by default 1.25 s,
//     growing with the number of non-voters beyond 50 (heartbeatGap), so
//     that the leader sends all of them together at most 40 a second.
//     In a large application most members are non-voters, and their
//     heartbeats were most of what an idle leader did. Its appends are
//     batched under a stream of writes (pacedTransport.AppendEntries). A
//     heartbeat held for a member that the committed configuration makes
//     a voter meanwhile goes out at once.
//
// followRole reloads raft's timeouts whenever this member's raft state or
// its suffrage in the committed configuration changes. Nothing is answered
// for a non-voter: a paced heartbeat is sent later, not skipped, so what
// raft counts (contact, leader verification) is what the member really
// answered.

// nonVoterHeartbeatEvery is the default least time between two heartbeats
// to one non-voter (Config.NonvoterHeartbeatInterval), for a group whose
// heartbeat timeout is hb and which counts a member unhealthy after
// unhealthyAfter without an answer: 2.5 × hb, but at most half of
// unhealthyAfter, so that a non-voter answers the leader at least twice
// within it.
func nonVoterHeartbeatEvery(hb, unhealthyAfter time.Duration) time.Duration {
	return max(time.Millisecond, min(5*hb/2, unhealthyAfter/2))
}

// nonVoterHeartbeatShare is, per non-voter in the group, the least
// default gap between two heartbeats to one (heartbeatGap): beyond 50
// non-voters the leader sends them all together at most 40 heartbeats a
// second, however many there are. Each costs the idle leader a wake-up, a
// send and an answer (~0.3 ms of CPU on a small VM): at 95 non-voters a
// fixed 1.25 s gap was 76 a second, a third of the idle leader's CPU
// (BENCHMARKS.md, 2026-12-07). The price is in how late the leader counts
// a dead non-voter unhealthy (2.5 gaps: 5.9 s at 95 non-voters instead of
// 3.1 s), which only delays its removal.
const nonVoterHeartbeatShare = 25 * time.Millisecond

// nonVoterHeartbeatMost is the longest default gap between two
// heartbeats to one non-voter (reached at 200 non-voters).
const nonVoterHeartbeatMost = 5 * time.Second

// heartbeatGap is the least time between two heartbeats to one non-voter
// of a group with nonVoters non-voters, for the configured gap base: base
// if fixed; otherwise nonVoters × nonVoterHeartbeatShare, at least base
// and at most nonVoterHeartbeatMost (unless base is longer).
func heartbeatGap(base time.Duration, fixed bool, nonVoters int) time.Duration {
	if fixed {
		return base
	}
	return perNonVoter(base, nonVoters, nonVoterHeartbeatShare, nonVoterHeartbeatMost)
}

// perNonVoter is nonVoters × share, at least base, and at most most
// unless base is longer: an interval that grows with the non-voters so
// that what they are sent together stays bounded (heartbeatGap,
// appendInterval).
func perNonVoter(base time.Duration, nonVoters int, share, most time.Duration) time.Duration {
	return max(base, min(time.Duration(nonVoters)*share, most))
}

// nonVotersAhead is the number of non-voters a non-voter that counts n in
// its committed configuration allows the leader's count to be ahead by,
// when it picks its timeouts: the leader commits a configuration (and
// lengthens its gap) before its non-voters apply it, up to an append
// interval later, and a group that forms adds its members in quick
// succession. A count behind the leader's is the safe side (the leader's
// gap is then shorter than the non-voter allows for).
func nonVotersAhead(n int) int { return n + n/4 + 4 }

// nonVoterSilence is the silence a non-voter and its leader allow each
// other when the leader heartbeats it every every: 2.5 × every (through
// two missed heartbeats, not three). The non-voter runs raft with it
// (nonVoterTimeouts), and the leader counts it unhealthy after it
// (nonVoterUnhealthyAfter).
func nonVoterSilence(every time.Duration) time.Duration { return 5 * every / 2 }

// nonVoterUnhealthyAfter is how long a non-voter may go without answering
// the leader before the leader counts it unhealthy, for a group that
// counts a member unhealthy after unhealthyAfter and heartbeats a
// non-voter every every: the silence after which the non-voter forgets
// its leader, or unhealthyAfter if longer. A non-voter answers the leader
// only once per heartbeat gap when idle; with the voters' threshold a gap
// longer than it would make a live non-voter look dead between two
// heartbeats.
func nonVoterUnhealthyAfter(unhealthyAfter, every time.Duration) time.Duration {
	return max(unhealthyAfter, nonVoterSilence(every))
}

// unhealthyAfter is how long a member (a non-voter if nonVoter) may go
// without answering before the leader counts it unhealthy.
func (n *Node) unhealthyAfter(nonVoter bool) time.Duration {
	if nonVoter {
		return nonVoterUnhealthyAfter(n.cfg.Autopilot.UnhealthyAfter, n.paced.heartbeatEvery())
	}
	return n.cfg.Autopilot.UnhealthyAfter
}

// nonVoterTimeouts are the heartbeat and election timeouts a non-voter
// runs raft with, for a group whose timeouts are hb and election and whose
// leader heartbeats a non-voter every every: nonVoterSilence, never
// shorter than the group's own. Raft forgets its leader between one and
// two heartbeat timeouts after the last word.
func nonVoterTimeouts(hb, election, every time.Duration) (time.Duration, time.Duration) {
	t := nonVoterSilence(every)
	return max(hb, t), max(election, t)
}

// nonVoterAppendShare is the least interval between two appends to one
// non-voter under a stream of writes, per non-voter in the group: the
// leader sends all of them together at most one append per share (125 a
// second), however many there are. Chosen by measurement (BENCHMARKS.md,
// 2026-12-07): at 100 members on two cores a fixed 100 ms interval cost a
// put 4.5–6.5 times the 3-member commit time, the non-voters' appends
// crowding out the voters' for the CPU (on tmpfs too, so not the disk);
// with this share (760 ms there) 2.2–2.9 times; half of it (380 ms) was
// a little slower in three alternating runs (2.65–2.97 against 2.33–2.75
// times), and sends the non-voters twice as many appends.
const nonVoterAppendShare = 8 * time.Millisecond

// appendInterval is the interval between appends to a non-voter under a
// stream of writes, for a group with nonVoters non-voters whose least
// interval is base (0: no batching): nonVoters × nonVoterAppendShare, but
// at least base, and at most most unless base is longer.
func appendInterval(base time.Duration, nonVoters int, most time.Duration) time.Duration {
	if base <= 0 {
		return 0
	}
	return perNonVoter(base, nonVoters, nonVoterAppendShare, most)
}

// appendSlot is when the held return of an append to id that started at
// start ends, for an interval every: the first of id's slots (every
// apart, at an offset of id's own within the interval) at least half an
// interval after start. Under a stream the next append then starts at the
// next slot, one interval later; the members' offsets spread the appends
// to all non-voters over the interval instead of sending them together
// (they were triggered by the same write), which made the group's disk
// and the leader's CPU take them all at once, every interval.
func appendSlot(id raft.ServerID, start time.Time, every time.Duration) time.Time {
	if every <= 0 {
		return start
	}
	h := fnv.New64a()
	h.Write([]byte(id))
	offset := int64(h.Sum64() % uint64(every))
	from := start.Add(every/2).UnixNano() - offset
	k := from / int64(every)
	if k*int64(every) < from {
		k++
	}
	return time.Unix(0, k*int64(every)+offset)
}

// idleAppendHold is how many commit timeouts the return of an idle append
// to a non-voter is held (see pacedTransport.AppendEntries): raft's own
// pace for those is one every one to two commit timeouts.
const idleAppendHold = 4

// leaderHeartbeatTimeout is the heartbeat timeout a leader runs raft with,
// for a group whose heartbeat timeout is hb and whose leader lease is
// lease (raft heartbeats every tenth to fifth of it): 2.5 × hb or 2.5 ×
// lease, whichever is shorter, so that a heartbeat goes out at least every
// half hb and every half lease; never shorter than hb.
func leaderHeartbeatTimeout(hb, lease time.Duration) time.Duration {
	return max(hb, min(5*hb/2, 5*lease/2))
}

// suffrages is the suffrage of each member in the newest committed
// configuration.
type suffrages struct {
	m          atomic.Pointer[map[raft.ServerID]raft.ServerSuffrage]
	nonVoterNo atomic.Int64
}

func (s *suffrages) set(cfg raft.Configuration) {
	m := make(map[raft.ServerID]raft.ServerSuffrage, len(cfg.Servers))
	n := 0
	for _, srv := range cfg.Servers {
		m[srv.ID] = srv.Suffrage
		if srv.Suffrage == raft.Nonvoter {
			n++
		}
	}
	s.m.Store(&m)
	s.nonVoterNo.Store(int64(n))
}

// nonVoters is the number of non-voters in the committed configuration.
func (s *suffrages) nonVoters() int { return int(s.nonVoterNo.Load()) }

// of returns id's suffrage and whether id is a member.
func (s *suffrages) of(id raft.ServerID) (raft.ServerSuffrage, bool) {
	m := s.m.Load()
	if m == nil {
		return 0, false
	}
	v, ok := (*m)[id]
	return v, ok
}

// nonVoter reports whether id is a non-voter of the committed
// configuration (a member being promoted, Staging, is not one).
func (s *suffrages) nonVoter(id raft.ServerID) bool {
	v, ok := s.of(id)
	return ok && v == raft.Nonvoter
}

// voter reports whether id is a voter of the committed configuration.
func (s *suffrages) voter(id raft.ServerID) bool {
	v, ok := s.of(id)
	return ok && v == raft.Voter
}

// pacedTransport is the raft transport with heartbeats to non-voters
// paced, one at most every every per non-voter, and appends to non-voters
// paced, one at most every appendEvery(). Everything else passes through
// unchanged.
type pacedTransport struct {
	*raft.NetworkTransport
	// every is the least gap between two heartbeats to a non-voter; unless
	// everyFixed, the gap grows with the number of non-voters (see
	// heartbeatEvery).
	every      time.Duration
	everyFixed bool
	nonVoter   func(raft.ServerID) bool
	nonVoters  func() int      // how many non-voters the group has
	done       <-chan struct{} // closed when the member stops
	// appendBase is the least interval between two appends to a
	// non-voter under a stream of writes (0: no batching); see
	// appendEvery and AppendEntries.
	appendBase time.Duration
	// idleEvery is how long the return of an append that tells a
	// non-voter nothing new is held, unless this member writes its log
	// meanwhile (0: never); see AppendEntries.
	idleEvery time.Duration

	mu      sync.Mutex
	next    map[raft.ServerID]time.Time   // the earliest a heartbeat may go out
	sent    map[raft.ServerID]int         // heartbeats sent to each member (tests)
	appends map[raft.ServerID]*appendPace // appends (not heartbeats) to each member
	// news is closed (and replaced) when this member writes its raft log
	// while an idle append's return is held (newsWaited).
	news       chan struct{}
	newsWaited bool
	// suffrages is closed (and replaced) when the committed configuration
	// changes: a held heartbeat to a member it made a voter goes at once.
	suffrages chan struct{}

	// rpcs is what raft consumes: the requests received, passed on by
	// relayVotes (see votes.go).
	rpcs chan raft.RPC
	// afterAppend, if set, sees every append and its answer (tests); an
	// error it returns is what raft gets instead of the answer.
	afterAppend func(raft.ServerID, *raft.AppendEntriesRequest, *raft.AppendEntriesResponse) error
	// installs marks the snapshot raft is installing (see installMark).
	installs *installMark
	// heard is told of each heartbeat and append received, with the term
	// of the leader that sent it.
	heard func(term uint64)
	// answered is told of each member that answered a heartbeat or an
	// append this member sent (as the leader).
	answered func(raft.ServerID)
}

// appendPace is what pacedTransport keeps of the appends to one member.
type appendPace struct {
	sent int // appends sent (tests)
	idle int // of which idle ones (tests)
	// wake is closed (and replaced) by release: the held return of an
	// append that started before returns at once.
	wake     chan struct{}
	released int       // releases (tests)
	last     time.Time // when the latest that carried news returned to raft
	burst    time.Time // when the first after the latest quiet spell started
	// told is what the latest append the member took said.
	told told
}

// told is what the latest append a member took said: the last entry it
// then had (prev) and the leader's commit index.
type told struct {
	ok           bool
	prev, commit uint64
}

// idle reports whether args tells a member that took the append t
// describes nothing new: no entries, the same last entry, no later commit
// index — and t had told it that everything it holds is committed, so
// that no commit index it lacks can come without new entries (which the
// leader writes first: see pacedTransport.wrote).
func (t told) idle(args *raft.AppendEntriesRequest) bool {
	return t.ok && t.commit >= t.prev && len(args.Entries) == 0 &&
		args.PrevLogEntry == t.prev && args.LeaderCommitIndex <= t.commit
}

func newPacedTransport(t *raft.NetworkTransport, every time.Duration, everyFixed bool, appendBase, idleEvery time.Duration, nonVoter func(raft.ServerID) bool, nonVoters func() int, heard func(term uint64), answered func(raft.ServerID), done <-chan struct{}) *pacedTransport {
	return &pacedTransport{NetworkTransport: t, every: every, everyFixed: everyFixed, appendBase: appendBase, idleEvery: idleEvery, nonVoter: nonVoter, nonVoters: nonVoters, heard: heard, answered: answered, done: done,
		next: map[raft.ServerID]time.Time{}, sent: map[raft.ServerID]int{}, appends: map[raft.ServerID]*appendPace{}, rpcs: make(chan raft.RPC), news: make(chan struct{}), suffrages: make(chan struct{})}
}

// appendEvery is the interval between appends to a non-voter under a
// stream of writes now (0: no batching): appendInterval for the group's
// non-voters, at most the gap between two heartbeats to one (and never
// more than a second).
func (t *pacedTransport) appendEvery() time.Duration {
	return appendInterval(t.appendBase, t.nonVoters(), min(time.Second, t.heartbeatEvery()))
}

// heartbeatEvery is the least gap between two heartbeats to a non-voter
// now: heartbeatGap for the non-voters of the committed configuration.
func (t *pacedTransport) heartbeatEvery() time.Duration {
	return heartbeatGap(t.every, t.everyFixed, t.nonVoters())
}

// heartbeatEveryAllowed is the gap a non-voter allows its leader when it
// picks its timeouts: heartbeatGap for nonVotersAhead of the non-voters it
// counts, the leader's count being ahead of its own while configurations
// are made.
func (t *pacedTransport) heartbeatEveryAllowed() time.Duration {
	return heartbeatGap(t.every, t.everyFixed, nonVotersAhead(t.nonVoters()))
}

// wrote tells the transport that this member wrote its raft log: the idle
// appends held (see AppendEntries) return, so that raft sends what was
// written at once.
func (t *pacedTransport) wrote() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.newsWaited {
		close(t.news)
		t.news = make(chan struct{})
		t.newsWaited = false
	}
}

// SetHeartbeatHandler implements raft.Transport: raft's handler of the
// heartbeats received, which the network transport calls without going
// through relayVotes, and then heard.
func (t *pacedTransport) SetHeartbeatHandler(cb func(raft.RPC)) {
	if cb == nil {
		t.NetworkTransport.SetHeartbeatHandler(nil)
		return
	}
	t.NetworkTransport.SetHeartbeatHandler(func(rpc raft.RPC) {
		cb(rpc)
		if req, ok := rpc.Command.(*raft.AppendEntriesRequest); ok {
			t.heard(req.Term)
		}
	})
}

// isHeartbeat reports whether req is one of raft's heartbeats: an append
// that carries no entries and no log position (what the network
// transport's receiving side treats as one too).
func isHeartbeat(req *raft.AppendEntriesRequest) bool {
	return len(req.Entries) == 0 && req.PrevLogEntry == 0 && req.PrevLogTerm == 0 && req.LeaderCommitIndex == 0
}

// AppendEntries holds a heartbeat to a non-voter until its turn, paces
// appends to non-voters (below), and tells answered of each answer.
//
// Raft replicates to each follower from one goroutine, one append at a
// time (no pipeline, see MaxRPCsInFlight), each carrying every entry the
// leader has that the follower lacks, up to maxAppendEntries. An append to
// a non-voter is sent at once, and its return is held until the member's
// next slot (appendSlot: one interval, appendEvery, apart; at least half
// an interval after the append started): the entries written during the
// hold go out together in the next append. Under a stream of writes a
// non-voter then gets one append per interval instead of one or two per
// write (each costs it a wake-up, a decode, an fsync and an apply, and the
// leader a send and an answer), and learns of a write at most an interval
// plus a round trip after a voter does. The interval grows with the number
// of non-voters (appendInterval), so that what they cost the leader and
// the voters under a stream stays bounded, and each member's slots have an
// offset of their own, so that the appends to the non-voters are spread
// over the interval. Not held: the appends that start within half of the
// interval after a quiet spell (no append returned within an interval), so
// that a lone write and the append that tells its commit (see nudge) go
// out as fast as to a voter however many appends the write took; and a
// full append (a member catching up gets its entries as fast as raft
// sends them). Voters, which commit, are never held; a hold ends at once
// when the member becomes one, or when it waits for the leader for a write
// or a read of its own (release).
//
// Raft also sends each follower an append every commit timeout or so when
// nothing happens (1–2 s by default), telling it nothing new: at a hundred
// members that is most of an idle leader's appends. The return of such an
// idle append to a non-voter (see told.idle: no entries, the same last
// entry and commit index as the last append it took, which told it all it
// holds is committed) is held idleEvery, or until this member next writes
// its log: raft then sends the new entries at once, as it would have.
// Heartbeats, which tell the non-voter the leader is there, are not
// affected.
func (t *pacedTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if isHeartbeat(args) {
		if err := t.turn(id); err != nil {
			return err
		}
		err := t.NetworkTransport.AppendEntries(id, target, args, resp)
		if err == nil {
			t.answered(id)
		}
		return err
	}
	start := time.Now()
	nonVoter := t.nonVoter(id)
	t.mu.Lock()
	pace := t.appends[id]
	if pace == nil {
		pace = &appendPace{}
		t.appends[id] = pace
	}
	pace.sent++
	if pace.wake == nil {
		pace.wake = make(chan struct{})
	}
	wake := pace.wake
	idle := t.idleEvery > 0 && nonVoter && pace.told.idle(args)
	var news chan struct{}
	if idle {
		pace.idle++
		// Taken before the append goes out: a write while it is under way
		// cuts the hold short too.
		news = t.news
		t.newsWaited = true
	}
	every := t.appendEvery()
	if !idle && (pace.last.IsZero() || start.Sub(pace.last) >= every) {
		pace.burst = start // after a quiet spell
	}
	held := !idle && every > 0 && nonVoter && start.Sub(pace.burst) >= every/2 &&
		len(args.Entries) < maxAppendEntries
	t.mu.Unlock()

	err := t.NetworkTransport.AppendEntries(id, target, args, resp)
	if err == nil {
		t.answered(id)
		if t.afterAppend != nil {
			err = t.afterAppend(id, args, resp)
		}
	}
	t.mu.Lock()
	if err == nil && resp.Success && nonVoter {
		t.contactedLocked(id, time.Now())
	}
	if err == nil && resp.Success {
		pace.told.ok = true
		pace.told.prev = args.PrevLogEntry
		if n := len(args.Entries); n > 0 {
			pace.told.prev = args.Entries[n-1].Index
		}
		pace.told.commit = args.LeaderCommitIndex
	} else {
		pace.told.ok = false
	}
	t.mu.Unlock()

	var herr error
	switch {
	case idle && err == nil:
		herr = t.holdUnless(t.idleEvery, news)
	case held:
		herr = t.holdUnless(time.Until(appendSlot(id, start, every)), wake)
	}
	if herr != nil && err == nil {
		err = herr
	}
	if !idle {
		// An idle append is no part of a burst: a lone write after it
		// still comes after a quiet spell.
		t.mu.Lock()
		pace.last = time.Now()
		t.mu.Unlock()
	}
	return err
}

// contactedLocked notes that non-voter id took an append at now: its next
// heartbeat waits until every after it. An append the member took tells
// it the leader as a heartbeat does (its raft counts the contact, and so
// does the leader's; one it refused counts for neither), so a non-voter
// that gets appends — one per append interval under a stream, and the
// idle ones — needs no heartbeat between them. t.mu is held.
func (t *pacedTransport) contactedLocked(id raft.ServerID, now time.Time) {
	if at := now.Add(t.heartbeatEvery()); at.After(t.next[id]) {
		t.next[id] = at
	}
}

// stored is the last index of id's log as the latest append it answered
// left it, or 0 if that append failed or none was sent (see told).
func (t *pacedTransport) stored(id raft.ServerID) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.appends[id]; p != nil && p.told.ok {
		return p.told.prev
	}
	return 0
}

// release ends the hold of an append to id now (see AppendEntries), and
// of one under way: the member waits for a write of its own, which the
// leader just committed, or for the index of a read of its own, and gets
// the entries and the commit index with raft's next append instead of the
// next batch.
func (t *pacedTransport) release(id raft.ServerID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	pace := t.appends[id]
	if pace == nil || pace.wake == nil {
		return
	}
	pace.endHold()
	pace.released++
}

// endHold returns the held append to the member at once, and the one
// under way when it is held; pacedTransport.mu is held.
func (p *appendPace) endHold() {
	close(p.wake)
	p.wake = make(chan struct{})
}

// holdUnless waits d, or until cut is closed or the member stops.
func (t *pacedTransport) holdUnless(d time.Duration, cut <-chan struct{}) error {
	if d <= 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-cut:
		return nil
	case <-t.done:
		return raft.ErrTransportShutdown
	}
}

// turn waits until a heartbeat to id may go out and counts it: at once to
// a voter; to a non-voter once the gap (heartbeatEvery) has passed since
// the last, or at once when the committed configuration makes it a voter
// meanwhile. A configuration that shortens the gap shortens the wait.
func (t *pacedTransport) turn(id raft.ServerID) error {
	t.mu.Lock()
	t.sent[id]++
	for {
		if !t.nonVoter(id) {
			delete(t.next, id)
			t.mu.Unlock()
			return nil
		}
		now := time.Now()
		every := t.heartbeatEvery()
		at := t.next[id]
		if !at.After(now) {
			t.next[id] = now.Add(every)
			t.mu.Unlock()
			return nil
		}
		if latest := now.Add(every); at.After(latest) {
			// The group lost non-voters since: the leader counts this one
			// unhealthy after 2.5 of the shorter gaps now.
			at = latest
			t.next[id] = at
		}
		changed := t.suffrages
		t.mu.Unlock()
		if err := t.holdUnless(at.Sub(now), changed); err != nil {
			return err
		}
		t.mu.Lock()
	}
}

// suffragesChanged wakes the heartbeats held (see turn) to look at their
// member's suffrage again, and ends the holds of appends to members that
// are no longer non-voters: the committed configuration changed.
func (t *pacedTransport) suffragesChanged() {
	t.mu.Lock()
	defer t.mu.Unlock()
	close(t.suffrages)
	t.suffrages = make(chan struct{})
	// And the held appends to a member the configuration made a voter
	// return: it counts for commit now.
	for id, pace := range t.appends {
		if pace.wake != nil && !t.nonVoter(id) {
			pace.endHold()
		}
	}
}

// forget drops what is kept for the members keep refuses (members no
// longer in the configuration).
func (t *pacedTransport) forget(keep func(raft.ServerID) bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id := range t.sent {
		if !keep(id) {
			delete(t.sent, id)
			delete(t.next, id)
		}
	}
	for id := range t.appends {
		if !keep(id) {
			delete(t.appends, id)
		}
	}
}

// heartbeatsSent returns how many heartbeats went to id (for tests).
func (t *pacedTransport) heartbeatsSent(id raft.ServerID) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sent[id]
}

// paceOf returns a copy of what is kept of the appends to id (for
// tests): how many went, how many of them idle, when the latest that
// carried news returned.
func (t *pacedTransport) paceOf(id raft.ServerID) appendPace {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.appends[id]; p != nil {
		return *p
	}
	return appendPace{}
}

// roleChanged tells followRole to look at this member's role again.
func (n *Node) roleChanged() {
	select {
	case n.roleChange <- struct{}{}:
	default:
	}
}

// roleTimeouts returns the heartbeat and election timeouts raft runs with
// on this member now: leaderHeartbeatTimeout as the leader; as a voter (or
// not yet a member) that names a leader, the silence it allows that leader
// (silence.go: the group's heartbeat timeout while the leader's words come
// on time), and the group's heartbeat timeout when it names none (a leader
// that stepped down stands again one to two of those after it, raft
// counting from the step-down, mostly before its voters' longer allowance
// runs out; they, still naming it, let it win); as a non-voter, which
// never stands for election, nonVoterTimeouts. Raft wants the election
// timeout no shorter than the heartbeat timeout.
func (n *Node) roleTimeouts() (hb, election time.Duration, role string) {
	hb, election = n.cfg.HeartbeatTimeout, n.cfg.ElectionTimeout
	switch {
	case n.raft.State() == raft.Leader:
		hb = leaderHeartbeatTimeout(hb, n.cfg.LeaderLeaseTimeout)
		return hb, max(hb, election), "leader"
	case n.suffrage.nonVoter(n.id):
		hb, election = nonVoterTimeouts(hb, election, n.paced.heartbeatEveryAllowed())
		return hb, election, "nonvoter"
	}
	if n.raft.Leader() != "" {
		hb = n.silenceBound.bound(time.Now())
	}
	return hb, max(hb, election), "voter"
}

// followRole gives this member's raft the timeouts of its role
// (roleTimeouts). It runs until ctx ends, acting on each change of raft
// state or committed configuration (changed is signalled after either).
func (n *Node) followRole(ctx context.Context, changed <-chan struct{}) {
	for {
		hb, election, role := n.roleTimeouts()
		if role == "voter" {
			n.silenceGiven.Store(int64(hb))
		}
		n.reloadMu.Lock()
		rc := n.raft.ReloadableConfig()
		if rc.HeartbeatTimeout != hb || rc.ElectionTimeout != election {
			rc.HeartbeatTimeout, rc.ElectionTimeout = hb, election
			if err := n.raft.ReloadConfig(rc); err != nil {
				n.log.Warn("could not change the raft timeouts for this member's role", "role", role, "heartbeat_timeout", hb, "election_timeout", election, "err", err)
			} else {
				n.log.Debug("raft timeouts set for this member's role", "role", role, "heartbeat_timeout", hb, "election_timeout", election)
			}
		}
		n.reloadMu.Unlock()
		n.paced.forget(func(id raft.ServerID) bool { _, ok := n.suffrage.of(id); return ok })
		n.paced.suffragesChanged()
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}
