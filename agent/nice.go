package agent

import (
	"os/exec"
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

// startNiced starts cmd, which leads a process group of its own
// (SysProcAttr.Setpgid), and raises the nice value of that group by nice
// (capped at 19) over this process's: the hook, and anything it started
// in the moment before (they are in its group); what it starts later
// inherits the value. This process's own threads are left as they are.
// If the value cannot be raised, the hook runs at this process's
// priority.
func startNiced(cmd *exec.Cmd, nice int) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	if nice > 0 {
		// getpriority returns 20 minus the nice value.
		if prio, err := syscall.Getpriority(syscall.PRIO_PROCESS, 0); err == nil {
			_ = syscall.Setpriority(syscall.PRIO_PGRP, cmd.Process.Pid, min(19, 20-prio+nice))
		}
	}
	return nil
}
