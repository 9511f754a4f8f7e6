package state

import (
	"slices"
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
	results       []sessionResult // ordered by sequence
}

type sessionResult struct {
	seq    uint64
	result []byte // encoded storepb.Result
}

// answered returns the recorded result of a retried command, or why it is
// not answered from the session.
func (s *session) answered(req *storepb.ClientRequest) (*storepb.Result, bool) {
	for _, r := range s.results {
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
func (s *session) record(req *storepb.ClientRequest, now time.Time, res *storepb.Result) *session {
	next := &session{lastActive: now, lowestPending: max(s.lowestPending, req.GetLowestPending())}
	for _, r := range s.results {
		if r.seq >= next.lowestPending {
			next.results = append(next.results, r)
		}
	}
	if req.GetSequence() >= next.lowestPending {
		if enc, err := proto.Marshal(res); err == nil {
			next.results = append(next.results, sessionResult{seq: req.GetSequence(), result: enc})
			slices.SortFunc(next.results, func(a, b sessionResult) int {
				switch {
				case a.seq < b.seq:
					return -1
				case a.seq > b.seq:
					return 1
				}
				return 0
			})
		}
	}
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
