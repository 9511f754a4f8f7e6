package main

import (
	"strings"
	"testing"
	"time"

	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

func TestStatusShowsDivergedMembersAndWaitingPods(t *testing.T) {
	now := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	st := &adminpb.StatusResponse{
		App: "web", Self: "web-0/a", Unit: "web/0", Ready: true,
		Members: []*adminpb.Member{
			{Id: "web-0/a", Suffrage: "Voter", Reachable: true, RaftState: "Leader", Leader: true},
			{Id: "web-1/b", Suffrage: "Voter", Reachable: true, RaftState: "Follower", Diverged: "at raft index 12: hash 01, most members have 02"},
		},
		Units:   []*adminpb.Unit{{Name: "web/0", State: "active", Member: "web-0/a", SinceUnixNano: now.Add(-time.Minute).UnixNano()}},
		Waiting: []*adminpb.Claimant{{Member: "web-x/c", Pod: "web-x", SinceUnixNano: now.Add(-5 * time.Second).UnixNano()}},
	}
	var b strings.Builder
	printStatus(&b, st, now)
	out := b.String()
	for _, want := range []string{
		"Follower DIVERGED",
		"web-1/b: state diverged from the group's at raft index 12",
		"(waiting)  -       web-x/c  5s ago",
		"pod web-x waits for a unit",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status table lacks %q:\n%s", want, out)
		}
	}
	js := statusJSON(st)
	if w := js["waiting"].([]map[string]any); len(w) != 1 || w[0]["pod"] != "web-x" {
		t.Errorf("JSON waiting: %v", js["waiting"])
	}
	if m := js["members"].([]map[string]any); m[1]["diverged"] == nil || m[0]["diverged"] != nil {
		t.Errorf("JSON members: %v", m)
	}
}
