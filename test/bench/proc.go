package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
)

// process is a child process started by the harness in its own process
// group. Every process is registered until it has exited, so that
// killAllProcesses can clean up on errors and interrupts; in addition the
// kernel kills it (SIGKILL) if the harness itself dies.
type process struct {
	name string
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{} // closed once the process has exited and been reaped
	err  error         // the exit status from Wait; valid once done is closed
}

// liveProcesses holds every process that has been started and has not yet
// exited.
var liveProcesses = struct {
	sync.Mutex
	m map[*process]struct{}
}{m: make(map[*process]struct{})}

// startProcess starts bin with args in a new process group, with stdout and
// stderr appended to logPath and the harness's environment minus any
// variable whose name starts with one of dropEnvPrefixes (plus extraEnv).
func startProcess(name, logPath string, dropEnvPrefixes, extraEnv []string, bin string, args ...string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: open log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Env = append(filterEnv(os.Environ(), dropEnvPrefixes), extraEnv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:   true,            // signals go to the whole group, Ctrl-C does not reach it
		Pdeathsig: syscall.SIGKILL, // if the harness dies, the kernel kills the child
	}
	p := &process{name: name, cmd: cmd, log: logFile, done: make(chan struct{})}
	liveProcesses.Lock()
	defer liveProcesses.Unlock()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	liveProcesses.m[p] = struct{}{}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		liveProcesses.Lock()
		delete(liveProcesses.m, p)
		liveProcesses.Unlock()
		close(p.done)
	}()
	return p, nil
}

// filterEnv returns env without the variables whose names start with any
// of prefixes.
func filterEnv(env, prefixes []string) []string {
	out := make([]string, 0, len(env))
next:
	for _, kv := range env {
		for _, p := range prefixes {
			if strings.HasPrefix(kv, p) {
				continue next
			}
		}
		out = append(out, kv)
	}
	return out
}

// Pid returns the process id, which is also its process group id.
func (p *process) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has exited.
func (p *process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Signal sends sig to the process's group. It is not an error if the
// process has already exited.
func (p *process) Signal(sig syscall.Signal) error {
	if p.Exited() {
		return nil
	}
	if err := syscall.Kill(-p.Pid(), sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %s to %s (pid %d): %w", sig, p.name, p.Pid(), err)
	}
	return nil
}

// Wait waits until the process has exited or ctx is done.
func (p *process) Wait(ctx context.Context) error {
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for %s (pid %d) to exit: %w", p.name, p.Pid(), ctx.Err())
	}
}

// Kill sends SIGKILL to the process group and waits until the process has
// been reaped.
func (p *process) Kill() error {
	err := p.Signal(syscall.SIGKILL)
	<-p.done
	return err
}

// ExitError returns the process's exit status once it has exited, or nil
// while it is running.
func (p *process) ExitError() error {
	if !p.Exited() {
		return nil
	}
	if p.err == nil {
		return fmt.Errorf("%s exited with status 0", p.name)
	}
	return fmt.Errorf("%s: %w", p.name, p.err)
}

// killAllProcesses kills every process started by startProcess that is
// still running and waits for them to be reaped.
func killAllProcesses() {
	liveProcesses.Lock()
	procs := make([]*process, 0, len(liveProcesses.m))
	for p := range liveProcesses.m {
		procs = append(procs, p)
	}
	liveProcesses.Unlock()
	for _, p := range procs {
		_ = p.Kill()
	}
}

// tailFile returns up to the last n bytes of the file at path, for error
// messages; it returns "" if the file cannot be read.
func tailFile(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(st.Size()-n, 0)
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return ""
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
