package raftstore

import (
	"math"
	"sync"
	"time"
)

// How long a silent leader is given.
//
// A voter counts its leader gone after a heartbeat timeout without a word
// from it (votes.go). That timeout is chosen for a member that gets the
// CPU when it needs it: the leader's words then arrive every 100 to 200 ms
// at the defaults, and a 500 ms silence means the leader is gone. On a
// machine whose CPU is taken (a hundred pods' hooks on a few cores, a pod
// at its CPU limit) the leader's goroutines and the voter's own wait their
// turn for hundreds of milliseconds, the words come late, and the voters
// stand for election against a leader that is only slow. The new leader is
// just as slow, and has more to do (every member must be caught up with
// it, and a member too far behind is sent a snapshot): measured at 100
// units on two cores, a storm of relation-created hooks drove the group to
// an election every few seconds, and it went on after the hooks had ended
// (BENCHMARKS.md).
//
// So a voter measures how its leader's words arrive: the gaps between two
// words of one term (one leader), the longest of them kept and halved
// every silenceGapHalfLife. It counts the leader gone after twice the
// longest recent gap, never less than the group's heartbeat timeout and
// never more than maxSilenceFactor of it: a group whose leader speaks on
// time detects a dead leader as fast as before, and one on a starved
// machine stops deposing a slow leader (and takes up to maxSilenceFactor
// heartbeat timeouts to replace a dead one). A gap that ends with another
// term's word is not counted: it is an election's, not the leader's pace.
// Only the time a voter waits changes; what it takes to win an election
// does not, so this changes no safety property (raft's safety never rests
// on timing, and linearizable reads here ask a quorum, read.go).

// maxSilenceFactor bounds the silence a voter allows its leader, in
// heartbeat timeouts.
const maxSilenceFactor = 4

// silenceGapHalfLife is how fast the longest recent gap between two of
// the leader's words is forgotten: it is halved every silenceGapHalfLife.
const silenceGapHalfLife = time.Minute

// silenceBound tracks the gaps between a leader's words to this member and
// gives the silence after which it counts the leader gone.
type silenceBound struct {
	base time.Duration // the group's heartbeat timeout
	mu   sync.Mutex
	term uint64    // term of the last word heard
	last time.Time // when it was heard
	gap  time.Duration
	// gapAt is when gap was last set (it decays from there).
	gapAt time.Time
}

// heard records a word from the leader of term at now, heard as a voter
// or not, and returns the silence allowed from now on (bound): only the
// gaps between two words heard as a voter count (a non-voter's heartbeats
// are paced far apart, heartbeat.go).
func (b *silenceBound) heard(term uint64, now time.Time, voter bool) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !voter {
		b.term, b.last = 0, time.Time{}
		return b.allowed(now)
	}
	if term == b.term && !b.last.IsZero() && now.After(b.last) {
		if g := now.Sub(b.last); g > b.decayed(now) {
			b.gap, b.gapAt = g, now
		}
	}
	b.term, b.last = term, now
	return b.allowed(now)
}

// decayed is the longest recent gap as of now; b.mu is held.
func (b *silenceBound) decayed(now time.Time) time.Duration {
	if b.gap <= 0 {
		return 0
	}
	age := now.Sub(b.gapAt)
	if age <= 0 {
		return b.gap
	}
	return time.Duration(float64(b.gap) * math.Exp2(-float64(age)/float64(silenceGapHalfLife)))
}

// bound is the silence after which this member counts its leader gone, as
// of now: twice the longest recent gap, within [base, maxSilenceFactor ×
// base].
func (b *silenceBound) bound(now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.allowed(now)
}

// allowed is bound with b.mu held.
func (b *silenceBound) allowed(now time.Time) time.Duration {
	return min(maxSilenceFactor*b.base, max(b.base, 2*b.decayed(now)))
}
