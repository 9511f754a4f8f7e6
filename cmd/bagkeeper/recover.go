package main

import (
	"context"
	"fmt"

	"github.com/hashicorp/raft"

	"github.com/bagkeeper/bagkeeper/raftstore"
	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

const recoverUsage = `Usage: bagkeeper recover --app APP --data-dir DIR --show
       bagkeeper recover --plan --survivors FILE [admin flags]
       bagkeeper recover --at-next-start --survivors FILE --plan-digest DIGEST [admin flags]

Recovery after a majority of voters is lost for good (see docs/operations.md,
"Losing a majority"). Raft cannot commit anything without a majority, and
bagkeeper never guesses which survivors to trust: you list them, and it
refuses whatever could split the group.

  --show              print this member's raft id, its last log index and the
                      configuration it last knew. It reads a STOPPED member's
                      data dir (a running sidecar holds the directory lock).
  --plan              ask this pod's RUNNING sidecar to check that the group
                      lost its majority and that the survivors listed are
                      every member that still runs, and print the plan: the
                      survivor with the most up-to-date log recovers the group
                      alone and leads it; every other survivor sets its raft
                      state aside at its next start and joins it as a new
                      member. The plan has a digest.
  --at-next-start     stage this member's part of the plan, for its next
                      start; the plan is made again and must have the digest
                      given with --plan-digest. Run it on every survivor, then
                      restart them all (the one that leads first, if you can).
  --survivors FILE    a JSON list of every member that still runs, this one
                      included; the same file on every survivor:
                        [{"id": "app-0/k2j4...", "address": "app-0.app:7400"},
                         {"id": "app-2/x7p3...", "address": "app-2.app:7400"}]

Refused, among others: while any member knows a leader or heard from one
recently; while the members that answer are a majority of the voters; when a
member that runs is not listed, or a listed one does not answer; when the
digest is not the plan's any more. Entries in the leading survivor's log that
were not known committed become committed.`

func cmdRecover(e *env, args []string) error {
	fs := newFlagSet("recover", recoverUsage)
	var a adminFlags
	var app, survivors, digest string
	var show, plan, atNextStart bool
	a.register(fs, writeFormats)
	fs.StringVar(&app, "app", "", "the application `name` (as given to run; with --show)")
	fs.StringVar(&survivors, "survivors", "", "JSON `file` listing every member that still runs")
	fs.StringVar(&digest, "plan-digest", "", "the `digest` --plan printed (with --at-next-start)")
	fs.BoolVar(&show, "show", false, "only show what a stopped member's data dir holds")
	fs.BoolVar(&plan, "plan", false, "check the recovery and print its plan")
	fs.BoolVar(&atNextStart, "at-next-start", false, "stage this member's part of the plan for its next start")
	rest, err := parse(e, fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageErrorf("unexpected arguments %q", rest)
	}
	modes := 0
	for _, m := range []bool{show, plan, atNextStart} {
		if m {
			modes++
		}
	}
	if modes != 1 {
		return usageErrorf("give one of --show, --plan or --at-next-start")
	}
	if err := checkFormat(a.format, "text", "json"); err != nil {
		return err
	}
	if show {
		if app == "" {
			return usageErrorf("--show needs --app")
		}
		in, err := raftstore.Inspect(a.dataDir, app)
		if err != nil {
			return err
		}
		if a.format == "json" {
			servers := []map[string]any{}
			for _, s := range in.Configuration.Servers {
				servers = append(servers, map[string]any{"id": string(s.ID), "suffrage": suffrage(s.Suffrage), "address": string(s.Address)})
			}
			return writeJSON(e.stdout, map[string]any{"member": string(in.Identity.ServerID()), "pod": in.Identity.Pod,
				"incarnation_created": in.Identity.Created, "last_index": in.LastIndex, "configuration": servers})
		}
		fmt.Fprintf(e.stdout, "member      %s\npod         %s\nincarnation created %s\nlast index  %d\nlast known configuration:\n", in.Identity.ServerID(), in.Identity.Pod, in.Identity.Created.Format("2006-01-02 15:04:05 MST"), in.LastIndex)
		for _, s := range in.Configuration.Servers {
			fmt.Fprintf(e.stdout, "  %-40s %-9s %s\n", s.ID, suffrage(s.Suffrage), s.Address)
		}
		return nil
	}
	if survivors == "" {
		return usageErrorf("--plan and --at-next-start need --survivors FILE")
	}
	if atNextStart && digest == "" {
		return usageErrorf("--at-next-start needs --plan-digest, as --plan printed it")
	}
	list, err := raftstore.ReadSurvivors(survivors)
	if err != nil {
		return err
	}
	var req []*adminpb.Survivor
	for _, s := range list {
		req = append(req, &adminpb.Survivor{Id: string(s.ID), Address: string(s.Address)})
	}
	return a.call(func(ctx context.Context, c adminpb.AdminClient) error {
		if plan {
			p, err := c.PlanRecovery(ctx, &adminpb.PlanRecoveryRequest{Survivors: req})
			if err != nil {
				return err
			}
			if a.format == "json" {
				return writeJSON(e.stdout, map[string]any{"plan": planJSON(p)})
			}
			printPlan(e, p)
			fmt.Fprintf(e.stdout, "\nStage it on every survivor, with the same survivors file:\n  bagkeeper recover --at-next-start --survivors FILE --plan-digest %s\n", p.GetDigest())
			return nil
		}
		r, err := c.StageRecovery(ctx, &adminpb.StageRecoveryRequest{Survivors: req, Digest: digest})
		if err != nil {
			return err
		}
		if a.format == "json" {
			return writeJSON(e.stdout, map[string]any{"plan": planJSON(r.GetPlan()), "role": r.GetRole()})
		}
		printPlan(e, r.GetPlan())
		what := "at its next start it sets its raft state aside (kept in before-recovery-" + r.GetPlan().GetId() + "/ in its data dir) and joins the recovered group as a new member"
		if r.GetRole() == raftstore.RoleLead {
			what = "at its next start it recovers the group alone and leads it"
		}
		fmt.Fprintf(e.stdout, "\nStaged on this member: %s. Stage the other survivors, then restart every one of them.\n", what)
		return nil
	})
}

// planJSON is a recovery plan for --format json.
func planJSON(p *adminpb.RecoveryPlan) map[string]any {
	survivors := []map[string]any{}
	for _, s := range p.GetSurvivors() {
		survivors = append(survivors, map[string]any{"id": s.GetId(), "address": s.GetAddress(),
			"last_log_term": s.GetLastLogTerm(), "last_index": s.GetLastIndex(), "role": s.GetRole()})
	}
	return map[string]any{"id": p.GetId(), "digest": p.GetDigest(), "cluster_id": p.GetClusterId(),
		"generation": p.GetGeneration(), "leader": p.GetLeader(), "survivors": survivors}
}

func printPlan(e *env, p *adminpb.RecoveryPlan) {
	fmt.Fprintf(e.stdout, "Recovery plan %s (digest %s)\ncluster %s, new generation %d, led by %s\n\n", p.GetId(), p.GetDigest(), p.GetClusterId(), p.GetGeneration(), p.GetLeader())
	fmt.Fprintf(e.stdout, "%-40s %-28s %-9s %-9s %s\n", "SURVIVOR", "ADDRESS", "LOG TERM", "LAST IDX", "AT NEXT START")
	for _, s := range p.GetSurvivors() {
		role := "sets its state aside, joins as a new member"
		if s.GetRole() == raftstore.RoleLead {
			role = "recovers the group alone and leads it"
		}
		fmt.Fprintf(e.stdout, "%-40s %-28s %-9d %-9d %s\n", s.GetId(), s.GetAddress(), s.GetLastLogTerm(), s.GetLastIndex(), role)
	}
}

func suffrage(s raft.ServerSuffrage) string {
	if s == raft.Voter {
		return "voter"
	}
	return "nonvoter"
}
