package hooktools

import (
	"errors"
	"time"
)

// secretInfoGet is secret-info-get <ID> | --label L.
type secretInfoGet struct {
	ctx       Context
	id, label string
	out       output
}

func newSecretInfoGet(ctx Context) command { return &secretInfoGet{ctx: ctx} }

func (c *secretInfoGet) info() *info {
	return &info{
		name:    "secret-info-get",
		args:    "<ID>",
		purpose: "Get a secret's metadata info.",
		doc: `
Get the metadata of a secret with a given secret ID.
Either the ID or label can be used to identify the secret.
`,
		examples: `
    secret-info-get secret:9m4e2mr0ui3e8a215n4g
    secret-info-get --label db-password
`,
	}
}

func (c *secretInfoGet) setFlags(fs *flagSet) {
	c.out.addFlags(fs, "yaml", "yaml", "json")
	fs.stringVar(&c.label, "", "a label used to identify the secret", "label")
}

func (c *secretInfoGet) init(args []string) error {
	c.id = ""
	if len(args) > 0 {
		id, err := parseSecretURI(args[0])
		if err != nil {
			return err
		}
		c.id, args = id, args[1:]
	}
	if c.id == "" && c.label == "" {
		return errors.New("require either a secret URI or label")
	}
	if c.id != "" && c.label != "" {
		return errors.New("specify either a secret URI or label but not both")
	}
	return checkEmpty(args)
}

// secretInfoDisplay is Juju's layout of secret-info-get.
type secretInfoDisplay struct {
	Revision    int                 `yaml:"revision" json:"revision"`
	Label       string              `yaml:"label" json:"label"`
	Owner       string              `yaml:"owner" json:"owner"`
	Description string              `yaml:"description,omitempty" json:"description,omitempty"`
	Rotation    string              `yaml:"rotation,omitempty" json:"rotation,omitempty"`
	Expiry      *time.Time          `yaml:"expiry,omitempty" json:"expiry,omitempty"`
	Rotates     *time.Time          `yaml:"rotates,omitempty" json:"rotates,omitempty"`
	Access      []secretAccessEntry `yaml:"access,omitempty" json:"access,omitempty"`
}

type secretAccessEntry struct {
	Target string `yaml:"target" json:"target"`
	Scope  string `yaml:"scope" json:"scope"`
	Role   string `yaml:"role" json:"role"`
}

func (c *secretInfoGet) run(e *env) error {
	sc, err := secretsOf(c.ctx)
	if err != nil {
		return err
	}
	in, err := sc.SecretInfo(c.id, c.label)
	if err != nil {
		return err
	}
	d := secretInfoDisplay{Revision: in.Revision, Label: in.Label, Owner: in.Owner, Description: in.Description,
		Rotation: in.Rotation, Expiry: in.Expiry, Rotates: in.Rotates}
	for _, a := range in.Access {
		d.Access = append(d.Access, secretAccessEntry(a))
	}
	return c.out.write(e, map[string]secretInfoDisplay{in.ID: d})
}
