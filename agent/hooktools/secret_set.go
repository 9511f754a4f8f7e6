package hooktools

// secretSet is secret-set <ID> [options] [key[#base64]=value...].
type secretSet struct {
	ctx   Context
	id    string
	owner string
	meta  secretMeta
}

func newSecretSet(ctx Context) command { return &secretSet{ctx: ctx} }

func (c *secretSet) info() *info {
	return &info{
		name:    "secret-set",
		args:    "<ID> [key[#base64]=value...]",
		purpose: "Update an existing secret.",
		doc: `
Update a secret with a list of key values, or set new metadata.
If a value has the '#base64' suffix, it is already in base64 format and no
encoding will be performed, otherwise the value will be base64 encoded
prior to being stored.
To just update selected metadata like rotate policy, do not specify any secret value.

New content makes a new revision: consumers see it once they refresh.
`,
		examples: `
    secret-set secret:9m4e2mr0ui3e8a215n4g token=34ae35facd4
    secret-set secret:9m4e2mr0ui3e8a215n4g --rotate monthly token=s3cret
    secret-set secret:9m4e2mr0ui3e8a215n4g --expire 24h
    secret-set secret:9m4e2mr0ui3e8a215n4g --label db-password \
        --description "my database password"
`,
	}
}

func (c *secretSet) setFlags(fs *flagSet) {
	c.meta.setFlags(fs)
	// Accepted as Juju's tool accepts it; the secret's owner decides.
	fs.stringVar(&c.owner, "application", "the owner of the secret, either the application or unit", "owner")
}

func (c *secretSet) init(args []string) error {
	id, rest, err := secretURIArg(args)
	if err != nil {
		return err
	}
	c.id = id
	return c.meta.init(secretNow(), rest)
}

func (c *secretSet) run(e *env) error {
	sc, err := secretsOf(c.ctx)
	if err != nil {
		return err
	}
	content, err := c.meta.content.parse(e)
	if err != nil {
		return err
	}
	return sc.UpdateSecret(c.id, c.meta.updateArgs(content))
}
