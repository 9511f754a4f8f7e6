package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
)

// ActionSpec is one action of the charm's actions.yaml. As in Juju, the
// action's entry is a JSON schema (draft 4) of an object: its params are
// the object's properties, and other keys (required, title,
// additionalProperties, ...) are schema keywords; additionalProperties is
// false unless the charm says otherwise.
type ActionSpec struct {
	Name        string
	Description string
	// Schema is the JSON schema the parameters are validated against.
	Schema map[string]any

	compiled *jsonschema.Schema
}

// actionNameRule is Juju's rule for action names.
var actionNameRule = regexp.MustCompile(`^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$`)

// loadActions reads actions.yaml (optional) into c.Actions.
func (c *Charm) loadActions() error {
	c.Actions = map[string]*ActionSpec{}
	b, err := os.ReadFile(filepath.Join(c.Dir, "actions.yaml"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("charm directory %s: %w", c.Dir, err)
	}
	specs, err := ParseActions(b)
	if err != nil {
		return fmt.Errorf("charm directory %s: actions.yaml: %w", c.Dir, err)
	}
	c.Actions = specs
	return nil
}

// ParseActions parses an actions.yaml document.
func ParseActions(data []byte) (map[string]*ActionSpec, error) {
	var doc map[string]map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	out := map[string]*ActionSpec{}
	for _, name := range slices.Sorted(maps.Keys(doc)) {
		if !actionNameRule.MatchString(name) {
			return nil, fmt.Errorf("bad action name %s", name)
		}
		if strings.HasPrefix(name, "juju-") {
			return nil, fmt.Errorf("cannot use action name %s: juju- prefix is reserved", name)
		}
		spec := &ActionSpec{Name: name, Description: "No description"}
		schema := map[string]any{
			"description":          spec.Description,
			"type":                 "object",
			"title":                name,
			"properties":           map[string]any{},
			"additionalProperties": false,
		}
		for key, value := range doc[name] {
			switch key {
			case "description", "title":
				s, ok := value.(string)
				if !ok {
					return nil, fmt.Errorf("action %s: value for schema key %q must be a string", name, key)
				}
				schema[key] = s
				if key == "description" {
					spec.Description = s
				}
			case "required":
				if _, ok := value.([]any); !ok {
					return nil, fmt.Errorf("action %s: value for schema key %q must be a YAML list", name, key)
				}
				schema[key] = value
			case "parallel", "execution-group":
				// Juju's scheduling hints: actions run one at a time here.
			case "params":
				if value == nil {
					continue
				}
				m, ok := value.(map[string]any)
				if !ok {
					return nil, fmt.Errorf("action %s: params failed to parse as a map", name)
				}
				schema["properties"] = m
			default:
				schema[key] = value
			}
		}
		if err := checkSchemaKeys(schema); err != nil {
			return nil, fmt.Errorf("action %s: %w", name, err)
		}
		compiled, err := compileSchema(name, schema)
		if err != nil {
			return nil, fmt.Errorf("invalid params schema for action schema %s: %w", name, err)
		}
		spec.Schema, spec.compiled = schema, compiled
		out[name] = spec
	}
	return out, nil
}

// checkSchemaKeys refuses what Juju refuses in an action's schema:
// references to other documents.
func checkSchemaKeys(v any) error {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if k == "$ref" || k == "$schema" {
				return fmt.Errorf("schema key %q not compatible with this version of juju", k)
			}
			if err := checkSchemaKeys(x); err != nil {
				return err
			}
		}
	case []any:
		for _, x := range v {
			if err := checkSchemaKeys(x); err != nil {
				return err
			}
		}
	}
	return nil
}

func compileSchema(name string, schema map[string]any) (*jsonschema.Schema, error) {
	doc, err := toJSONValue(schema)
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft4)
	url := "action:" + name
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

// toJSONValue turns v into what encoding/json would decode it as (numbers
// as json.Number), the form the validator takes.
func toJSONValue(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return jsonschema.UnmarshalJSON(bytes.NewReader(b))
}

// ValidateParams checks params against the action's schema and returns
// them as a JSON object with the schema's defaults filled in, as Juju
// does when an action is queued.
func (s *ActionSpec) ValidateParams(params map[string]any) ([]byte, error) {
	if params == nil {
		params = map[string]any{}
	}
	doc, err := toJSONValue(params)
	if err != nil {
		return nil, fmt.Errorf("parameters: %w", err)
	}
	if err := s.compiled.Validate(doc); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("validation failed: %s", validationText(ve))
		}
		return nil, fmt.Errorf("validation failed: %w", err)
	}
	withDefaults := insertDefaults(s.Schema, doc.(map[string]any))
	return json.Marshal(withDefaults)
}

// validationText lists the leaf errors of a failed validation, each with
// where in the parameters it is ("(root)" for the parameters as a whole).
func validationText(ve *jsonschema.ValidationError) string {
	var msgs []string
	var visit func(u *jsonschema.OutputUnit)
	visit = func(u *jsonschema.OutputUnit) {
		if u.Error != nil && len(u.Errors) == 0 {
			loc := strings.TrimPrefix(u.InstanceLocation, "/")
			if loc == "" {
				loc = "(root)"
			}
			msgs = append(msgs, strings.ReplaceAll(loc, "/", ".")+": "+u.Error.String())
		}
		for i := range u.Errors {
			visit(&u.Errors[i])
		}
	}
	visit(ve.BasicOutput())
	sort.Strings(msgs)
	msgs = slices.Compact(msgs)
	if len(msgs) == 0 {
		return ve.Error()
	}
	return strings.Join(msgs, "; ")
}

// insertDefaults fills in the defaults of the schema's properties that
// params lack, recursing into object parameters that are given.
func insertDefaults(schema map[string]any, params map[string]any) map[string]any {
	props, _ := schema["properties"].(map[string]any)
	for name, p := range props {
		ps, ok := p.(map[string]any)
		if !ok {
			continue
		}
		v, given := params[name]
		if !given {
			if def, ok := ps["default"]; ok {
				params[name] = def
			}
			continue
		}
		if sub, ok := v.(map[string]any); ok {
			params[name] = insertDefaults(ps, sub)
		}
	}
	return params
}
