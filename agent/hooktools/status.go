package hooktools

import (
	"errors"
	"fmt"
)

// statusSet is status-set [--application] <status> [message].
type statusSet struct {
	ctx         Context
	application bool
	status      string
	message     string
}

// settableStatuses are the statuses a charm may set, in Juju's order (the
// order appears in the error message).
func settableStatuses() []string {
	return []string{"maintenance", "blocked", "waiting", "active"}
}

func newStatusSet(ctx Context) command { return &statusSet{ctx: ctx} }

func (c *statusSet) info() *info {
	return &info{
		name:    "status-set",
		args:    "<maintenance | blocked | waiting | active> [message]",
		purpose: "Set the workload status of this unit or application.",
		doc: `
status-set sets the workload status, and an optional message, of this unit,
or with --application (leader only) of the application. It takes effect at
once, and updates the time of the status even when nothing else changes.
`,
		examples: `
    status-set maintenance "installing packages"
    status-set --application active
`,
	}
}

func (c *statusSet) setFlags(fs *flagSet) {
	fs.boolVar(&c.application, "Set the application's status (leader only)", "application")
}

func (c *statusSet) init(args []string) error {
	if len(args) < 1 {
		return errors.New("invalid args, require <status> [message]")
	}
	valid := false
	for _, s := range settableStatuses() {
		valid = valid || s == args[0]
	}
	if !valid {
		return fmt.Errorf("invalid status %q, expected one of %v", args[0], settableStatuses())
	}
	c.status = args[0]
	if len(args) > 1 {
		c.message = args[1]
		return checkEmpty(args[2:])
	}
	return nil
}

func (c *statusSet) run(*env) error {
	s := Status{Status: c.status, Message: c.message}
	if c.application {
		return c.ctx.SetAppStatus(s)
	}
	return c.ctx.SetUnitStatus(s)
}

// statusGet is status-get [--include-data] [--application].
type statusGet struct {
	ctx         Context
	includeData bool
	application bool
	out         output
}

func newStatusGet(ctx Context) command { return &statusGet{ctx: ctx} }

func (c *statusGet) info() *info {
	return &info{
		name:    "status-get",
		args:    "[--include-data] [--application]",
		purpose: "Print the workload status of this unit or application.",
		doc: `
status-get prints the workload status of this unit. --include-data prints a
map with the message and the data of the status as well. --application
prints the status of the application and of each of its units.
`,
		examples: `
    status-get
    status-get --include-data --format=json
    status-get --application
`,
	}
}

func (c *statusGet) setFlags(fs *flagSet) {
	c.out.addDefaultFlags(fs)
	fs.boolVar(&c.includeData, "Include the message and data of the status", "include-data")
	fs.boolVar(&c.application, "Print the application's status and its units'", "application")
}

func (c *statusGet) init(args []string) error { return checkEmpty(args) }

// statusDetails is the map status-get prints for one status.
func statusDetails(s Status, includeData bool) map[string]any {
	details := map[string]any{"status": s.Status}
	if includeData {
		data := make(map[string]any, len(s.Data))
		for k, v := range s.Data {
			data[k] = v
		}
		details["status-data"] = data
		details["message"] = s.Message
	}
	return details
}

func (c *statusGet) run(e *env) error {
	// Like Juju, a failure to write the map is not reported.
	if c.application {
		app, units, err := c.ctx.AppStatus()
		if err != nil {
			return fmt.Errorf("finding application status: %w", err)
		}
		if !c.includeData && c.out.format.name == "smart" {
			return c.out.write(e, app.Status)
		}
		details := statusDetails(app, c.includeData)
		unitDetails := make(map[string]any, len(units))
		for name, s := range units {
			unitDetails[name] = statusDetails(s, c.includeData)
		}
		details["units"] = unitDetails
		_ = c.out.write(e, map[string]any{"application-status": details})
		return nil
	}
	s, err := c.ctx.UnitStatus()
	if err != nil {
		return fmt.Errorf("finding workload status: %w", err)
	}
	if !c.includeData && c.out.format.name == "smart" {
		return c.out.write(e, s.Status)
	}
	_ = c.out.write(e, statusDetails(s, c.includeData))
	return nil
}
