package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// Charm is what the agent reads of the charm directory.
type Charm struct {
	Dir  string
	Name string
	// Peers maps each peer endpoint of metadata.yaml to its interface.
	Peers map[string]string
	// Provides maps each provides endpoint of metadata.yaml to its
	// interface.
	Provides map[string]string
	// Requires maps each requires endpoint of metadata.yaml to its
	// interface.
	Requires map[string]string
	// Endpoints holds every endpoint name (peers, provides, requires).
	Endpoints map[string]bool
	// Options are the options of config.yaml.
	Options map[string]Option
	// Actions are the actions of actions.yaml (charm_actions.go).
	Actions map[string]*ActionSpec
}

// Option is one charm config option.
type Option struct {
	// Type is string, int, float, boolean or secret.
	Type    string
	Default any
}

type metadataFile struct {
	Name     string                  `yaml:"name"`
	Peers    map[string]endpointSpec `yaml:"peers"`
	Provides map[string]endpointSpec `yaml:"provides"`
	Requires map[string]endpointSpec `yaml:"requires"`
}

type endpointSpec struct {
	Interface string `yaml:"interface"`
}

// LoadCharm reads metadata.yaml (required) and config.yaml (optional).
func LoadCharm(dir string) (*Charm, error) {
	b, err := os.ReadFile(filepath.Join(dir, "metadata.yaml"))
	if err != nil {
		return nil, fmt.Errorf("charm directory %s: %w (a charm needs a metadata.yaml)", dir, err)
	}
	var md metadataFile
	if err := yaml.Unmarshal(b, &md); err != nil {
		return nil, fmt.Errorf("charm directory %s: metadata.yaml: %w", dir, err)
	}
	if md.Name == "" {
		return nil, fmt.Errorf("charm directory %s: metadata.yaml has no name", dir)
	}
	c := &Charm{
		Dir: dir, Name: md.Name,
		Peers: map[string]string{}, Provides: map[string]string{}, Requires: map[string]string{},
		Endpoints: map[string]bool{}, Options: map[string]Option{},
	}
	declaredIn := map[string]string{} // endpoint -> the first section declaring it
	for _, sec := range []struct {
		name, kind string // the metadata.yaml key; what its endpoints are called
		specs      map[string]endpointSpec
		out        map[string]string
	}{
		{"peers", "peer", md.Peers, c.Peers},
		{"provides", "provides", md.Provides, c.Provides},
		{"requires", "requires", md.Requires, c.Requires},
	} {
		for _, ep := range slices.Sorted(maps.Keys(sec.specs)) {
			if first, ok := declaredIn[ep]; ok {
				return nil, fmt.Errorf("charm directory %s: metadata.yaml: endpoint %q is declared in both %s and %s; each endpoint name must be used once", dir, ep, first, sec.name)
			}
			declaredIn[ep] = sec.name
			iface := sec.specs[ep].Interface
			if iface == "" {
				return nil, fmt.Errorf("charm directory %s: metadata.yaml: %s endpoint %q has no interface", dir, sec.kind, ep)
			}
			sec.out[ep] = iface
			c.Endpoints[ep] = true
		}
	}
	if err := c.loadActions(); err != nil { // charm_actions.go
		return nil, err
	}
	b, err = os.ReadFile(filepath.Join(dir, "config.yaml"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return c, nil
	case err != nil:
		return nil, fmt.Errorf("charm directory %s: %w", dir, err)
	}
	var cf struct {
		Options map[string]struct {
			Type    string `yaml:"type"`
			Default any    `yaml:"default"`
		} `yaml:"options"`
	}
	if err := yaml.Unmarshal(b, &cf); err != nil {
		return nil, fmt.Errorf("charm directory %s: config.yaml: %w", dir, err)
	}
	for name, o := range cf.Options {
		typ := o.Type
		if typ == "" {
			typ = "string"
		}
		def, err := convertOption(typ, o.Default)
		if err != nil {
			return nil, fmt.Errorf("charm directory %s: config.yaml: option %q default: %w", dir, name, err)
		}
		c.Options[name] = Option{Type: typ, Default: def}
	}
	return c, nil
}

// convertOption turns a YAML value into the Go type of an option type:
// string, int64, float64 or bool; nil stays nil.
func convertOption(typ string, v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	switch typ {
	case "string", "secret":
		switch x := v.(type) {
		case string:
			return x, nil
		case int, int64, float64, bool:
			return fmt.Sprint(x), nil
		}
	case "int":
		switch x := v.(type) {
		case int:
			return int64(x), nil
		case int64:
			return x, nil
		case float64:
			if x == math.Trunc(x) {
				return int64(x), nil
			}
		case string:
			if n, err := strconv.ParseInt(x, 10, 64); err == nil {
				return n, nil
			}
		}
	case "float":
		switch x := v.(type) {
		case int:
			return float64(x), nil
		case int64:
			return float64(x), nil
		case float64:
			return x, nil
		case string:
			if f, err := strconv.ParseFloat(x, 64); err == nil {
				return f, nil
			}
		}
	case "boolean":
		switch x := v.(type) {
		case bool:
			return x, nil
		case string:
			if b, err := strconv.ParseBool(x); err == nil {
				return b, nil
			}
		}
	default:
		return nil, fmt.Errorf("unknown option type %q", typ)
	}
	return nil, fmt.Errorf("%v is not a valid %s", v, typ)
}

// EffectiveConfig is the charm config a unit sees: every option of
// config.yaml with its default, overridden by the operator's settings.
// Settings for options the charm does not declare are an error.
func (c *Charm) EffectiveConfig(settings map[string]any) (map[string]any, error) {
	out := make(map[string]any, len(c.Options))
	for name, o := range c.Options {
		out[name] = o.Default
	}
	names := make([]string, 0, len(settings))
	for name := range settings {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		o, ok := c.Options[name]
		if !ok {
			return nil, fmt.Errorf("unknown option %q (config.yaml declares %d options)", name, len(c.Options))
		}
		v, err := convertOption(o.Type, settings[name])
		if err != nil {
			return nil, fmt.Errorf("option %q: %w", name, err)
		}
		out[name] = v
	}
	return out, nil
}

// ConfigHash identifies a config: equal configs, equal hashes.
func ConfigHash(cfg map[string]any) string {
	b, _ := json.Marshal(cfg) // map keys are sorted
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// ErrNoConfigFile is returned, wrapped, by ReadConfigFile for a file that
// does not exist.
var ErrNoConfigFile = errors.New("no such file")

// ReadConfigFile reads the operator's config settings: a YAML map of option
// names to values. No path means no settings; a path whose file does not
// exist is an error that wraps ErrNoConfigFile.
func ReadConfigFile(path string) (map[string]any, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("charm config %s: %w", path, ErrNoConfigFile)
	}
	if err != nil {
		return nil, fmt.Errorf("charm config %s: %w", path, err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("charm config %s is not a YAML map of option names to values: %w", path, err)
	}
	return m, nil
}
