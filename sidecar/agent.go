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
	ua := &unitAgent{done: make(chan struct{})}
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
	var runner agent.Runner = agent.LocalRunner{ToolsDir: toolsDir, Logger: s.log}
	if as.RemoteRunner {
		runner = agent.NewRemoteRunner()
	}
	ua.a, err = agent.New(agent.Config{
		Store: s.node, Unit: s.Unit, Ready: s.Ready, Member: string(s.node.ID()), Pod: pod,
		Charm: charm, ConfigFile: as.ConfigFile, ConfigChanged: changed,
		Listener: ua.ln, Socket: socket, ToolsDir: toolsDir, ToolBinary: toolBinary,
		AllowedUIDs: as.AllowedUIDs, Runner: runner, Address: address,
		ModelName: as.ModelName, ModelUUID: as.ModelUUID, AvailabilityZone: as.AvailabilityZone, JujuVersion: as.JujuVersion,
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
	ctx, cancel := context.WithCancel(context.Background())
	s.agent.cancel = cancel
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(s.agent.done)
		if err := s.agent.a.Run(ctx); err != nil {
			s.log.Error("unit agent stopped", "err", err)
		}
	}()
}

// stopAgent lets the running hook finish, runs the stop hook and gives up
// the leadership lease (the pod is going away).
func (s *Sidecar) stopAgent(ctx context.Context, graceful bool) {
	ua := s.agent
	if ua == nil {
		return
	}
	if ua.cancel != nil {
		ua.cancel()
		<-ua.done
	}
	if graceful {
		ua.a.Stop(ctx)
	}
	ua.close()
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
