package state

import (
	"fmt"
	"strings"
)

// Dump renders a State canonically so that two States can be compared.
var Dump = dump

// KV renders Settings canonically.
var KV = kv

// Requests returns the remembered request ids, and the length of their
// time index.
func Requests(s *State) (ids []string, byTime int) {
	walk(s.requests, func(k []byte, _ *requestEntry) bool {
		ids = append(ids, string(k))
		return true
	})
	return ids, s.reqByTime.Len()
}

// dump renders a State canonically so two States can be compared.
func dump(s *State) string {
	var b strings.Builder
	m := s.meta
	fmt.Fprintf(&b, "index=%d app=%s cluster=%s nextUnit=%d nextRel=%d leaderRev=%d lease=%+v\n", s.index, m.app, m.clusterID, m.nextUnit, m.nextRelation, m.leaderRev, m.lease)
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
		return true
	})
	walk(s.requests, func(k []byte, v *requestEntry) bool {
		fmt.Fprintf(&b, "req %s t=%d %x\n", k, v.time, v.result)
		return true
	})
	walk(s.reqByTime, func(k []byte, v string) bool {
		fmt.Fprintf(&b, "reqt %x %s\n", k, v)
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
