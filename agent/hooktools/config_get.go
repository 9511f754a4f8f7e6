package hooktools

import "fmt"

// configGet is config-get [<key>] [-a|--all].
type configGet struct {
	ctx Context
	key string
	all bool
	out output
}

func newConfigGet(ctx Context) command { return &configGet{ctx: ctx} }

func (c *configGet) info() *info {
	return &info{
		name:    "config-get",
		args:    "[<key>]",
		purpose: "Print the charm's configuration.",
		doc: `
config-get prints the value of one configuration key, or a map of all keys
that have a value (set, or with a default). --all includes the keys without
a value, as null. A key that is not defined prints nothing (null in JSON).
A key and --all cannot be used together.
`,
		examples: `
    PORT=$(config-get port)
    config-get --all --format=json
`,
	}
}

func (c *configGet) setFlags(fs *flagSet) {
	c.out.addDefaultFlags(fs)
	fs.boolVar(&c.all, "Include keys that have no value", "a", "all")
}

func (c *configGet) init(args []string) error {
	if len(args) == 0 {
		return nil
	}
	c.key = args[0]
	if c.key != "" && c.all {
		return fmt.Errorf("cannot use argument --all together with key %q", c.key)
	}
	return checkEmpty(args[1:])
}

func (c *configGet) run(e *env) error {
	config := c.ctx.Config()
	if c.key != "" {
		return c.out.write(e, config[c.key])
	}
	settings := make(map[string]any, len(config))
	for k, v := range config {
		if v != nil || c.all {
			settings[k] = v
		}
	}
	return c.out.write(e, settings)
}
