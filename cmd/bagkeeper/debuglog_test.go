package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

func TestDebugLogUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		text string
	}{
		{[]string{"debug-log", "extra"}, "unexpected arguments"},
		{[]string{"debug-log", "--no-tail", "-f"}, "--no-tail and --follow contradict each other"},
		{[]string{"debug-log", "--format", "yaml"}, "--format must be one of text, json"},
	} {
		e, _, errb := testEnv(nil)
		if code := runMain(e, c.args); code != 2 || !strings.Contains(errb.String(), c.text) {
			t.Errorf("%q: exit %d, stderr %q; want 2 with %q", c.args, code, errb.String(), c.text)
		}
	}
	e, out, _ := testEnv(nil)
	if code := runMain(e, []string{"debug-log", "--help"}); code != 0 || !strings.Contains(out.String(), "--no-tail") || !strings.Contains(out.String(), "until interrupted") {
		t.Fatalf("help: %d %q", code, out.String())
	}
	var u unitList
	_ = u.Set("web/0,web/1")
	_ = u.Set("web/2")
	if strings.Join(u, " ") != "web/0 web/1 web/2" {
		t.Fatalf("%q", u)
	}
}

func TestDebugLogLine(t *testing.T) {
	at := time.Date(2026, 5, 4, 3, 2, 1, 5e6, time.UTC).UnixNano()
	for _, c := range []struct {
		ev   *adminpb.DebugLogEvent
		want string
	}{
		{&adminpb.DebugLogEvent{TimeUnixNano: at, Index: 7, Unit: "web/1", Member: "web-1/x", Kind: "hook-running", Details: "install", LocalTime: true},
			"2026-05-04T03:02:01.005Z~ #7 web/1 (web-1/x) hook-running: install"},
		{&adminpb.DebugLogEvent{TimeUnixNano: at, Index: 7, Unit: "web/1", Member: "web-1/x", Kind: "unit", Details: "active", Summary: true},
			"2026-05-04T03:02:01.005Z  #7 web/1 now: unit: active"},
		{&adminpb.DebugLogEvent{TimeUnixNano: at, Index: 9, Member: "web-2/y", Kind: "member-added", Details: "joined", LocalTime: true},
			"2026-05-04T03:02:01.005Z~ #9 web-2/y member-added: joined"},
		{&adminpb.DebugLogEvent{TimeUnixNano: at, Index: 9, Kind: "relation-created", Details: "db:1", LocalTime: true},
			"2026-05-04T03:02:01.005Z~ #9 - relation-created: db:1"},
	} {
		if got := debugLogLine(c.ev); got != c.want {
			t.Errorf("got  %q\nwant %q", got, c.want)
		}
	}
}

func TestExecAndDebugLogExplainAMissingSidecar(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{{"exec", "--data-dir", dir, "app/0", "--", "true"}, {"debug-log", "--data-dir", dir}, {"debug-log", "--data-dir", dir, "--no-tail"}} {
		e, _, errb := testEnv(nil)
		if code := runMain(e, args); code != 1 || !strings.Contains(errb.String(), "no sidecar answers at "+filepath.Join(dir, "admin.sock")) {
			t.Errorf("%q: exit %d, stderr %q", args, code, errb)
		}
	}
}
