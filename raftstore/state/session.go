package state

import (
	"time"

	iradix "github.com/hashicorp/go-immutable-radix/v2"
	"google.golang.org/protobuf/proto"

	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

// Client sessions make retries safe (the Raft thesis, section 6.3). Each
// running member is a client with a random id; it numbers its commands and
// sends a retry under the same number. The state machine keeps, per
// client, the results of the commands the client may still wait for (those
// at or above the lowest number the client says it has no answer for), and
// answers a retry from them. Memory is one small entry per client plus the
// results of its commands in flight — not a record of every request.
//
// Sessions are created by a client's first command and dropped once idle
// for SessionTTL, by the leader's clock carried in the commands. A retry
// that arrives after its session was dropped would be applied again; no
// client retries for anywhere near that long.

// SessionTTL is how long an idle client session is kept.
const SessionTTL = time.Hour

// sweepEvery is how often, by the commands' clock, expired sessions are
// looked for.
const sweepEvery = SessionTTL / 8

type session struct {
	lastActive    time.Time
	lowestPending uint64
	// The results of the commands the client may still wait for, ordered by
	// sequence: log.arr[lo:hi] (no log when there are none).
	log    *resultLog
	lo, hi int
}

type sessionResult struct {
	seq    uint64
	result []byte // encoded storepb.Result
}

// resultLog is the array a client's session versions keep their results
// in. Each command makes a new version of its client's session, which
// usually differs from the one before by results dropped at the front
// (the client no longer waits for them) and one added at the back, so a
// version shares its predecessor's array instead of copying every result
// in flight: with many commands in flight from one member, a copy per
// command cost the state machine time and garbage in proportion to their
// number.
//
// Versions are immutable: a version only ever writes arr[next], past the
// end of every version made so far, and only when its own results end at
// next (it is the newest). A version that is not the newest (a second
// command applied to the same earlier state) copies. arr's length never
// changes after it is made, so readers of older versions never race the
// writer.
type resultLog struct {
	arr  []sessionResult
	next int // arr[:next] has been written
}

// newSession returns a session with results (ordered by sequence).
func newSession(lastActive time.Time, lowestPending uint64, results []sessionResult) *session {
	s := &session{lastActive: lastActive, lowestPending: lowestPending}
	s.setResults(results)
	return s
}

// results returns the session's results, ordered by sequence. The caller
// must not modify them.
func (s *session) results() []sessionResult {
	if s.log == nil {
		return nil
	}
	return s.log.arr[s.lo:s.hi:s.hi]
}

// setResults makes a new array for results, with room to append as many
// again.
func (s *session) setResults(results []sessionResult) {
	if len(results) == 0 {
		s.log, s.lo, s.hi = nil, 0, 0
		return
	}
	arr := make([]sessionResult, max(8, 2*len(results)))
	copy(arr, results)
	s.log, s.lo, s.hi = &resultLog{arr: arr, next: len(results)}, 0, len(results)
}

// answered returns the recorded result of a retried command, or why it is
// not answered from the session.
func (s *session) answered(req *storepb.ClientRequest) (*storepb.Result, bool) {
	for _, r := range s.results() {
		if r.seq == req.GetSequence() {
			var res storepb.Result
			if proto.Unmarshal(r.result, &res) == nil {
				return &res, true
			}
		}
	}
	return nil, false
}

// record returns the session after the client's command req had result res.
// s is not modified (its results array may gain an entry past its end).
func (s *session) record(req *storepb.ClientRequest, now time.Time, res *storepb.Result) *session {
	next := &session{lastActive: now, lowestPending: max(s.lowestPending, req.GetLowestPending())}
	rs := s.results()
	drop := 0
	for drop < len(rs) && rs[drop].seq < next.lowestPending {
		drop++
	}
	live := rs[drop:]
	seq := req.GetSequence()
	add := seq >= next.lowestPending
	var enc []byte
	if add {
		var err error
		enc, err = proto.Marshal(res)
		add = err == nil
	}
	switch {
	case !add && len(live) == 0:
		return next
	case !add:
		next.log, next.lo, next.hi = s.log, s.lo+drop, s.hi
		return next
	case s.log != nil && s.hi == s.log.next && s.hi < len(s.log.arr) && (len(live) == 0 || live[len(live)-1].seq < seq):
		// The newest version, with room, and the command numbered after
		// every result kept: append in place.
		s.log.arr[s.hi] = sessionResult{seq: seq, result: enc}
		s.log.next++
		next.log, next.lo, next.hi = s.log, s.lo+drop, s.hi+1
		return next
	}
	// Otherwise a new array: the result goes after those numbered up to its
	// own sequence.
	at := len(live)
	for at > 0 && live[at-1].seq > seq {
		at--
	}
	merged := make([]sessionResult, 0, len(live)+1)
	merged = append(merged, live[:at]...)
	merged = append(merged, sessionResult{seq: seq, result: enc})
	merged = append(merged, live[at:]...)
	next.setResults(merged)
	return next
}

// sweepSessions drops sessions idle for SessionTTL, looking at most every
// sweepEvery.
func sweepSessions(s *State, now time.Time) *State {
	if now.Sub(s.meta.sessionsSwept) < sweepEvery {
		return s
	}
	txn := s.sessions.Txn()
	walk(s.sessions, func(k []byte, v *session) bool {
		if now.Sub(v.lastActive) >= SessionTTL {
			txn.Delete(k)
		}
		return true
	})
	c := *s
	c.sessions = txn.CommitOnly()
	m := *s.meta
	m.sessionsSwept = now
	c.meta = &m
	return &c
}

// Sessions returns how many client sessions the state holds.
func (s *State) Sessions() int { return s.sessions.Len() }

func withSession(sessions *iradix.Tree[*session], id string, sess *session) *iradix.Tree[*session] {
	t, _, _ := sessions.Insert([]byte(id), sess)
	return t
}
