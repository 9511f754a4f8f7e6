package hooktools

import (
	"errors"
	"fmt"
	"time"
)

// secretNow is the clock that turns --expire durations into times (tests
// replace it).
var secretNow = time.Now

// secretAdd is secret-add [options] [key[#base64|#file]=value...].
type secretAdd struct {
	ctx   Context
	owner string
	meta  secretMeta
}

func newSecretAdd(ctx Context) command { return &secretAdd{ctx: ctx} }

func (c *secretAdd) info() *info {
	return &info{
		name:    "secret-add",
		args:    "[key[#base64|#file]=value...]",
		purpose: "Add a new secret.",
		doc: `
Add a secret with a list of key values.

If a key has the '#base64' suffix, the value is already in base64 format and no
encoding will be performed, otherwise the value will be base64 encoded
prior to being stored.

If a key has the '#file' suffix, the value is read from the corresponding file.

By default, a secret is owned by the application, meaning only the unit
leader can manage it. Use "--owner unit" to create a secret owned by the
specific unit which created it.

The content is encrypted with the application's secrets key before it is
replicated; one call reads at most one file (--file or one key#file=PATH).
`,
		examples: `
    secret-add token=34ae35facd4
    secret-add key#base64=AA==
    secret-add key#file=/path/to/file another-key=s3cret
    secret-add --owner unit token=s3cret
    secret-add --rotate monthly token=s3cret
    secret-add --expire 24h token=s3cret
    secret-add --expire 2025-01-01T06:06:06 token=s3cret
    secret-add --label db-password \
        --description "my database password" \
        data#base64=s3cret==
`,
	}
}

func (c *secretAdd) setFlags(fs *flagSet) {
	c.meta.setFlags(fs)
	fs.stringVar(&c.owner, "application", "the owner of the secret, either the application or unit", "owner")
}

func (c *secretAdd) init(args []string) error {
	if len(args) < 1 && c.meta.content.file == "" {
		return errors.New("missing secret value or filename")
	}
	if err := c.meta.init(secretNow(), args); err != nil {
		return err
	}
	if c.owner != "application" && c.owner != "unit" {
		return fmt.Errorf("secret owner %q not valid", c.owner)
	}
	return nil
}

func (c *secretAdd) run(e *env) error {
	sc, err := secretsOf(c.ctx)
	if err != nil {
		return err
	}
	content, err := c.meta.content.parse(e)
	if err != nil {
		return err
	}
	if len(content) == 0 {
		return errors.New("empty secret value not valid")
	}
	id, err := sc.CreateSecret(c.owner, c.meta.updateArgs(content))
	if err != nil {
		return err
	}
	fmt.Fprintln(&e.stdout, SecretURI(id))
	return nil
}
