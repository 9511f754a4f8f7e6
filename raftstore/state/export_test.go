package state

import (
	"fmt"
	"strings"
)

// Dump renders a State canonically so that two States can be compared.
var Dump = dump

// KV renders Settings canonically.
var KV = kv

// SessionResults returns how many results the session of client keeps.
func SessionResults(s *State, client string) int {
	sess, ok := s.sessions.Get([]byte(client))
	if !ok {
		return -1
	}
	return len(sess.results())
}

// dump renders a State canonically so two States can be compared.
func dump(s *State) string {
	var b strings.Builder
	m := s.meta
	fmt.Fprintf(&b, "index=%d app=%s cluster=%s nextUnit=%d nextRel=%d leaderRev=%d lease=%+v swept=%d gen=%d/%s/%d\n", s.index, m.app, m.clusterID, m.nextUnit, m.nextRelation, m.leaderRev, m.lease, m.sessionsSwept.UnixNano(), m.generation, m.generationPlan, m.generationStarted.UnixNano())
	fmt.Fprintf(&b, "leader=%s\n", kv(m.leader))
	for _, r := range s.Relations() {
		fmt.Fprintf(&b, "rel %+v\n", *r)
		for _, bag := range s.Bags(r.ID) {
			fmt.Fprintf(&b, "  bag %s rev=%d mod=%d %s\n", bag.Owner, bag.Revision, bag.ModifiedIndex, kv(bag.Data))
		}
	}
	for _, u := range s.Units() {
		fmt.Fprintf(&b, "unit %+v charm=%s cursor=%x\n", *u, kv(s.CharmState(u.Name)), s.Cursor(u.Name))
	}
	walk(s.statuses, func(k []byte, v *Status) bool {
		fmt.Fprintf(&b, "status %s %s %q %s since=%d\n", k, v.Status, v.Message, v.DataJSON, v.Since.UnixNano())
		return true
	})
	walk(s.extras, func(k []byte, v *UnitExtra) bool {
		fmt.Fprintf(&b, "extra %s version=%q ports=%v err=%q %q %d\n", k, v.WorkloadVersion, v.Ports, v.HookError, v.HookErrorMessage, v.HookErrorSince.UnixNano())
		fmt.Fprintf(&b, "  failure tail=%q exit=%d attempt=%d next=%d retries=%d\n", v.HookErrorOutputTail, v.HookErrorExitCode, v.HookErrorAttempt, v.HookErrorNextAttempt.UnixNano(), v.RetryRequests)
		for _, h := range v.History {
			fmt.Fprintf(&b, "  hook %+v started=%d\n", h, h.Started.UnixNano())
		}
		return true
	})
	walk(s.sessions, func(k []byte, v *session) bool {
		fmt.Fprintf(&b, "session %s active=%d lowest=%d", k, v.lastActive.UnixNano(), v.lowestPending)
		for _, r := range v.results() {
			fmt.Fprintf(&b, " %d:%x", r.seq, r.result)
		}
		b.WriteString("\n")
		return true
	})
	walk(s.claimants, func(k []byte, v *Claimant) bool {
		fmt.Fprintf(&b, "claimant %s %+v\n", k, *v)
		return true
	})
	walk(s.secrets, func(k []byte, v *Secret) bool {
		fmt.Fprintf(&b, "secret %s %+v\n", k, *v)
		return true
	})
	walk(s.actions, func(_ []byte, a *Action) bool { // actions.go
		fmt.Fprintf(&b, "action %d %s %s %s params=%s msg=%q results=%s enq=%d start=%d done=%d by=%s/%s log=%d",
			a.ID, a.Unit, a.Name, a.Status, a.ParamsJSON, a.Message, a.ResultsJSON, a.Enqueued.UnixNano(), a.Started.UnixNano(), a.Completed.UnixNano(), a.Member, a.Pod, len(a.Log))
		for _, l := range a.Log {
			fmt.Fprintf(&b, " %d:%q", l.Time.UnixNano(), l.Message)
		}
		b.WriteString("\n")
		return true
	})
	return b.String()
}

func kv(m Settings) string {
	var parts []string
	for k, v := range m.All() { // in key order
		parts = append(parts, fmt.Sprintf("%q=%q", k, v))
	}
	return "{" + strings.Join(parts, ",") + "}"
}
