package hooktools

import (
	"errors"
	"fmt"
)

// relationSet is relation-set [options] key=value ...
type relationSet struct {
	ctx      Context
	relation *relationFlag
	file     fileValue
	app      bool
	format   string // deprecated, ignored

	settings map[string]string // from the arguments
}

func newRelationSet(ctx Context) command {
	return &relationSet{ctx: ctx, relation: newRelationFlag(ctx)}
}

func (c *relationSet) info() *info {
	return &info{
		name:    "relation-set",
		args:    "key=value [key=value ...]",
		purpose: "Change relation data of this unit or application.",
		doc: `
relation-set changes keys of this unit's data bag in a relation, or with
--app (leader only) of this application's data bag. Values are stored as
strings; an empty value removes the key. A key may be given only once.

--file reads a YAML (or JSON) map of strings from a file, or from standard
input when the file is "-"; key=value arguments take precedence over it.
The file is read where the hook runs, and may hold up to 16 MiB.

A key may not be empty or hold "=" or white space, in an argument or in
the file. Changes are kept with the hook and take effect only if it
succeeds.
`,
		examples: `
    relation-set port=5432 host=db.example
    relation-set -r db:7 --app --file settings.yaml
    echo '{"user": "app"}' | relation-set --file -
`,
	}
}

func (c *relationSet) setFlags(fs *flagSet) {
	c.relation.add(fs)
	fs.add(&c.file, `Read a YAML map of settings from a file ("-" for stdin)`, "file")
	fs.boolVar(&c.app, "Change the application data bag (leader only)", "app")
	fs.stringVar(&c.format, "", "Ignored (deprecated)", "format")
}

func (c *relationSet) init(args []string) error {
	if err := c.relation.require(); err != nil {
		return err
	}
	settings, err := parseKeyValues(args)
	if err != nil {
		return err
	}
	if err := checkKeys(settings); err != nil {
		return err
	}
	c.settings = settings
	return nil
}

func (c *relationSet) run(e *env) error {
	deprecatedFormat(e, c.format, "relation-set")
	settings, err := readSettings(e, &c.file, c.settings)
	if err != nil {
		return err
	}
	if err := checkKeys(settings); err != nil {
		return err
	}
	r, err := c.ctx.Relation(c.relation.id)
	if err != nil {
		return err
	}
	if !c.app {
		return r.WriteUnit(settings)
	}
	leader, err := c.ctx.IsLeader()
	if err != nil {
		return fmt.Errorf("cannot determine leadership status: %w", err)
	}
	if !leader {
		return ErrCannotWriteSettings
	}
	if err := r.WriteApp(settings); err != nil {
		if errors.Is(err, ErrCannotWriteSettings) {
			return ErrCannotWriteSettings
		}
		return err
	}
	return nil
}
