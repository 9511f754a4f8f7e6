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
	"strings"
	"time"
)

// waitTimeout bounds any single wait on the agent's socket.
const waitTimeout = 5 * time.Minute

// maxStdin is the most stdin sent to a tool.
const maxStdin = 1 << 30

// selfName is the name this binary is installed under.
const selfName = "jujuc"

// tools lists the hook tools the agent serves, for the usage text.
var tools = []string{
	"application-version-set", "close-port", "config-get", "goal-state",
	"is-leader", "juju-log", "leader-get", "leader-set", "network-get",
	"open-port", "opened-ports", "relation-get", "relation-ids",
	"relation-list", "relation-model-get", "relation-set", "state-delete",
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

	req := &request{contextID: ctxID, dir: dir, command: name, args: args}
	resp, err := c.call(addr, req)
	if err == nil && resp.needStdin {
		req.stdinSet = true
		if req.stdin, err = readStdin(c.stdin); err != nil {
			return c.fail(err.Error())
		}
		resp, err = c.call(addr, req)
		if err == nil && resp.needStdin {
			return c.fail("the unit agent asked again for stdin, which it was sent")
		}
	}
	if err != nil {
		return c.fail(err.Error())
	}
	if len(resp.stdout) > 0 {
		c.stdout.Write(resp.stdout)
	}
	if len(resp.stderr) > 0 {
		c.stderr.Write(resp.stderr)
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

// readStdin reads all of stdin, up to maxStdin bytes.
func readStdin(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxStdin+1))
	if err != nil {
		return nil, errors.New("cannot read stdin: " + err.Error())
	}
	if len(b) > maxStdin {
		return nil, errors.New("stdin is larger than 1 GiB")
	}
	return b, nil
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
