package hooktools

import (
	"errors"
	"strings"
)

// actionLog is action-log <message>.
type actionLog struct {
	ctx     Context
	message string
}

func newActionLog(ctx Context) command { return &actionLog{ctx: ctx} }

func (c *actionLog) info() *info {
	return &info{
		name:    "action-log",
		args:    "<message>",
		purpose: "Record a progress message for the current action.",
		doc: `
action-log records its arguments, joined by spaces, as one timestamped
message of the running action's log, which the operator sees with the
action's results (and while it runs).
`,
	}
}

func (c *actionLog) setFlags(*flagSet) {}

func (c *actionLog) init(args []string) error {
	if len(args) == 0 {
		return errors.New("no message specified")
	}
	c.message = strings.Join(args, " ")
	return nil
}

func (c *actionLog) run(*env) error {
	ac, err := actionContext(c.ctx)
	if err != nil {
		return err
	}
	return ac.LogActionMessage(c.message)
}
