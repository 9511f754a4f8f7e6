package hooktools

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	yaml "go.yaml.in/yaml/v2"
)

// The formatters below reproduce Juju's (internal/cmd/output.go) byte for
// byte: yaml is yaml.v2 output with exactly one trailing newline, json is
// encoding/json plus a newline, and smart prints strings, string lists and
// booleans plainly and everything else as yaml.

// formatYAML formats v as YAML; nil prints nothing.
func formatYAML(v any) ([]byte, error) {
	if v == nil {
		return nil, nil
	}
	out, err := yaml.Marshal(v)
	if err != nil {
		return nil, err
	}
	for i := len(out) - 1; i > 0 && out[i] == '\n'; i-- {
		out = out[:i]
	}
	if len(out) == 0 {
		return nil, nil
	}
	return append(out, '\n'), nil
}

// formatJSON formats v as compact JSON (map keys sorted) plus a newline;
// nil prints "null".
func formatJSON(v any) ([]byte, error) {
	out, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// formatSmart prints a string as is, a []string one item per line, a bool
// as True or False, and anything else as YAML. nil, an empty string and an
// empty list print nothing.
func formatSmart(v any) ([]byte, error) {
	var s string
	switch v := v.(type) {
	case nil:
		return nil, nil
	case string:
		s = v
	case []string:
		s = strings.Join(v, "\n")
	case bool:
		s = "False"
		if v {
			s = "True"
		}
	default:
		return formatYAML(v)
	}
	if s == "" {
		return nil, nil
	}
	return []byte(s + "\n"), nil
}

// formatterFor returns the formatter of a format name.
func formatterFor(name string) func(any) ([]byte, error) {
	switch name {
	case "json":
		return formatJSON
	case "yaml":
		return formatYAML
	default:
		return formatSmart
	}
}

// formatValue is the --format option: one of a fixed set of names.
type formatValue struct {
	name    string
	choices []string // sorted
}

func (f *formatValue) String() string { return f.name }

func (f *formatValue) Set(s string) error {
	for _, c := range f.choices {
		if c == s {
			f.name = s
			return nil
		}
	}
	return fmt.Errorf("unknown format %q", s)
}

// output is the --format and -o/--output options of a tool that prints a
// value.
type output struct {
	format formatValue
	path   string
}

// addFlags declares --format (default def, choices as given) and
// -o/--output.
func (o *output) addFlags(fs *flagSet, def string, choices ...string) {
	choices = append([]string(nil), choices...)
	sort.Strings(choices)
	o.format = formatValue{name: def, choices: choices}
	fs.add(&o.format, "Specify output format ("+strings.Join(choices, "|")+")", "format")
	fs.stringVar(&o.path, "", "Specify an output file", "o", "output")
}

// addDefaultFlags declares the usual smart/yaml/json output options.
func (o *output) addDefaultFlags(fs *flagSet) {
	o.addFlags(fs, "smart", "smart", "yaml", "json")
}

// write formats v and writes it to stdout, or to the file named by
// -o/--output (relative to the caller's directory), which then holds
// exactly the bytes stdout would have held. The client writes that file,
// in the hook's file system (see files.go).
func (o *output) write(e *env, v any) error {
	out, err := formatterFor(o.format.name)(v)
	if err != nil {
		return err
	}
	if o.path == "" {
		e.stdout.Write(out)
		return nil
	}
	return e.writeFile(absPath(e.dir, o.path), out)
}
