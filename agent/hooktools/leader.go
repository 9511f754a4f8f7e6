package hooktools

import (
	"fmt"
	"strings"
)

// isLeader is is-leader.
type isLeader struct {
	ctx Context
	out output
}

func newIsLeader(ctx Context) command { return &isLeader{ctx: ctx} }

func (c *isLeader) info() *info {
	return &info{
		name:    "is-leader",
		purpose: "Print whether this unit is the application leader.",
		doc: `
is-leader prints True when this unit is the leader of its application and
will stay leader for at least 30 seconds, False otherwise. When it fails,
assume that the unit is not the leader.
`,
		examples: `
    if [ "$(is-leader)" = True ]; then
        leader-set primary="$(unit-get private-address)"
    fi
`,
	}
}

func (c *isLeader) setFlags(fs *flagSet) { c.out.addDefaultFlags(fs) }

func (c *isLeader) init(args []string) error { return checkEmpty(args) }

func (c *isLeader) run(e *env) error {
	leader, err := c.ctx.IsLeader()
	if err != nil {
		return fmt.Errorf("leadership status unknown: %w", err)
	}
	return c.out.write(e, leader)
}

// leaderGet is leader-get [<key>|-].
type leaderGet struct {
	ctx Context
	key string
	out output
}

func newLeaderGet(ctx Context) command { return &leaderGet{ctx: ctx} }

func (c *leaderGet) info() *info {
	return &info{
		name:    "leader-get",
		args:    "[<key>]",
		purpose: "Print the leader settings of the application.",
		doc: `
leader-get prints one leader setting, or all of them when the key is "-" or
left out. A missing key prints nothing.
`,
	}
}

func (c *leaderGet) setFlags(fs *flagSet) { c.out.addDefaultFlags(fs) }

func (c *leaderGet) init(args []string) error {
	c.key = ""
	if len(args) == 0 {
		return nil
	}
	key := args[0]
	if key == "-" {
		key = ""
	} else if strings.Contains(key, "=") {
		return fmt.Errorf("invalid key %q", key)
	}
	c.key = key
	return checkEmpty(args[1:])
}

func (c *leaderGet) run(e *env) error {
	settings, err := c.ctx.LeaderSettings()
	if err != nil {
		return fmt.Errorf("cannot read leadership settings: %w", err)
	}
	if c.key == "" {
		if settings == nil {
			settings = map[string]string{}
		}
		return c.out.write(e, settings)
	}
	if value, ok := settings[c.key]; ok {
		return c.out.write(e, value)
	}
	return c.out.write(e, nil)
}

// leaderSet is leader-set key=value ...
type leaderSet struct {
	ctx      Context
	settings map[string]string
}

func newLeaderSet(ctx Context) command { return &leaderSet{ctx: ctx} }

func (c *leaderSet) info() *info {
	return &info{
		name:    "leader-set",
		args:    "<key>=<value> [...]",
		purpose: "Change the leader settings of the application.",
		doc: `
leader-set writes leader settings at once (not when the hook ends); the
other units are told of the change. Only the leader may call it. An empty
value removes the key.
`,
		examples: `
    leader-set primary=10.0.0.7
`,
	}
}

func (c *leaderSet) setFlags(*flagSet) {}

func (c *leaderSet) init(args []string) error {
	settings, err := parseKeyValues(args)
	c.settings = settings
	return err
}

func (c *leaderSet) run(*env) error {
	if err := c.ctx.WriteLeaderSettings(c.settings); err != nil {
		return fmt.Errorf("cannot write leadership settings: %w", err)
	}
	return nil
}
