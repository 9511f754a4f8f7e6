package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Every setting of a subcommand is a flag. A flag not given on the command
// line is taken from the environment variable BAGKEEPER_<NAME> (the name in
// upper case, dashes as underscores), and failing that from the YAML file
// named by --config, whose keys are the flag names. Command line beats
// environment beats file beats default.

// usageError is a mistake in how bagkeeper was called (exit status 2).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErrorf(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// envName is the environment variable that sets flag name.
func envName(name string) string {
	return "BAGKEEPER_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// otherSettings are the flags of bagkeeper's commands other than run. A
// pod's environment may set them for the admin commands run in it (a test
// keeps the list complete).
var otherSettings = []string{
	"admin-socket", "data-dir", "config", "timeout", "format", "url", "check", "relation", "stale", "app",
	"endpoint", "interface", "peer", "remote-app", "remote-endpoint", "force",
	"background", "params", "wait", "unit", "show", "plan", "at-next-start", "survivors", "plan-digest",
	"agent-socket", "charm-dir", "hook-tool", "log-level", "name", "tools-dir", "to", "charm", "charm-to",
	"all", "no-tail", "follow", "f", "hook-nice",
}

// checkEnvNames refuses a BAGKEEPER_ variable that sets nothing, as the
// config file refuses an unknown key: a misspelt setting must not be
// silently ignored.
func checkEnvNames(e *env, fs *flag.FlagSet) error {
	if e.environ == nil {
		return nil
	}
	known := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { known[envName(f.Name)] = true })
	for _, n := range otherSettings {
		known[envName(n)] = true
	}
	var errs []error
	for _, kv := range e.environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "BAGKEEPER_") || known[name] {
			continue
		}
		msg := fmt.Sprintf("environment variable %s sets nothing: no setting is named so", name)
		if near := nearest(name, known); near != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", near)
		}
		errs = append(errs, usageErrorf("%s", msg))
	}
	return errors.Join(errs...)
}

// nearest returns the name in names closest to s, if it is close.
func nearest(s string, names map[string]bool) string {
	best, bestD := "", 4
	for n := range names {
		if d := editDistance(s, n); d < bestD || d == bestD && n < best {
			best, bestD = n, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// loadSettings parses args into fs, then fills the flags not given from
// the environment and the config file. It returns the positional args.
func loadSettings(fs *flag.FlagSet, args []string, lookupEnv func(string) (string, bool)) ([]string, error) {
	positional, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, &usageError{msg: err.Error()}
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] {
			return
		}
		if v, ok := lookupEnv(envName(f.Name)); ok {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, usageErrorf("environment variable %s=%q: %v", envName(f.Name), v, err))
				return
			}
			given[f.Name] = true
		}
	})
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if cf := fs.Lookup("config"); cf != nil && cf.Value.String() != "" {
		if err := applyConfigFile(fs, cf.Value.String(), given); err != nil {
			return nil, err
		}
	}
	return positional, nil
}

// parseInterspersed parses flags that may come before or after the
// positional arguments ("unit remove app/3 --admin-socket S"); "--" ends
// the flags.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

func applyConfigFile(fs *flag.FlagSet, path string, given map[string]bool) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return usageErrorf("config file: %v", err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		return usageErrorf("config file %s is not a YAML map of settings: %v", path, err)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		f := fs.Lookup(k)
		if f == nil || k == "config" {
			if fs.Name() != "run" {
				// The sidecar's file, read by an admin command for where
				// the sidecar is (data-dir, admin-socket): the rest is
				// the sidecar's business.
				continue
			}
			return usageErrorf("config file %s: unknown setting %q (settings are the flag names of %q; see --help)", path, k, fs.Name())
		}
		if given[k] {
			continue
		}
		v, err := scalarString(m[k])
		if err != nil {
			return usageErrorf("config file %s: setting %q: %v", path, k, err)
		}
		if err := fs.Set(k, v); err != nil {
			return usageErrorf("config file %s: setting %q=%q: %v", path, k, v, err)
		}
	}
	return nil
}

// scalarString renders a YAML value as the flag text it stands for; a list
// becomes a comma-separated value.
func scalarString(v any) (string, error) {
	switch x := v.(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	case bool, int, int64, uint64, float64:
		return fmt.Sprint(x), nil
	case []any:
		parts := make([]string, 0, len(x))
		for _, e := range x {
			s, err := scalarString(e)
			if err != nil {
				return "", err
			}
			if strings.Contains(s, ",") {
				return "", fmt.Errorf("list item %q contains a comma", s)
			}
			parts = append(parts, s)
		}
		return strings.Join(parts, ","), nil
	}
	return "", fmt.Errorf("expected a string, number, boolean or list, got %T", v)
}

// listFlag is a comma-separated list flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	*l = nil
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}

// printDefaults writes the flags of fs with their environment variables.
func printDefaults(fs *flag.FlagSet, w *strings.Builder) {
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		fmt.Fprintf(w, "  --%s", f.Name)
		if name != "" {
			fmt.Fprintf(w, " %s", name)
		}
		fmt.Fprintf(w, "\n      %s", strings.ReplaceAll(usage, "\n", "\n      "))
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, "\n      env %s\n", envName(f.Name))
	})
}
