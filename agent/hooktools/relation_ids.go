package hooktools

import (
	"errors"
	"fmt"
	"sort"
)

// relationIDs is relation-ids [<endpoint>].
type relationIDs struct {
	ctx      Context
	endpoint string // defaults to the hook relation's endpoint
	out      output
}

func newRelationIDs(ctx Context) command {
	c := &relationIDs{ctx: ctx}
	if r, ok := hookRelation(ctx); ok {
		c.endpoint = r.Endpoint()
	}
	return c
}

// hookRelation returns the relation of the running relation hook.
func hookRelation(ctx Context) (Relation, bool) {
	id, ok := ctx.HookRelation()
	if !ok {
		return nil, false
	}
	r, err := ctx.Relation(id)
	if err != nil {
		return nil, false
	}
	return r, true
}

func (c *relationIDs) info() *info {
	i := &info{
		name:    "relation-ids",
		args:    "<name>",
		purpose: "List the relation ids of an endpoint.",
		doc: `
relation-ids prints the ids (endpoint:id) of the relations of an endpoint
that are not broken, for use with -r of the other relation tools. In a
relation hook the endpoint defaults to the hook's.
`,
		examples: `
    relation-ids database
`,
	}
	if c.endpoint != "" {
		i.args = "[<name>]"
		i.doc = fmt.Sprintf("The default endpoint of this hook is %q.\n", c.endpoint) + i.doc
	}
	return i
}

func (c *relationIDs) setFlags(fs *flagSet) {
	c.out.addDefaultFlags(fs)
}

func (c *relationIDs) init(args []string) error {
	if len(args) > 0 {
		c.endpoint = args[0]
		args = args[1:]
	} else if c.endpoint == "" {
		return errors.New("no endpoint name specified")
	}
	return checkEmpty(args)
}

func (c *relationIDs) run(e *env) error {
	keys := []string{}
	for _, id := range c.ctx.RelationIDs(c.endpoint) {
		r, err := c.ctx.Relation(id)
		switch {
		case errors.Is(err, ErrRelationNotFound):
			continue
		case err != nil:
			return err
		}
		if r.Endpoint() == c.endpoint {
			keys = append(keys, r.Key())
		}
	}
	sort.Strings(keys)
	return c.out.write(e, keys)
}
