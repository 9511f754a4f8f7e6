package sidecar

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"

	"github.com/bagkeeper/bagkeeper/agent"
	"github.com/bagkeeper/bagkeeper/sidecar/filewatch"
	"github.com/bagkeeper/bagkeeper/sidecar/unixsock"
)

// unitAgent is the agent as the sidecar runs it.
type unitAgent struct {
	a       *agent.Agent
	ln      *unixsock.Listener
	watcher *filewatch.Watcher
	cancel  context.CancelFunc
	done    chan struct{}

	// mu guards stopping: once the hooks stop (the sidecar stops, or the
	// charm container's hook runner says the pod is going away), they
	// never start again, and the stop hook runs once; stopped is closed
	// when it has.
	mu       sync.Mutex
	stopping bool
	stopped  chan struct{}
}

// startAgent prepares the unit agent: it reads the charm, opens the hook
// tool socket and starts watching the charm config. Hooks start to run in
// runAgent, once the pod holds its unit.
func (s *Sidecar) startAgent() error {
	as := s.cfg.Agent
	charm, err := agent.LoadCharm(as.CharmDir)
	if err != nil {
		return err
	}
	socket := as.Socket
	if socket == "" {
		socket = filepath.Join(s.cfg.DataDir, "agent.sock")
	}
	toolsDir := as.ToolsDir
	if toolsDir == "" {
		toolsDir = filepath.Join(s.cfg.DataDir, "tools")
	}
	toolBinary := as.ToolBinary
	if toolBinary == "" {
		if exe, err := os.Executable(); err == nil {
			toolBinary = filepath.Join(filepath.Dir(exe), "jujuc")
		}
	}
	if _, err := os.Stat(toolBinary); err != nil {
		return fmt.Errorf("hook tool binary: %w (give its path with --hook-tool)", err)
	}
	address := as.Address
	if address == "" {
		if host, _, err := net.SplitHostPort(s.cfg.Advertise); err == nil && net.ParseIP(host) != nil {
			address = host
		}
	}
	pod := as.PodUID
	if pod == "" {
		pod = string(s.node.ID())
	}
	ua := &unitAgent{done: make(chan struct{}), stopped: make(chan struct{})}
	ua.ln, err = unixsock.Listen(socket, 0o660)
	if err != nil {
		return fmt.Errorf("hook tool socket %s: %w", socket, err)
	}
	var changed <-chan struct{}
	if as.ConfigFile != "" {
		ua.watcher, err = filewatch.New(as.ConfigFile, s.log)
		if err != nil {
			ua.ln.Close()
			return fmt.Errorf("charm config %s: %w", as.ConfigFile, err)
		}
		changed = ua.watcher.Changes()
	}
	var runner agent.Runner = agent.LocalRunner{ToolsDir: toolsDir, Logger: s.log, Nice: as.HookNice}
	if as.RemoteRunner {
		runner = agent.NewRemoteRunner()
	}
	ua.a, err = agent.New(agent.Config{
		Store: s.node, Unit: s.Unit, Ready: s.Ready, Member: string(s.node.ID()), Pod: pod,
		Charm: charm, ConfigFile: as.ConfigFile, ConfigChanged: changed,
		Listener: ua.ln, Socket: socket, ToolsDir: toolsDir, ToolBinary: toolBinary,
		AllowedUIDs: as.AllowedUIDs, Runner: runner, Address: address,
		RunnerStopping: func(ctx context.Context) { s.stopHooks(ctx, true) },
		Metrics:        s.metrics.agent,
		ModelName:      as.ModelName, ModelUUID: as.ModelUUID, AvailabilityZone: as.AvailabilityZone, JujuVersion: as.JujuVersion,
		UpdateStatusEvery: as.UpdateStatusEvery, RetryDelay: as.RetryDelay,
		SecretsKey: as.SecretsKey,
		Logger:     s.log, Now: s.cfg.Now,
	})
	if err != nil {
		ua.close()
		return err
	}
	s.agent, s.secretsKey = ua, as.SecretsKey
	if as.SecretsKey != nil {
		s.log.Info("secrets enabled", "key_id", as.SecretsKey.ID())
	}
	return nil
}

// runAgent runs hooks until the sidecar stops.
func (s *Sidecar) runAgent(wg *sync.WaitGroup) {
	ua := s.agent
	ua.mu.Lock()
	defer ua.mu.Unlock()
	if ua.stopping {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	ua.cancel = cancel
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(s.agent.done)
		if err := s.agent.a.Run(ctx); err != nil {
			s.log.Error("unit agent stopped", "err", err)
		}
	}()
}

// stopAgent stops the hooks (see stopHooks) and closes the unit agent.
func (s *Sidecar) stopAgent(ctx context.Context, graceful bool) {
	if s.agent == nil {
		return
	}
	s.stopHooks(ctx, graceful)
	s.agent.close()
}

// stopHooks lets the running hook finish and, if graceful, runs the stop
// hook (the pod is going away); no hook runs after it. It runs once: a
// second caller (the sidecar stopping while the charm container's hook
// runner asked for the same) waits for the first to finish.
func (s *Sidecar) stopHooks(ctx context.Context, graceful bool) {
	ua := s.agent
	ua.mu.Lock()
	if ua.stopping {
		ua.mu.Unlock()
		select {
		case <-ua.stopped:
		case <-ctx.Done():
		}
		return
	}
	ua.stopping = true
	cancel := ua.cancel
	ua.mu.Unlock()
	defer close(ua.stopped)
	if cancel != nil {
		cancel()
		<-ua.done
	}
	if graceful {
		ua.a.Stop(ctx)
	}
}

func (ua *unitAgent) close() {
	if ua.a != nil {
		ua.a.Close()
	}
	if ua.watcher != nil {
		ua.watcher.Close()
	}
	ua.ln.Close()
}
