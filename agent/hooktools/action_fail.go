package hooktools

// actionFail is action-fail ["<failure message>"].
type actionFail struct {
	ctx     Context
	message string
}

func newActionFail(ctx Context) command { return &actionFail{ctx: ctx} }

// defaultActionFailMessage is Juju's message for action-fail without one.
const defaultActionFailMessage = "action failed without reason given, check action for errors"

func (c *actionFail) info() *info {
	return &info{
		name:    "action-fail",
		args:    `["<failure message>"]`,
		purpose: "Set action fail status with message.",
		doc: `
action-fail makes the running action end failed, with the given message or,
without one, a message saying that the action failed without a reason. The
action goes on running until it exits; its results are kept.
`,
	}
}

func (c *actionFail) setFlags(*flagSet) {}

func (c *actionFail) init(args []string) error {
	if len(args) == 0 {
		c.message = defaultActionFailMessage
		return nil
	}
	c.message = args[0]
	return checkEmpty(args[1:])
}

func (c *actionFail) run(*env) error {
	ac, err := actionContext(c.ctx)
	if err != nil {
		return err
	}
	if err := ac.SetActionMessage(c.message); err != nil {
		return err
	}
	return ac.SetActionFailed()
}
