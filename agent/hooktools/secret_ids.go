package hooktools

import "sort"

// secretIDs is secret-ids.
type secretIDs struct {
	ctx Context
	out output
}

func newSecretIDs(ctx Context) command { return &secretIDs{ctx: ctx} }

func (c *secretIDs) info() *info {
	return &info{
		name:    "secret-ids",
		purpose: "Print secret IDs.",
		doc: `
Returns the secret ids for secrets owned by the application.
`,
		examples: `
    secret-ids
`,
	}
}

func (c *secretIDs) setFlags(fs *flagSet) { c.out.addDefaultFlags(fs) }

func (c *secretIDs) init(args []string) error { return checkEmpty(args) }

func (c *secretIDs) run(e *env) error {
	sc, err := secretsOf(c.ctx)
	if err != nil {
		return err
	}
	ids, err := sc.SecretIDs()
	if err != nil {
		return err
	}
	sort.Strings(ids)
	if ids == nil {
		ids = []string{}
	}
	return c.out.write(e, ids)
}
