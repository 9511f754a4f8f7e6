package sidecar

// bagkeeper debug-log (Juju's `juju debug-log`, for the group rather than
// the machines): the group's hook and membership events, derived by this
// member from what it applies, with no replicated record of their own.
// Each state the member publishes is compared with the one before
// (diffViews): units claimed, taken over, released and removed, pods
// waiting for a unit, hooks recorded as running and committed (the unit's
// cursor), hook errors, actions, relations, the application's leader. The
// raft configuration and the raft leader are not in that state: they are
// read beside it, when the state changes and every half second, and
// compared too.
//
// An event's time comes from the replicated record when it has one (a
// unit's claim, release and removal, an action's times, a hook error's
// start, the lease's acquisition: the leader's clock when it committed the
// change); otherwise it is this member's clock when it saw the change, and
// the event says so (LocalTime).

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/bagkeeper/bagkeeper/agent"
	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

// logView is what debug-log compares: the replicated state, and the raft
// configuration and leader as this member sees them.
type logView struct {
	st *state.State
	// members maps each member of the configuration to its suffrage
	// (nil: not known, so not compared).
	members    map[string]raft.ServerSuffrage
	raftLeader string
}

// logEvent is one event of debug-log.
type logEvent struct {
	Time      time.Time
	LocalTime bool
	Index     uint64
	Unit      string
	Member    string
	Kind      string
	Details   string
	Summary   bool
}

func (e logEvent) pb() *adminpb.DebugLogEvent {
	return &adminpb.DebugLogEvent{TimeUnixNano: nanos(e.Time), LocalTime: e.LocalTime, Index: e.Index, Unit: e.Unit,
		Member: e.Member, Kind: e.Kind, Details: e.Details, Summary: e.Summary}
}

// eventList gathers events, giving each the index, and the local time
// when it has none of its own.
type eventList struct {
	index uint64
	now   time.Time
	out   []logEvent
}

func (l *eventList) add(at time.Time, unit, member, kind, details string) {
	e := logEvent{Time: at, Index: l.index, Unit: unit, Member: member, Kind: kind, Details: details}
	if at.IsZero() {
		e.Time, e.LocalTime = l.now, true
	}
	l.out = append(l.out, e)
}

func holder(u *state.Unit) string {
	if u.Pod != "" {
		return fmt.Sprintf("member %s (pod %s)", u.Member, u.Pod)
	}
	return "member " + u.Member
}

// diffViews returns the events that lead from prev to next, in a fixed
// order: membership, units, hooks, actions, relations, leadership. now is
// the local time of the change.
func diffViews(prev, next logView, now time.Time) []logEvent {
	l := &eventList{index: next.st.Index(), now: now}
	diffMembers(l, prev, next)
	ps, ns := prev.st, next.st
	// Units.
	for _, u := range ns.Units() {
		p, had := ps.Unit(u.Name)
		switch {
		case u.State == state.UnitActive && (!had || p.State != state.UnitActive):
			l.add(u.Claimed, u.Name, u.Member, "unit-claimed", "claimed by "+holder(u))
		case u.State == state.UnitActive && (p.Member != u.Member || p.Epoch != u.Epoch):
			l.add(u.Claimed, u.Name, u.Member, "unit-taken-over", fmt.Sprintf("taken over by %s from %s", holder(u), holder(p)))
		case u.State == state.UnitReleased && had && p.State != state.UnitReleased:
			l.add(u.Released, u.Name, u.Member, "unit-released", "released by "+holder(u)+reasonOf(u))
		case u.State == state.UnitRemoved && had && p.State != state.UnitRemoved:
			l.add(u.Removed, u.Name, u.Member, "unit-removed", "removed"+reasonOf(u))
		}
	}
	prevClaimants := map[string]bool{}
	for _, c := range ps.Claimants() {
		prevClaimants[c.Member] = true
	}
	for _, c := range ns.Claimants() {
		if !prevClaimants[c.Member] {
			l.add(c.Since, "", c.Member, "claimant-waiting", fmt.Sprintf("pod %s waits for a unit", c.Pod))
		}
		delete(prevClaimants, c.Member)
	}
	for _, m := range slices.Sorted(mapKeys(prevClaimants)) {
		l.add(time.Time{}, "", m, "claimant-gone", "no longer waits for a unit")
	}
	// Hooks: the units' cursors and hook errors.
	for _, u := range ns.Units() {
		diffCursor(l, u, ps, ns, diffHistory(l, u, ps, ns))
		pe, ne := ps.UnitExtra(u.Name), ns.UnitExtra(u.Name)
		switch {
		case ne.HookError != "" && (ne.HookError != pe.HookError || ne.HookErrorMessage != pe.HookErrorMessage):
			l.add(ne.HookErrorSince, u.Name, u.Member, "hook-error", fmt.Sprintf("%s failed: %s", ne.HookError, ne.HookErrorMessage))
		case ne.HookError == "" && pe.HookError != "":
			l.add(time.Time{}, u.Name, u.Member, "hook-error-cleared", pe.HookError+" no longer fails")
		}
	}
	// Actions.
	for _, a := range ns.Actions() {
		p, had := ps.Action(a.ID)
		if !had {
			l.add(a.Enqueued, a.Unit, "", "action-queued", actionText(a))
		}
		if a.Status != state.ActionPending && (!had || p.Status == state.ActionPending) && !a.Started.IsZero() {
			l.add(a.Started, a.Unit, a.Member, "action-started", actionText(a)+" on pod "+a.Pod)
		}
		if a.Finished() && (!had || !p.Finished()) {
			d := actionText(a) + " " + a.Status
			if a.Message != "" {
				d += ": " + a.Message
			}
			l.add(a.Completed, a.Unit, a.Member, "action-finished", d)
		}
	}
	// Relations.
	for _, r := range ns.Relations() {
		if _, had := ps.Relation(r.ID); !had {
			l.add(time.Time{}, "", "", "relation-created", relationText(r))
		}
	}
	for _, r := range ps.Relations() {
		if _, has := ns.Relation(r.ID); !has {
			l.add(time.Time{}, "", "", "relation-removed", relationText(r))
		}
	}
	// The application's leader.
	if pl, nl := ps.Lease(), ns.Lease(); nl.Epoch != pl.Epoch || nl.Unit != pl.Unit {
		if nl.Unit != "" {
			l.add(nl.Acquired, nl.Unit, nl.Member, "leader", nl.Unit+" leads the application")
		} else {
			l.add(time.Time{}, pl.Unit, pl.Member, "leader", pl.Unit+" no longer leads the application")
		}
	}
	return l.out
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func reasonOf(u *state.Unit) string {
	if u.Reason == "" {
		return ""
	}
	return ": " + u.Reason
}

func actionText(a *state.Action) string {
	if a.Name == state.ExecAction {
		return fmt.Sprintf("%d (exec)", a.ID)
	}
	return fmt.Sprintf("%d (%s)", a.ID, a.Name)
}

func relationText(r *state.Relation) string {
	s := fmt.Sprintf("%s:%d (%s", r.Endpoint, r.ID, r.Interface)
	if r.Peer {
		s += ", peer"
	} else if r.RemoteApp != "" {
		s += ", with " + r.RemoteApp
		if r.RemoteEndpoint != "" {
			s += ":" + r.RemoteEndpoint
		}
	}
	return s + ")"
}

// diffHistory reports the hooks a unit's history gained between the two
// states, each with the time it ended and what it took, by the clock of
// the agent that ran it: every hook, also those committed in one burst.
// A failed one is said by its hook error. It reports whether the history
// said anything new (else the cursor is read; see diffCursor).
func diffHistory(l *eventList, u *state.Unit, ps, ns *state.State) bool {
	prev, next := ps.UnitExtra(u.Name).History, ns.UnitExtra(u.Name).History
	start := 0
	if n := len(prev); n > 0 {
		// The records after the last one prev has (the history drops its
		// oldest as it grows); all of them if prev's last is gone.
		last := prev[n-1]
		for i := len(next) - 1; i >= 0; i-- {
			if sameRecord(next[i], last) {
				start = i + 1
				break
			}
		}
	}
	for _, r := range next[start:] {
		if !r.OK {
			continue
		}
		d := r.Hook
		if r.Relation != "" || r.RemoteUnit != "" {
			d += " (" + strings.TrimSpace(r.Relation+" "+r.RemoteUnit) + ")"
		}
		l.add(r.Started.Add(r.Duration), u.Name, r.Member, "hook-committed", d+" in "+r.Duration.Round(time.Millisecond).String())
	}
	return start < len(next)
}

func sameRecord(a, b state.HookRecord) bool {
	return a.Hook == b.Hook && a.Relation == b.Relation && a.RemoteUnit == b.RemoteUnit && a.Member == b.Member &&
		a.Started.Equal(b.Started) && a.Duration == b.Duration && a.OK == b.OK
}

// diffCursor derives a unit's hook events from its cursor: the hook
// recorded as running (Running) and, when the unit's history says
// nothing (a record written by an older agent), the hook committed (the
// cursor advanced). A commit records the next hook to run in the same
// write.
func diffCursor(l *eventList, u *state.Unit, ps, ns *state.State, committedSaid bool) {
	prevB, nextB := ps.Cursor(u.Name), ns.Cursor(u.Name)
	if bytes.Equal(prevB, nextB) {
		return
	}
	pc, perr := agent.DecodeCursor(prevB)
	nc, nerr := agent.DecodeCursor(nextB)
	if perr != nil || nerr != nil {
		l.add(time.Time{}, u.Name, u.Member, "hook-committed", "the unit's cursor changed (it could not be read)")
		return
	}
	pr, nr := pc.Running, nc.Running
	pc.Running, nc.Running = nil, nil
	advanced := !bytes.Equal(pc.Encode(), nc.Encode())
	sameRunning := pr != nil && nr != nil && *pr == *nr
	switch {
	case committedSaid:
	case pr != nil && (!sameRunning || advanced):
		l.add(time.Time{}, u.Name, u.Member, "hook-committed", hookText(pr, ns, ps))
	case pr == nil && advanced:
		l.add(time.Time{}, u.Name, u.Member, "hook-committed", "the unit's cursor advanced")
	}
	if nr != nil && (!sameRunning || advanced) {
		l.add(time.Time{}, u.Name, u.Member, "hook-running", hookText(nr, ns, ps))
	}
}

// hookText names a hook as the charm sees it ("db-relation-changed"),
// with its relation and remote unit or application.
func hookText(id *agent.HookID, states ...*state.State) string {
	s := id.String()
	if !id.InRelation || !strings.HasPrefix(id.Name, "relation-") {
		return s
	}
	for _, st := range states {
		if r, ok := st.Relation(id.Relation); ok {
			return r.Endpoint + "-" + s
		}
	}
	return s
}

// diffMembers compares the raft configurations and leaders.
func diffMembers(l *eventList, prev, next logView) {
	if prev.members != nil && next.members != nil {
		for _, id := range slices.Sorted(mapKeys(next.members)) {
			ns := next.members[id]
			ps, had := prev.members[id]
			switch {
			case !had:
				l.add(time.Time{}, "", id, "member-added", "joined the configuration as a "+suffrageText(ns))
			case ps != raft.Voter && ns == raft.Voter:
				l.add(time.Time{}, "", id, "member-promoted", "is a voter")
			case ps == raft.Voter && ns != raft.Voter:
				l.add(time.Time{}, "", id, "member-demoted", "is a "+suffrageText(ns))
			}
		}
		for _, id := range slices.Sorted(mapKeys(prev.members)) {
			if _, has := next.members[id]; !has {
				l.add(time.Time{}, "", id, "member-removed", "left the configuration")
			}
		}
	}
	if prev.raftLeader != next.raftLeader {
		if next.raftLeader == "" {
			l.add(time.Time{}, "", prev.raftLeader, "raft-leader", "no raft leader is known (an election is under way, or this member is cut off)")
		} else {
			l.add(time.Time{}, "", next.raftLeader, "raft-leader", "leads the raft group")
		}
	}
}

func suffrageText(s raft.ServerSuffrage) string {
	switch s {
	case raft.Voter:
		return "voter"
	case raft.Nonvoter:
		return "non-voter"
	}
	return "staging member"
}

// summarize describes the view as events: the members and the raft
// leader, the units and who holds them, the application's leader, the
// relations, the hooks running or failing, the actions not finished.
func summarize(v logView, now time.Time) []logEvent {
	l := &eventList{index: v.st.Index(), now: now}
	for _, id := range slices.Sorted(mapKeys(v.members)) {
		l.add(time.Time{}, "", id, "member", "a "+suffrageText(v.members[id]))
	}
	if v.raftLeader != "" {
		l.add(time.Time{}, "", v.raftLeader, "raft-leader", "leads the raft group")
	}
	st := v.st
	for _, u := range st.Units() {
		switch u.State {
		case state.UnitActive:
			l.add(u.Claimed, u.Name, u.Member, "unit", "active, held by "+holder(u))
		case state.UnitReleased:
			l.add(u.Released, u.Name, u.Member, "unit", "released by "+holder(u)+reasonOf(u))
		case state.UnitRemoved:
			l.add(u.Removed, u.Name, u.Member, "unit", "removed"+reasonOf(u))
		}
	}
	for _, c := range st.Claimants() {
		l.add(c.Since, "", c.Member, "claimant-waiting", fmt.Sprintf("pod %s waits for a unit", c.Pod))
	}
	if ls := st.Lease(); ls.Unit != "" {
		l.add(ls.Acquired, ls.Unit, ls.Member, "leader", ls.Unit+" leads the application")
	}
	for _, r := range st.Relations() {
		l.add(time.Time{}, "", "", "relation", relationText(r))
	}
	for _, u := range st.Units() {
		if u.State == state.UnitRemoved {
			continue
		}
		if c, err := agent.DecodeCursor(st.Cursor(u.Name)); err == nil && c.Running != nil {
			l.add(time.Time{}, u.Name, u.Member, "hook-running", hookText(c.Running, st))
		}
		if e := st.UnitExtra(u.Name); e.HookError != "" {
			l.add(e.HookErrorSince, u.Name, u.Member, "hook-error", fmt.Sprintf("%s failed: %s", e.HookError, e.HookErrorMessage))
		}
	}
	for _, a := range st.Actions() {
		switch a.Status {
		case state.ActionPending:
			l.add(a.Enqueued, a.Unit, "", "action-queued", actionText(a))
		case state.ActionRunning:
			l.add(a.Started, a.Unit, a.Member, "action-started", actionText(a)+" on pod "+a.Pod)
		}
	}
	for i := range l.out {
		l.out[i].Summary = true
	}
	return l.out
}

// debugLogBuffer is how many events wait for a slow reader; past it, new
// events are dropped and counted.
const debugLogBuffer = 1024

// eventQueue holds the events not sent yet, at most max of them; those
// that do not fit are counted, and the reader is told how many it lost.
type eventQueue struct {
	mu      sync.Mutex
	events  []logEvent
	dropped int
	max     int
	ready   chan struct{} // holds a token while there is something to take
}

func newEventQueue(max int) *eventQueue {
	return &eventQueue{max: max, ready: make(chan struct{}, 1)}
}

func (q *eventQueue) push(evs []logEvent) {
	if len(evs) == 0 {
		return
	}
	q.mu.Lock()
	for _, e := range evs {
		if len(q.events) >= q.max {
			q.dropped++
			continue
		}
		q.events = append(q.events, e)
	}
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// take returns the events queued and, after them, a "dropped" event if
// any were lost since the last take.
func (q *eventQueue) take(now time.Time) []logEvent {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.events
	q.events = nil
	if q.dropped > 0 {
		out = append(out, logEvent{Time: now, LocalTime: true, Kind: "dropped",
			Details: fmt.Sprintf("%d events dropped: this reader fell behind", q.dropped)})
		q.dropped = 0
	}
	return out
}

// logWatcher reads views of the member.
type logWatcher struct {
	n   adminStore
	now func() time.Time
}

func (w logWatcher) view() logView {
	v := logView{st: w.n.State(), raftLeader: w.n.Status().LeaderID}
	if ms, err := w.n.ListMembers(); err == nil {
		v.members = map[string]raft.ServerSuffrage{}
		for _, m := range ms {
			v.members[string(m.Server.ID)] = m.Server.Suffrage
		}
	}
	return v
}

// wanted filters events by unit (every event when units is empty).
func wanted(units []string, e logEvent) bool {
	return len(units) == 0 || e.Kind == "dropped" || slices.Contains(units, e.Unit)
}

func (a *adminServer) DebugLog(req *adminpb.DebugLogRequest, stream adminpb.Admin_DebugLogServer) error {
	ctx := stream.Context()
	w := logWatcher{n: a.n, now: time.Now}
	units := req.GetUnits()
	send := func(evs []logEvent) error {
		for _, e := range evs {
			if !wanted(units, e) {
				continue
			}
			if err := stream.Send(e.pb()); err != nil {
				return err
			}
		}
		return nil
	}
	changes, _ := a.n.(interface{ Changed() <-chan struct{} })
	var changed <-chan struct{}
	if changes != nil {
		changed = changes.Changed()
	}
	prev := w.view()
	if err := send(summarize(prev, w.now())); err != nil {
		return err
	}
	if req.GetNoTail() {
		return nil
	}
	// The events are made here and sent by another goroutine: a reader
	// that does not keep up costs at most the queue's room.
	q := newEventQueue(debugLogBuffer)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sendErr := make(chan error, 1)
	go func() {
		for {
			select {
			case <-ctx.Done():
				sendErr <- nil
				return
			case <-q.ready:
			}
			if err := send(q.take(w.now())); err != nil {
				sendErr <- err
				cancel()
				return
			}
		}
	}()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			cancel()
			return <-sendErr
		case <-changed:
			changed = changes.Changed()
		case <-tick.C:
		}
		next := w.view()
		evs := diffViews(prev, next, w.now())
		if len(units) > 0 {
			evs = slices.DeleteFunc(evs, func(e logEvent) bool { return !wanted(units, e) })
		}
		q.push(evs)
		prev = next
	}
}
