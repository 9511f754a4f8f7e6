package hooktools

import "sort"

// relationList is relation-list [-r <id>] [--app].
type relationList struct {
	ctx      Context
	relation *relationFlag
	app      bool
	out      output
}

func newRelationList(ctx Context) command {
	return &relationList{ctx: ctx, relation: newRelationFlag(ctx)}
}

func (c *relationList) info() *info {
	i := &info{
		name:    "relation-list",
		purpose: "List the remote units of a relation.",
		doc: `
relation-list prints the names of the remote units in a relation, sorted;
with --app, the name of the remote application instead. Outside a relation
hook, -r must name the relation.
`,
	}
	if _, ok := c.ctx.HookRelation(); ok {
		i.doc = ""
	}
	return i
}

func (c *relationList) setFlags(fs *flagSet) {
	c.out.addDefaultFlags(fs)
	c.relation.add(fs)
	fs.boolVar(&c.app, "Print the remote application instead of its units", "app")
}

func (c *relationList) init(args []string) error {
	if err := c.relation.require(); err != nil {
		return err
	}
	return checkEmpty(args)
}

func (c *relationList) run(e *env) error {
	r, err := c.ctx.Relation(c.relation.id)
	if err != nil {
		return err
	}
	if c.app {
		app := r.RemoteApp()
		if app == "" && r.Peer() {
			// The other side of a peer relation is this application.
			app = c.ctx.AppName()
		}
		return c.out.write(e, app)
	}
	units := append([]string{}, r.Members()...)
	sort.Strings(units)
	return c.out.write(e, units)
}
