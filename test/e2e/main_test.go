//go:build linux

package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// bkBin is the bagkeeper binary built for this test run, jujucBin the hook
// tools' binary (what --hook-tool names).
var bkBin, jujucBin string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "bk-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	bkBin = filepath.Join(dir, "bagkeeper")
	jujucBin = filepath.Join(dir, "jujuc")
	for _, b := range []struct{ path, pkg string }{
		{bkBin, "github.com/bagkeeper/bagkeeper/cmd/bagkeeper"},
		{jujucBin, "github.com/bagkeeper/bagkeeper/cmd/jujuc"},
	} {
		if err := buildBinary(b.path, b.pkg); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: building %s: %v\n", filepath.Base(b.path), err)
			return 1
		}
	}
	pickLoopbackRange()

	code := m.Run()

	// Every test kills its processes in its cleanup; whatever is left here
	// is a harness bug, but it must not outlive the run either way.
	if n := killAllProcesses(); n > 0 {
		fmt.Fprintf(os.Stderr, "e2e: %d bagkeeper processes were still running after the tests and were killed\n", n)
		code = 1
	}
	if stray := strayProcesses(bkBin); stray != "" {
		fmt.Fprintf(os.Stderr, "e2e: stray bagkeeper processes after the run:\n%s\n", stray)
		code = 1
	}
	return code
}

// buildBinary builds the command pkg into path, without the race detector
// even when the tests themselves run with it: the processes under test are
// timing-sensitive and the race detector slows them several times.
func buildBinary(path, pkg string) error {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return errors.New("no go tool found on PATH")
	}
	cmd := exec.Command(goTool, "build", "-o", path, pkg)
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "GOFLAGS=") {
			// Keep the flags but not -race.
			var keep []string
			for _, f := range strings.Fields(strings.TrimPrefix(kv, "GOFLAGS=")) {
				if f != "-race" {
					keep = append(keep, f)
				}
			}
			kv = "GOFLAGS=" + strings.Join(keep, " ")
		}
		env = append(env, kv)
	}
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%v\n%s", err, out.String())
	}
	fmt.Fprintf(os.Stderr, "e2e: built %s in %v\n", filepath.Base(path), time.Since(start).Round(time.Millisecond))
	return nil
}

// strayProcesses lists processes still running the test binary (there
// should be none).
func strayProcesses(bin string) string {
	out, err := exec.Command("pgrep", "-a", "-f", bin).Output()
	if err != nil {
		// Exit status 1: nothing matched. Anything else (no pgrep): we
		// cannot tell, and the registry check above already ran.
		return ""
	}
	return strings.TrimSpace(string(out))
}

// process is a child process in its own process group. It is registered
// until it has exited, so TestMain can kill whatever a test left behind;
// the kernel also kills it if the test binary dies (Pdeathsig).
type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been reaped
	err  error         // Wait's result, valid once done is closed
	logF *os.File
}

var liveProcs = struct {
	sync.Mutex
	m map[*process]struct{}
}{m: map[*process]struct{}{}}

// startProcess starts bin with args, stdout and stderr going to logPath.
// The BAGKEEPER_* environment of the test run is not passed on: every
// setting the tests give is a flag.
func startProcess(name, logPath string, args ...string) (*process, error) {
	logF, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bkBin, args...)
	cmd.Stdout, cmd.Stderr = logF, logF
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BAGKEEPER_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &process{name: name, cmd: cmd, done: make(chan struct{}), logF: logF}
	liveProcs.Lock()
	defer liveProcs.Unlock()
	if err := cmd.Start(); err != nil {
		logF.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	liveProcs.m[p] = struct{}{}
	go func() {
		err := cmd.Wait()
		logF.Close()
		liveProcs.Lock()
		p.err = err
		delete(liveProcs.m, p)
		liveProcs.Unlock()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitStatus describes how the process ended ("" while it runs).
func (p *process) exitStatus() string {
	if !p.exited() {
		return ""
	}
	if p.err == nil {
		return "exited with status 0"
	}
	return p.err.Error()
}

// exitCode is the exit code once exited (-1 if killed by a signal).
func (p *process) exitCode() int {
	<-p.done
	return p.cmd.ProcessState.ExitCode()
}

func (p *process) signal(sig syscall.Signal) {
	if p.exited() {
		return
	}
	// The process leads its own group; signal only that group.
	_ = syscall.Kill(-p.pid(), sig)
}

// kill sends SIGKILL and waits until the process is reaped. A paused
// process (SIGSTOP) is resumed first, so that nothing stopped outlives a
// test whatever the kernel does with a signal to a stopped process.
func (p *process) kill() {
	p.signal(syscall.SIGCONT)
	p.signal(syscall.SIGKILL)
	<-p.done
}

// endProcessesIn kills every process whose working directory is in dir
// (a charm's hook, and what the hook started, run in the pod's charm
// directory) and waits until they have ended.
func endProcessesIn(t testing.TB, dir string) {
	t.Helper()
	err := poll(10*time.Second, "the processes in "+dir+" to end", func() (bool, string) {
		pids := processesIn(dir)
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		return len(pids) == 0, fmt.Sprintf("processes %v still run", pids)
	})
	if err != nil {
		t.Error(err)
	}
}

// processesIn lists the live processes whose working directory is in dir
// (a zombie has none).
func processesIn(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if err == nil && (cwd == dir || strings.HasPrefix(cwd, dir+"/")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// wait waits until the process exits or d passes.
func (p *process) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

// killAllProcesses kills every registered process and returns how many
// there were.
func killAllProcesses() int {
	liveProcs.Lock()
	var ps []*process
	for p := range liveProcs.m {
		ps = append(ps, p)
	}
	liveProcs.Unlock()
	for _, p := range ps {
		p.kill()
	}
	return len(ps)
}

// The loopback range of this run: 127.<second>.<third>.<host>, the second
// octet picked at random so that two runs on one machine do not collide,
// the third given to each cluster in turn.
var loopback struct {
	sync.Mutex
	second int
	third  int
}

func pickLoopbackRange() {
	loopback.second = 100 + rand.IntN(150)
}
