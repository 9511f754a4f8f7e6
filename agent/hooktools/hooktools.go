// Package hooktools is the server side of Juju's hook tools (relation-get,
// relation-set, status-set, ...). The tool binary on the hook's PATH sends
// its name, arguments, working directory and (when asked for) stdin or the
// file named by --file; Run parses the arguments with Juju's rules, runs
// the tool against the hook's Context and returns what Juju's tool would
// have printed and its exit code, and the output file's contents for the
// client to write. Run never opens a file itself (see files.go).
//
// Exit codes and output follow Juju's command framework: 0 on success (and
// for --help, which prints to stdout), 2 for an option or argument error, 1
// when the tool fails; errors are printed on stderr as "ERROR <message>\n".
package hooktools

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
)

// Request is one tool invocation.
type Request struct {
	Command  string   // tool name, e.g. "relation-get"
	Args     []string // argv[1:]
	Dir      string   // caller's absolute working directory (for -o/--output and --file paths)
	Stdin    []byte
	StdinSet bool // false: the tool has no stdin yet

	// ClientFiles is set by a client that reads and writes the files the
	// tools name itself; without it, --file PATH and -o/--output fail.
	ClientFiles bool
	// FilePath is the file a previous Response's NeedFile named, File what
	// the client read from it and FileErr, if it could not read it, why.
	FilePath string
	File     []byte
	FileErr  string
}

// Response is what the tool printed and its exit code. NeedStdin is set (and
// nothing else matters) when the tool must read stdin but StdinSet was
// false: the caller resends the request with stdin. Likewise NeedFile,
// when the tool reads a file the request does not carry: the caller
// resends the request with that file (see files.go).
type Response struct {
	Code           int
	Stdout, Stderr []byte
	NeedStdin      bool
	NeedFile       string
	// OutputPath, when set, is the file (-o/--output) the caller must
	// create or truncate and fill with Output.
	OutputPath string
	Output     []byte
}

// ErrUnknownCommand is wrapped by the error Run returns for a command name
// that is not a hook tool. The error's text is `unknown command "<name>"`;
// the server reports it to the client as `bad request: <text>`.
var ErrUnknownCommand = errors.New("unknown command")

// errNoCommand is returned by Run for an empty command name.
var errNoCommand = errors.New("command not specified")

// Run runs one tool against ctx. The error is non-nil only when the request
// names no tool or an unknown one (see ErrUnknownCommand); everything a tool
// reports, including its failures, is in the Response. A panic in a tool or
// in ctx fails the tool (exit 1) instead of the caller.
func Run(ctx Context, req Request) (resp Response, err error) {
	defer func() {
		if p := recover(); p != nil {
			resp = Response{Code: 1, Stderr: errorLine(fmt.Errorf("internal error in %s: %v", req.Command, p))}
			err = nil
		}
	}()
	return run(ctx, req)
}

// Names lists every tool name, sorted.
func Names() []string {
	var names []string
	for _, t := range tools() {
		names = append(names, t.name)
	}
	sort.Strings(names)
	return names
}

// tool is one entry of the tool table.
type tool struct {
	name string
	make func(ctx Context) command
}

// tools returns the table of hook tools. It is built on each call so that
// the package holds no mutable state.
func tools() []tool {
	return []tool{
		{"action-fail", newActionFail}, // action_*.go
		{"action-get", newActionGet},
		{"action-log", newActionLog},
		{"action-set", newActionSet},
		{"application-version-set", newApplicationVersionSet},
		{"close-port", newClosePort},
		{"config-get", newConfigGet},
		{"goal-state", newGoalState},
		{"is-leader", newIsLeader},
		{"juju-log", newJujuLog},
		{"leader-get", newLeaderGet},
		{"leader-set", newLeaderSet},
		{"network-get", newNetworkGet},
		{"open-port", newOpenPort},
		{"opened-ports", newOpenedPorts},
		{"relation-get", newRelationGet},
		{"relation-ids", newRelationIDs},
		{"relation-list", newRelationList},
		{"relation-model-get", newRelationModelGet},
		{"relation-set", newRelationSet},
		{"secret-add", newSecretAdd},
		{"secret-get", newSecretGet},
		{"secret-grant", newSecretGrant},
		{"secret-ids", newSecretIDs},
		{"secret-info-get", newSecretInfoGet},
		{"secret-remove", newSecretRemove},
		{"secret-revoke", newSecretRevoke},
		{"secret-set", newSecretSet},
		{"state-delete", newStateDelete},
		{"state-get", newStateGet},
		{"state-set", newStateSet},
		{"status-get", newStatusGet},
		{"status-set", newStatusSet},
		{"unit-get", newUnitGet},
	}
}

// lookup returns the constructor of the named tool.
func lookup(name string) (func(Context) command, bool) {
	for _, t := range tools() {
		if t.name == name {
			return t.make, true
		}
	}
	return nil, false
}

// command is one hook tool, run the way Juju's cmd.Main runs a command:
// flags are declared, parsed, the positional arguments validated by init
// (errors exit 2), then run does the work (errors exit 1).
type command interface {
	info() *info
	setFlags(fs *flagSet)
	init(args []string) error
	run(e *env) error
}

// env is what a running tool sees of its invocation.
type env struct {
	ctx    Context
	dir    string
	req    *Request
	stdout bytes.Buffer
	stderr bytes.Buffer

	// The output file the client is to write (writeFile).
	outputPath string
	output     []byte
}

// errNeedStdin is returned by env.readStdin when the client sent no stdin.
var errNeedStdin = errors.New("hook tool requires stdin, none supplied")

// readStdin returns the tool's stdin, or errNeedStdin when the client has
// not sent it yet.
func (e *env) readStdin() ([]byte, error) {
	if !e.req.StdinSet {
		return nil, errNeedStdin
	}
	if len(e.req.Stdin) > MaxFileSize {
		return nil, fmt.Errorf("stdin is over the %d byte limit", MaxFileSize)
	}
	return e.req.Stdin, nil
}

// run is Run without the recovery from panics.
func run(ctx Context, req Request) (Response, error) {
	if req.Command == "" {
		return Response{}, errNoCommand
	}
	newCmd, ok := lookup(req.Command)
	if !ok {
		return Response{}, fmt.Errorf("%w %q", ErrUnknownCommand, req.Command)
	}
	cmd := newCmd(ctx)
	e := &env{ctx: ctx, dir: req.Dir, req: &req}

	fs := newFlagSet()
	cmd.setFlags(fs)
	args, err := fs.parse(req.Args)
	if err == nil {
		err = cmd.init(args)
	}
	switch {
	case errors.Is(err, errHelp):
		return Response{Code: 0, Stdout: cmd.info().help(fs)}, nil
	case err != nil:
		return Response{Code: 2, Stderr: errorLine(err)}, nil
	}

	code := 0
	if err := cmd.run(e); err != nil {
		var nf *needFileError
		switch {
		case errors.Is(err, errNeedStdin):
			return Response{NeedStdin: true}, nil
		case errors.As(err, &nf):
			return Response{NeedFile: nf.path}, nil
		}
		e.stderr.Write(errorLine(err))
		code = 1
	}
	return Response{
		Code: code, Stdout: e.stdout.Bytes(), Stderr: e.stderr.Bytes(),
		OutputPath: e.outputPath, Output: e.output,
	}, nil
}

// errorLine is how Juju prints an error on stderr.
func errorLine(err error) []byte {
	return []byte("ERROR " + err.Error() + "\n")
}

// checkEmpty rejects leftover positional arguments as Juju does.
func checkEmpty(args []string) error {
	if len(args) != 0 {
		return fmt.Errorf("unrecognized args: %q", args)
	}
	return nil
}

// deprecatedFormat writes Juju's warning for the ignored --format option of
// tools that print nothing. Juju writes it without a trailing newline.
func deprecatedFormat(e *env, format, name string) {
	if format != "" {
		fmt.Fprintf(&e.stderr, "--format flag deprecated for command %q", name)
	}
}
