package hooktools

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// secretGet is secret-get <ID> [key[#base64]].
type secretGet struct {
	ctx            Context
	id, label, key string
	peek, refresh  bool
	out            output
}

func newSecretGet(ctx Context) command { return &secretGet{ctx: ctx} }

func (c *secretGet) info() *info {
	return &info{
		name:    "secret-get",
		args:    "<ID> [key[#base64]]",
		purpose: "Get the content of a secret.",
		doc: `
Get the content of a secret with a given secret ID.
The first time the value is fetched, the latest revision is used.
Subsequent calls will always return this same revision unless
--peek or --refresh are used.
Using --peek will fetch the latest revision just this time.
Using --refresh will fetch the latest revision and continue to
return the same revision next time unless --peek or --refresh is used.

Either the ID or label can be used to identify the secret.
`,
		examples: `
    secret-get secret:9m4e2mr0ui3e8a215n4g
    secret-get secret:9m4e2mr0ui3e8a215n4g token
    secret-get secret:9m4e2mr0ui3e8a215n4g token#base64
    secret-get secret:9m4e2mr0ui3e8a215n4g --format json
    secret-get secret:9m4e2mr0ui3e8a215n4g --peek
    secret-get secret:9m4e2mr0ui3e8a215n4g --refresh
    secret-get secret:9m4e2mr0ui3e8a215n4g --label db-password
`,
	}
}

func (c *secretGet) setFlags(fs *flagSet) {
	c.out.addFlags(fs, "yaml", "yaml", "json")
	fs.stringVar(&c.label, "", "a label used to identify the secret in hooks", "label")
	fs.boolVar(&c.peek, "get the latest revision just this time", "peek")
	fs.boolVar(&c.refresh, "get the latest revision and also get this same revision for subsequent calls", "refresh")
}

func (c *secretGet) init(args []string) error {
	c.id, c.key = "", ""
	if len(args) > 0 {
		id, err := parseSecretURI(args[0])
		if err != nil {
			return fmt.Errorf("secret URI %q not valid", args[0])
		}
		c.id, args = id, args[1:]
	}
	if c.id == "" && c.label == "" {
		return errors.New("require either a secret URI or label")
	}
	if c.peek && c.refresh {
		return errors.New("specify one of --peek or --refresh but not both")
	}
	if len(args) > 0 {
		c.key = args[0]
		args = args[1:]
	}
	return checkEmpty(args)
}

func (c *secretGet) run(e *env) error {
	sc, err := secretsOf(c.ctx)
	if err != nil {
		return err
	}
	content, err := sc.GetSecret(c.id, c.label, c.refresh, c.peek)
	if err != nil {
		return err
	}
	if c.key == "" {
		return c.out.write(e, content)
	}
	key, b64 := c.key, false
	if k, ok := strings.CutSuffix(key, "#base64"); ok {
		key, b64 = k, true
	}
	v, ok := content[key]
	if !ok {
		return fmt.Errorf("secret key %q %w", key, ErrSecretNotFound)
	}
	if b64 {
		v = base64.StdEncoding.EncodeToString([]byte(v))
	}
	return c.out.write(e, v)
}
