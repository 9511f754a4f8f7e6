package raftstore

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestPlanKeepsVotersAtTargetSafely(t *testing.T) {
	now := t0.Add(time.Hour)
	policy := planPolicy{voters: 3, stabilization: 5 * time.Second, maxLag: 10, deadVoterAfter: time.Minute, deadNonvoterAfter: 10 * time.Minute}
	healthy := func(id string, voter bool, since time.Duration, applied uint64) MemberHealth {
		return MemberHealth{ID: raft.ServerID(id), Address: raft.ServerAddress(id + ":1"), Voter: voter, Healthy: true, Since: now.Add(-since), AppliedIndex: applied}
	}
	dead := func(id string, voter bool, since time.Duration) MemberHealth {
		return MemberHealth{ID: raft.ServerID(id), Address: raft.ServerAddress(id + ":1"), Voter: voter, Since: now.Add(-since)}
	}
	const self = "a-0/x"
	cases := []struct {
		name    string
		members []MemberHealth
		want    actionKind
		wantID  string
	}{
		{
			name:    "stable cluster at target does nothing",
			members: []MemberHealth{healthy(self, true, time.Hour, 100), healthy("b-0/x", true, time.Hour, 100), healthy("c-0/x", true, time.Hour, 100), healthy("d-0/x", false, time.Hour, 100)},
		},
		{
			name:    "caught-up stable non-voter is promoted below target",
			members: []MemberHealth{healthy(self, true, time.Hour, 100), healthy("b-0/x", true, time.Hour, 100), healthy("c-0/y", false, time.Minute, 95)},
			want:    actPromote, wantID: "c-0/y",
		},
		{
			name:    "non-voter healthy for less than the stabilization time waits",
			members: []MemberHealth{healthy(self, true, time.Hour, 100), healthy("b-0/x", true, time.Hour, 100), healthy("c-0/y", false, 2*time.Second, 100)},
		},
		{
			name:    "lagging non-voter is not promoted",
			members: []MemberHealth{healthy(self, true, time.Hour, 100), healthy("b-0/x", true, time.Hour, 100), healthy("c-0/y", false, time.Minute, 50)},
		},
		{
			name:    "the longest-healthy candidate is promoted first",
			members: []MemberHealth{healthy(self, true, time.Hour, 100), healthy("b-0/x", false, time.Minute, 100), healthy("c-0/y", false, 10*time.Minute, 100)},
			want:    actPromote, wantID: "c-0/y",
		},
		{
			name:    "superseded incarnation is removed once the new one is healthy",
			members: []MemberHealth{healthy(self, true, time.Hour, 100), healthy("b-0/x", true, time.Hour, 100), dead("c-0/old", true, time.Second), healthy("c-0/new", false, time.Second, 100)},
			want:    actRemove, wantID: "c-0/old",
		},
		{
			name:    "superseded voter is kept while dropping it would break quorum",
			members: []MemberHealth{healthy(self, true, time.Hour, 100), dead("b-0/x", true, time.Second), dead("c-0/old", true, time.Second), healthy("c-0/new", false, time.Second, 100)},
		},
		{
			name:    "dead voter is replaced by promoting a healthy non-voter",
			members: []MemberHealth{healthy(self, true, time.Hour, 100), healthy("b-0/x", true, time.Hour, 100), dead("c-0/x", true, 2*time.Minute), healthy("d-0/x", false, time.Hour, 100)},
			want:    actPromote, wantID: "d-0/x",
		},
		{
			name:    "dead voter is not replaced before its timeout",
			members: []MemberHealth{healthy(self, true, time.Hour, 100), healthy("b-0/x", true, time.Hour, 100), dead("c-0/x", true, 30*time.Second), healthy("d-0/x", false, time.Hour, 100)},
		},
		{
			name:    "dead voter without a replacement stays a voter",
			members: []MemberHealth{healthy(self, true, time.Hour, 100), healthy("b-0/x", true, time.Hour, 100), dead("c-0/x", true, time.Hour)},
		},
		{
			name:    "after the replacement the dead voter is demoted, not a healthy one",
			members: []MemberHealth{healthy(self, true, time.Hour, 100), healthy("b-0/x", true, time.Hour, 100), dead("c-0/x", true, 2*time.Minute), healthy("d-0/x", true, time.Hour, 100)},
			want:    actDemote, wantID: "c-0/x",
		},
		{
			name:    "above target with all healthy demotes one, never the leader",
			members: []MemberHealth{healthy(self, true, time.Hour, 100), healthy("b-0/x", true, time.Hour, 100), healthy("c-0/x", true, time.Hour, 100), healthy("d-0/x", true, time.Hour, 100), healthy("e-0/x", true, time.Hour, 100)},
			want:    actDemote, wantID: "e-0/x",
		},
		{
			name:    "dead non-voter is removed after its timeout",
			members: []MemberHealth{healthy(self, true, time.Hour, 100), healthy("b-0/x", true, time.Hour, 100), healthy("c-0/x", true, time.Hour, 100), dead("d-0/x", false, 11*time.Minute)},
			want:    actRemove, wantID: "d-0/x",
		},
		{
			name:    "dead non-voter is kept before its timeout",
			members: []MemberHealth{healthy(self, true, time.Hour, 100), healthy("b-0/x", true, time.Hour, 100), healthy("c-0/x", true, time.Hour, 100), dead("d-0/x", false, 9*time.Minute)},
		},
		{
			name:    "a leader that sees only itself never drops a voter",
			members: []MemberHealth{healthy(self, true, time.Hour, 100), dead("b-0/x", true, time.Hour), dead("c-0/x", true, time.Hour), dead("d-0/x", true, time.Hour), dead("e-0/x", true, time.Hour)},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			act, ok := plan(c.members, self, 100, now, policy)
			if c.want == 0 {
				if ok {
					t.Fatalf("unexpected action %s %s (%s)", act.kind, act.id, act.reason)
				}
				return
			}
			if !ok || act.kind != c.want || string(act.id) != c.wantID {
				t.Fatalf("got %v %s %s, want %s %s", ok, act.kind, act.id, c.want, c.wantID)
			}
		})
	}
}

// twoVotersAndANonVoter returns a health tracker whose leadership (of a/1)
// started at t0, and the configuration it watches: voters a/1 and b/1,
// non-voter c/1.
func twoVotersAndANonVoter() (*healthTracker, raft.Configuration) {
	h := newHealthTracker()
	h.reset(t0)
	return h, raft.Configuration{Servers: []raft.Server{
		{ID: "a/1", Address: "a:1", Suffrage: raft.Voter},
		{ID: "b/1", Address: "b:1", Suffrage: raft.Voter},
		{ID: "c/1", Address: "c:1", Suffrage: raft.Nonvoter},
	}}
}

// within is an unhealthy-after rule with one threshold for every member.
func within(d time.Duration) func(bool) time.Duration {
	return func(bool) time.Duration { return d }
}

// TestANonVoterIsUnhealthyAfterItsOwnThreshold: the view counts a member
// unhealthy after the threshold of its suffrage: a non-voter, which hears
// from the leader only once per heartbeat gap, stays healthy through a
// silence that makes a voter unhealthy.
func TestANonVoterIsUnhealthyAfterItsOwnThreshold(t *testing.T) {
	h, cfg := twoVotersAndANonVoter()
	rule := func(nonVoter bool) time.Duration {
		if nonVoter {
			return 5 * time.Second
		}
		return 2 * time.Second
	}
	h.answered("b/1", t0.Add(time.Second), rule(false))
	h.answered("c/1", t0.Add(time.Second), rule(true))
	v := h.view(cfg, "a/1", 1, t0.Add(4*time.Second), rule)
	if v[1].Healthy {
		t.Errorf("a voter silent for 3 s (threshold 2 s) counts as healthy: %+v", v[1])
	}
	if !v[2].Healthy || !v[2].Since.Equal(t0.Add(time.Second)) {
		t.Errorf("a non-voter silent for 3 s (threshold 5 s) counts as unhealthy: %+v", v[2])
	}
	// Its next answer, 4.5 s after the last, goes on with the same healthy
	// spell; one after more than 5 s starts a new one.
	h.answered("c/1", t0.Add(5500*time.Millisecond), rule(true))
	if v := h.view(cfg, "a/1", 1, t0.Add(6*time.Second), rule); !v[2].Healthy || !v[2].Since.Equal(t0.Add(time.Second)) {
		t.Errorf("after an answer within its threshold: %+v", v[2])
	}
	if v := h.view(cfg, "a/1", 1, t0.Add(11*time.Second), rule); v[2].Healthy {
		t.Errorf("a non-voter silent for 5.5 s (threshold 5 s) counts as healthy: %+v", v[2])
	}
	h.answered("c/1", t0.Add(12*time.Second), rule(true))
	if v := h.view(cfg, "a/1", 1, t0.Add(12*time.Second), rule); !v[2].Healthy || !v[2].Since.Equal(t0.Add(12*time.Second)) {
		t.Errorf("a non-voter back after its threshold: %+v", v[2])
	}
}

func TestHealthViewCountsFromLeadershipStart(t *testing.T) {
	h, cfg := twoVotersAndANonVoter()
	h.ok("b/1", t0.Add(time.Second), 7, 7, nil, 3*time.Second)
	h.ok("b/1", t0.Add(2*time.Second), 9, 9, nil, 3*time.Second)
	v := h.view(cfg, "a/1", 10, t0.Add(4*time.Second), within(3*time.Second))
	if !v[0].Healthy || !v[1].Healthy || v[1].AppliedIndex != 9 || !v[1].Since.Equal(t0.Add(time.Second)) {
		t.Fatalf("view %+v", v)
	}
	if v[2].Healthy || !v[2].Since.Equal(t0) {
		t.Fatalf("never-seen member must count from leadership start: %+v", v[2])
	}
	v = h.view(cfg, "a/1", 10, t0.Add(10*time.Second), within(3*time.Second))
	if v[1].Healthy || !v[1].Since.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("silent member: %+v", v[1])
	}
	// Coming back starts a new healthy streak.
	h.ok("b/1", t0.Add(11*time.Second), 12, 12, nil, 3*time.Second)
	v = h.view(cfg, "a/1", 12, t0.Add(11*time.Second), within(3*time.Second))
	if !v[1].Healthy || !v[1].Since.Equal(t0.Add(11*time.Second)) {
		t.Fatalf("returning member: %+v", v[1])
	}
}

// TestSettledMembersArePolledLess: a member that answers raft, had
// applied the leader's commit index at its last poll (and nothing was
// committed since) and may rest is polled every settledPollFactor
// intervals, and its health counts from its raft answers in between; one
// that was behind, silent to raft, never polled, not allowed to rest, or
// polled before the latest commit is polled every interval; raft answers
// alone keep a member healthy, and their end makes it unhealthy after
// UnhealthyAfter.
func TestSettledMembersArePolledLess(t *testing.T) {
	const every, unhealthy = time.Second, 3 * time.Second
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	h := newHealthTracker()
	h.reset(t0)
	cfg := raft.Configuration{Servers: []raft.Server{
		{ID: "a/1", Address: "a:1", Suffrage: raft.Voter},
		{ID: "b/1", Address: "b:1", Suffrage: raft.Voter},
	}}
	if !h.pollDue("b/1", at(0), every, every, 50, 0, true) {
		t.Fatal("a member never polled must be due")
	}
	h.answered("b/1", at(100*time.Millisecond), unhealthy)
	if !h.pollDue("b/1", at(time.Second), every, every, 50, 0, true) {
		t.Fatal("a member that only answered raft, never a poll, must be due")
	}
	h.ok("b/1", at(time.Second), 50, 50, nil, unhealthy)
	// Raft answers every 200 ms from here on.
	for d := time.Second + 200*time.Millisecond; d < 20*time.Second; d += 200 * time.Millisecond {
		h.answered("b/1", at(d), unhealthy)
		if d%every != 0 {
			continue
		}
		due := h.pollDue("b/1", at(d), every, every, 50, 0, true)
		if want := d >= time.Second+settledPollFactor*every-every/2 && d < time.Second+settledPollFactor*every+every; due != want {
			t.Fatalf("at %s: due %v, want %v", d, due, want)
		}
		if !h.pollDue("b/1", at(d), every, every, 50, 0, false) {
			t.Fatalf("at %s: a member that may not rest must be due every interval", d)
		}
		if !h.pollDue("b/1", at(d), every, every, 51, 0, true) {
			t.Fatalf("at %s: a member polled before the latest commit must be due", d)
		}
		if d == 11*time.Second {
			h.ok("b/1", at(d), 50, 50, nil, unhealthy)
		}
		if v := h.view(cfg, "a/1", 50, at(d), within(unhealthy)); !v[1].Healthy || !v[1].LastContact.Equal(at(d)) {
			t.Fatalf("at %s: a member answering raft must be healthy as of its last answer: %+v", d, v[1])
		}
	}
	// Behind at its last poll: polled every interval.
	h.ok("b/1", at(20*time.Second), 60, 61, nil, unhealthy)
	h.answered("b/1", at(21*time.Second-100*time.Millisecond), unhealthy)
	if !h.pollDue("b/1", at(21*time.Second), every, every, 61, 0, true) {
		t.Fatal("a member behind at its last poll must be due")
	}
	// Caught up, but raft has not heard from it for an interval: due, and
	// unhealthy once UnhealthyAfter has passed.
	h.ok("b/1", at(21*time.Second), 61, 61, nil, unhealthy)
	if h.pollDue("b/1", at(22*time.Second), every, every, 61, 0, true) {
		t.Fatal("a settled member answering within the interval must rest")
	}
	if !h.pollDue("b/1", at(22*time.Second+time.Millisecond), every, every, 61, 0, true) {
		t.Fatal("a member silent to raft for an interval must be due")
	}
	if v := h.view(cfg, "a/1", 61, at(25*time.Second), within(unhealthy)); v[1].Healthy {
		t.Fatalf("a member silent for longer than UnhealthyAfter must be unhealthy: %+v", v[1])
	}

	// A non-voter the leader heartbeats every 1.25 s rests when it
	// answered raft within the interval and one such gap, not after.
	const gap = 1250 * time.Millisecond
	h.ok("c/1", at(35*time.Second), 70, 70, nil, unhealthy)
	h.answered("c/1", at(40*time.Second-2*time.Second), unhealthy)
	if h.pollDue("c/1", at(40*time.Second), every, every+gap, 70, 0, true) {
		t.Fatal("a settled non-voter heard 2 s ago, heartbeated every 1.25 s, must rest")
	}
	if !h.pollDue("c/1", at(40*time.Second), every, every, 70, 0, true) {
		t.Fatal("a member heard 2 s ago must be due when it answers raft within the interval")
	}
	if !h.pollDue("c/1", at(40*time.Second+gap), every, every+gap, 70, 0, true) {
		t.Fatal("a non-voter silent to raft for longer than the interval and a gap must be due")
	}

	// Under a stream of writes (the commit index moved on since the last
	// poll, at 80): a member whose latest append stored what it was sent,
	// past that poll's commit index, rests; one whose latest append
	// failed (0) or that stores nothing new is due at once.
	h.ok("d/1", at(50*time.Second), 80, 80, nil, unhealthy)
	h.answered("d/1", at(51*time.Second-100*time.Millisecond), unhealthy)
	for _, tc := range []struct {
		stored uint64
		due    bool
	}{{95, false}, {80, false}, {0, true}, {79, true}} {
		if got := h.pollDue("d/1", at(51*time.Second), every, every, 90, tc.stored, true); got != tc.due {
			t.Fatalf("commit 90, polled at 80, latest append left its log at %d: due %v, want %v", tc.stored, got, tc.due)
		}
	}
	if !h.pollDue("d/1", at(51*time.Second), every, every, 90, 95, false) {
		t.Fatal("a member that may not rest must be due whatever it stored")
	}
}
