package hooktools

import (
	"errors"
	"fmt"
)

// secretRevoke is secret-revoke <ID> [-r <relation>] [--app A | --unit U].
type secretRevoke struct {
	ctx       Context
	id        string
	app, unit string
	rel       *relationFlag
}

func newSecretRevoke(ctx Context) command {
	c := &secretRevoke{ctx: ctx, rel: newRelationFlag(ctx)}
	return c
}

func (c *secretRevoke) info() *info {
	return &info{
		name:    "secret-revoke",
		args:    "<ID>",
		purpose: "Revoke access to a secret.",
		doc: `
Revoke access to view the value of a specified secret.
Access may be revoked from an application (all units of
that application lose access), or from a specified unit.
If run in a relation hook, the related application's
access is revoked, unless a unit is specified, in which
case just that unit's access is revoked.
`,
		examples: `
    secret-revoke secret:9m4e2mr0ui3e8a215n4g
    secret-revoke secret:9m4e2mr0ui3e8a215n4g --relation 1
    secret-revoke secret:9m4e2mr0ui3e8a215n4g --app mediawiki
    secret-revoke secret:9m4e2mr0ui3e8a215n4g --unit mediawiki/6
`,
	}
}

func (c *secretRevoke) setFlags(fs *flagSet) {
	fs.stringVar(&c.app, "", "the application to revoke access", "app", "application")
	fs.stringVar(&c.unit, "", "the unit to revoke access", "unit")
	fs.add(c.rel, "the relation for which to revoke the grant", "r", "relation")
}

func (c *secretRevoke) init(args []string) error {
	id, rest, err := secretURIArg(args)
	if err != nil {
		return err
	}
	c.id = id
	if c.app != "" && !isValidApplication(c.app) {
		return fmt.Errorf("application %q not valid", c.app)
	}
	if c.unit != "" && !isValidUnit(c.unit) {
		return fmt.Errorf("unit %q not valid", c.unit)
	}
	if c.app != "" && c.unit != "" {
		return errors.New("specify only one of application or unit")
	}
	if c.rel.id >= 0 {
		r, err := c.ctx.Relation(c.rel.id)
		if err != nil {
			return err
		}
		if c.app != "" {
			return errors.New("do not specify both relation and app")
		}
		if c.unit == "" {
			c.app = remoteAppOf(c.ctx, r)
		}
	}
	if c.app == "" && c.unit == "" {
		return errors.New("missing relation or application or unit")
	}
	return checkEmpty(rest)
}

func (c *secretRevoke) run(*env) error {
	sc, err := secretsOf(c.ctx)
	if err != nil {
		return err
	}
	return sc.RevokeSecret(c.id, c.rel.id, c.app, c.unit)
}
