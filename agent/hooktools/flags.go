package hooktools

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// This file reimplements the option parsing of github.com/juju/gnuflag as
// Juju's hook tools use it: interspersed options, "--" ending options, "-"
// and "" as positional arguments, runs of single-letter options ("-abc"),
// "-rX" as "-r X", "--name=value", and boolean options that take a value
// only after "=" ("--app=False"). Messages call options "option", as Juju's
// hook tools do.

// flagKnownAs is the word Juju's hook tools use for a flag in messages.
const flagKnownAs = "option"

// errHelp is returned by flagSet.parse for -h or --help.
var errHelp = errors.New(flagKnownAs + ": help requested")

// flagValue is what an option stores its argument into.
type flagValue interface {
	// String returns the current value; at declaration time, the default
	// shown in help.
	String() string
	// Set parses and stores an argument; its error is reported as
	// `invalid value "<arg>" for option <name>: <error>`.
	Set(arg string) error
}

// boolValue is a boolean option: it takes no argument, except one given
// with "=" (strconv.ParseBool syntax).
type boolValue struct{ p *bool }

func (b boolValue) String() string { return strconv.FormatBool(*b.p) }

func (b boolValue) Set(s string) error {
	v, err := strconv.ParseBool(s)
	*b.p = v
	return err
}

// stringValue is a plain string option; help shows its default quoted.
type stringValue struct{ p *string }

func (s stringValue) String() string { return *s.p }

func (s stringValue) Set(v string) error {
	*s.p = v
	return nil
}

// option is one option with all its names.
type option struct {
	names []string // shortest first
	usage string
	value flagValue
	def   string // default as shown in help
}

// flagSet is the set of options of one tool.
type flagSet struct {
	opts   []*option
	byName map[string]*option
}

func newFlagSet() *flagSet {
	return &flagSet{byName: make(map[string]*option)}
}

// add declares an option with one or more names ("r", "relation").
func (fs *flagSet) add(v flagValue, usage string, names ...string) {
	names = append([]string(nil), names...)
	sort.SliceStable(names, func(i, j int) bool { return len(names[i]) < len(names[j]) })
	o := &option{names: names, usage: usage, value: v, def: v.String()}
	for _, n := range names {
		if _, dup := fs.byName[n]; dup {
			panic("hooktools: option declared twice: " + n)
		}
		fs.byName[n] = o
	}
	fs.opts = append(fs.opts, o)
}

// boolVar declares a boolean option with default false.
func (fs *flagSet) boolVar(p *bool, usage string, names ...string) {
	*p = false
	fs.add(boolValue{p}, usage, names...)
}

// stringVar declares a string option with a default.
func (fs *flagSet) stringVar(p *string, def, usage string, names ...string) {
	*p = def
	fs.add(stringValue{p}, usage, names...)
}

// dashed returns an option name as typed: "-r", "--relation".
func dashed(name string) string {
	if len(name) > 1 {
		return "--" + name
	}
	return "-" + name
}

// parse parses args and returns the positional arguments (nil when there
// are none). It returns errHelp for -h/--help.
func (fs *flagSet) parse(args []string) ([]string, error) {
	var positional []string
	for len(args) > 0 {
		a := args[0]
		if a == "-" || a == "" || a[0] != '-' {
			positional = append(positional, a)
			args = args[1:]
			continue
		}
		if a == "--" {
			positional = append(positional, args[1:]...)
			break
		}
		args = args[1:]
		if a[1] == '-' {
			name, val, hasVal := strings.Cut(a[2:], "=")
			if hasVal && name == "" {
				return nil, fmt.Errorf("empty %s in argument %q", flagKnownAs, a)
			}
			rest := ""
			if hasVal {
				rest = "=" + val
			}
			var err error
			if args, _, err = fs.set(name, rest, true, args); err != nil {
				return nil, err
			}
			continue
		}
		// A run of single-letter options; an option that takes a value
		// takes the rest of the run, or else the next argument.
		run := a[1:]
		for run != "" {
			_, n := utf8.DecodeRuneInString(run)
			name := run[:n]
			var err error
			if args, run, err = fs.set(name, run[n:], false, args); err != nil {
				return nil, err
			}
		}
	}
	return positional, nil
}

// set handles one option occurrence. rest is what follows the option name
// in its argument ("=value" for a long option, the rest of the run for a
// short one); args are the arguments not yet parsed. It returns the
// remaining args and the part of rest not consumed.
func (fs *flagSet) set(name, rest string, long bool, args []string) ([]string, string, error) {
	o, ok := fs.byName[name]
	if !ok {
		if name == "help" || name == "h" {
			return nil, "", errHelp
		}
		return nil, "", fmt.Errorf("%s provided but not defined: %s", flagKnownAs, dashed(name))
	}
	if _, isBool := o.value.(boolValue); isBool && !strings.HasPrefix(rest, "=") {
		_ = o.value.Set("true")
		return args, rest, nil
	}
	var value string
	switch {
	case rest != "":
		value = rest
		if long {
			value = rest[1:]
		}
		rest = ""
	case len(args) > 0:
		value, args = args[0], args[1:]
	default:
		return nil, "", fmt.Errorf("%s needs an argument: %s", flagKnownAs, dashed(name))
	}
	if err := o.value.Set(value); err != nil {
		return nil, "", fmt.Errorf("invalid value %q for %s %s: %v", value, flagKnownAs, dashed(name), err)
	}
	return args, rest, nil
}

// printDefaults writes the option list of help: options sorted by their
// shortest name, names of one option joined, the default and the usage.
func (fs *flagSet) printDefaults(w io.Writer) {
	opts := append([]*option(nil), fs.opts...)
	sort.Slice(opts, func(i, j int) bool { return opts[i].names[0] < opts[j].names[0] })
	for _, o := range opts {
		var names []string
		for _, n := range o.names {
			names = append(names, dashed(n))
		}
		line := strings.Join(names, ", ")
		if _, isString := o.value.(stringValue); isString {
			fmt.Fprintf(w, "%s (= %q)\n    %s\n", line, o.def, o.usage)
		} else {
			fmt.Fprintf(w, "%s  (= %s)\n    %s\n", line, o.def, o.usage)
		}
	}
}
