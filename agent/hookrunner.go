package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/bagkeeper/bagkeeper/agent/toolpb"
)

// HookRunnerConfig configures a hook runner in another container of the
// pod (`bagkeeper hook-runner`): it runs the hooks the agent sends it, with
// the charm and the hook tools of its own container.
type HookRunnerConfig struct {
	// Socket is the agent's socket, as this container sees it.
	Socket string
	// CharmDir is the charm, as this container sees it.
	CharmDir string
	// ToolsDir receives the tool symlinks, pointing at ToolBinary.
	ToolsDir   string
	ToolBinary string
	Name       string
	Logger     *slog.Logger
	// Nice is how much higher than this process's the nice value of the
	// hooks is (LocalRunner.Nice).
	Nice int
	// StopTimeout bounds how long the runner, once told to stop, waits
	// for the agent to run the stop hook through it (default 30s).
	StopTimeout time.Duration
}

// RunHookRunner runs hooks for the agent until ctx ends, reconnecting when
// the agent goes away.
func RunHookRunner(ctx context.Context, cfg HookRunnerConfig) error {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ToolsDir != "" && cfg.ToolBinary != "" {
		if err := InstallTools(cfg.ToolsDir, cfg.ToolBinary); err != nil {
			return err
		}
	}
	abs, err := filepath.Abs(cfg.Socket)
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient("unix://"+abs, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("agent socket %s: %w", cfg.Socket, err)
	}
	defer conn.Close()
	client := toolpb.NewHookRunnerClient(conn)
	runner := LocalRunner{ToolsDir: cfg.ToolsDir, Logger: cfg.Logger, Nice: cfg.Nice}
	// Once ctx ends (the container is being stopped), hooks keep running
	// until the agent has run the stop hook here, or StopTimeout passes.
	run, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-ctx.Done():
		case <-run.Done():
			return
		}
		timeout := cfg.StopTimeout
		if timeout <= 0 {
			timeout = 30 * time.Second
		}
		sctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if _, err := client.Stopping(sctx, &toolpb.RunnerHello{Name: cfg.Name}); err != nil {
			cfg.Logger.Warn("stopping without the stop hook: the agent did not run it", "err", err)
		} else {
			cfg.Logger.Info("the agent ran the stop hook; stopping")
		}
		stopRun()
	}()
	defer func() { stopRun(); <-stopped }()
	backoff := 100 * time.Millisecond
	var unreachableSince, warned time.Time
	failures := 0
	for run.Err() == nil {
		connected, err := runHooks(run, client, runner, cfg)
		if run.Err() != nil {
			break
		}
		if connected {
			cfg.Logger.Warn("connection to the agent lost; reconnecting", "err", err)
			backoff, unreachableSince, failures = 100*time.Millisecond, time.Time{}, 0
		} else {
			// Not reached at all: a wrong --agent-socket, a socket on a
			// volume the sidecar does not share, or a sidecar still
			// starting. Said at once, then every 30 s, never silently.
			now := time.Now()
			if unreachableSince.IsZero() {
				unreachableSince = now
			}
			failures++
			if warned.IsZero() || now.Sub(warned) >= 30*time.Second {
				warned = now
				cfg.Logger.Warn("cannot reach the unit agent: is the sidecar running with --hook-runner=remote and this socket, on a volume both containers mount?",
					"socket", cfg.Socket, "err", err, "attempts", failures, "for", now.Sub(unreachableSince).Round(time.Second).String())
			}
		}
		select {
		case <-run.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	return nil
}

// runHooks runs the hooks the agent sends until the stream ends; connected
// says whether it reached the agent at all.
func runHooks(ctx context.Context, client toolpb.HookRunnerClient, runner LocalRunner, cfg HookRunnerConfig) (connected bool, err error) {
	// The stream ends with this call: an abandoned stream would keep the
	// agent's side attached, refusing the next one and queueing hooks to
	// a runner that no longer reads them.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.Hooks(ctx, &toolpb.RunnerHello{Name: cfg.Name})
	if err != nil {
		return false, err
	}
	// A server stream is made before the agent answers: the first message,
	// or the stream's header, says whether it did.
	if _, err := stream.Header(); err != nil {
		return false, err
	}
	cfg.Logger.Info("connected to the agent", "socket", cfg.Socket)
	for {
		h, err := stream.Recv()
		if err != nil {
			return true, err
		}
		env := h.GetEnv()
		if env == nil {
			env = map[string]string{}
		}
		// Paths as this container sees them.
		env["JUJU_CHARM_DIR"], env["CHARM_DIR"] = cfg.CharmDir, cfg.CharmDir
		env["JUJU_AGENT_SOCKET_ADDRESS"] = cfg.Socket
		res := runner.Run(ctx, HookRun{ContextID: h.GetContextId(), Hook: h.GetHook(), Dir: cfg.CharmDir, Env: env,
			Command: h.GetCommand(), Timeout: time.Duration(h.GetTimeoutMs()) * time.Millisecond})
		out := &toolpb.HookResult{ContextId: h.GetContextId(), ExitCode: int32(res.ExitCode), Output: res.Stdout, Stderr: res.Stderr, OutputTail: res.OutputTail}
		if res.Err != nil {
			out.Error = res.Err.Error()
		}
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = client.Done(dctx, out)
		cancel()
		switch {
		case err == nil, errors.Is(err, context.Canceled):
		case status.Code(err) == codes.FailedPrecondition:
			// The agent stopped waiting for this hook (it is stopping, or
			// gave up on it); it is still connected and may send more.
			cfg.Logger.Info("the agent no longer waits for this hook's result", "hook", h.GetHook(), "err", status.Convert(err).Message())
		default:
			return true, fmt.Errorf("reporting hook %s: %w", h.GetHook(), err)
		}
	}
}
