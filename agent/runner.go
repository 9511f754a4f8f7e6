package agent

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/bagkeeper/bagkeeper/agent/toolpb"
)

// HookRun is one hook to run.
type HookRun struct {
	ContextID string
	Hook      string
	// Dir is the charm directory, the hook's working directory.
	Dir string
	// Env holds the JUJU_* variables (PATH is added by the runner, with
	// its tools directory first).
	Env map[string]string

	// ---- exec (exec.go) ----
	// Command, when set, is run with /bin/sh -c in the charm directory
	// instead of the charm's hook (bagkeeper exec); its output is kept as
	// an action's is.
	Command string
	// Timeout, when set, kills the run (its process group) after this long.
	Timeout time.Duration
	// ---- end of exec ----
}

// HookResult is how a hook ended. Err means it could not run or was
// killed; otherwise ExitCode is its exit status.
type HookResult struct {
	ExitCode int
	Err      error
	// Stdout and Stderr are what an action (a run whose Env has
	// JUJU_ACTION_NAME) wrote, up to MaxActionOutput bytes each; a hook's
	// output is only logged.
	Stdout, Stderr []byte
	// OutputTail is the last MaxOutputTail bytes of what the hook wrote,
	// standard output and error together (kept for a failed hook's
	// record).
	OutputTail []byte
}

// MaxOutputTail is how much of a hook's last output is kept.
const MaxOutputTail = 4 << 10

// Runner runs hooks. Run blocks until the hook has ended.
type Runner interface {
	Run(ctx context.Context, h HookRun) HookResult
}

// hookEnv is the environment of a hook, as Juju sets it.
func (a *Agent) hookEnv(hc *hookContext) map[string]string {
	h := hc.hook
	env := map[string]string{
		"JUJU_CHARM_DIR":            a.cfg.Charm.Dir,
		"CHARM_DIR":                 a.cfg.Charm.Dir,
		"JUJU_CONTEXT_ID":           hc.id,
		"JUJU_HOOK_NAME":            h.FullName(),
		"JUJU_DISPATCH_PATH":        "hooks/" + h.FullName(),
		"JUJU_AGENT_SOCKET_ADDRESS": a.cfg.Socket,
		"JUJU_AGENT_SOCKET_NETWORK": "unix",
		"JUJU_UNIT_NAME":            hc.unit,
		"JUJU_MODEL_NAME":           a.cfg.ModelName,
		"JUJU_MODEL_UUID":           a.cfg.ModelUUID,
		"JUJU_VERSION":              a.cfg.JujuVersion,
		"JUJU_AVAILABILITY_ZONE":    a.cfg.AvailabilityZone,
		"JUJU_MACHINE_ID":           "",
	}
	if r := h.Relation; r != nil {
		env["JUJU_RELATION"] = r.Endpoint
		env["JUJU_RELATION_ID"] = r.Key()
		env["JUJU_REMOTE_APP"] = h.RemoteApp
		if r.Peer && env["JUJU_REMOTE_APP"] == "" {
			env["JUJU_REMOTE_APP"] = hc.app
		}
		env["JUJU_REMOTE_UNIT"] = h.RemoteUnit
		if h.DepartingUnit != "" {
			env["JUJU_DEPARTING_UNIT"] = h.DepartingUnit
		}
	}
	secretEnv(env, h) // secrets.go
	return env
}

// baseEnv is what a hook inherits from the agent's environment: only the
// harmless basics — the agent's own settings (a join token!) stay out.
func baseEnv() []string {
	var out []string
	for _, k := range []string{"HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "USER", "LOGNAME", "SHELL"} {
		if v, ok := os.LookupEnv(k); ok {
			out = append(out, k+"="+v)
		}
	}
	return out
}

// envList renders env for exec, PATH with toolsDir first.
func envList(env map[string]string, toolsDir string) []string {
	out := baseEnv()
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	if toolsDir != "" {
		path = toolsDir + ":" + path
	}
	out = append(out, "PATH="+path)
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out = append(out, k+"="+env[k])
	}
	return out
}

// LocalRunner runs hooks as child processes of this process.
type LocalRunner struct {
	// ToolsDir is put first on the hook's PATH.
	ToolsDir string
	Logger   *slog.Logger
	// KillAfter is how long a hook may run on after ctx ends before it is
	// killed (default 30s; a stopping pod lets its hook finish).
	KillAfter time.Duration
	// Nice is how much higher than this process's the nice value of a hook
	// is (lower CPU priority; DefaultHookNice); 0 runs it at this
	// process's.
	Nice int
}

// Run runs dispatch if the charm has an executable one, else
// hooks/<name>; a charm with neither has nothing to run for the hook.
func (r LocalRunner) Run(ctx context.Context, h HookRun) HookResult {
	logger := r.Logger
	if logger == nil {
		logger = slog.Default()
	}
	var cmd *exec.Cmd
	if h.Command != "" {
		cmd = exec.Command("/bin/sh", "-c", h.Command)
	} else {
		path, err := hookPath(h.Dir, h.Hook)
		if err != nil {
			return HookResult{Err: err}
		}
		if path == "" {
			logger.Debug("charm has no handler for the hook; skipped", "hook", h.Hook)
			return HookResult{}
		}
		cmd = exec.Command(path)
	}
	path := cmd.Path
	var err error
	cmd.Dir = h.Dir
	cmd.Env = envList(h.Env, r.ToolsDir)
	// The hook leads its own process group, so that a timeout or a stop
	// kills what it started too; and the kernel kills it if this process
	// dies (kill -9, OOM): a hook whose agent is gone can commit nothing,
	// and must not go on changing the charm's files beside the next one.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var out io.ReadCloser
	// An action's output is kept for its results too (actions.go).
	capture, closeCapture := captureActionOutput(cmd, h)
	if capture == nil {
		if out, err = cmd.StdoutPipe(); err != nil {
			return HookResult{Err: err}
		}
		cmd.Stderr = cmd.Stdout
	} else {
		out = capture.reader
	}
	release, err := startNiced(cmd, r.Nice)
	if err != nil {
		closeCapture()
		return HookResult{Err: fmt.Errorf("starting %s: %w", path, err)}
	}
	tail := &tailBuffer{max: MaxOutputTail}
	logged := io.TeeReader(out, tail)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		logLines(logged, logger, h.Hook)
		_, _ = io.Copy(io.Discard, logged) // past a line too long to log
	}()
	done := make(chan struct{})
	// A command past its timeout (exec.go) is killed, with its process
	// group; the timer stops once the process has been waited for.
	var timedOut atomic.Bool
	stopTimer := func() {}
	if h.Timeout > 0 {
		timer := time.AfterFunc(h.Timeout, func() {
			timedOut.Store(true)
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		})
		stopTimer = func() { timer.Stop() }
	}
	go func() {
		killAfter := r.KillAfter
		if killAfter <= 0 {
			killAfter = 30 * time.Second
		}
		select {
		case <-done:
			return
		case <-ctx.Done():
		}
		select {
		case <-done:
		case <-time.After(killAfter):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	}()
	if capture != nil {
		err = cmd.Wait()
		stopTimer()
		closeCapture()
		wg.Wait()
	} else {
		wg.Wait()
		err = cmd.Wait()
		stopTimer()
	}
	release() // the hook has been waited for: the thread that started it may end
	close(done)
	res := capture.result()
	res.OutputTail = tail.bytes()
	var ee *exec.ExitError
	switch {
	case timedOut.Load() && err != nil: // killed, not ended on its own
		res.Err = fmt.Errorf("timed out after %s", h.Timeout)
		return res
	case err == nil:
		return res
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.Err = fmt.Errorf("killed by signal %s", ws.Signal())
			return res
		}
		res.ExitCode = ee.ExitCode()
		return res
	}
	res.Err = err
	return res
}

// hookPath finds what runs a hook: dispatch if executable, else
// hooks/<name> if present; "" if neither.
func hookPath(dir, hook string) (string, error) {
	own := filepath.Join(dir, "hooks", hook)
	if name, ok := strings.CutPrefix(hook, "actions/"); ok { // an action: actions/<name>
		own = filepath.Join(dir, "actions", name)
	}
	for _, p := range []string{filepath.Join(dir, "dispatch"), own} {
		fi, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		if fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
		if p == own {
			return "", fmt.Errorf("%s is not an executable file", p)
		}
	}
	return "", nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(p) >= b.max {
		b.buf = append(b.buf[:0], p[len(p)-b.max:]...)
		return len(p), nil
	}
	if over := len(b.buf) + len(p) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *tailBuffer) bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf)
}

// logLines logs a hook's output line by line.
func logLines(r io.Reader, logger *slog.Logger, hook string) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		logger.Info(strings.TrimRight(sc.Text(), "\r"), "hook", hook, "stream", "output")
	}
}

// RemoteRunner hands hooks to a hook runner in another container of the
// pod, connected over the agent's socket (bagkeeper hook-runner). A hook
// waits until a runner is connected; a runner that disconnects mid-hook
// fails the hook, which is then retried.
type RemoteRunner struct {
	mu      sync.Mutex
	stream  chan *toolpb.HookAssignment // the connected runner's queue
	results map[string]chan HookResult
	ready   chan struct{} // closed while a runner is connected
	gone    chan struct{} // closed when that runner disconnects
}

// NewRemoteRunner returns a runner with no hook runner connected yet.
func NewRemoteRunner() *RemoteRunner {
	return &RemoteRunner{results: map[string]chan HookResult{}, ready: make(chan struct{})}
}

// Run sends the hook to the connected runner and waits for its result.
func (r *RemoteRunner) Run(ctx context.Context, h HookRun) HookResult {
	r.mu.Lock()
	ready := r.ready
	r.mu.Unlock()
	select {
	case <-ctx.Done():
		return HookResult{Err: ctx.Err()}
	case <-ready:
	}
	r.mu.Lock()
	stream, gone := r.stream, r.gone
	res := make(chan HookResult, 1)
	r.results[h.ContextID] = res
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.results, h.ContextID)
		r.mu.Unlock()
	}()
	select {
	case stream <- &toolpb.HookAssignment{ContextId: h.ContextID, Hook: h.Hook, Env: h.Env, Command: h.Command, TimeoutMs: h.Timeout.Milliseconds()}:
	case <-gone:
		return HookResult{Err: errors.New("hook runner disconnected")}
	case <-ctx.Done():
		return HookResult{Err: ctx.Err()}
	}
	select {
	case out := <-res:
		return out
	case <-gone:
		return HookResult{Err: errors.New("hook runner disconnected while the hook ran")}
	case <-ctx.Done():
		return HookResult{Err: ctx.Err()}
	}
}

// attach registers a connected runner; it returns its queue and a detach
// function. Only one runner may be connected at a time.
func (r *RemoteRunner) attach() (<-chan *toolpb.HookAssignment, func(), error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stream != nil {
		return nil, nil, errors.New("another hook runner is already connected")
	}
	r.stream = make(chan *toolpb.HookAssignment)
	r.gone = make(chan struct{})
	close(r.ready)
	stream, gone := r.stream, r.gone
	return stream, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		close(gone)
		r.stream = nil
		r.ready = make(chan struct{})
	}, nil
}

// done delivers a runner's result.
func (r *RemoteRunner) done(res *toolpb.HookResult) error {
	r.mu.Lock()
	ch, ok := r.results[res.GetContextId()]
	r.mu.Unlock()
	if !ok {
		return fmt.Errorf("no hook %q is running", res.GetContextId())
	}
	out := HookResult{ExitCode: int(res.GetExitCode()), Stdout: res.GetOutput(), Stderr: res.GetStderr(), OutputTail: res.GetOutputTail()}
	if res.GetError() != "" {
		out.Err = errors.New(res.GetError())
	}
	ch <- out
	return nil
}
