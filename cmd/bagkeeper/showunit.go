package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

const showUnitUsage = `Usage: bagkeeper show-unit [flags] UNIT

Shows everything known of one unit (like 'juju show-unit'), read from one
version of the replicated state: its state (active, released or removed),
the member and pod holding it and whether that member answers (lost when it
does not), whether it is the application leader, its workload status and
version, its opened ports, the hook it is failing with which attempt failed
last, when the next is due and the last 4 KiB of what the hook wrote, its
last 20 hooks (oldest first: ok or failed, exit status, start, duration and
the member that ran it), its relation bags relation by relation, its charm
state (state-get) and, for the leader, the leader settings.

The read is linearizable, as 'bags' reads; --stale reads this pod's copy as
it is. A unit that does not exist is an error (exit 1). 'bagkeeper unit
retry UNIT' runs a failed hook again now.`

func cmdShowUnit(e *env, args []string) error {
	var a adminFlags
	var stale bool
	fs := newFlagSet("show-unit", showUnitUsage)
	a.register(fs, "yaml|json")
	fs.BoolVar(&stale, "stale", false, "read this pod's copy as it is, without asking the leader (may be behind)")
	rest, err := parse(e, fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usageErrorf("expected exactly one UNIT (like app/3), got %q", rest)
	}
	if err := checkFormat(a.format, "yaml", "json"); err != nil {
		return err
	}
	return a.call(func(ctx context.Context, c adminpb.AdminClient) error {
		resp, err := c.ShowUnit(ctx, &adminpb.ShowUnitRequest{Unit: rest[0], Stale: stale})
		if err != nil {
			return err
		}
		if why := resp.GetNotReadyReason(); why != "" {
			fmt.Fprintf(e.stderr, "warning: stale read at raft index %d from a pod that is not ready (%s): it may be behind\n", resp.GetIndex(), why)
		}
		if a.format == "json" {
			return writeJSON(e.stdout, showUnitJSON(resp))
		}
		return printShowUnit(e.stdout, resp, time.Now())
	})
}

func rfc3339(n int64) string {
	if n == 0 {
		return ""
	}
	return time.Unix(0, n).UTC().Format(time.RFC3339)
}

// unitBags is a unit's bags keyed by relation (endpoint:id).
func unitBags(resp *adminpb.ShowUnitResponse) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, b := range resp.GetBags() {
		data := b.GetData()
		if data == nil {
			data = map[string]string{}
		}
		out[b.GetRelation()] = data
	}
	return out
}

func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// showUnitJSON is the stable JSON shape of `show-unit --format=json`.
func showUnitJSON(resp *adminpb.ShowUnitResponse) map[string]any {
	u := resp.GetUnit()
	out := map[string]any{
		"name": u.GetName(), "state": u.GetState(), "member": u.GetMember(), "pod": u.GetPod(),
		"since": rfc3339(u.GetSinceUnixNano()), "reason": u.GetReason(), "leader": resp.GetLeader(), "lost": resp.GetLost(),
		"workload_status": u.GetWorkloadStatus(), "workload_message": u.GetWorkloadMessage(), "workload_version": resp.GetWorkloadVersion(),
		"index": resp.GetIndex(),
	}
	var failure any // null when no hook is failing
	if f := resp.GetHookFailure(); f != nil {
		failure = map[string]any{
			"hook": f.GetHook(), "message": f.GetMessage(), "exit_code": f.GetExitCode(), "attempt": f.GetAttempt(),
			"since": rfc3339(f.GetSinceUnixNano()), "next_attempt": rfc3339OrEmpty(f.GetNextAttemptUnixNano()), "output_tail": f.GetOutputTail(),
		}
	}
	out["hook_error"] = failure
	history := []map[string]any{}
	for _, h := range resp.GetHistory() {
		history = append(history, map[string]any{
			"hook": h.GetHook(), "relation": h.GetRelation(), "remote_unit": h.GetRemoteUnit(), "ok": h.GetOk(), "exit_code": h.GetExitCode(),
			"error": h.GetError(), "started": rfc3339OrEmpty(h.GetStartedUnixNano()), "duration_seconds": time.Duration(h.GetDurationNanos()).Seconds(), "member": h.GetMember(),
		})
	}
	out["hook_history"] = history
	out["relations"] = unitBags(resp)
	out["charm_state"] = orEmpty(resp.GetCharmState())
	if resp.GetLeader() {
		out["leader_settings"] = orEmpty(resp.GetLeaderSettings())
	}
	ports := []map[string]any{}
	for _, p := range resp.GetPorts() {
		ports = append(ports, map[string]any{"endpoint": p.GetEndpoint(), "range": p.GetRange()})
	}
	out["opened_ports"] = ports
	return out
}

// The human shape of show-unit: YAML, in this order.
type showUnitText struct {
	State           string                       `yaml:"state"`
	Since           string                       `yaml:"since"`
	Reason          string                       `yaml:"reason,omitempty"`
	Holder          string                       `yaml:"holder,omitempty"`
	Leader          bool                         `yaml:"leader"`
	Workload        string                       `yaml:"workload-status"`
	WorkloadVersion string                       `yaml:"workload-version,omitempty"`
	Ports           []string                     `yaml:"opened-ports,omitempty"`
	HookError       *hookErrorText               `yaml:"hook-error,omitempty"`
	History         []string                     `yaml:"hook-history,omitempty"`
	Relations       map[string]map[string]string `yaml:"relations,omitempty"`
	CharmState      map[string]string            `yaml:"charm-state,omitempty"`
	LeaderSettings  map[string]string            `yaml:"leader-settings,omitempty"`
}

type hookErrorText struct {
	Hook        string `yaml:"hook"`
	Message     string `yaml:"message"`
	ExitCode    int32  `yaml:"exit-code"`
	Attempt     uint32 `yaml:"attempt,omitempty"`
	Since       string `yaml:"failing-since"`
	NextAttempt string `yaml:"next-attempt,omitempty"`
	Output      string `yaml:"output,omitempty"`
}

// when is t as RFC 3339 with how long ago or ahead of now it is.
func when(n int64, now time.Time) string {
	if n == 0 {
		return ""
	}
	t := time.Unix(0, n)
	if d := t.Sub(now); d > 0 {
		return fmt.Sprintf("%s (in %s)", t.UTC().Format(time.RFC3339), roundDuration(d))
	}
	return fmt.Sprintf("%s (%s ago)", t.UTC().Format(time.RFC3339), roundDuration(now.Sub(t)))
}

// historyLine is one hook of the history on one line.
func historyLine(h *adminpb.HookRecord) string {
	name := h.GetHook()
	if r := h.GetRelation(); r != "" {
		name += " (" + r
		if ru := h.GetRemoteUnit(); ru != "" {
			name += " " + ru
		}
		name += ")"
	}
	result := "ok"
	if !h.GetOk() {
		result = "failed"
		if c := h.GetExitCode(); c != 0 {
			result = fmt.Sprintf("failed (exit %d)", c)
		} else if e := h.GetError(); e != "" {
			result = "failed: " + e
		}
	}
	return fmt.Sprintf("%s %s %s in %s on %s", time.Unix(0, h.GetStartedUnixNano()).UTC().Format(time.RFC3339), name, result,
		roundDuration(time.Duration(h.GetDurationNanos())), orDash(h.GetMember()))
}

func printShowUnit(w io.Writer, resp *adminpb.ShowUnitResponse, now time.Time) error {
	u := resp.GetUnit()
	state := u.GetState()
	if resp.GetLost() {
		state = "lost (active, but its pod's member does not answer)"
	}
	t := showUnitText{State: state, Since: when(u.GetSinceUnixNano(), now), Reason: u.GetReason(), Leader: resp.GetLeader(), WorkloadVersion: resp.GetWorkloadVersion()}
	if m := u.GetMember(); m != "" {
		t.Holder = fmt.Sprintf("member %s (pod %s)", m, orDash(u.GetPod()))
	}
	t.Workload = orDash(u.GetWorkloadStatus())
	if m := u.GetWorkloadMessage(); m != "" {
		t.Workload += ": " + m
	}
	for _, p := range resp.GetPorts() {
		s := p.GetRange()
		if ep := p.GetEndpoint(); ep != "" {
			s += " (endpoint " + ep + ")"
		}
		t.Ports = append(t.Ports, s)
	}
	if f := resp.GetHookFailure(); f != nil {
		t.HookError = &hookErrorText{Hook: f.GetHook(), Message: f.GetMessage(), ExitCode: f.GetExitCode(), Attempt: f.GetAttempt(),
			Since: when(f.GetSinceUnixNano(), now), NextAttempt: when(f.GetNextAttemptUnixNano(), now), Output: f.GetOutputTail()}
	}
	for _, h := range resp.GetHistory() {
		t.History = append(t.History, historyLine(h))
	}
	if bags := unitBags(resp); len(bags) > 0 {
		t.Relations = bags
	}
	if cs := resp.GetCharmState(); len(cs) > 0 {
		t.CharmState = cs
	}
	if ls := resp.GetLeaderSettings(); resp.GetLeader() && len(ls) > 0 {
		t.LeaderSettings = ls
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(map[string]showUnitText{u.GetName(): t}); err != nil {
		return err
	}
	return enc.Close()
}
