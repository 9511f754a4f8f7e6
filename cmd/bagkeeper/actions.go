package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

const actionsUsage = `Usage: bagkeeper actions run|show|list ...

Runs the charm's actions (actions.yaml) and shows how they went:

  bagkeeper actions run [flags] UNIT ACTION [key=value ...]
  bagkeeper actions show [flags] ID
  bagkeeper actions list [flags]

Run 'bagkeeper actions <subcommand> --help' for each one's flags.`

func cmdActions(e *env, args []string) error {
	if len(args) == 0 {
		return usageErrorf("expected 'actions run', 'actions show' or 'actions list'")
	}
	switch args[0] {
	case "run":
		return cmdActionsRun(e, args[1:])
	case "show":
		return cmdActionsShow(e, args[1:])
	case "list":
		return cmdActionsList(e, args[1:])
	case "-h", "--help", "help":
		fmt.Fprintln(e.stdout, actionsUsage)
		return nil
	}
	return usageErrorf("unknown subcommand %q: expected run, show or list", args[0])
}

const actionsRunUsage = `Usage: bagkeeper actions run [flags] UNIT ACTION [key=value ...]

Queues the charm's action ACTION (from its actions.yaml) for UNIT (like
app/0), waits for it to end and prints its results, as 'juju run' does: the
results set with action-set as YAML, then what the action wrote on its
standard output (its standard error goes to this command's). Progress
messages (action-log) are printed on standard error as they come. The
command fails if the action fails.

Parameters are key=value arguments; each value is read as YAML ("3" is a
number, "true" a boolean, "'3'" a string), and a dotted key ("a.b=1") makes
nested parameters. --params reads more from a YAML file; the arguments win.
The parameters are checked against the action's schema, whose defaults fill
in what is not given, before the action is queued.

The action runs on the pod that holds the unit, between its hooks, after the
actions queued before it. Any pod's sidecar can queue it. With --background
the command prints the action's id and returns at once: see 'bagkeeper
actions show ID'.`

func cmdActionsRun(e *env, args []string) error {
	var a adminFlags
	var background bool
	var wait time.Duration
	var paramsFile string
	fs := newFlagSet("actions run", actionsRunUsage)
	a.register(fs, "plain|yaml|json")
	fs.BoolVar(&background, "background", false, "queue the action and return at once, printing its id")
	fs.DurationVar(&wait, "wait", 0, "give up waiting for the action after this `long` (0: wait until it ends)")
	fs.StringVar(&paramsFile, "params", "", "read parameters from this YAML `file`")
	rest, err := parse(e, fs, args)
	if err != nil {
		return err
	}
	if len(rest) < 2 {
		return usageErrorf("expected UNIT ACTION [key=value ...], got %q", rest)
	}
	if err := checkFormat(a.format, "plain", "yaml", "json"); err != nil {
		return err
	}
	unit, name := rest[0], rest[1]
	params, err := actionParams(paramsFile, rest[2:])
	if err != nil {
		return err
	}
	paramsJSON, err := json.Marshal(params)
	if err != nil {
		return fmt.Errorf("parameters: %w", err)
	}
	c, closeFn, err := a.dial()
	if err != nil {
		return err
	}
	defer closeFn()
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	resp, err := c.EnqueueAction(ctx, &adminpb.EnqueueActionRequest{Unit: unit, Name: name, ParamsJson: paramsJSON})
	cancel()
	if err != nil {
		return friendly(err, &a)
	}
	id := resp.GetId()
	if background {
		fmt.Fprintf(e.stdout, "Scheduled operation %d with task %d\n", id, id)
		fmt.Fprintf(e.stdout, "Check task status with 'bagkeeper actions show %d'\n", id)
		return nil
	}
	fmt.Fprintf(e.stderr, "Running operation %d with 1 task\n  - task %d on %s\n\nWaiting for task %d...\n", id, id, unitTag(unit), id)
	act, err := waitAction(e, c, &a, id, wait)
	if err != nil {
		return err
	}
	if err := printRunResult(e, act, a.format); err != nil {
		return err
	}
	if act.GetStatus() != "completed" || returnCode(act) != 0 {
		return fmt.Errorf("the following task failed:\n - id %q with return code %d\n\nuse 'bagkeeper actions show %d' to inspect the failure", strconv.FormatInt(id, 10), returnCode(act), id)
	}
	return nil
}

// unitTag is Juju's tag of a unit ("unit-app-0").
func unitTag(unit string) string { return "unit-" + strings.ReplaceAll(unit, "/", "-") }

// waitAction waits until the action has ended (or wait, if not 0, has
// passed), printing its log messages on stderr as they come.
func waitAction(e *env, c adminpb.AdminClient, a *adminFlags, id int64, wait time.Duration) (*adminpb.Action, error) {
	var deadline time.Time
	if wait > 0 {
		deadline = time.Now().Add(wait)
	}
	seen := 0
	failures := 0
	for {
		per := 30 * time.Second
		if !deadline.IsZero() {
			per = min(per, time.Until(deadline))
		}
		ctx, cancel := context.WithTimeout(context.Background(), max(per, 100*time.Millisecond))
		act, err := c.GetAction(ctx, &adminpb.GetActionRequest{Id: id, Wait: true, LogLines: int32(seen)})
		cancel()
		if err != nil {
			// The sidecar asked may be restarting, or without a leader for
			// a moment: keep waiting, within bounds.
			if failures++; failures > 10 || (!deadline.IsZero() && time.Now().After(deadline)) {
				return nil, friendly(err, a)
			}
			time.Sleep(500 * time.Millisecond)
			continue
		}
		failures = 0
		for _, l := range act.GetLog()[min(seen, len(act.GetLog())):] {
			fmt.Fprintf(e.stderr, "%s %s\n", time.Unix(0, l.GetTimeUnixNano()).Format("15:04:05"), l.GetMessage())
		}
		seen = len(act.GetLog())
		switch act.GetStatus() {
		case "completed", "failed", "cancelled":
			return act, nil
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			return nil, fmt.Errorf("timed out waiting for task %d, which is still %s: see 'bagkeeper actions show %d'", id, act.GetStatus(), id)
		}
	}
}

// actionParams reads --params and key=value arguments.
func actionParams(file string, args []string) (map[string]any, error) {
	params := map[string]any{}
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--params: %w", err)
		}
		if err := yaml.Unmarshal(b, &params); err != nil {
			return nil, usageErrorf("--params %s: not a YAML map of parameters: %v", file, err)
		}
		if params == nil {
			params = map[string]any{}
		}
	}
	for _, arg := range args {
		key, value, ok := strings.Cut(arg, "=")
		if !ok || key == "" {
			return nil, usageErrorf("argument %q must be of the form key=value", arg)
		}
		var v any
		if err := yaml.Unmarshal([]byte(value), &v); err != nil {
			return nil, usageErrorf("argument %q: the value is not YAML: %v", arg, err)
		}
		if value == "" {
			v = ""
		}
		parts := strings.Split(key, ".")
		m := params
		for _, p := range parts[:len(parts)-1] {
			next, ok := m[p].(map[string]any)
			if !ok {
				next = map[string]any{}
				m[p] = next
			}
			m = next
		}
		m[parts[len(parts)-1]] = v
	}
	return params, nil
}

// returnCode is the action's return code as its results say (0 if they
// say none).
func returnCode(act *adminpb.Action) int {
	var r struct {
		Code int `json:"return-code"`
	}
	_ = json.Unmarshal(act.GetResultsJson(), &r)
	return r.Code
}

func results(act *adminpb.Action) map[string]any {
	m := map[string]any{}
	if len(act.GetResultsJson()) > 0 {
		_ = json.Unmarshal(act.GetResultsJson(), &m)
	}
	return m
}

// printRunResult prints an ended action as 'juju run' does: plain (the
// results as YAML without the output keys, then the output), or the task
// as YAML or JSON keyed by its unit.
func printRunResult(e *env, act *adminpb.Action, format string) error {
	if format != "plain" {
		out := map[string]any{act.GetUnit(): taskView(act)}
		if format == "json" {
			return writeJSON(e.stdout, out)
		}
		return writeYAML(e.stdout, out)
	}
	r := results(act)
	stdout, _ := r["stdout"].(string)
	stderr, _ := r["stderr"].(string)
	for _, k := range []string{"return-code", "stdout", "stderr", "stdout-encoding", "stderr-encoding"} {
		delete(r, k)
	}
	if len(r) > 0 {
		if err := writeYAML(e.stdout, r); err != nil {
			return err
		}
	}
	fmt.Fprint(e.stdout, stdout)
	fmt.Fprint(e.stderr, stderr)
	if act.GetStatus() != "completed" {
		fmt.Fprintf(e.stderr, "Action id %d %s: %s\n", act.GetId(), act.GetStatus(), act.GetMessage())
	}
	return nil
}

func writeYAML(w io.Writer, v any) error {
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	return enc.Encode(v)
}

func jujuTime(n int64) string {
	return time.Unix(0, n).UTC().Format("2006-01-02 15:04:05 -0700 MST")
}

// taskView is an action as 'juju show-task' shows a task.
func taskView(act *adminpb.Action) map[string]any {
	v := map[string]any{
		"id":     strconv.FormatInt(act.GetId(), 10),
		"action": act.GetName(),
		"unit":   act.GetUnit(),
		"status": act.GetStatus(),
	}
	var params map[string]any
	if json.Unmarshal(act.GetParamsJson(), &params) == nil && len(params) > 0 {
		v["parameters"] = params
	}
	if m := act.GetMessage(); m != "" {
		v["message"] = m
	}
	if r := results(act); len(r) > 0 {
		v["results"] = r
	}
	if len(act.GetLog()) > 0 {
		var log []string
		for _, l := range act.GetLog() {
			log = append(log, jujuTime(l.GetTimeUnixNano())+" "+l.GetMessage())
		}
		v["log"] = log
	}
	timing := map[string]any{"enqueued": jujuTime(act.GetEnqueuedUnixNano())}
	if n := act.GetStartedUnixNano(); n != 0 {
		timing["started"] = jujuTime(n)
	}
	if n := act.GetCompletedUnixNano(); n != 0 {
		timing["completed"] = jujuTime(n)
	}
	v["timing"] = timing
	if p := act.GetPod(); p != "" {
		v["pod"] = p
	}
	return v
}

const actionsShowUsage = `Usage: bagkeeper actions show [flags] ID

Shows one action as 'juju show-task' shows a task: its unit, status,
message, parameters, results, log and times.`

func cmdActionsShow(e *env, args []string) error {
	var a adminFlags
	fs := newFlagSet("actions show", actionsShowUsage)
	a.register(fs, "yaml|json")
	rest, err := parse(e, fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usageErrorf("expected exactly one action ID, got %q", rest)
	}
	if err := checkFormat(a.format, "yaml", "json"); err != nil {
		return err
	}
	id, err := strconv.ParseInt(strings.TrimPrefix(rest[0], "action-"), 10, 64)
	if err != nil || id <= 0 {
		return usageErrorf("invalid action ID %q: a number, as 'actions run' or 'actions list' shows it", rest[0])
	}
	return a.call(func(ctx context.Context, c adminpb.AdminClient) error {
		act, err := c.GetAction(ctx, &adminpb.GetActionRequest{Id: id})
		if err != nil {
			return err
		}
		if a.format == "json" {
			return writeJSON(e.stdout, taskView(act))
		}
		return writeYAML(e.stdout, taskView(act))
	})
}

const actionsListUsage = `Usage: bagkeeper actions list [flags]

Lists the actions kept (the last 1,000), oldest first: id, unit, action,
status and when each was queued and ended.`

func cmdActionsList(e *env, args []string) error {
	var a adminFlags
	var unit string
	fs := newFlagSet("actions list", actionsListUsage)
	a.register(fs, "table|yaml|json")
	fs.StringVar(&unit, "unit", "", "only this `unit`'s actions")
	rest, err := parse(e, fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		return usageErrorf("unexpected arguments %q", rest)
	}
	if err := checkFormat(a.format, "table", "yaml", "json"); err != nil {
		return err
	}
	return a.call(func(ctx context.Context, c adminpb.AdminClient) error {
		resp, err := c.ListActions(ctx, &adminpb.ListActionsRequest{Unit: unit})
		if err != nil {
			return err
		}
		acts := resp.GetActions()
		sort.Slice(acts, func(i, j int) bool { return acts[i].GetId() < acts[j].GetId() })
		if a.format != "table" {
			views := []map[string]any{}
			for _, act := range acts {
				views = append(views, taskView(act))
			}
			if a.format == "json" {
				return writeJSON(e.stdout, views)
			}
			return writeYAML(e.stdout, views)
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tUNIT\tACTION\tSTATUS\tQUEUED\tENDED\tMESSAGE")
		for _, act := range acts {
			ended := "-"
			if n := act.GetCompletedUnixNano(); n != 0 {
				ended = time.Unix(0, n).UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", act.GetId(), act.GetUnit(), act.GetName(), act.GetStatus(),
				time.Unix(0, act.GetEnqueuedUnixNano()).UTC().Format(time.RFC3339), ended, act.GetMessage())
		}
		return tw.Flush()
	})
}
