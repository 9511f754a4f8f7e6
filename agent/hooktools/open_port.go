package hooktools

import (
	"errors"
	"strings"
)

// portCommand is open-port and close-port:
// <port>[/<protocol>] | <from>-<to>[/<protocol>] | icmp [--endpoints a,b].
type portCommand struct {
	ctx       Context
	name      string
	open      bool
	endpoints string
	format    string // deprecated, ignored
	portRange PortRange
}

func newOpenPort(ctx Context) command {
	return &portCommand{ctx: ctx, name: "open-port", open: true}
}

func newClosePort(ctx Context) command {
	return &portCommand{ctx: ctx, name: "close-port"}
}

func (c *portCommand) info() *info {
	i := &info{
		name: c.name,
		args: "<port>[/<protocol>] or <from>-<to>[/<protocol>] or icmp",
	}
	if c.open {
		i.purpose = "Ask for a port or port range to be opened."
		i.doc = `
open-port asks for a port, a range of ports or ICMP to be opened for all the
application's endpoints, or only for those given with --endpoints (a
comma-separated list). The protocol is tcp unless given. The request is kept
with the hook and takes effect only if it succeeds.
`
		i.examples = `
    open-port 80
    open-port 1000-2000/udp
    open-port 8443/tcp --endpoints admin,metrics
`
	} else {
		i.purpose = "Ask for a port or port range to be closed."
		i.doc = `
close-port asks for a port, a range of ports or ICMP to be closed for all the
application's endpoints, or only for those given with --endpoints (a
comma-separated list). The protocol is tcp unless given. The request is kept
with the hook and takes effect only if it succeeds.
`
		i.examples = `
    close-port 80
    close-port 1000-2000/udp
`
	}
	return i
}

func (c *portCommand) setFlags(fs *flagSet) {
	fs.stringVar(&c.format, "", "Ignored (deprecated)", "format")
	fs.stringVar(&c.endpoints, "", "Comma-separated endpoints the request applies to", "endpoints")
}

func (c *portCommand) init(args []string) error {
	if len(args) == 0 {
		return errors.New("no port or range specified")
	}
	p, err := parsePortRange(strings.ToLower(args[0]))
	if err != nil {
		return err
	}
	c.portRange = p
	return checkEmpty(args[1:])
}

func (c *portCommand) run(e *env) error {
	deprecatedFormat(e, c.format, c.name)
	op := c.ctx.ClosePort
	if c.open {
		op = c.ctx.OpenPort
	}
	if c.endpoints == "" {
		return op("", c.portRange)
	}
	for _, endpoint := range strings.Split(c.endpoints, ",") {
		if err := op(strings.TrimSpace(endpoint), c.portRange); err != nil {
			return err
		}
	}
	return nil
}
