package raftstore

import (
	"testing"
	"time"
)

// TestTheSilenceAllowedFollowsTheLeadersPace: a voter allows its leader
// the group's heartbeat timeout while the leader's words come on time,
// twice the longest recent gap between two of them when they come late (up
// to maxSilenceFactor heartbeat timeouts), and forgets a late word with
// time; gaps across an election or heard as a non-voter do not count.
func TestTheSilenceAllowedFollowsTheLeadersPace(t *testing.T) {
	const hb = 500 * time.Millisecond
	t0 := time.Unix(1000, 0)
	b := &silenceBound{base: hb}
	at := t0
	word := func(term uint64, after time.Duration, voter bool) {
		at = at.Add(after)
		b.heard(term, at, voter)
	}
	// Within 1%: the longest gap decays continuously.
	check := func(what string, now time.Time, want time.Duration) {
		t.Helper()
		if got := b.bound(now); got < want-want/100 || got > want+want/100 {
			t.Fatalf("%s: allowed %s, want %s", what, got, want)
		}
	}
	check("nothing heard", t0, hb)
	for range 20 {
		word(1, 150*time.Millisecond, true)
	}
	check("words every 150ms", at, hb)
	word(1, 400*time.Millisecond, true)
	check("after a 400ms gap", at, 800*time.Millisecond)
	word(1, 100*time.Millisecond, true)
	check("a shorter gap after it", at, 800*time.Millisecond)
	check("a quarter of a half-life later", at.Add(silenceGapHalfLife/4), 673*time.Millisecond)
	check("a half-life later", at.Add(silenceGapHalfLife), hb)
	for range int(silenceGapHalfLife / (100 * time.Millisecond)) {
		word(1, 100*time.Millisecond, true)
	}
	word(1, 350*time.Millisecond, true)
	check("a 350ms gap once the 400ms one decayed below it", at, 700*time.Millisecond)
	word(1, 3*time.Second, true)
	check("a 3s gap", at, maxSilenceFactor*hb)

	// Gaps that are not the leader's pace.
	b = &silenceBound{base: hb}
	word(1, 0, true)
	word(2, 3*time.Second, true) // a new leader after an election
	check("the gap before a new term's first word", at, hb)
	word(2, 100*time.Millisecond, false)
	word(2, 1250*time.Millisecond, false) // a non-voter's paced heartbeats
	check("words heard as a non-voter", at, hb)
	word(2, 1250*time.Millisecond, true) // promoted
	check("the first word heard as a voter", at, hb)
	word(2, 300*time.Millisecond, true)
	check("a 300ms gap as a voter", at, 600*time.Millisecond)
}
