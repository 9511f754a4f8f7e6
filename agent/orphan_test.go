package agent

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bagkeeper/bagkeeper/test/wait"
)

// hookHelperEnv, when set in a re-run of this test binary, makes it run
// one hook of the charm in that directory with a LocalRunner, instead of
// the tests (see TestMain): a unit agent in a process of its own, for a
// test to kill.
const hookHelperEnv = "AGENT_TEST_RUN_ONE_HOOK"

// runOneHook is the helper process: it runs the charm's install hook and
// exits when the hook does.
func runOneHook(dir string) int {
	res := LocalRunner{}.Run(context.Background(), HookRun{ContextID: "helper", Hook: "install", Dir: dir, Env: map[string]string{}})
	if res.Err != nil {
		fmt.Fprintln(os.Stderr, res.Err)
		return 1
	}
	return res.ExitCode
}

// TestAHookDoesNotOutliveItsAgent kills (-9) the process of a unit agent
// while its hook runs: the hook must end with it rather than go on
// changing the charm's files beside the next agent's hooks.
func TestAHookDoesNotOutliveItsAgent(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "hook.pid")
	script := "#!/bin/sh\necho $$ >" + pidFile + ".new && mv " + pidFile + ".new " + pidFile + "\nwhile :; do sleep 0.05; done\n"
	if err := os.WriteFile(filepath.Join(dir, "dispatch"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), hookHelperEnv+"="+dir)
	helper.Stdout, helper.Stderr = os.Stderr, os.Stderr
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = helper.Process.Kill(); _ = helper.Wait() }()

	hookPid := 0
	wait.Until(t, 30*time.Second, "the hook to start", func() error {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return err
		}
		hookPid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err
	})
	// Whatever the outcome, the hook does not outlive the test.
	defer func() { _ = syscall.Kill(hookPid, syscall.SIGKILL) }()

	if err := helper.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = helper.Wait()
	wait.Until(t, 10*time.Second, fmt.Sprintf("the hook (pid %d) to end with its agent", hookPid), func() error {
		if processLives(hookPid) {
			return fmt.Errorf("pid %d still runs", hookPid)
		}
		return nil
	})
}

// processLives reports whether pid names a process that has not ended (a
// zombie waiting for its reaper has ended).
func processLives(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || !strings.HasPrefix(s[i+1:], " Z") && !strings.HasPrefix(s[i+1:], " X")
}
