package hooktools

import (
	"errors"
	"fmt"
)

// secretGrant is secret-grant <ID> -r <relation> [--unit U].
type secretGrant struct {
	ctx  Context
	id   string
	unit string
	rel  *relationFlag
}

func newSecretGrant(ctx Context) command { return &secretGrant{ctx: ctx, rel: newRelationFlag(ctx)} }

func (c *secretGrant) info() *info {
	return &info{
		name:    "secret-grant",
		args:    "<ID>",
		purpose: "Grant access to a secret.",
		doc: `
Grant access to view the value of a specified secret.
Access is granted in the context of a relation - unless revoked
earlier, once the relation is removed, so too is the access grant.

By default, all units of the related application are granted access.
Optionally specify a unit name to limit access to just that unit.
`,
		examples: `
    secret-grant secret:9m4e2mr0ui3e8a215n4g -r 0 --unit mediawiki/6
    secret-grant secret:9m4e2mr0ui3e8a215n4g --relation db:2
`,
	}
}

func (c *secretGrant) setFlags(fs *flagSet) {
	fs.stringVar(&c.unit, "", "the unit to grant access", "unit")
	fs.add(c.rel, "the relation with which to associate the grant", "r", "relation")
}

// remoteAppOf is the application on the other side of a relation: this
// one for a peer relation.
func remoteAppOf(ctx Context, r Relation) string {
	if r.Peer() {
		return ctx.AppName()
	}
	return r.RemoteApp()
}

func (c *secretGrant) init(args []string) error {
	id, rest, err := secretURIArg(args)
	if err != nil {
		return err
	}
	c.id = id
	if c.rel.id == -1 {
		return errors.New("no relation id specified")
	}
	r, err := c.ctx.Relation(c.rel.id)
	if err != nil {
		return err
	}
	if c.unit != "" {
		if !isValidUnit(c.unit) {
			return fmt.Errorf("unit %q not valid", c.unit)
		}
		if app := remoteAppOf(c.ctx, r); unitApplication(c.unit) != app {
			return fmt.Errorf("cannot specify unit %q in relation to application %q", c.unit, app)
		}
	}
	return checkEmpty(rest)
}

func (c *secretGrant) run(*env) error {
	sc, err := secretsOf(c.ctx)
	if err != nil {
		return err
	}
	return sc.GrantSecret(c.id, c.rel.id, c.unit)
}
