package hooktools

import (
	"errors"
	"fmt"
)

// relationGet is relation-get [options] [<key>|- [<unit-or-app>]].
type relationGet struct {
	ctx      Context
	relation *relationFlag
	app      bool
	out      output

	key    string // "" for the whole bag
	target string // unit name, or application name with --app
}

func newRelationGet(ctx Context) command {
	return &relationGet{ctx: ctx, relation: newRelationFlag(ctx)}
}

func (c *relationGet) info() *info {
	i := &info{
		name:    "relation-get",
		args:    "<key> <unit id>",
		purpose: "Print the relation data of a unit or application.",
		doc: `
relation-get prints one key of a relation data bag, or the whole bag when the
key is "-" or left out. Values are always strings.

The bag read is that of the given unit, or with --app that of the given
application; a unit name given with --app stands for its application.
Reading this unit's own bag (or, as leader, this application's bag) shows
the changes this hook has made with relation-set.

The relation defaults to the one of the running relation hook; use -r to
name another. The unit defaults to the remote unit of the hook; in a hook
about a whole application (no remote unit), the remote application's bag is
read.
`,
		examples: `
    relation-get
    relation-get password
    relation-get -r db:7 - postgresql/0
    relation-get --app -r db:7 - postgresql
`,
	}
	if unit := c.ctx.RemoteUnit(); unit != "" {
		i.args = "[<key> [<unit id>]]"
		i.doc += fmt.Sprintf("\nThe default unit of this hook is %q.\n", unit)
	}
	return i
}

func (c *relationGet) setFlags(fs *flagSet) {
	c.out.addDefaultFlags(fs)
	c.relation.add(fs)
	fs.boolVar(&c.app, "Read the application data bag instead of a unit's", "app")
}

func (c *relationGet) init(args []string) error {
	if err := c.relation.require(); err != nil {
		return err
	}
	c.key = ""
	if len(args) > 0 {
		if c.key = args[0]; c.key == "-" {
			c.key = ""
		}
		args = args[1:]
	}
	rest, err := c.resolveTarget(args)
	if err != nil {
		return err
	}
	return checkEmpty(rest)
}

// resolveTarget decides whose bag is read: an explicit argument first (with
// --app a unit name is turned into its application; without --app it must
// be a unit name), else with --app the remote application, else the remote
// unit, else (a hook about a whole application) the remote application with
// an implied --app.
func (c *relationGet) resolveTarget(args []string) ([]string, error) {
	if len(args) > 0 {
		name := args[0]
		switch {
		case c.app && isValidApplication(name):
			c.target = name
		case c.app && isValidUnit(name):
			c.target = unitApplication(name)
		case c.app:
			// Juju ignores a name that is neither; the read then fails.
		case isValidUnit(name):
			c.target = name
		case isValidApplication(name):
			return nil, fmt.Errorf("expected unit name, got application name %q", name)
		default:
			return nil, fmt.Errorf("invalid unit name %q", name)
		}
		return args[1:], nil
	}
	if c.app {
		if c.target = c.ctx.RemoteApp(); c.target == "" {
			return nil, errors.New("no unit or application specified")
		}
		return args, nil
	}
	if c.target = c.ctx.RemoteUnit(); c.target != "" {
		return args, nil
	}
	if c.target = c.ctx.RemoteApp(); c.target != "" {
		c.app = true
		return args, nil
	}
	return nil, errors.New("no unit or application specified")
}

func (c *relationGet) run(e *env) error {
	r, err := c.ctx.Relation(c.relation.id)
	if err != nil {
		return err
	}
	var settings map[string]string
	if c.app {
		if c.target == c.ctx.AppName() {
			// Whether this unit may read its own application's bag
			// depends on leadership; Juju reports a failure to find out
			// as such.
			if _, err := c.ctx.IsLeader(); err != nil {
				return fmt.Errorf("cannot determine leadership status: %w", err)
			}
		}
		settings, err = r.ReadApp(c.target)
	} else {
		settings, err = r.ReadUnit(c.target)
	}
	if err != nil {
		return err
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
