package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	"github.com/bagkeeper/bagkeeper/agent"
	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

const execUsage = `Usage: bagkeeper exec [flags] UNIT -- COMMAND [ARG ...]
       bagkeeper exec [flags] --all -- COMMAND [ARG ...]

Runs COMMAND in a hook context of UNIT (like app/0), as 'juju exec --unit'
does, on whichever pod holds the unit, and waits for it: its standard output
is printed on standard output, its standard error on standard error, and
this command exits with its exit status.

COMMAND runs with /bin/sh -c in the charm directory, with the environment a
hook gets (JUJU_UNIT_NAME, JUJU_CONTEXT_ID, JUJU_CHARM_DIR, ... and the hook
tools on PATH): relation-ids, relation-get, state-get, leader-get, status-get
and the others work, and what it writes through them (state-set,
relation-set, leader-set, status-set, ...) commits when it exits 0, as an
action's writes do. It is not an action context: JUJU_ACTION_NAME is not
set, and action-get, action-set, action-log and action-fail fail. A single
COMMAND argument is a shell script ('echo $JUJU_UNIT_NAME; relation-ids db');
several are one command with its arguments, each kept as it is (quoted for
the shell). Put '--' before the command, so that its flags are not taken for
this command's.

Like Juju's, it is queued as an action named juju-exec: it runs between the
unit's hooks, after the actions queued before it, once the charm is
installed; 'bagkeeper actions list' shows it. Each output is kept up to 16
KiB. It is killed after --timeout (the command then fails, exit status 1);
BAGKEEPER_TIMEOUT, which the other admin commands read as how long to wait
for the sidecar, sets it too.
The unit must be active (a pod holds it). With --all, the command runs on
every active unit, one after another in the listing; each unit's output
follows a line "== UNIT (exit N) ==" and this command exits 0 only if every
one exited 0, else 1.

--format json prints {"unit", "code", "stdout", "stderr"} (a list of them
with --all; "message" says why a command that has no exit code failed).`

func cmdExec(e *env, args []string) error {
	var a adminFlags
	var all bool
	var timeout time.Duration
	fs := newFlagSet("exec", execUsage)
	a.registerSocket(fs)
	a.registerFormat(fs, "plain|json")
	fs.BoolVar(&all, "all", false, "run the command on every active unit")
	fs.DurationVar(&timeout, "timeout", agent.DefaultExecTimeout, "kill the command after this `long`")
	rest, err := parse(e, fs, args)
	if err != nil {
		return err
	}
	if err := checkFormat(a.format, "plain", "json"); err != nil {
		return err
	}
	if timeout <= 0 {
		return usageErrorf("--timeout must be positive")
	}
	var units []string
	if !all {
		if len(rest) == 0 {
			return usageErrorf("expected UNIT -- COMMAND [ARG ...]")
		}
		units, rest = rest[:1], rest[1:]
	}
	if len(rest) == 0 {
		return usageErrorf("no command given: expected COMMAND [ARG ...] after the unit and '--'")
	}
	command := rest[0]
	if len(rest) > 1 {
		command = shellJoin(rest)
	}
	if strings.TrimSpace(command) == "" {
		return usageErrorf("the command is empty")
	}
	a.timeout = 10 * time.Second
	c, closeFn, err := a.dial()
	if err != nil {
		return err
	}
	defer closeFn()
	if all {
		ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
		resp, err := c.Status(ctx, &adminpb.StatusRequest{SkipProbe: true})
		cancel()
		if err != nil {
			return friendly(err, &a)
		}
		for _, u := range resp.GetUnits() {
			if u.GetState() == state.UnitActive.String() {
				units = append(units, u.GetName())
			}
		}
		if len(units) == 0 {
			return fmt.Errorf("no unit is active")
		}
	}
	params := agent.ExecParamsJSON(command, timeout)
	ids := make([]int64, len(units))
	for i, unit := range units {
		ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
		resp, err := c.EnqueueAction(ctx, &adminpb.EnqueueActionRequest{Unit: unit, Name: state.ExecAction, ParamsJson: params})
		cancel()
		if err != nil {
			return fmt.Errorf("%s: %w", unit, friendly(err, &a))
		}
		ids[i] = resp.GetId()
	}
	var outs []execOutput
	for i, id := range ids {
		act, err := waitAction(e, c, &a, id, 0)
		if err != nil {
			return err
		}
		out := execResult(units[i], act)
		outs = append(outs, out)
		if a.format == "plain" {
			printExecOutput(e, out, all)
		}
	}
	if a.format == "json" {
		var err error
		if all {
			err = writeJSON(e.stdout, outs)
		} else {
			err = writeJSON(e.stdout, outs[0])
		}
		if err != nil {
			return err
		}
	}
	code := 0
	for _, o := range outs {
		switch {
		case o.Code == nil:
			code = 1
		case *o.Code != 0 && all:
			code = 1
		case *o.Code != 0:
			code = *o.Code
		}
	}
	if code != 0 {
		return exitStatus(code)
	}
	return nil
}

// execOutput is how a command ended on one unit.
type execOutput struct {
	Unit string `json:"unit"`
	// Code is nil when the command has no exit status (killed, timed out,
	// or its unit's agent stopped).
	Code    *int   `json:"code"`
	Stdout  string `json:"stdout"`
	Stderr  string `json:"stderr"`
	Message string `json:"message,omitempty"`
}

func execResult(unit string, act *adminpb.Action) execOutput {
	r := results(act)
	out := execOutput{Unit: unit, Stdout: decodedOutput(r, "stdout"), Stderr: decodedOutput(r, "stderr")}
	if c, ok := r["return-code"].(float64); ok {
		n := int(c)
		out.Code = &n
	}
	if act.GetStatus() != "completed" && out.Code == nil {
		out.Message = act.GetMessage()
		if out.Message == "" {
			out.Message = act.GetStatus()
		}
	}
	return out
}

// decodedOutput is an output as the command wrote it (results keep output
// that is not UTF-8 as base64).
func decodedOutput(r map[string]any, key string) string {
	s, _ := r[key].(string)
	if r[key+"-encoding"] == "base64" {
		if b, err := base64.StdEncoding.DecodeString(s); err == nil {
			return string(b)
		}
	}
	return s
}

func printExecOutput(e *env, o execOutput, header bool) {
	if header {
		code := "none"
		if o.Code != nil {
			code = fmt.Sprint(*o.Code)
		}
		fmt.Fprintf(e.stdout, "== %s (exit %s) ==\n", o.Unit, code)
	}
	fmt.Fprint(e.stdout, o.Stdout)
	fmt.Fprint(e.stderr, o.Stderr)
	if o.Message != "" {
		fmt.Fprintf(e.stderr, "bagkeeper exec: %s: the command failed: %s\n", o.Unit, o.Message)
	}
}

// shellJoin quotes each argument for /bin/sh and joins them.
func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, s := range args {
		if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,@%+") == "" {
			q[i] = s
			continue
		}
		q[i] = "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}
