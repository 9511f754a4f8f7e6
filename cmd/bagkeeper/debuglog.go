package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

const debugLogUsage = `Usage: bagkeeper debug-log [flags]

Prints the group's hook and membership events, as this pod's sidecar applies
them, like 'juju debug-log' for the application: units claimed, taken over,
released and removed; pods waiting for a unit; hooks recorded as running and
committed; hook errors set and cleared; actions (and exec commands) queued,
started and finished; relations created and removed; the unit that leads the
application; raft members added, promoted, demoted and removed, and the raft
leader.

It prints first a summary of the current state (the members and the raft
leader, each unit and its holder, the application's leader, the relations,
the hooks running or failing, the actions not finished), then follows: as in
Juju, it goes on printing events as they come until interrupted (Ctrl-C).
--no-tail prints the summary and exits; --follow (-f) is the default, for
those used to 'tail -f'.

Each line is the event's time, the raft index of the state it was seen in,
the unit or member, the kind and the details. A time marked "~" is this
sidecar's clock when it saw the change; the others are the leader's clock
when it committed the record (a claim, a release, an action's times, a
hook error). --unit keeps one unit's events (repeat it for more); member and
relation events have no unit and are then left out. --format json prints one
JSON object per line: time, local_time, index, unit, member, kind, details,
summary.

The events are derived from the replicated state; nothing extra is stored. A
reader too slow for them loses some and is told ("N events dropped").`

// unitList is a repeatable --unit.
type unitList []string

func (u *unitList) String() string { return strings.Join(*u, ",") }
func (u *unitList) Set(s string) error {
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*u = append(*u, part)
		}
	}
	return nil
}

func cmdDebugLog(e *env, args []string) error {
	var a adminFlags
	var units unitList
	var noTail, follow, f bool
	fs := newFlagSet("debug-log", debugLogUsage)
	a.registerSocket(fs)
	a.registerFormat(fs, "text|json")
	fs.Var(&units, "unit", "only this `unit`'s events (repeatable, or comma-separated)")
	fs.BoolVar(&noTail, "no-tail", false, "print the summary of the current state and exit")
	fs.BoolVar(&follow, "follow", false, "follow the events as they come (the default)")
	fs.BoolVar(&f, "f", false, "the same as --follow")
	rest, err := parse(e, fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		return usageErrorf("unexpected arguments %q", rest)
	}
	if err := checkFormat(a.format, "text", "json"); err != nil {
		return err
	}
	if noTail && (follow || f) {
		return usageErrorf("--no-tail and --follow contradict each other")
	}
	c, closeFn, err := a.dial()
	if err != nil {
		return err
	}
	defer closeFn()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if noTail {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	stream, err := c.DebugLog(ctx, &adminpb.DebugLogRequest{Units: units, NoTail: noTail})
	if err != nil {
		return friendly(err, &a)
	}
	for {
		ev, err := stream.Recv()
		switch {
		case err == nil:
		case errors.Is(err, context.Canceled) || status.Code(err) == codes.Canceled:
			return nil // interrupted
		case errors.Is(err, io.EOF):
			return nil
		default:
			return friendly(err, &a)
		}
		if a.format == "json" {
			if err := writeJSONLine(e, ev); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintln(e.stdout, debugLogLine(ev))
	}
}

// debugLogEvent is an event as --format json prints it.
type debugLogEvent struct {
	Time      string `json:"time"`
	LocalTime bool   `json:"local_time"`
	Index     uint64 `json:"index"`
	Unit      string `json:"unit,omitempty"`
	Member    string `json:"member,omitempty"`
	Kind      string `json:"kind"`
	Details   string `json:"details"`
	Summary   bool   `json:"summary,omitempty"`
}

func writeJSONLine(e *env, ev *adminpb.DebugLogEvent) error {
	return writeJSONCompact(e.stdout, debugLogEvent{
		Time: time.Unix(0, ev.GetTimeUnixNano()).UTC().Format(time.RFC3339Nano), LocalTime: ev.GetLocalTime(), Index: ev.GetIndex(),
		Unit: ev.GetUnit(), Member: ev.GetMember(), Kind: ev.GetKind(), Details: ev.GetDetails(), Summary: ev.GetSummary(),
	})
}

// debugLogLine is an event as text: time (~ for this sidecar's clock),
// #index, the unit or member, kind, details.
func debugLogLine(ev *adminpb.DebugLogEvent) string {
	mark := " "
	if ev.GetLocalTime() {
		mark = "~"
	}
	who := ev.GetUnit()
	if who == "" {
		who = ev.GetMember()
	} else if ev.GetMember() != "" && !strings.HasPrefix(ev.GetKind(), "unit") {
		who += " (" + ev.GetMember() + ")"
	}
	if who == "" {
		who = "-"
	}
	kind := ev.GetKind()
	if ev.GetSummary() {
		kind = "now: " + kind
	}
	return fmt.Sprintf("%s%s #%d %s %s: %s", time.Unix(0, ev.GetTimeUnixNano()).UTC().Format("2006-01-02T15:04:05.000Z"), mark, ev.GetIndex(), who, kind, ev.GetDetails())
}

func writeJSONCompact(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}
