package hooktools

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// actionKeyRule is the rule of each dotted part of an action-set key.
var actionKeyRule = regexp.MustCompile(`^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$`)

// reservedActionKeys are results Juju sets itself.
var reservedActionKeys = []string{"stdout", "stdout-encoding", "stderr", "stderr-encoding"}

// actionSet is action-set <key>=<value> [<key>=<value> ...].
type actionSet struct {
	ctx  Context
	args [][]string // each: the key path, then the value
}

func newActionSet(ctx Context) command { return &actionSet{ctx: ctx} }

func (c *actionSet) info() *info {
	return &info{
		name:    "action-set",
		args:    "<key>=<value> [<key>=<value> ...]",
		purpose: "Set action results.",
		doc: `
action-set adds values to the results of the running action, shown to the
operator when the action ends. A key is one or more dotted parts, each of
lower-case letters, digits and hyphens, starting and ending with a letter or
digit; dotted keys make nested results. The keys "stdout", "stdout-encoding",
"stderr" and "stderr-encoding" are reserved.
`,
		examples: `
    action-set outfile.size=10G
    action-set foo.bar=2 foo.baz=1

gives the results:

    outfile:
      size: 10G
    foo:
      bar: "2"
      baz: "1"
`,
	}
}

func (c *actionSet) setFlags(*flagSet) {}

func (c *actionSet) init(args []string) error {
	c.args = nil
	for _, arg := range args {
		key, value, ok := strings.Cut(arg, "=")
		if !ok {
			return fmt.Errorf("argument %q must be of the form key...=value", arg)
		}
		parts := strings.Split(key, ".")
		for _, p := range parts {
			if !actionKeyRule.MatchString(p) {
				return fmt.Errorf("key %q must start and end with lowercase alphanumeric, and contain only lowercase alphanumeric, hyphens and periods", p)
			}
			if slices.Contains(reservedActionKeys, p) {
				return fmt.Errorf("cannot set reserved action key %q", p)
			}
		}
		c.args = append(c.args, append(parts, value))
	}
	return nil
}

func (c *actionSet) run(*env) error {
	ac, err := actionContext(c.ctx)
	if err != nil {
		return err
	}
	for _, a := range c.args {
		if err := ac.UpdateActionResults(a[:len(a)-1], a[len(a)-1]); err != nil {
			return err
		}
	}
	return nil
}
