package hooktools

import (
	"bytes"
	"fmt"
	"strings"
)

// info is the documentation of a tool, printed by --help.
type info struct {
	name     string
	args     string // positional arguments, e.g. "<key> [<unit id>]"
	purpose  string // one line
	doc      string // details
	examples string // printed verbatim
}

// help renders the help text in the layout of Juju's command framework:
//
//	Usage: <name> [options] <args>
//
//	Summary:
//	<purpose>
//
//	Options:
//	<option lines>
//
//	Details:
//	<doc>
//
//	Examples:
//	<examples>
func (i *info) help(fs *flagSet) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "Usage: %s", i.name)
	hasOptions := len(fs.opts) > 0
	if hasOptions {
		fmt.Fprintf(&b, " [%ss]", flagKnownAs)
	}
	if i.args != "" {
		fmt.Fprintf(&b, " %s", i.args)
	}
	b.WriteString("\n")
	if i.purpose != "" {
		fmt.Fprintf(&b, "\nSummary:\n%s\n", strings.TrimSpace(i.purpose))
	}
	if hasOptions {
		fmt.Fprintf(&b, "\n%ss:\n", strings.ToUpper(flagKnownAs[:1])+flagKnownAs[1:])
		fs.printDefaults(&b)
	}
	if i.doc != "" {
		fmt.Fprintf(&b, "\nDetails:\n%s\n", strings.TrimSpace(i.doc))
	}
	if i.examples != "" {
		fmt.Fprintf(&b, "\nExamples:\n%s", i.examples)
	}
	return b.Bytes()
}
