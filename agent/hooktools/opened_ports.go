package hooktools

import (
	"fmt"
	"sort"
	"strings"
)

// openedPorts is opened-ports [--endpoints].
type openedPorts struct {
	ctx       Context
	endpoints bool
	out       output
}

func newOpenedPorts(ctx Context) command { return &openedPorts{ctx: ctx} }

func (c *openedPorts) info() *info {
	return &info{
		name:    "opened-ports",
		purpose: "List the ports this unit has opened.",
		doc: `
opened-ports lists the ports and port ranges this unit has opened, as
"80/tcp" or "8000-8099/udp", including those opened or closed earlier in
this hook. With --endpoints, each entry is followed by the endpoints it
applies to, or (*) when it applies to all of them.
`,
		examples: `
    opened-ports --endpoints
`,
	}
}

func (c *openedPorts) setFlags(fs *flagSet) {
	c.out.addDefaultFlags(fs)
	fs.boolVar(&c.endpoints, "Show the endpoints of each range", "endpoints")
}

func (c *openedPorts) init(args []string) error { return checkEmpty(args) }

func (c *openedPorts) run(e *env) error {
	byRange := make(map[PortRange]map[string]bool)
	for endpoint, ranges := range c.ctx.OpenedPorts() {
		for _, p := range ranges {
			if byRange[p] == nil {
				byRange[p] = make(map[string]bool)
			}
			byRange[p][endpoint] = true
		}
	}
	ranges := make([]PortRange, 0, len(byRange))
	for p := range byRange {
		ranges = append(ranges, p)
	}
	sortPortRanges(ranges)
	lines := make([]string, len(ranges))
	for i, p := range ranges {
		lines[i] = p.String()
		if !c.endpoints {
			continue
		}
		endpoints := byRange[p]
		descr := "*"
		if !endpoints[""] {
			var names []string
			for name := range endpoints {
				names = append(names, name)
			}
			sort.Strings(names)
			descr = strings.Join(names, ", ")
		}
		lines[i] = fmt.Sprintf("%s (%s)", p, descr)
	}
	return c.out.write(e, lines)
}
