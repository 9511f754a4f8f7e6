// Command bagkeeper is the bagkeeper sidecar and its admin tool.
//
//	bagkeeper run            run the sidecar
//	bagkeeper status         show members, units and relations
//	bagkeeper bags           read relation data bags
//	bagkeeper bags set       write keys of a bag (operators' repair tool)
//	bagkeeper relation ensure  create a relation unless it exists
//	bagkeeper unit remove    remove a unit at once
//	bagkeeper unit retry     run a unit's failed hook again now
//	bagkeeper show-unit      show everything known of one unit
//	bagkeeper actions run    run a charm action on a unit (show, list: see results)
//	bagkeeper leader transfer  move raft leadership to another voter
//	bagkeeper recover        force a new configuration after losing a majority
//	bagkeeper hook-runner    run hooks in another container of the pod
//	bagkeeper install-tools  link the hook tools into a directory
//	bagkeeper install        copy the binaries and the charm into a pod's shared volumes
//	bagkeeper snapshot       save, check and restore backups of the replicated state
//	bagkeeper exec           run a command in a unit's hook context
//	bagkeeper debug-log      follow the group's hook and membership events
//	bagkeeper completion     print a bash or zsh completion script
//	bagkeeper version        print the version
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// env is what a command reads from its surroundings; tests replace it.
type env struct {
	stdout, stderr io.Writer
	stdin          io.Reader
	lookupEnv      func(string) (string, bool)
	environ        func() []string
}

type command struct {
	name    string
	summary string
	run     func(e *env, args []string) error
}

func commands() []command {
	return []command{
		{"run", "run the sidecar (the pod's member of the application's raft group)", cmdRun},
		{"status", "show the cluster as this pod's sidecar sees it", cmdStatus},
		{"bags", "read relation data bags (bags set: write keys of one bag)", cmdBags},
		{"relation", "relation ensure: create a relation unless it exists", cmdRelation},
		{"unit", "unit remove|retry: remove a unit at once, run its failed hook again now", cmdUnit},
		{"show-unit", "show a unit: its state, failed hook, hook history, bags and charm state", cmdShowUnit},
		{"actions", "actions run|show|list: run the charm's actions and see their results", cmdActions},
		{"member", "member remove: remove a raft member that is gone for good", cmdMember},
		{"leader", "leader transfer: move raft leadership to another voter", cmdLeader},
		{"recover", "force the raft configuration after a majority of voters is lost", cmdRecover},
		{"hook-runner", "run the charm's hooks in this container for the pod's unit agent", cmdHookRunner},
		{"install-tools", "link the Juju hook tools into a directory", cmdInstallTools},
		{"install", "copy the binaries and the charm into a pod's shared volumes (init containers)", cmdInstall},
		{"snapshot", "snapshot save|status|restore: back up the replicated state, check a backup, restore it into a new group", cmdSnapshot},
		{"exec", "exec UNIT -- CMD: run a command in a unit's hook context", cmdExec},
		{"debug-log", "follow the group's hook and membership events", cmdDebugLog},
		{"completion", "completion bash|zsh: a shell completion script", cmdCompletion},
		{"version", "print the version", func(e *env, _ []string) error { fmt.Fprintln(e.stdout, "bagkeeper", version); return nil }},
	}
}

func main() {
	e := &env{stdout: os.Stdout, stderr: os.Stderr, stdin: os.Stdin, lookupEnv: os.LookupEnv, environ: os.Environ}
	os.Exit(runMain(e, os.Args[1:]))
}

// exitStatus is an error that only sets the exit status: the command has
// said what it had to (exec exits with its command's status).
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// runMain runs one command and returns the exit status: 0 success,
// 1 failure, 2 bad usage (exec: its command's).
func runMain(e *env, args []string) int {
	if len(args) == 0 {
		topUsage(e.stderr)
		return 2
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		topUsage(e.stdout)
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(e, args[1:])
		var ue *usageError
		var es exitStatus
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.As(err, &es):
			return int(es)
		case errors.As(err, &ue):
			fmt.Fprintf(e.stderr, "bagkeeper %s: %v\nRun 'bagkeeper %s --help' for usage.\n", c.name, err, c.name)
			return 2
		default:
			fmt.Fprintf(e.stderr, "bagkeeper %s: error: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(e.stderr, "bagkeeper: unknown command %q\n", args[0])
	topUsage(e.stderr)
	return 2
}

func topUsage(w io.Writer) {
	var b strings.Builder
	b.WriteString("bagkeeper keeps a Juju application's relation data in a raft group formed by\nthe sidecars of its pods, so a replaced pod gets its unit and its bags back.\n\nUsage: bagkeeper <command> [flags]\n\nCommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(&b, "  %-14s %s\n", c.name, c.summary)
	}
	b.WriteString("\nRun 'bagkeeper <command> --help' for a command's flags. Every flag can also be\nset with an environment variable BAGKEEPER_<FLAG> (upper case, dashes as\nunderscores); 'run' also reads a YAML file given with --config.\n")
	fmt.Fprint(w, b.String())
}

// cmdFlags is a command's flag set and the usage text its --help prints.
type cmdFlags struct {
	*flag.FlagSet
	usage string
}

func newFlagSet(name, usage string) *cmdFlags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &cmdFlags{FlagSet: fs, usage: usage}
}

// parse loads settings; on --help it prints the usage, the flags and their
// environment variables to stdout.
func parse(e *env, fs *cmdFlags, args []string) ([]string, error) {
	rest, err := loadSettings(fs.FlagSet, args, e.lookupEnv)
	if errors.Is(err, flag.ErrHelp) {
		var b strings.Builder
		b.WriteString(fs.usage)
		b.WriteString("\n\nFlags:\n")
		printDefaults(fs.FlagSet, &b)
		fmt.Fprint(e.stdout, b.String())
	}
	return rest, err
}
