package hooktools

import (
	"fmt"
	"sort"
)

// stateGet is state-get [<key>|-] [--strict].
type stateGet struct {
	ctx    Context
	key    string
	strict bool
	out    output
}

func newStateGet(ctx Context) command { return &stateGet{ctx: ctx} }

func (c *stateGet) info() *info {
	return &info{
		name:    "state-get",
		args:    "[<key>]",
		purpose: "Print this unit's charm state.",
		doc: `
state-get prints the value of one key of the charm state kept for this unit
by the agent, or all of it when the key is "-" or left out. A missing key
prints nothing, or fails with --strict.
`,
	}
}

func (c *stateGet) setFlags(fs *flagSet) {
	c.out.addDefaultFlags(fs)
	fs.boolVar(&c.strict, "Fail if the key does not exist", "strict")
}

func (c *stateGet) init(args []string) error {
	c.key = ""
	if len(args) > 0 {
		if c.key = args[0]; c.key == "-" {
			c.key = ""
		}
		args = args[1:]
	}
	return checkEmpty(args)
}

func (c *stateGet) run(e *env) error {
	state := c.ctx.CharmState()
	if c.key == "" {
		if state == nil {
			state = map[string]string{}
		}
		return c.out.write(e, state)
	}
	value, ok := state[c.key]
	if !ok && c.strict {
		return fmt.Errorf("%q not found", c.key)
	}
	return c.out.write(e, value)
}

// stateSet is state-set [--file F|-] key=value ...
type stateSet struct {
	ctx    Context
	file   fileValue
	values map[string]string
}

func newStateSet(ctx Context) command { return &stateSet{ctx: ctx} }

func (c *stateSet) info() *info {
	return &info{
		name:    "state-set",
		args:    "key=value [key=value ...]",
		purpose: "Change this unit's charm state.",
		doc: `
state-set sets keys of the charm state kept for this unit by the agent. The
values are stored as given, even when empty; use state-delete to remove a
key. --file reads a YAML map of strings from a file, or from standard input
when the file is "-"; key=value arguments take precedence over it. The file
is read where the hook runs, and may hold up to 16 MiB.

Keys are limited to 256 bytes and values to 64 KiB. Changes are kept with
the hook and take effect only if it succeeds.
`,
	}
}

func (c *stateSet) setFlags(fs *flagSet) {
	fs.add(&c.file, `Read a YAML map of values from a file ("-" for stdin)`, "file")
}

func (c *stateSet) init(args []string) error {
	values, err := parseKeyValues(args)
	c.values = values
	return err
}

func (c *stateSet) run(e *env) error {
	values, err := readSettings(e, &c.file, c.values)
	if err != nil {
		return err
	}
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := c.ctx.SetCharmState(k, values[k]); err != nil {
			return err
		}
	}
	return nil
}

// stateDelete is state-delete <key>.
type stateDelete struct {
	ctx Context
	key string
}

func newStateDelete(ctx Context) command { return &stateDelete{ctx: ctx} }

func (c *stateDelete) info() *info {
	return &info{
		name:    "state-delete",
		args:    "<key>",
		purpose: "Remove a key from this unit's charm state.",
		doc: `
state-delete removes one key of the charm state kept for this unit by the
agent. The change is kept with the hook and takes effect only if it
succeeds.
`,
	}
}

func (c *stateDelete) setFlags(*flagSet) {}

func (c *stateDelete) init(args []string) error {
	if len(args) == 0 {
		return nil
	}
	c.key = args[0]
	return checkEmpty(args[1:])
}

func (c *stateDelete) run(*env) error {
	if c.key == "" {
		return nil
	}
	return c.ctx.DeleteCharmState(c.key)
}
