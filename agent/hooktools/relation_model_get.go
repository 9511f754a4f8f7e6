package hooktools

// relationModelGet is relation-model-get [-r <id>].
type relationModelGet struct {
	ctx      Context
	relation *relationFlag
	out      output
}

func newRelationModelGet(ctx Context) command {
	return &relationModelGet{ctx: ctx, relation: newRelationFlag(ctx)}
}

func (c *relationModelGet) info() *info {
	i := &info{
		name:    "relation-model-get",
		purpose: "Print details of the model of the remote application.",
		doc: `
relation-model-get prints details (the uuid) of the model that hosts the
application at the other end of a relation. Outside a relation hook, -r must
name the relation.
`,
	}
	if _, ok := c.ctx.HookRelation(); ok {
		i.doc = ""
	}
	return i
}

func (c *relationModelGet) setFlags(fs *flagSet) {
	c.out.addDefaultFlags(fs)
	c.relation.add(fs)
}

func (c *relationModelGet) init(args []string) error {
	if err := c.relation.require(); err != nil {
		return err
	}
	return checkEmpty(args)
}

// modelDetails is what relation-model-get prints.
type modelDetails struct {
	UUID string `yaml:"uuid" json:"uuid"`
}

func (c *relationModelGet) run(e *env) error {
	r, err := c.ctx.Relation(c.relation.id)
	if err != nil {
		return err
	}
	return c.out.write(e, modelDetails{UUID: r.ModelUUID()})
}
