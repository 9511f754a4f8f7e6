package hooktools

import (
	"errors"
	"fmt"
	"strings"
)

// jujuLog is juju-log [-l LEVEL] [--debug] <message...>.
type jujuLog struct {
	ctx     Context
	message string
	debug   bool
	level   string
	format  string // deprecated, ignored
}

func newJujuLog(ctx Context) command { return &jujuLog{ctx: ctx} }

func (c *jujuLog) info() *info {
	return &info{
		name:    "juju-log",
		args:    "<message>",
		purpose: "Write a message to the unit's log.",
		doc: `
juju-log logs its arguments, joined by spaces, as one line of the unit's log
(logger unit.<unit>.juju-log). In a relation hook the line starts with the
relation id. The level is INFO unless --debug or --log-level says otherwise
(TRACE, DEBUG, INFO, WARNING, ERROR or CRITICAL, in any case).
`,
		examples: `
    juju-log "configuration written"
    juju-log --log-level WARNING -- "-x is deprecated"
`,
	}
}

func (c *jujuLog) setFlags(fs *flagSet) {
	fs.boolVar(&c.debug, "Log at DEBUG level", "debug")
	fs.stringVar(&c.level, "INFO", "Log at the given level", "l", "log-level")
	fs.stringVar(&c.format, "", "Ignored (deprecated)", "format")
}

func (c *jujuLog) init(args []string) error {
	if len(args) == 0 {
		return errors.New("no message specified")
	}
	c.message = strings.Join(args, " ")
	return nil
}

func (c *jujuLog) run(e *env) error {
	deprecatedFormat(e, c.format, "juju-log")
	level := "INFO"
	if c.debug {
		level = "DEBUG"
	} else if c.level != "" {
		var ok bool
		if level, ok = parseLogLevel(c.level); !ok {
			c.ctx.Log("WARNING", fmt.Sprintf("Specified log level of %q is not valid", c.level))
			level = "INFO"
		}
	}
	prefix := ""
	if id, ok := c.ctx.HookRelation(); ok {
		r, err := c.ctx.Relation(id)
		switch {
		case err == nil:
			prefix = r.Key() + ": "
		case !errors.Is(err, ErrRelationNotFound):
			return err
		}
	}
	if level == "" {
		// UNSPECIFIED is a valid level that Juju's logger never writes.
		return nil
	}
	c.ctx.Log(level, prefix+c.message)
	return nil
}

// parseLogLevel parses a level name case-insensitively as Juju's logger
// does, returning the name Context.Log takes ("" for UNSPECIFIED).
func parseLogLevel(s string) (string, bool) {
	switch l := strings.ToUpper(s); l {
	case "UNSPECIFIED":
		return "", true
	case "TRACE", "DEBUG", "INFO", "ERROR", "CRITICAL", "WARNING":
		return l, true
	case "WARN":
		return "WARNING", true
	}
	return "", false
}
