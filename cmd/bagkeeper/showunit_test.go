package main

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

// fakeAdmin answers ShowUnit and RetryHook as a sidecar would for web/0
// (failing config-changed) and web/1 (no failed hook).
type fakeAdmin struct {
	adminpb.UnimplementedAdminServer
	now     time.Time
	retried []string
}

func (f *fakeAdmin) unit(name string) (*adminpb.ShowUnitResponse, error) {
	t := f.now
	switch name {
	case "web/0":
		return &adminpb.ShowUnitResponse{
			Unit: &adminpb.Unit{Name: "web/0", State: "active", Member: "web-0/a", Pod: "web-0", SinceUnixNano: t.Add(-time.Hour).UnixNano(),
				WorkloadStatus: "active", WorkloadMessage: "serving", HookError: "config-changed", HookErrorAttempt: 3, HookErrorNextAttemptUnixNano: t.Add(40 * time.Second).UnixNano()},
			Leader: true,
			HookFailure: &adminpb.HookFailure{Hook: "config-changed", Message: "hook config-changed exited with status 2", ExitCode: 2, Attempt: 3,
				SinceUnixNano: t.Add(-time.Minute).UnixNano(), NextAttemptUnixNano: t.Add(40 * time.Second).UnixNano(), OutputTail: "reading /etc/app.conf\nno such file\n"},
			History: []*adminpb.HookRecord{
				{Hook: "db-relation-joined", Relation: "db:1", RemoteUnit: "pg/0", Ok: true, StartedUnixNano: t.Add(-2 * time.Minute).UnixNano(), DurationNanos: int64(120 * time.Millisecond), Member: "web-0/a"},
				{Hook: "config-changed", ExitCode: 2, Error: "hook config-changed exited with status 2", StartedUnixNano: t.Add(-time.Minute).UnixNano(), DurationNanos: int64(time.Second), Member: "web-0/a"},
			},
			Bags:            []*adminpb.Bag{{RelationId: 1, Relation: "db:1", Owner: "web/0", Data: map[string]string{"z": "1", "a": "2"}}, {RelationId: 0, Relation: "replicas:0", Owner: "web/0"}},
			CharmState:      map[string]string{"token": "abc"},
			LeaderSettings:  map[string]string{"admin": "root"},
			Ports:           []*adminpb.OpenPort{{Range: "8080/tcp"}, {Endpoint: "db", Range: "5432/tcp"}},
			WorkloadVersion: "1.2.3", Index: 42,
		}, nil
	case "web/1":
		return &adminpb.ShowUnitResponse{Unit: &adminpb.Unit{Name: "web/1", State: "active", Member: "web-1/b", Pod: "web-1", SinceUnixNano: t.Add(-time.Hour).UnixNano()}, Lost: true, Index: 42}, nil
	}
	return nil, status.Errorf(codes.NotFound, "unit %q does not exist in web", name)
}

func (f *fakeAdmin) ShowUnit(_ context.Context, req *adminpb.ShowUnitRequest) (*adminpb.ShowUnitResponse, error) {
	return f.unit(req.GetUnit())
}

func (f *fakeAdmin) RetryHook(_ context.Context, req *adminpb.RetryHookRequest) (*adminpb.RetryHookResponse, error) {
	u, err := f.unit(req.GetUnit())
	if err != nil {
		return nil, status.Errorf(codes.NotFound, "unit %s does not exist (refused; nothing was committed)", req.GetUnit())
	}
	if u.GetHookFailure() == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "unit %s has no failed hook to retry (refused; nothing was committed)", req.GetUnit())
	}
	f.retried = append(f.retried, req.GetUnit())
	return &adminpb.RetryHookResponse{Hook: u.GetHookFailure().GetHook(), Attempt: u.GetHookFailure().GetAttempt(), Index: 43}, nil
}

func serveFake(t *testing.T, f adminpb.AdminServer) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "bk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "admin.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	adminpb.RegisterAdminServer(srv, f)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return sock
}

func TestShowUnitPrintsEverythingOfAUnit(t *testing.T) {
	f := &fakeAdmin{now: time.Now()}
	sock := serveFake(t, f)
	e, out, errb := testEnv(nil)
	if code := runMain(e, []string{"show-unit", "--admin-socket", sock, "web/0"}); code != 0 {
		t.Fatalf("exit %d: %s", code, errb)
	}
	text := out.String()
	for _, want := range []string{
		"web/0:\n  state: active\n",
		"holder: member web-0/a (pod web-0)",
		"leader: true",
		"workload-status: 'active: serving'",
		"workload-version: 1.2.3",
		"- 8080/tcp\n", "- 5432/tcp (endpoint db)",
		"hook-error:\n    hook: config-changed\n    message: hook config-changed exited with status 2\n    exit-code: 2\n    attempt: 3\n",
		"next-attempt: ",
		"output: |\n      reading /etc/app.conf\n      no such file\n",
		"db-relation-joined (db:1 pg/0) ok in 120ms on web-0/a",
		"config-changed failed (exit 2) in 1s on web-0/a",
		"relations:\n    db:1:\n      a: \"2\"\n      z: \"1\"\n    replicas:0: {}\n",
		"charm-state:\n    token: abc",
		"leader-settings:\n    admin: root",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("show-unit lacks %q:\n%s", want, text)
		}
	}
	if strings.Index(text, "db-relation-joined") > strings.Index(text, "config-changed failed") {
		t.Errorf("history not oldest first:\n%s", text)
	}

	e, out, _ = testEnv(nil)
	if code := runMain(e, []string{"show-unit", "--admin-socket", sock, "--format", "json", "web/0"}); code != 0 {
		t.Fatalf("json: exit %d", code)
	}
	var js struct {
		Name      string `json:"name"`
		Leader    bool   `json:"leader"`
		HookError *struct {
			Hook        string `json:"hook"`
			Attempt     int    `json:"attempt"`
			ExitCode    int    `json:"exit_code"`
			NextAttempt string `json:"next_attempt"`
			OutputTail  string `json:"output_tail"`
		} `json:"hook_error"`
		History []struct {
			Hook     string  `json:"hook"`
			OK       bool    `json:"ok"`
			ExitCode int     `json:"exit_code"`
			Duration float64 `json:"duration_seconds"`
			Member   string  `json:"member"`
		} `json:"hook_history"`
		Relations      map[string]map[string]string `json:"relations"`
		CharmState     map[string]string            `json:"charm_state"`
		LeaderSettings map[string]string            `json:"leader_settings"`
		Ports          []map[string]string          `json:"opened_ports"`
	}
	if err := json.Unmarshal(out.Bytes(), &js); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if js.Name != "web/0" || !js.Leader || js.HookError == nil || js.HookError.Attempt != 3 || js.HookError.ExitCode != 2 || js.HookError.NextAttempt == "" ||
		!strings.HasSuffix(js.HookError.OutputTail, "no such file\n") || len(js.History) != 2 || js.History[1].OK || js.History[1].ExitCode != 2 ||
		js.History[0].Duration != 0.12 || js.Relations["db:1"]["z"] != "1" || js.Relations["replicas:0"] == nil || js.CharmState["token"] != "abc" ||
		js.LeaderSettings["admin"] != "root" || len(js.Ports) != 2 {
		t.Fatalf("json %+v\n%s", js, out)
	}

	// A unit with no failed hook, held by a member that does not answer.
	e, out, _ = testEnv(nil)
	if code := runMain(e, []string{"show-unit", "--admin-socket", sock, "--format", "json", "web/1"}); code != 0 {
		t.Fatalf("web/1: exit %d", code)
	}
	var js1 map[string]any
	if err := json.Unmarshal(out.Bytes(), &js1); err != nil || js1["hook_error"] != nil || js1["lost"] != true || js1["leader_settings"] != nil {
		t.Fatalf("web/1 json: %v %v", err, js1)
	}
	e, out, _ = testEnv(nil)
	if runMain(e, []string{"show-unit", "--admin-socket", sock, "web/1"}); !strings.Contains(out.String(), "state: lost (active, but its pod's member does not answer)") || strings.Contains(out.String(), "hook-error") {
		t.Fatalf("web/1:\n%s", out)
	}
}

func TestShowUnitAndUnitRetryErrors(t *testing.T) {
	f := &fakeAdmin{now: time.Now()}
	sock := serveFake(t, f)
	for _, c := range []struct {
		args []string
		code int
		out  string
		err  string
	}{
		{[]string{"show-unit", "web/9"}, 1, "", `bagkeeper show-unit: error: unit "web/9" does not exist in web`},
		{[]string{"show-unit"}, 2, "", "expected exactly one UNIT"},
		{[]string{"show-unit", "--format", "table", "web/0"}, 2, "", "--format must be one of yaml, json"},
		{[]string{"unit", "retry", "web/0"}, 0, "unit web/0: retry of config-changed requested (attempt 3 failed last)", ""},
		{[]string{"unit", "retry", "web/1"}, 1, "", "bagkeeper unit: error: unit web/1 has no failed hook to retry"},
		{[]string{"unit", "retry", "web/9"}, 1, "", "bagkeeper unit: error: unit web/9 does not exist"},
		{[]string{"unit", "retry"}, 2, "", "expected exactly one UNIT"},
		{[]string{"unit", "frob"}, 2, "", "expected 'unit remove UNIT' or 'unit retry UNIT'"},
	} {
		e, out, errb := testEnv(nil)
		args := c.args
		if c.code != 2 {
			args = append(args[:len(args)-1:len(args)-1], "--admin-socket", sock, args[len(args)-1])
		}
		if code := runMain(e, args); code != c.code || !strings.Contains(out.String(), c.out) || !strings.Contains(errb.String(), c.err) {
			t.Errorf("%q: exit %d\nstdout %s\nstderr %s\nwant exit %d, %q, %q", c.args, code, out, errb, c.code, c.out, c.err)
		}
	}
	if len(f.retried) != 1 || f.retried[0] != "web/0" {
		t.Errorf("retries asked: %q", f.retried)
	}
	e, out, _ := testEnv(nil)
	if code := runMain(e, []string{"unit", "retry", "--help"}); code != 0 || !strings.Contains(out.String(), "retry (Juju's 'resolved')") {
		t.Errorf("unit retry --help: exit %d\n%s", code, out)
	}
}

func TestStatusShowsTheAttemptOfAFailedHook(t *testing.T) {
	now := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	st := &adminpb.StatusResponse{
		App: "web", Self: "web-0/a", Unit: "web/0",
		Members: []*adminpb.Member{{Id: "web-0/a", Suffrage: "Voter", Reachable: true, RaftState: "Leader", Leader: true}},
		Units: []*adminpb.Unit{
			{Name: "web/0", State: "active", Member: "web-0/a", SinceUnixNano: now.Add(-time.Minute).UnixNano(), HookError: "config-changed", HookErrorAttempt: 3, HookErrorNextAttemptUnixNano: now.Add(40 * time.Second).UnixNano()},
			{Name: "web/1", State: "active", Member: "web-0/a", SinceUnixNano: now.Add(-time.Minute).UnixNano(), HookError: "install", HookErrorAttempt: 1, HookErrorNextAttemptUnixNano: now.Add(-time.Second).UnixNano()},
			{Name: "web/2", State: "active", Member: "web-0/a", SinceUnixNano: now.Add(-time.Minute).UnixNano(), HookError: "start"},
		},
	}
	var b strings.Builder
	printStatus(&b, st, now)
	for _, want := range []string{"error: hook failed: config-changed (attempt 3, next in 40s)", "error: hook failed: install (attempt 1, next due now)", "error: hook failed: start  "} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, b.String())
		}
	}
	units := statusJSON(st)["units"].([]map[string]any)
	if units[0]["hook_error_attempt"] != uint32(3) || units[0]["hook_error_next_attempt"] != "2026-05-06T07:08:49Z" || units[2]["hook_error_next_attempt"] != "" {
		t.Errorf("JSON units: %v", units)
	}
}
