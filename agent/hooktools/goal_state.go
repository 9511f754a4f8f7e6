package hooktools

// goalState is goal-state.
type goalState struct {
	ctx Context
	out output
}

func newGoalState(ctx Context) command { return &goalState{ctx: ctx} }

func (c *goalState) info() *info {
	return &info{
		name:    "goal-state",
		purpose: "Print the units and relations this unit is meant to have.",
		doc: `
goal-state prints the units of this application and, per relation endpoint,
the related units and applications that the model is meant to have, each
with its status and the time the status was set.
`,
	}
}

func (c *goalState) setFlags(fs *flagSet) {
	c.out.addFlags(fs, "yaml", "yaml", "json")
}

func (c *goalState) init(args []string) error { return checkEmpty(args) }

// goalStatusDisplay is one entry of goal-state's output.
type goalStatusDisplay struct {
	Status string `json:"status" yaml:"status"`
	Since  string `json:"since,omitempty" yaml:"since,omitempty"`
}

// goalStateDisplay is goal-state's output.
type goalStateDisplay struct {
	Units     map[string]goalStatusDisplay            `json:"units" yaml:"units"`
	Relations map[string]map[string]goalStatusDisplay `json:"relations" yaml:"relations"`
}

// goalUnits converts one map of goal statuses; since is formatted in UTC as
// "2006-01-02 15:04:05Z" and left out when unknown.
func goalUnits(units map[string]GoalStatus) map[string]goalStatusDisplay {
	out := make(map[string]goalStatusDisplay, len(units))
	for name, s := range units {
		d := goalStatusDisplay{Status: s.Status}
		if s.Since != nil {
			d.Since = s.Since.UTC().Format("2006-01-02 15:04:05Z")
		}
		out[name] = d
	}
	return out
}

func (c *goalState) run(e *env) error {
	gs, err := c.ctx.GoalState()
	if err != nil {
		return err
	}
	d := goalStateDisplay{
		Units:     goalUnits(gs.Units),
		Relations: make(map[string]map[string]goalStatusDisplay, len(gs.Relations)),
	}
	for endpoint, units := range gs.Relations {
		d.Relations[endpoint] = goalUnits(units)
	}
	return c.out.write(e, d)
}
