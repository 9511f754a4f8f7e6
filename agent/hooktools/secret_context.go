package hooktools

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	yaml "go.yaml.in/yaml/v2"
)

// SecretsContext is implemented by a Context that serves Juju secrets. It
// is optional: without it, every secret tool fails with
// ErrSecretsUnsupported. Secret ids are given and returned bare (the 20
// characters after "secret:"); the tools parse and print URIs.
type SecretsContext interface {
	// CreateSecret adds a secret owned by the application (owner
	// "application", leader only) or by this unit (owner "unit") and
	// returns its id.
	CreateSecret(owner string, args SecretUpdateArgs) (string, error)
	// GetSecret returns a secret's content, by id or (id "") by label.
	// A consumer gets the revision it follows (the latest the first time,
	// which it then follows); refresh moves it to the latest, peek reads
	// the latest once. A non-empty label with an id labels the secret for
	// this consumer.
	GetSecret(id, label string, refresh, peek bool) (map[string]string, error)
	// UpdateSecret changes a secret this unit manages: content makes a new
	// revision; nil fields are left as they are.
	UpdateSecret(id string, args SecretUpdateArgs) error
	// RemoveSecret removes one revision (revision > 0) or the whole secret.
	RemoveSecret(id string, revision int) error
	// SecretIDs returns the ids of the secrets this unit manages.
	SecretIDs() ([]string, error)
	// SecretInfo returns the metadata of a secret this unit manages, by id
	// or (id "") by label.
	SecretInfo(id, label string) (SecretInfo, error)
	// GrantSecret lets the remote application of a relation (or only
	// unit of it) read a secret; RevokeSecret withdraws it, from an
	// application or a unit (relationID -1: over every relation).
	GrantSecret(id string, relationID int, unit string) error
	RevokeSecret(id string, relationID int, app, unit string) error
}

// SecretUpdateArgs are the changes of secret-add and secret-set.
type SecretUpdateArgs struct {
	Content      map[string]string // nil: unchanged
	Label        *string
	Description  *string
	RotatePolicy *string
	Expire       *time.Time
}

// SecretInfo is what secret-info-get prints of a secret.
type SecretInfo struct {
	ID          string
	Revision    int
	Label       string
	Owner       string // "application" or "unit"
	Description string
	Rotation    string
	Expiry      *time.Time
	Rotates     *time.Time
	Access      []SecretAccess
}

// SecretAccess is one grant of a secret.
type SecretAccess struct {
	Target string
	Scope  string
	Role   string
}

// Errors of the secret tools.
var (
	// ErrSecretsUnsupported is the error of every secret tool when the
	// context serves no secrets.
	ErrSecretsUnsupported = errors.New("secrets are not supported by this agent")
	// ErrSecretNotFound is wrapped by the errors of a secret or label
	// that does not exist or that this unit may not see; its text ends in
	// "not found", as Juju's does (ops relies on it).
	ErrSecretNotFound = errors.New("not found")
)

// secretsOf returns the context's secrets, or ErrSecretsUnsupported.
func secretsOf(ctx Context) (SecretsContext, error) {
	if s, ok := ctx.(SecretsContext); ok {
		return s, nil
	}
	return nil, ErrSecretsUnsupported
}

// validSecretID is a Juju secret id: an xid in lower-case base32hex.
var validSecretID = regexp.MustCompile(`^[0-9a-v]{20}$`)

// parseSecretURI accepts what Juju's ParseURI accepts: "secret:ID",
// "secret://SOURCE/ID" or a bare ID. It returns the ID.
// secretURIArg parses the secret URI the tools that act on one secret
// take as their first argument, and returns the arguments after it.
func secretURIArg(args []string) (id string, rest []string, err error) {
	if len(args) < 1 {
		return "", nil, errors.New("missing secret URI")
	}
	id, err = parseSecretURI(args[0])
	return id, args[1:], err
}

func parseSecretURI(s string) (string, error) {
	notValid := fmt.Errorf("secret URI %q not valid", s)
	u, err := url.Parse(s)
	if err != nil {
		return "", notValid
	}
	if u.Scheme != "" && u.Scheme != "secret" {
		return "", fmt.Errorf("secret URI scheme %q not valid", u.Scheme)
	}
	spec := u.Opaque
	switch {
	case u.Scheme == "":
		spec = u.Path
	case spec == "":
		spec = strings.TrimPrefix(u.Path, "/")
	}
	if !validSecretID.MatchString(spec) {
		return "", notValid
	}
	return spec, nil
}

// SecretURI is the URI Juju prints for a secret id.
func SecretURI(id string) string { return "secret:" + id }

// validSecretKey is Juju's rule for the keys of a secret's content.
var validSecretKey = regexp.MustCompile(`^([a-z](?:-?[a-z0-9]){2,})$`)

// secretContent collects content arguments (key=value, key#base64=value,
// key#file=path) and the --file YAML, the way Juju's secret-add does.
// Base64 values are decoded: the context gets plain values.
type secretContent struct {
	args []string
	file string
}

func (c *secretContent) parse(e *env) (map[string]string, error) {
	out := map[string]string{}
	if c.file != "" {
		data, err := e.readFile(absPath(e.dir, c.file))
		if err != nil {
			return nil, err
		}
		m := map[string]string{}
		if err := yaml.Unmarshal(data, m); err != nil {
			return nil, fmt.Errorf("reading secret data from %s: %w", c.file, err)
		}
		for k, v := range m {
			if err := putSecretValue(out, k, v); err != nil {
				return nil, err
			}
		}
	}
	files := 0
	for _, arg := range c.args {
		k, v, ok := strings.Cut(arg, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf(`expected key=value format, got %q`, arg)
		}
		if key, isFile := strings.CutSuffix(k, "#file"); isFile {
			if files++; files > 1 || c.file != "" {
				return nil, errors.New("only one file (one key#file=PATH, or --file) per call is supported")
			}
			data, err := e.readFile(absPath(e.dir, v))
			if err != nil {
				return nil, err
			}
			k, v = key, string(data)
		}
		if err := putSecretValue(out, k, v); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func putSecretValue(out map[string]string, k, v string) error {
	if key, b64 := strings.CutSuffix(k, "#base64"); b64 {
		raw, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			return fmt.Errorf("invalid base64 value for key %q", key)
		}
		k, v = key, string(raw)
	}
	if !validSecretKey.MatchString(k) {
		return fmt.Errorf("key %q not valid", k)
	}
	out[k] = v
	return nil
}

// secretMeta is the metadata options of secret-add and secret-set.
type secretMeta struct {
	expireSpec, rotate, description, label string
	descriptionSet, labelSet               bool
	content                                secretContent
	expire                                 time.Time
}

// trackedString is a string option that remembers whether it was given.
type trackedString struct {
	p   *string
	set *bool
}

func (t trackedString) String() string { return *t.p }
func (t trackedString) Set(s string) error {
	*t.p, *t.set = s, true
	return nil
}

func (m *secretMeta) setFlags(fs *flagSet) {
	fs.stringVar(&m.expireSpec, "", "either a duration or time when the secret should expire", "expire")
	fs.stringVar(&m.rotate, "", "the secret rotation policy", "rotate")
	fs.add(trackedString{&m.description, &m.descriptionSet}, "the secret description", "description")
	fs.add(trackedString{&m.label, &m.labelSet}, "a label used to identify the secret in hooks", "label")
	fs.stringVar(&m.content.file, "", "a YAML file containing secret key values", "file")
}

var rotatePolicies = []string{"never", "hourly", "daily", "weekly", "monthly", "quarterly", "yearly"}

// init checks the options as Juju does. now resolves an expiry given as a
// duration.
func (m *secretMeta) init(now time.Time, args []string) error {
	if m.expireSpec != "" {
		t, err := time.Parse(time.RFC3339, m.expireSpec)
		if err != nil {
			t, err = time.Parse("2006-01-02T15:04:05", m.expireSpec)
		}
		if err != nil {
			d, err := time.ParseDuration(m.expireSpec)
			if err != nil {
				return fmt.Errorf("expire time or duration %q not valid", m.expireSpec)
			}
			if d <= 0 {
				return fmt.Errorf("negative expire duration %q not valid", m.expireSpec)
			}
			t = now.Add(d)
		}
		m.expire = t.UTC()
	}
	if m.rotate != "" && !slices.Contains(rotatePolicies, m.rotate) {
		return fmt.Errorf("rotate policy %q not valid", m.rotate)
	}
	m.content.args = args
	return nil
}

// updateArgs builds the context's arguments; content is nil when none was
// given.
func (m *secretMeta) updateArgs(content map[string]string) SecretUpdateArgs {
	var a SecretUpdateArgs
	if len(content) > 0 {
		a.Content = content
	}
	if m.labelSet {
		a.Label = &m.label
	}
	if m.descriptionSet {
		a.Description = &m.description
	}
	if m.rotate != "" {
		a.RotatePolicy = &m.rotate
	}
	if !m.expire.IsZero() {
		a.Expire = &m.expire
	}
	return a
}
