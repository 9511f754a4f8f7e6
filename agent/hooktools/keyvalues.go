package hooktools

import (
	"fmt"
	"sort"
	"strings"
	"unicode"

	yaml "go.yaml.in/yaml/v2"
)

// parseKeyValues parses key=value arguments as Juju's keyvalues.Parse with
// empty values allowed: an empty argument is skipped, the argument is split
// at its first "=", key and value are trimmed of white space, the key must
// not be empty and must not repeat.
func parseKeyValues(args []string) (map[string]string, error) {
	result := make(map[string]string)
	for _, kv := range args {
		if kv == "" {
			continue
		}
		key, value, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf(`expected "key=value", got %q`, kv)
		}
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		if key == "" {
			return nil, fmt.Errorf(`expected "key=value", got "%s=%s"`, key, value)
		}
		if _, dup := result[key]; dup {
			return nil, fmt.Errorf("key %q specified more than once", key)
		}
		result[key] = value
	}
	return result, nil
}

// checkKey refuses a relation data key that is empty or has "=" or white
// space in it. A key=value argument cannot name such a key (its key ends
// at the first "=" and is trimmed of white space), so one written with
// --file could not be deleted with relation-set KEY= afterwards; white
// space inside a key is refused in arguments too, for one rule
// everywhere. Juju's relation-set has no rule of its own for keys; the
// text is that of Juju's leader-get, which refuses a key with "=".
func checkKey(key string) error {
	if key == "" || strings.ContainsRune(key, '=') || strings.IndexFunc(key, unicode.IsSpace) >= 0 {
		return fmt.Errorf("invalid key %q", key)
	}
	return nil
}

// checkKeys checks the keys of settings with checkKey, in sorted order.
func checkKeys(settings map[string]string) error {
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := checkKey(k); err != nil {
			return err
		}
	}
	return nil
}

// fileValue is the --file option: a path, or "-" for stdin. Help shows its
// default unquoted, as Juju's file options do.
type fileValue struct{ path string }

func (f *fileValue) String() string { return f.path }

func (f *fileValue) Set(s string) error {
	f.path = s
	return nil
}

// read returns the contents of the file, or stdin for "-". The client
// reads the file, in the hook's file system (see files.go).
func (f *fileValue) read(e *env) ([]byte, error) {
	if f.path == "-" {
		return e.readStdin()
	}
	return e.readFile(absPath(e.dir, f.path))
}

// readSettings reads the --file option (if given) as a YAML (or JSON) map
// of strings, the way Juju does with yaml.v2, and lays overrides over it.
// Without --file it returns overrides.
func readSettings(e *env, file *fileValue, overrides map[string]string) (map[string]string, error) {
	if file.path == "" {
		return overrides, nil
	}
	data, err := file.read(e)
	if err != nil {
		return nil, err
	}
	// Unmarshalling into the map itself (not a pointer to it) is what Juju
	// does: a document that is null leaves the map empty instead of nil.
	settings := make(map[string]string)
	if err := yaml.Unmarshal(data, settings); err != nil {
		return nil, err
	}
	for k, v := range overrides {
		settings[k] = v
	}
	return settings, nil
}
