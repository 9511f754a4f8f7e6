package sidecar

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

// syncBuffer is a log sink the test reads while the sidecar writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestRetryHookAndShowUnitOfARunningSidecar(t *testing.T) {
	s, _, _ := startSingle(t, "app-0")
	logs := &syncBuffer{}
	s.adminAPI.log = slog.New(slog.NewTextHandler(logs, nil))
	conn, err := grpc.NewClient("unix://"+s.cfg.AdminSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	admin := adminpb.NewAdminClient(conn)
	ctx := context.Background()
	waitFor(t, "the pod to hold app/0", func() error {
		if _, ok := s.node.State().Unit("app/0"); !ok || s.Unit() != "app/0" {
			return errors.New("not yet")
		}
		return nil
	})
	if _, err := admin.RetryHook(ctx, &adminpb.RetryHookRequest{Unit: "app/0"}); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "unit app/0 has no failed hook to retry") {
		t.Fatalf("retry with no failed hook: %v", err)
	}
	if _, err := admin.RetryHook(ctx, &adminpb.RetryHookRequest{Unit: "app/9"}); status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "app/9 does not exist") {
		t.Fatalf("retry of a unit that does not exist: %v", err)
	}
	if _, err := admin.ShowUnit(ctx, &adminpb.ShowUnitRequest{Unit: "app/9"}); status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), `unit "app/9" does not exist`) {
		t.Fatalf("show of a unit that does not exist: %v", err)
	}

	next := time.Now().Add(time.Minute).Round(0)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := state.NewCommand(
		state.EnsureRelationOp("peers", "p", true, "", ""),
		state.UpdateBagOp(0, "app/0", map[string]string{"b": "2", "a": "1"}),
		state.UpdateCharmStateOp("app/0", map[string]string{"k": "v"}),
		state.UpdatePortsOp("app/0", []state.Port{{From: 8080, To: 8080, Protocol: "tcp"}}, nil),
		state.SetWorkloadVersionOp("app/0", "9.9"),
		state.RecordHookOp("app/0", state.HookRecord{Hook: "install", OK: true, Started: time.Now(), Duration: time.Second, Member: "m"}),
		state.FailedHookOp("app/0", "config-changed", "hook config-changed exited with status 1", state.HookFailure{OutputTail: []byte("bad \xff byte\n"), ExitCode: 1, Attempt: 2, NextAttempt: next}),
		state.RecordHookOp("app/0", state.HookRecord{Hook: "config-changed", ExitCode: 1, Error: "hook config-changed exited with status 1", Started: time.Now(), Member: "m"}),
	)
	if _, err := s.node.Apply(cctx, cmd); err != nil {
		t.Fatal(err)
	}
	su, err := admin.ShowUnit(ctx, &adminpb.ShowUnitRequest{Unit: "app/0"})
	if err != nil {
		t.Fatal(err)
	}
	f := su.GetHookFailure()
	if su.GetUnit().GetState() != "active" || su.GetLost() || f.GetHook() != "config-changed" || f.GetAttempt() != 2 || f.GetExitCode() != 1 || f.GetNextAttemptUnixNano() != next.UnixNano() ||
		f.GetOutputTail() != "bad \uFFFD byte\n" || len(su.GetHistory()) != 2 || su.GetHistory()[1].GetOk() || su.GetHistory()[0].GetHook() != "install" ||
		len(su.GetBags()) != 1 || su.GetBags()[0].GetData()["b"] != "2" || su.GetCharmState()["k"] != "v" || su.GetWorkloadVersion() != "9.9" ||
		len(su.GetPorts()) != 1 || su.GetPorts()[0].GetRange() != "8080/tcp" || su.GetUnit().GetHookErrorAttempt() != 2 {
		t.Fatalf("show-unit %v", su)
	}
	st, err := admin.Status(ctx, &adminpb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if u := st.GetUnits()[0]; u.GetHookError() != "config-changed" || u.GetHookErrorAttempt() != 2 || u.GetHookErrorNextAttemptUnixNano() != next.UnixNano() {
		t.Fatalf("status unit %v", u)
	}
	resp, err := admin.RetryHook(ctx, &adminpb.RetryHookRequest{Unit: "app/0"})
	if err != nil || resp.GetHook() != "config-changed" || resp.GetAttempt() != 2 {
		t.Fatalf("retry: %v %v", resp, err)
	}
	if n := s.node.State().UnitExtra("app/0").RetryRequests; n != 1 {
		t.Fatalf("retry requests %d", n)
	}
	if l := logs.String(); !strings.Contains(l, "level=INFO") || !strings.Contains(l, `msg="hook retry requested by an operator" unit=app/0 hook=config-changed attempt=2`) {
		t.Fatalf("the retry is not logged: %s", l)
	}
}
