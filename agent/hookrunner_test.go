package agent

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/bagkeeper/bagkeeper/agent/toolpb"
)

// A hook the agent stops waiting for (it was stopping, or gave up) must not
// cost the runner its connection: the next hook, the stop hook above all,
// has to reach it. Once, the runner dropped the stream without closing it,
// the agent kept that stream attached and queued the next hook to nobody.
func TestHookRunnerKeepsServingAfterTheAgentGaveUpOnAHook(t *testing.T) {
	dir := t.TempDir()
	release := filepath.Join(dir, "release")
	script := "#!/bin/sh\necho \"$JUJU_HOOK_NAME\" >> \"$JUJU_CHARM_DIR/hooks.log\"\n" +
		"if [ \"$JUJU_HOOK_NAME\" = slow ]; then while [ ! -e " + release + " ]; do sleep 0.05; done; fi\n"
	if err := os.WriteFile(filepath.Join(dir, "dispatch"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	sockDir, err := os.MkdirTemp("", "hr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	socket := filepath.Join(sockDir, "agent.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	remote := NewRemoteRunner()
	srv := grpc.NewServer()
	toolpb.RegisterHookRunnerServer(srv, &runnerServer{r: remote, logger: slog.New(slog.DiscardHandler)})
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- RunHookRunner(ctx, HookRunnerConfig{Socket: socket, CharmDir: dir, Name: "charm", Logger: slog.New(slog.DiscardHandler), StopTimeout: time.Second})
	}()
	t.Cleanup(func() { cancel(); <-done })

	// The agent sends a hook and stops waiting while it runs.
	hctx, giveUp := context.WithCancel(context.Background())
	slow := make(chan HookResult, 1)
	go func() {
		slow <- remote.Run(hctx, HookRun{ContextID: "app/0-slow-1", Hook: "slow", Env: map[string]string{"JUJU_HOOK_NAME": "slow"}})
	}()
	waitFor(t, "the slow hook to start", func() error {
		select {
		case res := <-slow:
			t.Fatalf("the slow hook ended before it was given up on: %+v", res)
		default:
		}
		b, _ := os.ReadFile(filepath.Join(dir, "hooks.log"))
		if !strings.Contains(string(b), "slow") {
			return os.ErrNotExist
		}
		return nil
	})
	giveUp()
	if res := <-slow; res.Err == nil {
		t.Fatalf("a hook the agent gave up on reported %+v", res)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// The next hook runs, through the same runner.
	nctx, ncancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer ncancel()
	res := remote.Run(nctx, HookRun{ContextID: "app/0-stop-2", Hook: "stop", Env: map[string]string{"JUJU_HOOK_NAME": "stop"}})
	if res.Err != nil || res.ExitCode != 0 {
		t.Fatalf("the hook after the abandoned one: %+v", res)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "hooks.log"))
	if got := strings.Fields(string(b)); strings.Join(got, ",") != "slow,stop" {
		t.Fatalf("hooks run %q", got)
	}
}
