// Command jujuc is the client of Juju's hook tools. relation-get,
// relation-set, is-leader and the other tools a charm's hooks call are
// symlinks to this one binary: it runs the tool named by the base name it
// was called by in the unit agent, prints the tool's stdout and stderr as
// the agent returns them, and exits with the tool's exit code.
//
// The agent is reached through the environment of the hook: the Unix socket
// JUJU_AGENT_SOCKET_ADDRESS (JUJU_AGENT_SOCKET_NETWORK, if set, must be
// "unix") and the hook's JUJU_CONTEXT_ID. A tool call is one gRPC call,
// bagkeeper.tools.v1.HookTools/Run, sent with the arguments and the absolute
// working directory but without stdin; if the agent answers that the tool
// reads stdin, the client reads all of it and calls again with it.
// Problems on the client's side are printed as "ERROR <message>" with exit
// code 1, as Juju's client does.
//
// Files: the agent runs in another container than the hook, with other
// files, and never opens a path a hook names. When a tool reads a file
// (--file PATH) the agent answers with its absolute path; the client reads
// it here and calls again with its contents, or with the error reading it,
// which the tool reports as Juju's tool would. When a tool's output goes to
// a file (-o/--output PATH), the agent returns it and the client writes the
// file here. A file or stdin is read up to maxInput bytes: past that the
// tool fails, so that /dev/zero or an endless pipe costs little.
//
// Hooks call tools often, and each call is an exec, so this binary is kept
// to what starts fastest: it speaks just enough HTTP/2, HPACK and protobuf
// by hand instead of linking grpc-go, whose package initialisation alone
// takes longer than running a small Go program. It links only the standard
// library, and of that not net, fmt or reflect. The garbage collector is
// left on: a small call ends before the heap reaches its first goal, and a
// large one (a bag of many megabytes) is better bounded in memory.
//
// Timeouts: a tool that hangs blocks its hook, so the client gives up, and
// fails the tool, when any single wait on the socket (connecting, sending,
// or waiting for the reply) lasts longer than five minutes. No tool takes
// that long in a working agent: this only turns a wedged agent into a
// failed hook, which is reported and retried, instead of a hook that hangs
// forever. Reading stdin is not timed: that pace is the charm's.
package main

import (
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// waitTimeout bounds any single wait on the agent's socket.
const waitTimeout = 5 * time.Minute

// maxInput is the most a tool reads from a file or stdin: the size of the
// largest relation bag. It must equal state.MaxBagSize and
// hooktools.MaxFileSize (the tests check it); this binary does not import
// them, to keep to the standard library.
const maxInput = 16 << 20

// selfName is the name this binary is installed under.
const selfName = "jujuc"

// tools lists the hook tools the agent serves, for the usage text.
var tools = []string{
	"action-fail", "action-get", "action-log", "action-set",
	"application-version-set", "close-port", "config-get", "goal-state",
	"is-leader", "juju-log", "leader-get", "leader-set", "network-get",
	"open-port", "opened-ports", "relation-get", "relation-ids",
	"relation-list", "relation-model-get", "relation-set", "secret-add",
	"secret-get", "secret-grant", "secret-ids", "secret-info-get",
	"secret-remove", "secret-revoke", "secret-set", "state-delete",
	"state-get", "state-set", "status-get", "status-set", "unit-get",
}

func main() {
	c := &client{
		getenv:  os.Getenv,
		stdin:   os.Stdin,
		stdout:  os.Stdout,
		stderr:  os.Stderr,
		timeout: waitTimeout,
	}
	os.Exit(c.main(os.Args))
}

// client runs one hook tool; its fields are the process's surroundings,
// replaced in tests.
type client struct {
	getenv         func(string) string
	stdin          io.Reader
	stdout, stderr io.Writer
	timeout        time.Duration // bounds each wait on the socket; 0 for none
}

// main runs the tool named by args[0] and returns the exit code.
func (c *client) main(args []string) int {
	name := selfName // when exec'd without even argv[0]
	if len(args) > 0 {
		name = args[0][strings.LastIndexByte(args[0], '/')+1:]
		args = args[1:]
	}
	if name == selfName {
		if len(args) == 0 {
			c.stderr.Write(usage())
			return 2
		}
		switch args[0] {
		case "-h", "-help", "--help", "help":
			c.stdout.Write(usage())
			return 0
		}
		if strings.HasPrefix(args[0], "-") {
			return c.fail("unknown option " + args[0] + "; run \"jujuc --help\" for usage")
		}
		name, args = args[0], args[1:] // jujuc TOOL ARGS...
	}

	ctxID := c.getenv("JUJU_CONTEXT_ID")
	if ctxID == "" {
		// A tool's usage comes from the unit agent; outside a hook there
		// is none to ask, but --help still answers, and exits 0.
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			io.WriteString(c.stdout, "Usage: "+name+" [options] ...\n\n"+name+" is a Juju hook tool: it runs in a hook, where the unit agent\nanswers it (and prints its full usage for --help). Outside a hook there\nis no agent to ask; see docs/charms.md for every tool's options.\n")
			return 0
		}
		return c.fail("JUJU_CONTEXT_ID not set")
	}
	dir, err := os.Getwd()
	if err != nil {
		return c.fail("cannot get the working directory: " + err.Error())
	}
	if network := c.getenv("JUJU_AGENT_SOCKET_NETWORK"); network != "" && network != "unix" {
		return c.fail("JUJU_AGENT_SOCKET_NETWORK is " + network + "; only unix is supported")
	}
	addr := c.getenv("JUJU_AGENT_SOCKET_ADDRESS")
	if addr == "" {
		return c.fail("JUJU_AGENT_SOCKET_ADDRESS not set")
	}

	req := &request{contextID: ctxID, dir: dir, command: name, args: args, clientFiles: true}
	for {
		resp, err := c.call(addr, req)
		if err != nil {
			return c.fail(err.Error())
		}
		switch {
		case resp.needStdin:
			if req.stdinSet {
				return c.fail("the unit agent asked again for stdin, which it was sent")
			}
			req.stdinSet = true
			if req.stdin, err = readStdin(c.stdin); err != nil {
				return c.fail(err.Error())
			}
		case resp.needFile != "":
			// A tool reads one file at most: the agent asks once.
			switch req.filePath {
			case "":
			case resp.needFile:
				return c.fail("the unit agent asked again for " + req.filePath + ", which it was sent")
			default:
				return c.fail("the unit agent asked for " + resp.needFile + " after " + req.filePath + ", which it was sent")
			}
			if !strings.HasPrefix(resp.needFile, "/") {
				return c.fail("the unit agent asked for a file by a relative path: " + resp.needFile)
			}
			req.filePath = resp.needFile
			if req.file, err = readFile(resp.needFile); err != nil {
				req.file, req.fileError = nil, err.Error()
			}
		default:
			return c.finish(resp)
		}
	}
}

// finish prints what the tool printed, writes its output file, if it has
// one, and returns its exit code, or 1 if the file could not be written.
func (c *client) finish(resp response) int {
	if len(resp.stdout) > 0 {
		c.stdout.Write(resp.stdout)
	}
	if len(resp.stderr) > 0 {
		c.stderr.Write(resp.stderr)
	}
	if resp.outputPath != "" {
		if !strings.HasPrefix(resp.outputPath, "/") {
			return c.fail("the unit agent named an output file by a relative path: " + resp.outputPath)
		}
		if err := writeFile(resp.outputPath, resp.output); err != nil {
			return c.fail(err.Error())
		}
	}
	return int(resp.code)
}

// call makes one Run call on a connection of its own.
func (c *client) call(addr string, req *request) (response, error) {
	f, err := dial(addr, c.timeout)
	if err != nil {
		return response{}, err
	}
	defer f.Close()
	return invoke(f, req)
}

// fail prints msg as Juju prints errors and returns exit code 1.
func (c *client) fail(msg string) int {
	io.WriteString(c.stderr, "ERROR "+msg+"\n")
	return 1
}

// readStdin reads all of stdin, up to maxInput bytes.
func readStdin(r io.Reader) ([]byte, error) {
	b, err := readLimited(r, 0)
	if err != nil {
		return nil, errors.New("cannot read stdin: " + err.Error())
	}
	if len(b) > maxInput {
		return nil, errors.New("stdin is over the " + strconv.Itoa(maxInput) + " byte limit")
	}
	return b, nil
}

// readFile reads the file at path, up to maxInput bytes. Its errors are
// those of os.ReadFile, which Juju's tools print ("open /x: no such file
// or directory"), or that it is over the limit.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var size int64
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
		size = fi.Size()
	}
	var b []byte
	if size <= maxInput {
		b, err = readLimited(f, int(size))
	}
	if err != nil {
		return nil, err
	}
	if size > maxInput || len(b) > maxInput {
		return nil, errors.New("file " + path + " is over the " + strconv.Itoa(maxInput) + " byte limit")
	}
	return b, nil
}

// readLimited reads r to its end, but no more than maxInput+1 bytes: more
// than maxInput means too much. sizeHint, if not 0, is what r is expected
// to hold.
func readLimited(r io.Reader, sizeHint int) ([]byte, error) {
	b := make([]byte, 0, min(sizeHint, maxInput)+1)
	for len(b) <= maxInput {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // grow
		}
		n, err := r.Read(b[len(b):min(cap(b), maxInput+1)])
		b = b[:len(b)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	return b, nil
}

// writeFile creates or truncates the file at path, as Juju's tools do
// (mode 0666 less the umask), and writes data to it. Its errors are those
// of os.Create and File.Write, which Juju's tools print.
func writeFile(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o666)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// usage is the text printed when the binary is run by its own name.
func usage() []byte {
	var b strings.Builder
	b.WriteString(`Usage: jujuc TOOL [ARGS...]

jujuc is the client of the Juju hook tools that bagkeeper's unit agent
serves. Charms call each tool by its own name: every tool is a symlink to
this binary, which runs the tool it is called as. Create the symlinks with

    bagkeeper install-tools DIR

and put DIR on the hooks' PATH. "jujuc TOOL ARGS..." runs TOOL directly.
A tool needs JUJU_CONTEXT_ID and JUJU_AGENT_SOCKET_ADDRESS, which the agent
sets in each hook's environment.

Tools:
`)
	for _, t := range tools {
		b.WriteString("    " + t + "\n")
	}
	return []byte(b.String())
}
