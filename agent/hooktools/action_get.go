package hooktools

import "strings"

// actionGet is action-get [--format F] [-o FILE] [<key>[.<key>...]].
type actionGet struct {
	ctx  Context
	keys []string
	out  output
}

func newActionGet(ctx Context) command { return &actionGet{ctx: ctx} }

func (c *actionGet) info() *info {
	return &info{
		name:    "action-get",
		args:    "[<key>[.<key>.<key>...]]",
		purpose: "Get action parameters.",
		doc: `
action-get prints the parameters of the running action, or the value of one
of them. A key path of dotted names ("backup.target") goes into nested
parameters; a missing key prints nothing.
`,
		examples: `
    TARGET=$(action-get target)
    action-get --format json
`,
	}
}

func (c *actionGet) setFlags(fs *flagSet) { c.out.addDefaultFlags(fs) }

func (c *actionGet) init(args []string) error {
	c.keys = nil
	if len(args) > 0 {
		if err := checkEmpty(args[1:]); err != nil {
			return err
		}
		c.keys = strings.Split(args[0], ".")
	}
	return nil
}

func (c *actionGet) run(e *env) error {
	ac, err := actionContext(c.ctx)
	if err != nil {
		return err
	}
	params, err := ac.ActionParams()
	if err != nil {
		return err
	}
	if len(c.keys) == 0 {
		if params == nil {
			params = map[string]any{}
		}
		return c.out.write(e, params)
	}
	var v any = params
	for _, k := range c.keys {
		m, ok := v.(map[string]any)
		if !ok {
			v = nil
			break
		}
		v = m[k]
	}
	return c.out.write(e, v)
}
