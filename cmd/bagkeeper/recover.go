package main

import (
	"fmt"
	"log/slog"

	"github.com/hashicorp/raft"

	"github.com/bagkeeper/bagkeeper/raftstore"
)

const recoverUsage = `Usage: bagkeeper recover --app APP --data-dir DIR --show
       bagkeeper recover --app APP --data-dir DIR --survivors FILE [--at-next-start]

Recovery after a majority of voters is lost for good (see docs/operations.md).
Raft cannot commit anything without a majority, and bagkeeper never guesses
which survivors to trust: you list them.

  --show              print this member's raft id, its last log index and the
                      configuration it last knew. It reads a STOPPED member's
                      data dir (a running sidecar holds the directory lock).
  --survivors FILE    a JSON list of every surviving member, this one included:
                        [{"id": "app-0/k2j4...", "address": "app-0.app:7400"},
                         {"id": "app-2/x7p3...", "address": "app-2.app:7400"}]
                      ("non_voter": true makes one a non-voter). Run the same
                      command with the same file on every survivor.
  --at-next-start     stage the recovery in the data dir of a RUNNING sidecar;
                      the sidecar applies it when it next starts. Without it
                      the sidecar must be stopped, and the recovery happens now.

Entries in a survivor's log that were not known committed become committed.`

func cmdRecover(e *env, args []string) error {
	fs := newFlagSet("recover", recoverUsage)
	var app, dataDir, survivors string
	var show, atNextStart bool
	fs.StringVar(&app, "app", "", "the application `name` (as given to run)")
	fs.StringVar(&dataDir, "data-dir", defaultDataDir, "the member's data `dir`")
	fs.StringVar(&survivors, "survivors", "", "JSON `file` listing every surviving member")
	fs.BoolVar(&show, "show", false, "only show what the data dir holds")
	fs.BoolVar(&atNextStart, "at-next-start", false, "stage the recovery for the next start of a running sidecar")
	rest, err := parse(e, fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageErrorf("unexpected arguments %q", rest)
	}
	if app == "" {
		return usageErrorf("--app is required")
	}
	if show == (survivors != "") {
		return usageErrorf("give either --show or --survivors FILE")
	}
	if show {
		in, err := raftstore.Inspect(dataDir, app)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "member      %s\npod         %s\nincarnation created %s\nlast index  %d\nlast known configuration:\n", in.Identity.ServerID(), in.Identity.Pod, in.Identity.Created.Format("2006-01-02 15:04:05 MST"), in.LastIndex)
		for _, s := range in.Configuration.Servers {
			fmt.Fprintf(e.stdout, "  %-40s %-9s %s\n", s.ID, suffrage(s.Suffrage), s.Address)
		}
		return nil
	}
	cfg, err := raftstore.ReadRecoveryConfig(survivors)
	if err != nil {
		return err
	}
	if atNextStart {
		if err := raftstore.StageRecovery(dataDir, app, cfg); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "recovery staged in %s: restart this sidecar, then the other survivors the same way\n", dataDir)
		return nil
	}
	logger := slog.New(slog.NewTextHandler(e.stderr, nil))
	if err := raftstore.Recover(dataDir, app, cfg, logger); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "configuration of %s forced to %d members: start the sidecar, then recover the other survivors the same way\n", dataDir, len(cfg.Servers))
	return nil
}

func suffrage(s raft.ServerSuffrage) string {
	if s == raft.Voter {
		return "voter"
	}
	return "nonvoter"
}
