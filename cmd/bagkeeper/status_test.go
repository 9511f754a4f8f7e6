package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

func TestStatusShowsDivergedMembersAndWaitingPods(t *testing.T) {
	now := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	st := &adminpb.StatusResponse{
		App: "web", Self: "web-0/a", Unit: "web/0", Ready: true,
		LeaderUnit: "web/1", LeaseExpiresUnixNano: now.Add(50 * time.Second).UnixNano(),
		Members: []*adminpb.Member{
			{Id: "web-0/a", Suffrage: "Voter", Reachable: true, RaftState: "Leader", Leader: true, LogStore: "wal"},
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
		"App leader   web/1 (lease runs 50s more unless renewed)",
		"LAST CONTACT  LOG STORE",
		"(leader)      wal",
		"0s ago        -", // a member of an older version does not say
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status table lacks %q:\n%s", want, out)
		}
	}
	js := statusJSON(st)
	if w := js["waiting"].([]map[string]any); len(w) != 1 || w[0]["pod"] != "web-x" {
		t.Errorf("JSON waiting: %v", js["waiting"])
	}
	if js["leader_unit"] != "web/1" || js["lease_expires"] != "2026-05-06T07:08:59Z" {
		t.Errorf("JSON leader_unit %v, lease_expires %v", js["leader_unit"], js["lease_expires"])
	}
	if m := js["members"].([]map[string]any); m[1]["diverged"] == nil || m[0]["diverged"] != nil || m[0]["log_store"] != "wal" || m[1]["log_store"] != nil {
		t.Errorf("JSON members: %v", m)
	}
}

func TestStatusShowsRelationsBetweenApplications(t *testing.T) {
	now := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	st := &adminpb.StatusResponse{
		App: "web", Self: "web-0/a", Unit: "web/0", Ready: true,
		Relations: []*adminpb.Relation{
			{Id: 0, Key: "replicas:0", Interface: "web-peers", Peer: true, Bags: 3},
			{Id: 1, Key: "database:1", Interface: "pgsql", RemoteApp: "pg", RemoteEndpoint: "db", Bags: 7, RemoteSource: "c1", RemoteRevision: 42,
				Stream: &adminpb.RelationStream{Connected: true, Address: "pg-0.pg:7402", SinceUnixNano: now.Add(-90 * time.Second).UnixNano()}},
			{Id: 2, Key: "cache:2", Interface: "redis", RemoteApp: "redis", RemoteEndpoint: "cache", Bags: 0,
				Stream: &adminpb.RelationStream{LastError: "connection refused", SinceUnixNano: now.Add(-3 * time.Second).UnixNano()}},
			{Id: 3, Key: "api:3", Interface: "http", RemoteApp: "front", RemoteEndpoint: "backend", Offered: true, Bags: 2, RemoteRevision: 9},
			{Id: -1, Key: "metrics (not made yet)", RemoteApp: "prom", RemoteEndpoint: "scrape",
				Stream: &adminpb.RelationStream{LastError: "wrong or missing token for offer", SinceUnixNano: now.Add(-time.Minute).UnixNano()}},
		},
		RelationsFileError: "line 3: relations[0] (? -> pg:db): endpoint: missing",
	}
	var b strings.Builder
	printStatus(&b, st, now)
	out := b.String()
	for _, want := range []string{
		"pg:db (offer we consume)",
		"revision 42",
		"open to pg-0.pg:7402 for 1m30s",
		"none yet",
		"down for 3s: connection refused",
		"front:backend (consumes our offer)",
		"metrics (not made yet)",
		"down for 1m0s: wrong or missing token for offer",
		"The relations file is not loaded; the previous one stays in force: line 3",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status table lacks %q:\n%s", want, out)
		}
	}
	js := statusJSON(st)
	rels := js["relations"].([]map[string]any)
	if rels[0]["offered"] != nil || rels[1]["remote_revision"] != uint64(42) || rels[3]["offered"] != true {
		t.Errorf("JSON relations: %v", rels)
	}
	if s, ok := rels[1]["stream"].(map[string]any); !ok || s["connected"] != true {
		t.Errorf("JSON stream: %v", rels[1]["stream"])
	}
	if js["relations_file_error"] == "" {
		t.Errorf("JSON lacks the relations file error")
	}
}

func TestStatusMarksTheLeaderAndLostUnits(t *testing.T) {
	now := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	st := &adminpb.StatusResponse{
		App: "web", Self: "web-0/a", Unit: "web/0", LeaderUnit: "web/1",
		Members: []*adminpb.Member{
			{Id: "web-0/a", Suffrage: "Voter", Reachable: true, RaftState: "Leader", Leader: true},
			{Id: "web-1/b", Suffrage: "Voter", Reachable: true, RaftState: "Follower"},
			{Id: "web-2/c", Suffrage: "Voter", Error: "connection refused"},
		},
		Units: []*adminpb.Unit{
			{Name: "web/0", State: "active", Member: "web-0/a", SinceUnixNano: now.Add(-time.Minute).UnixNano()},
			{Name: "web/1", State: "active", Member: "web-1/b", SinceUnixNano: now.Add(-time.Minute).UnixNano()},
			{Name: "web/2", State: "active", Member: "web-2/c", SinceUnixNano: now.Add(-time.Minute).UnixNano()},
			{Name: "web/3", State: "active", Member: "web-3/gone", SinceUnixNano: now.Add(-time.Minute).UnixNano()},
			{Name: "web/4", State: "released", Member: "web-4/d", Reason: "pod stopped", SinceUnixNano: now.Add(-time.Minute).UnixNano()},
		},
	}
	var b strings.Builder
	printStatus(&b, st, now)
	out := b.String()
	for _, want := range []string{
		"web/0   active    web-0/a",
		"web/1*  active    web-1/b",
		"web/2   lost      web-2/c",
		"web/3   lost      web-3/gone",
		"web/4   released  web-4/d",
		"its pod's member does not answer",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status table lacks %q:\n%s", want, out)
		}
	}
	units := statusJSON(st)["units"].([]map[string]any)
	for i, want := range []struct{ leader, lost bool }{{false, false}, {true, false}, {false, true}, {false, true}, {false, false}} {
		if units[i]["leader"] != want.leader || units[i]["lost"] != want.lost || units[i]["state"] != st.Units[i].State {
			t.Errorf("JSON unit %d: %v, want leader %v lost %v", i, units[i], want.leader, want.lost)
		}
	}
}

func TestStatusOverHTTPAndCheck(t *testing.T) {
	healthy := &adminpb.StatusResponse{App: "web", Self: "a", Leader: "a", Members: []*adminpb.Member{
		{Id: "a", Address: "web-0:7400", Suffrage: "Voter", Reachable: true, Leader: true},
		{Id: "b", Address: "web-1:7400", Suffrage: "Voter", Reachable: true},
	}}
	sick := &adminpb.StatusResponse{App: "web", Self: "a", Members: []*adminpb.Member{
		{Id: "a", Address: "web-0:7400", Suffrage: "Voter", Reachable: true},
		{Id: "b", Address: "web-1:7400", Suffrage: "Voter", Error: "connection refused"},
	}}
	var serve *adminpb.StatusResponse
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path != "/status":
			http.NotFound(w, r)
		case serve == nil:
			http.Error(w, "starting", http.StatusServiceUnavailable)
		default:
			b, _ := protojson.Marshal(serve)
			w.Write(b)
		}
	}))
	defer srv.Close()
	for _, c := range []struct {
		st   *adminpb.StatusResponse
		args []string
		code int
		out  string
		err  string
	}{
		{healthy, []string{"--check"}, 0, "web-1:7400", ""},
		{healthy, []string{"--format", "json"}, 0, `"leader": "a"`, ""},
		{sick, nil, 0, "web-1:7400", ""},
		{sick, []string{"--check"}, 1, "", "no raft leader is known; voter b (web-1:7400) does not answer"},
		{nil, nil, 1, "", "503 Service Unavailable: starting"},
	} {
		serve = c.st
		e, out, errb := testEnv(nil)
		args := append([]string{"status", "--url", srv.URL}, c.args...)
		if code := runMain(e, args); code != c.code || !strings.Contains(out.String(), c.out) || !strings.Contains(errb.String(), c.err) {
			t.Errorf("%v: exit %d\nstdout %s\nstderr %s\nwant exit %d, %q, %q", c.args, code, out, errb, c.code, c.out, c.err)
		}
	}
	e, _, errb := testEnv(nil)
	if code := runMain(e, []string{"status", "--url", "web-0:7401"}); code != 2 || !strings.Contains(errb.String(), "http://host:port") {
		t.Errorf("a URL without a scheme: exit %d, %s", code, errb)
	}
}
