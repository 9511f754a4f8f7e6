package hooktools

import (
	"errors"
	"fmt"
	"strconv"
)

// secretRemove is secret-remove <ID> [--revision N].
type secretRemove struct {
	ctx      Context
	id       string
	revision string
}

func newSecretRemove(ctx Context) command { return &secretRemove{ctx: ctx} }

func (c *secretRemove) info() *info {
	return &info{
		name:    "secret-remove",
		args:    "<ID>",
		purpose: "Remove an existing secret.",
		doc: `
Remove a secret with the specified URI, or only one of its revisions with
--revision.
`,
		examples: `
    secret-remove secret:9m4e2mr0ui3e8a215n4g
    secret-remove secret:9m4e2mr0ui3e8a215n4g --revision 1
`,
	}
}

func (c *secretRemove) setFlags(fs *flagSet) {
	fs.stringVar(&c.revision, "0", "remove the specified revision", "revision")
}

func (c *secretRemove) init(args []string) error {
	id, rest, err := secretURIArg(args)
	if err != nil {
		return err
	}
	c.id = id
	if _, err := strconv.Atoi(c.revision); err != nil {
		return fmt.Errorf("invalid value %q for option --revision: %v", c.revision, errors.Unwrap(err))
	}
	return checkEmpty(rest)
}

func (c *secretRemove) run(*env) error {
	sc, err := secretsOf(c.ctx)
	if err != nil {
		return err
	}
	rev, _ := strconv.Atoi(c.revision)
	return sc.RemoveSecret(c.id, max(rev, 0))
}
