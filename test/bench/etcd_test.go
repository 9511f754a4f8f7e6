package main

import (
	"context"
	"fmt"
	"os/exec"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// TestEtcdTarget starts a real 3-member etcd cluster, writes through the
// harness's client, runs one hand-off and one failover trial, and checks
// that every process is gone after Stop. It is skipped only where no etcd
// binary is installed.
func TestEtcdTarget(t *testing.T) {
	if _, err := exec.LookPath(*etcdBin); err != nil {
		t.Skipf("no etcd binary (%v); Debian's etcd-server package provides one", err)
	}
	env := testEnv(t, nil)
	tg, err := newEtcdTarget(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	env.Target = tg
	e := tg.(*etcdTarget)
	t.Cleanup(func() {
		if err := tg.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	if err := tg.Start(ctx, env.Dir); err != nil {
		t.Fatal(err)
	}
	w, err := tg.NewWriter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i := range 10 {
		if err := w.Put(ctx, fmt.Sprintf("test/%d", i), []byte(fmt.Sprintf("v%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	// A linearizable read through any member sees the last write.
	resp, err := pb.NewKVClient(e.members[1].conn).Range(ctx, &pb.RangeRequest{Key: []byte("test/9")})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v9" {
		t.Fatalf("read back %v, want v9", resp.Kvs)
	}

	for _, tc := range []struct {
		name    string
		disturb func(context.Context) (time.Time, error)
	}{
		{"hand-off", tg.StopLeader},
		{"failover", tg.KillLeader},
	} {
		res, err := runTrial(ctx, env, 1, tc.disturb)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		t.Logf("%s: first commit after %v, longest stall %v", tc.name, res.FirstCommit, res.Stall)
		if res.FirstCommit <= 0 || res.FirstCommit > env.Config.TrialTimeout {
			t.Errorf("%s: first commit after %v", tc.name, res.FirstCommit)
		}
		down := 0
		for _, m := range e.members {
			if m.proc.Exited() {
				down++
			}
		}
		if down != 1 {
			t.Errorf("%s: %d members down, want 1", tc.name, down)
		}
		if err := tg.Restore(ctx); err != nil {
			t.Fatalf("%s: restore: %v", tc.name, err)
		}
	}
	// The writer made before the trials still works after two leader
	// changes and restarts.
	if err := w.Put(ctx, "test/after", []byte("x")); err != nil {
		t.Fatal(err)
	}

	if err := tg.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, m := range e.members {
		if !m.proc.Exited() {
			t.Errorf("%s still running after Stop", m.name)
		}
	}
}
