package hooktools

import "errors"

// applicationVersionSet is application-version-set <version>.
type applicationVersionSet struct {
	ctx     Context
	version string
}

func newApplicationVersionSet(ctx Context) command { return &applicationVersionSet{ctx: ctx} }

func (c *applicationVersionSet) info() *info {
	return &info{
		name:    "application-version-set",
		args:    "<new-version>",
		purpose: "Set the version of the workload software.",
		doc: `
application-version-set records which version of the workload software this
unit runs (a package version, a git hash, ...); it is shown in the status of
the application. It takes effect at once.
`,
	}
}

func (c *applicationVersionSet) setFlags(*flagSet) {}

func (c *applicationVersionSet) init(args []string) error {
	if len(args) < 1 {
		return errors.New("no version specified")
	}
	c.version = args[0]
	return checkEmpty(args[1:])
}

func (c *applicationVersionSet) run(*env) error {
	return c.ctx.SetApplicationVersion(c.version)
}
