package sidecar

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/bagkeeper/bagkeeper/agent"
	"github.com/bagkeeper/bagkeeper/raftstore"
	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/state/statetest"
	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
	"github.com/bagkeeper/bagkeeper/test/wait"
)

// eventsText renders events one a line: unit or member, kind, details,
// and "(local)" for a time of this member's clock.
func eventsText(evs []logEvent) string {
	var b strings.Builder
	for _, e := range evs {
		who := e.Unit
		if who == "" {
			who = e.Member
		}
		if who == "" {
			who = "-"
		}
		fmt.Fprintf(&b, "%s %s %s", who, e.Kind, e.Details)
		if e.LocalTime {
			b.WriteString(" (local)")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// step applies ops and returns the events between the states before and
// after, checking that each has the new state's index and a time.
func step(t *testing.T, s *statetest.Store, ops ...*storepb.Op) string {
	t.Helper()
	prev := logView{st: s.State()}
	s.Advance(time.Second)
	s.Must(ops...)
	next := logView{st: s.State()}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	evs := diffViews(prev, next, now)
	for _, e := range evs {
		if e.Index != next.st.Index() || e.Time.IsZero() || e.LocalTime != e.Time.Equal(now) || e.Summary {
			t.Errorf("event %+v: index %d, local time %v", e, next.st.Index(), now)
		}
		// A committed hook's time is when it ended by its agent's clock
		// (TestDebugLogShowsEveryHookOfABurst), the others' the entry's.
		if !e.LocalTime && e.Kind != "hook-committed" && !e.Time.Equal(s.Now()) {
			t.Errorf("event %+v: the entry's time is %v", e, s.Now())
		}
	}
	return eventsText(evs)
}

func cursor(c agent.Cursor) []byte { return c.Encode() }

func TestDebugLogDiffsUnitsHooksActionsRelationsAndLeadership(t *testing.T) {
	s := statetest.New(t, "web")
	for _, c := range []struct {
		ops  []*storepb.Op
		want string
	}{
		{[]*storepb.Op{state.ClaimUnitOp("m0", "web-0", 0, 2), state.ClaimUnitOp("m1", "web-1", 1, 2)},
			"web/0 unit-claimed claimed by member m0 (pod web-0)\nweb/1 unit-claimed claimed by member m1 (pod web-1)\n"},
		{[]*storepb.Op{state.ClaimUnitOp("m2", "web-2", -1, 2)}, "m2 claimant-waiting pod web-2 waits for a unit\n"},
		{[]*storepb.Op{state.ClaimLeaseOp("web/0", "m0", int64(time.Minute))}, "web/0 leader web/0 leads the application\n"},
		{[]*storepb.Op{state.EnsureRelationOp("replicas", "web-peers", true, "", "")}, "- relation-created replicas:0 (web-peers, peer) (local)\n"},
		{[]*storepb.Op{state.SetCursorOp("web/0", cursor(agent.Cursor{Running: &agent.HookID{Name: "install"}}))},
			"web/0 hook-running install (local)\n"},
		// A commit that records the next hook in the same write.
		{[]*storepb.Op{state.SetCursorOp("web/0", cursor(agent.Cursor{Installed: true, Running: &agent.HookID{Name: "leader-elected"}}))},
			"web/0 hook-committed install (local)\nweb/0 hook-running leader-elected (local)\n"},
		{[]*storepb.Op{state.SetCursorOp("web/0", cursor(agent.Cursor{Installed: true, Running: &agent.HookID{Name: "relation-created", InRelation: true}}))},
			"web/0 hook-committed leader-elected (local)\nweb/0 hook-running replicas-relation-created (relation 0) (local)\n"},
		{[]*storepb.Op{state.SetCursorOp("web/0", cursor(agent.Cursor{Installed: true, Running: &agent.HookID{Name: "leader-elected"}}))},
			"web/0 hook-committed replicas-relation-created (relation 0) (local)\nweb/0 hook-running leader-elected (local)\n"},
		{[]*storepb.Op{state.SetHookErrorOp("web/0", "leader-elected", "exit status 1")},
			"web/0 hook-error leader-elected failed: exit status 1\n"},
		{[]*storepb.Op{state.SetCursorOp("web/0", cursor(agent.Cursor{Installed: true, LeaderSeen: true})), state.SetHookErrorOp("web/0", "", "")},
			"web/0 hook-committed leader-elected (local)\nweb/0 hook-error-cleared leader-elected no longer fails (local)\n"},
		// The same hook again (update-status twice): committed, then running.
		{[]*storepb.Op{state.SetCursorOp("web/0", cursor(agent.Cursor{Installed: true, LeaderSeen: true, Running: &agent.HookID{Name: "update-status"}}))},
			"web/0 hook-running update-status (local)\n"},
		{[]*storepb.Op{state.SetCursorOp("web/0", cursor(agent.Cursor{Installed: true, LeaderSeen: true, UpdateStatus: 5, Running: &agent.HookID{Name: "update-status"}}))},
			"web/0 hook-committed update-status (local)\nweb/0 hook-running update-status (local)\n"},
		{[]*storepb.Op{state.EnqueueActionOp("web/1", "backup", nil), state.EnqueueActionOp("web/1", state.ExecAction, agent.ExecParamsJSON("true", 0))},
			"web/1 action-queued 1 (backup)\nweb/1 action-queued 2 (exec)\n"},
		{[]*storepb.Op{state.StartActionOp(1, "m1", "web-1")}, "web/1 action-started 1 (backup) on pod web-1\n"},
		{[]*storepb.Op{state.FinishActionOp(1, state.ActionFailed, "disk full", nil, nil)}, "web/1 action-finished 1 (backup) failed: disk full\n"},
		{[]*storepb.Op{state.ReleaseUnitOp("web/1", "m1", "its pod stopped")},
			"web/1 unit-released released by member m1 (pod web-1): its pod stopped\n"},
		// The waiting pod gets the released unit.
		{[]*storepb.Op{state.ClaimUnitOp("m2", "web-2", -1, 2)},
			"web/1 unit-claimed claimed by member m2 (pod web-2)\nm2 claimant-gone no longer waits for a unit (local)\n"},
		{[]*storepb.Op{state.ClaimUnitOp("m3", "web-0b", 0, 2)},
			"web/0 unit-taken-over taken over by member m3 (pod web-0b) from member m0 (pod web-0)\n"},
		{[]*storepb.Op{state.ClaimLeaseOp("web/1", "m2", int64(time.Minute))}, "web/1 leader web/1 leads the application\n"},
		{[]*storepb.Op{state.RemoveRelationOp(0)}, "- relation-removed replicas:0 (web-peers, peer) (local)\n"},
	} {
		if c.ops[0].GetClaimLease().GetUnit() == "web/1" {
			s.Advance(2 * time.Minute) // web/0's lease ran out
		}
		if got := step(t, s, c.ops...); got != c.want {
			t.Errorf("%v:\ngot\n%s\nwant\n%s", c.ops, got, c.want)
		}
	}
	// Removing the unit fails its actions and ends its lease: all show.
	got := step(t, s, state.ReleaseUnitOp("web/1", "m2", "scaled down"), state.RemoveUnitOp("web/1", 0, "scaled down"))
	if want := "web/1 unit-removed removed: scaled down\nweb/1 action-finished 2 (exec) failed: the unit was removed before the action finished\n" +
		"web/1 leader web/1 no longer leads the application (local)\n"; got != want {
		t.Errorf("removal:\ngot\n%s\nwant\n%s", got, want)
	}
	// Nothing changed, nothing said.
	if evs := diffViews(logView{st: s.State()}, logView{st: s.State()}, time.Now()); len(evs) != 0 {
		t.Errorf("%v", evs)
	}
}

func TestDebugLogDiffsMembersAndTheRaftLeader(t *testing.T) {
	st := statetest.New(t, "web").State()
	v := func(leader string, members map[string]raft.ServerSuffrage) logView {
		return logView{st: st, raftLeader: leader, members: members}
	}
	now := time.Now()
	for _, c := range []struct {
		prev, next logView
		want       string
	}{
		{v("a", map[string]raft.ServerSuffrage{"a": raft.Voter}), v("a", map[string]raft.ServerSuffrage{"a": raft.Voter, "b": raft.Nonvoter}),
			"b member-added joined the configuration as a non-voter (local)\n"},
		{v("a", map[string]raft.ServerSuffrage{"a": raft.Voter, "b": raft.Nonvoter}), v("a", map[string]raft.ServerSuffrage{"a": raft.Voter, "b": raft.Voter}),
			"b member-promoted is a voter (local)\n"},
		{v("a", map[string]raft.ServerSuffrage{"a": raft.Voter, "b": raft.Voter}), v("b", map[string]raft.ServerSuffrage{"b": raft.Voter}),
			"a member-removed left the configuration (local)\nb raft-leader leads the raft group (local)\n"},
		{v("b", nil), v("", nil), "b raft-leader no raft leader is known (an election is under way, or this member is cut off) (local)\n"},
		// A configuration that could not be read is not compared.
		{v("", map[string]raft.ServerSuffrage{"a": raft.Voter}), v("", nil), ""},
	} {
		if got := eventsText(diffViews(c.prev, c.next, now)); got != c.want {
			t.Errorf("%+v -> %+v:\ngot\n%s\nwant\n%s", c.prev.members, c.next.members, got, c.want)
		}
	}
}

func TestDebugLogSummary(t *testing.T) {
	s := statetest.New(t, "web")
	s.Must(state.ClaimUnitOp("m0", "web-0", 0, 1), state.ClaimUnitOp("m1", "web-1", -1, 1), state.ClaimLeaseOp("web/0", "m0", int64(time.Minute)),
		state.EnsureRelationOp("replicas", "web-peers", true, "", ""),
		state.SetCursorOp("web/0", cursor(agent.Cursor{Running: &agent.HookID{Name: "install"}})),
		state.SetHookErrorOp("web/0", "install", "exit status 2"), state.EnqueueActionOp("web/0", "backup", nil))
	v := logView{st: s.State(), raftLeader: "m0", members: map[string]raft.ServerSuffrage{"m0": raft.Voter, "m1": raft.Nonvoter}}
	evs := summarize(v, time.Now())
	want := `m0 member a voter (local)
m1 member a non-voter (local)
m0 raft-leader leads the raft group (local)
web/0 unit active, held by member m0 (pod web-0)
m1 claimant-waiting pod web-1 waits for a unit
web/0 leader web/0 leads the application
- relation replicas:0 (web-peers, peer) (local)
web/0 hook-running install (local)
web/0 hook-error install failed: exit status 2
web/0 action-queued 1 (backup)
`
	if got := eventsText(evs); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	for _, e := range evs {
		if !e.Summary || e.Index != s.State().Index() {
			t.Errorf("%+v", e)
		}
	}
}

// A reader that does not keep up holds the queue at its bound; it learns
// how many events it lost, after those it keeps.
func TestDebugLogQueueIsBounded(t *testing.T) {
	q := newEventQueue(3)
	for i := range 10 {
		q.push([]logEvent{{Kind: fmt.Sprint(i)}})
	}
	if len(q.events) != 3 {
		t.Fatalf("%d events held", len(q.events))
	}
	got := q.take(time.Now())
	if len(got) != 4 || got[0].Kind != "0" || got[2].Kind != "2" || got[3].Kind != "dropped" || got[3].Details != "7 events dropped: this reader fell behind" {
		t.Fatalf("%+v", got)
	}
	q.push([]logEvent{{Kind: "next"}})
	if got := q.take(time.Now()); len(got) != 1 || got[0].Kind != "next" {
		t.Fatalf("%+v", got)
	}
}

// debugLogStore is the member as DebugLog reads it: a statetest store, one
// voter that leads.
type debugLogStore struct {
	adminStore
	s *statetest.Store
	// read counts the states read at each index (nil: not counted).
	read *readCounter
}

// readCounter counts how many times the debug log read the state at each
// index.
type readCounter struct {
	mu sync.Mutex
	at map[uint64]int
}

func (r *readCounter) times(index uint64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.at[index]
}

func (d debugLogStore) State() *state.State {
	st := d.s.State()
	if d.read != nil {
		d.read.mu.Lock()
		d.read.at[st.Index()]++
		d.read.mu.Unlock()
	}
	return st
}
func (d debugLogStore) Changed() <-chan struct{} { return d.s.Changed() }
func (d debugLogStore) Status() raftstore.Status { return raftstore.Status{LeaderID: "m0"} }
func (d debugLogStore) ListMembers() ([]raftstore.MemberStatus, error) {
	return []raftstore.MemberStatus{{Server: raft.Server{ID: "m0", Suffrage: raft.Voter}}}, nil
}

// debugLogStream is a reader that stops reading after the summary until
// let go.
type debugLogStream struct {
	adminpb.Admin_DebugLogServer
	ctx     context.Context
	mu      sync.Mutex
	got     []*adminpb.DebugLogEvent
	stalled chan struct{} // closed to let the reader go on
}

func (s *debugLogStream) Context() context.Context { return s.ctx }
func (s *debugLogStream) Send(e *adminpb.DebugLogEvent) error {
	if !e.GetSummary() {
		<-s.stalled
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, e)
	return nil
}

func (s *debugLogStream) events() []*adminpb.DebugLogEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

// A reader that stops reading costs the sidecar a bounded number of
// events; once it reads again it gets those kept and how many it lost.
func TestDebugLogSlowReaderLosesEventsNotMemory(t *testing.T) {
	s := statetest.New(t, "web")
	s.Must(state.ClaimUnitOp("m0", "web-0", 0, 1))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream := &debugLogStream{ctx: ctx, stalled: make(chan struct{})}
	read := &readCounter{at: map[uint64]int{}}
	a := &adminServer{n: debugLogStore{s: s, read: read}}
	done := make(chan error, 1)
	go func() { done <- a.DebugLog(&adminpb.DebugLogRequest{}, stream) }()
	wait.Until(t, 10*time.Second, "the summary", func() error {
		if n := len(stream.events()); n != 3 { // the member, the raft leader, the unit
			return fmt.Errorf("%d events", n)
		}
		return nil
	})
	// 900 actions queued and cancelled: 1800 events, more than the room.
	const perCommand, commands = 100, 9
	for c := range commands {
		var ops []*storepb.Op
		for i := range perCommand {
			ops = append(ops, state.EnqueueActionOp("web/0", "backup", nil),
				state.FinishActionOp(int64(c*perCommand+i+1), state.ActionCancelled, "", nil, nil))
		}
		s.Must(ops...)
	}
	// The events must all be made while the reader stalls: the debug log
	// reads the state after each change and on a tick; a second read of
	// the last state means the events of the first are queued.
	last := s.State().Index()
	wait.Until(t, 10*time.Second, "the debug log to read the last state twice", func() error {
		if n := read.times(last); n < 2 {
			return fmt.Errorf("read %d times", n)
		}
		return nil
	})
	close(stream.stalled)
	var lost, kept int
	wait.Until(t, 10*time.Second, "every event to be sent or counted lost", func() error {
		lost, kept = 0, 0
		for _, e := range stream.events()[3:] {
			if e.GetKind() == "dropped" {
				var n int
				fmt.Sscanf(e.GetDetails(), "%d", &n)
				lost += n
				continue
			}
			kept++
		}
		if lost+kept != 2*perCommand*commands {
			return fmt.Errorf("%d kept, %d lost", kept, lost)
		}
		return nil
	})
	if lost == 0 || kept > 2*debugLogBuffer {
		t.Fatalf("%d kept, %d lost: the room is %d", kept, lost, debugLogBuffer)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Hooks committed in one burst (several commits applied between two looks)
// each show, from the unit's hook history, with when they ended and what
// they took; the cursor then says nothing more about them.
func TestDebugLogShowsEveryHookOfABurst(t *testing.T) {
	s := statetest.New(t, "web")
	step(t, s, state.ClaimUnitOp("m0", "web-0", 0, 1), state.EnsureRelationOp("replicas", "web-peers", true, "", ""))
	at := s.Now()
	rec := func(hook, rel, remote string, started time.Time, ok bool) *storepb.Op {
		return state.RecordHookOp("web/0", state.HookRecord{Hook: hook, Relation: rel, RemoteUnit: remote, OK: ok, Started: started, Duration: 120 * time.Millisecond, Member: "m0"})
	}
	got := step(t, s,
		rec("install", "", "", at, true),
		rec("replicas-relation-created", "replicas:0", "", at.Add(time.Second), true),
		rec("config-changed", "", "", at.Add(2*time.Second), false),
		state.SetCursorOp("web/0", cursor(agent.Cursor{Installed: true, Running: &agent.HookID{Name: "config-changed"}})))
	want := "web/0 hook-committed install in 120ms\n" +
		"web/0 hook-committed replicas-relation-created (replicas:0) in 120ms\n" +
		"web/0 hook-running config-changed (local)\n"
	if got != want {
		t.Errorf("a burst:\ngot\n%s\nwant\n%s", got, want)
	}
	prev := logView{st: s.State()}
	s.Must(rec("update-status", "", "", at.Add(5*time.Second), true))
	if evs := diffViews(prev, logView{st: s.State()}, time.Now()); len(evs) != 1 || !evs[0].Time.Equal(at.Add(5*time.Second+120*time.Millisecond)) || evs[0].LocalTime {
		t.Errorf("a committed hook's time is when it ended by its agent's clock: %+v", evs)
	}
	// One more: only it shows.
	if got, want := step(t, s, rec("replicas-relation-joined", "replicas:0", "web/1", at.Add(3*time.Second), true)),
		"web/0 hook-committed replicas-relation-joined (replicas:0 web/1) in 120ms\n"; got != want {
		t.Errorf("the next hook:\ngot\n%s\nwant\n%s", got, want)
	}
}
