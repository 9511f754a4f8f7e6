package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/bagkeeper/bagkeeper/agent"
	"github.com/bagkeeper/bagkeeper/agent/hooktools"
)

const hookRunnerUsage = `Usage: bagkeeper hook-runner --agent-socket PATH --charm-dir DIR [flags]

Runs the charm's hooks in THIS container for the unit agent of the pod's
sidecar (started with --hook-runner=remote): it connects to the agent's
socket, receives one hook at a time, runs it here with Juju's environment and
reports how it ended. It reconnects when the sidecar restarts.

On SIGTERM (the pod is going away; with a native sidecar the charm
container stops first) it asks the agent to run the stop hook, runs it, and
exits once the agent says it has: the agent runs no hook after it. It waits
at most 30 seconds for that.`

func defaultHookTool() string {
	exe, err := os.Executable()
	if err != nil {
		return "jujuc"
	}
	return filepath.Join(filepath.Dir(exe), "jujuc")
}

// checkHookNice refuses a --hook-nice outside 0–19: a hook may only get a
// lower CPU priority than what runs it (than).
func checkHookNice(n int, than string) error {
	if n < 0 || n > 19 {
		return usageErrorf("--hook-nice must be between 0 and 19 (a hook may only get a lower priority than %s), got %d", than, n)
	}
	return nil
}

func cmdHookRunner(e *env, args []string) error {
	fs := newFlagSet("hook-runner", hookRunnerUsage)
	var socket, charmDir, toolsDir, hookTool, name, logLevel string
	var nice int
	fs.StringVar(&socket, "agent-socket", "", "the agent's hook tool socket, as this container sees it (`path`, required)")
	fs.StringVar(&charmDir, "charm-dir", "", "the charm in this container (`dir`, required)")
	fs.StringVar(&toolsDir, "tools-dir", "", "`dir`ectory for the hook tool symlinks (default: a temporary directory)")
	fs.StringVar(&hookTool, "hook-tool", defaultHookTool(), "`path` of the hook tool binary the symlinks point at")
	fs.StringVar(&name, "name", "", "a `name` for this runner in the agent's logs (default: the host name)")
	fs.StringVar(&logLevel, "log-level", "info", "log `level`: debug, info, warn or error")
	fs.IntVar(&nice, "hook-nice", agent.DefaultHookNice, "how much lower than this process's the CPU priority of the hooks is (`n`, 0 to 19, added\nto the nice value); 0 runs them at this process's priority")
	rest, err := parse(e, fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageErrorf("unexpected arguments %q", rest)
	}
	if socket == "" || charmDir == "" {
		return usageErrorf("--agent-socket and --charm-dir are required")
	}
	if err := checkHookNice(nice, "this runner"); err != nil {
		return err
	}
	for _, p := range []*string{&socket, &charmDir, &toolsDir, &hookTool} {
		if *p != "" {
			if *p, err = filepath.Abs(*p); err != nil {
				return err
			}
		}
	}
	logger, err := newLogger(e, logLevel, "json")
	if err != nil {
		return err
	}
	if toolsDir == "" {
		if toolsDir, err = os.MkdirTemp("", "bagkeeper-tools"); err != nil {
			return err
		}
		defer os.RemoveAll(toolsDir)
	}
	if name == "" {
		name, _ = os.Hostname()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return agent.RunHookRunner(ctx, agent.HookRunnerConfig{Socket: socket, CharmDir: charmDir, ToolsDir: toolsDir, ToolBinary: hookTool, Name: name, Logger: logger.With("runner", name), Nice: nice})
}

const installToolsUsage = `Usage: bagkeeper install-tools [--hook-tool PATH] DIR

Creates one symlink per Juju hook tool (relation-get, relation-set, ...) in
DIR, pointing at the hook tool binary. The agent does this itself for the
hooks it runs; use it to give a charm container the tools.`

func cmdInstallTools(e *env, args []string) error {
	fs := newFlagSet("install-tools", installToolsUsage)
	var hookTool string
	fs.StringVar(&hookTool, "hook-tool", defaultHookTool(), "`path` of the hook tool binary")
	rest, err := parse(e, fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usageErrorf("expected exactly one DIR, got %q", rest)
	}
	if _, err := os.Stat(hookTool); err != nil {
		return fmt.Errorf("hook tool binary: %w", err)
	}
	if err := agent.InstallTools(rest[0], hookTool); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%d hook tools linked in %s\n", len(hooktools.Names()), rest[0])
	return nil
}
