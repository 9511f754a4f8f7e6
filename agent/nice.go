package agent

import (
	"os/exec"
	"runtime"
	"syscall"
)

// DefaultHookNice is how much lower than the agent's the CPU priority of
// a hook (an action, an exec'd command) is by default: the nice value it
// runs at is the agent's plus this.
//
// A hook runs in the sidecar's container, beside the raft member, and
// charms' hooks are busy processes (an ops charm starts Python). When the
// container reaches its CPU limit, or the node its cores, a storm of hooks
// (a relation made on every unit, a config change) takes the CPU from the
// member, whose leader then hears from its voters late and steps down, or
// whose voters hear from the leader late (docs/architecture.md, "A slow
// leader is not a silent one"). At a higher nice value the hooks get what
// the member leaves: as much as before while the CPU is free, less only
// while the member needs it.
const DefaultHookNice = 10

// startNiced starts cmd with a nice value nice higher (capped at 19) than
// this process's, from its first instruction: what the hook starts
// inherits it. This process's own threads keep theirs. If the value
// cannot be raised, the hook runs at this process's priority. Once cmd
// has been waited for, the caller calls done.
//
// On Linux a nice value belongs to a thread, and a new process takes the
// value of the thread that forked it. So the hook is started from an OS
// thread of its own (runtime.LockOSThread) whose value is raised first;
// raising the new process's value after the start instead would leave the
// hook, and a child it starts at once, a moment at the agent's priority.
// The thread's value cannot be lowered again without privilege, so the
// thread must not return to the runtime's pool: its goroutine ends locked
// and the runtime ends the thread with it. It ends only after the hook
// has been waited for, because the kernel sends the hook its parent-death
// signal (SysProcAttr.Pdeathsig) when the thread that forked it ends.
func startNiced(cmd *exec.Cmd, nice int) (done func(), err error) {
	if nice <= 0 {
		return func() {}, cmd.Start()
	}
	// getpriority returns 20 minus the nice value; PRIO_PROCESS with the
	// process ID reads the main thread's.
	prio, err := syscall.Getpriority(syscall.PRIO_PROCESS, syscall.Getpid())
	if err != nil {
		return func() {}, cmd.Start()
	}
	value := min(19, 20-prio+nice)
	started := make(chan error, 1)
	release := make(chan struct{})
	go startOnNicedThread(cmd, value, started, release, nil)
	if err := <-started; err != nil {
		return nil, err
	}
	return func() { close(release) }, nil
}

// isMainThread tells whether the calling goroutine's thread is the
// process's main thread (a test replaces it).
var isMainThread = func() bool { return syscall.Gettid() == syscall.Getpid() }

// startOnNicedThread locks the calling goroutine to its thread, closes
// taken (if not nil), raises the thread's nice value to value, starts
// cmd, sends the result on started and, if cmd started, waits for
// release; it returns with the thread locked, which ends the thread.
//
// The main thread is never used: the runtime cannot end it, so a
// goroutine ending locked to it parks it for good, at the raised value.
// If this goroutine runs on it, it keeps the main thread busy until a new
// goroutine, which therefore runs on another thread, has taken the work
// (closed taken), and only then tells its own caller.
func startOnNicedThread(cmd *exec.Cmd, value int, started chan<- error, release <-chan struct{}, taken chan<- struct{}) {
	runtime.LockOSThread()
	if isMainThread() {
		moved := make(chan struct{})
		go startOnNicedThread(cmd, value, started, release, moved)
		<-moved
		runtime.UnlockOSThread()
		if taken != nil {
			close(taken)
		}
		return
	}
	if taken != nil {
		close(taken)
	}
	startLocked(cmd, value, started, release)
}

// startLocked is startOnNicedThread on a locked thread other than the
// main one.
func startLocked(cmd *exec.Cmd, value int, started chan<- error, release <-chan struct{}) {
	// An error leaves the thread at its value: the hook runs at the
	// agent's priority.
	_ = syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), value)
	err := cmd.Start()
	started <- err
	if err == nil {
		<-release
	}
}
