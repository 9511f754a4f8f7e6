package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func TestProcessSignalAndKillAll(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary")
	}
	dir := t.TempDir()
	a, err := startProcess("a", filepath.Join(dir, "a.log"), nil, nil, sleep, "30")
	if err != nil {
		t.Fatal(err)
	}
	b, err := startProcess("b", filepath.Join(dir, "b.log"), nil, nil, sleep, "30")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(killAllProcesses)
	if a.Exited() {
		t.Fatal("a exited at once")
	}
	if err := a.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if a.ExitError() == nil {
		t.Error("no exit error after SIGTERM")
	}
	if err := a.Signal(syscall.SIGKILL); err != nil {
		t.Errorf("signal to an exited process: %v", err)
	}
	killAllProcesses()
	if !b.Exited() {
		t.Error("b still running after killAllProcesses")
	}
	liveProcesses.Lock()
	n := len(liveProcesses.m)
	liveProcesses.Unlock()
	if n != 0 {
		t.Errorf("%d processes still registered", n)
	}
}

func TestFilterEnvAndTail(t *testing.T) {
	got := filterEnv([]string{"ETCD_NAME=x", "PATH=/bin", "ETCDCTL_API=3", "HOME=/home/u"}, []string{"ETCD_", "ETCDCTL_"})
	if len(got) != 2 || got[0] != "PATH=/bin" || got[1] != "HOME=/home/u" {
		t.Errorf("filterEnv = %v", got)
	}
	if tailFile(filepath.Join(t.TempDir(), "missing"), 10) != "" {
		t.Error("tail of a missing file")
	}
}
