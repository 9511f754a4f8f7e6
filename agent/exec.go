package agent

// bagkeeper exec (Juju's `juju exec --unit`): a command run in a unit's
// hook context, on whichever pod holds the unit. As Juju 3 does, it is an
// action of a name reserved to it (state.ExecAction, "juju-exec") queued
// through the action machinery: it runs between hooks, after the actions
// queued before it, with the environment a hook gets (the hook tools on
// PATH, JUJU_UNIT_NAME, JUJU_CONTEXT_ID, JUJU_CHARM_DIR, ...); what it
// writes through the hook tools commits with its end if it exits 0, as an
// action's writes do. Its stdout, stderr and exit status are the action's
// results (stdout, stderr, return-code), which the CLI prints.
//
// Unlike Juju 3, whose juju-exec runs inside the juju-exec action's
// context (JUJU_ACTION_NAME=juju-exec, action-get answering with the
// command), the command is not in an action context here: JUJU_ACTION_* and
// JUJU_DISPATCH_PATH are unset, and action-get, action-set, action-log and
// action-fail fail as they do in a hook. Its results are its output and
// exit status, nothing else.

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// DefaultExecTimeout is how long a command may run unless told otherwise
// (bagkeeper exec --timeout).
const DefaultExecTimeout = 5 * time.Minute

// execParams are the juju-exec action's parameters.
type execParams struct {
	Command string `json:"command"`
	// Timeout is in nanoseconds, as Juju has it; 0 is the default.
	Timeout int64 `json:"timeout"`
}

func (p execParams) timeout() time.Duration {
	if p.Timeout <= 0 {
		return DefaultExecTimeout
	}
	return time.Duration(p.Timeout)
}

// parseExecParams reads and checks the juju-exec action's parameters.
func parseExecParams(data []byte) (execParams, error) {
	var p execParams
	if err := json.Unmarshal(data, &p); err != nil {
		return p, fmt.Errorf("invalid %s parameters: %w", "juju-exec", err)
	}
	if p.Command == "" {
		return p, errors.New("invalid juju-exec parameters: no command")
	}
	return p, nil
}

// ExecParamsJSON returns the parameters of a juju-exec action running
// command, killed after timeout (0: DefaultExecTimeout).
func ExecParamsJSON(command string, timeout time.Duration) []byte {
	b, _ := json.Marshal(execParams{Command: command, Timeout: int64(timeout)})
	return b
}

// CheckExecParams checks the parameters of a juju-exec action as the
// admin API queues it.
func CheckExecParams(data []byte) error {
	p, err := parseExecParams(data)
	if err != nil {
		return err
	}
	if p.Timeout < 0 {
		return errors.New("invalid juju-exec parameters: a negative timeout")
	}
	return nil
}
