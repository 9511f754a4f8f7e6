// Package relconf reads a sidecar's relations file: the endpoints its
// application offers to other applications, and the other applications'
// offers it relates to.
//
// The file is YAML, usually mounted from a ConfigMap (the caller watches it
// and loads it again when it changes):
//
//	# This application offers its endpoints to other applications:
//	offers:
//	  - endpoint: db              # a provides (or requires) endpoint of metadata.yaml
//	    consumers: [web, api]     # the applications allowed to relate to it
//	    token-file: /etc/bagkeeper/offers/db.token   # optional
//	# This application consumes other applications' offers:
//	relations:
//	  - endpoint: database        # a requires (or provides) endpoint of metadata.yaml
//	    app: pg                   # the remote application
//	    offer: db                 # the endpoint the remote application offers
//	    interface: pgsql          # optional; must be the endpoint's interface
//	    addresses: [pg-0.pg:7402, pg.default.svc:7402]
//	    token-file: /etc/bagkeeper/relations/pg.token   # optional
//
// An offer's token-file holds the token a consumer must present when it does
// not connect with TLS; a relation's token-file holds the token of the offer
// it relates to. Token files are read when the relations file is, and their
// trailing white space is dropped.
//
// The rules: an endpoint is one of the charm's provides or requires
// endpoints (peer endpoints are not declared here: the agent creates peer
// relations from metadata.yaml); consumers and app are valid application
// names other than this application's, each consumer listed once; offer is
// a valid endpoint name; addresses are host:port with a port from 1 to
// 65535, each listed once; a token-file is the absolute path of a file that
// is not empty. An endpoint is offered at most once, and relates to a remote
// application at most once. Fields the file does not have are refused. An
// empty file, or one with only comments, declares nothing.
package relconf

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/bagkeeper/bagkeeper/agent"
	"github.com/bagkeeper/bagkeeper/raftstore/state"
)

// Offer is an endpoint of this application that other applications may
// relate to.
type Offer struct {
	// Endpoint is the offered endpoint of this charm.
	Endpoint string
	// Interface is the endpoint's interface in metadata.yaml.
	Interface string
	// Consumers are the applications allowed to relate to the endpoint.
	Consumers []string
	// TokenFile is the file of the token a consumer must present when it
	// does not connect with TLS; empty if there is none.
	TokenFile string
	// Token is the content of TokenFile without trailing white space.
	Token []byte
}

// Relation is a relation of an endpoint of this application to an endpoint
// another application offers.
type Relation struct {
	// Endpoint is this charm's endpoint.
	Endpoint string
	// Interface is the endpoint's interface in metadata.yaml.
	Interface string
	// App is the remote application.
	App string
	// Offer is the remote application's offered endpoint.
	Offer string
	// Addresses are the host:port addresses of members of App, as given.
	Addresses []string
	// TokenFile is the file of the offer's token; empty if there is none.
	TokenFile string
	// Token is the content of TokenFile without trailing white space.
	Token []byte
}

// Key identifies a relation entry by its endpoint, remote application and
// remote offer, as in "database -> pg:db".
func (r Relation) Key() string {
	return r.Endpoint + " -> " + r.App + ":" + r.Offer
}

// Config is the content of a relations file.
type Config struct {
	Offers    []Offer
	Relations []Relation
}

// Offer returns the offer of endpoint.
func (c *Config) Offer(endpoint string) (Offer, bool) {
	if c != nil {
		for _, o := range c.Offers {
			if o.Endpoint == endpoint {
				return o, true
			}
		}
	}
	return Offer{}, false
}

// Allows reports whether endpoint is offered and app is one of its
// consumers.
func (c *Config) Allows(endpoint, app string) bool {
	o, ok := c.Offer(endpoint)
	return ok && slices.Contains(o.Consumers, app)
}

// Load reads the relations file at path and parses it with [Parse], reading
// token files with os.ReadFile. A file that does not exist is an empty
// Config if allowMissing, and an error otherwise. Every error names path.
func Load(path, app string, charm *agent.Charm, allowMissing bool) (*Config, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && allowMissing {
		return &Config{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("relations file: %w", err)
	}
	c, err := Parse(data, app, charm, os.ReadFile)
	if err != nil {
		return nil, prefixed("relations file "+path+": ", err)
	}
	return c, nil
}

// prefixed puts prefix before the message of err, or of each error err
// joins.
func prefixed(prefix string, err error) error {
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return fmt.Errorf("%s%w", prefix, err)
	}
	var errs []error
	for _, e := range joined.Unwrap() {
		errs = append(errs, fmt.Errorf("%s%w", prefix, e))
	}
	return errors.Join(errs...)
}

// Parse decodes the relations file data of application app, whose charm is
// charm, and checks it against the charm's metadata. The interfaces of the
// entries come from the charm. readFile reads the token files (os.ReadFile
// if nil).
//
// All the problems of the file are reported together, as one error joining
// one error per problem (see errors.Join), each naming its line, entry and
// field and saying what would be right. On error the Config is nil.
func Parse(data []byte, app string, charm *agent.Charm, readFile func(string) ([]byte, error)) (*Config, error) {
	if charm == nil {
		return nil, errors.New("relconf: no charm")
	}
	if !state.ValidAppName(app) {
		return nil, fmt.Errorf("relconf: this application's name %q is not a valid application name", app)
	}
	if readFile == nil {
		readFile = os.ReadFile
	}
	f, errs := decode(data)
	if f == nil {
		return nil, errors.Join(errs...)
	}
	offerLines, relationLines := entryLines(data)
	p := &parser{app: app, charm: charm, readFile: readFile, errs: errs}
	c := &Config{}
	offered := map[string]int{} // endpoint -> index of its offer
	for i, y := range f.Offers {
		e := p.entry(lineOf(offerLines, i), fmt.Sprintf("offers[%d]", i), y.Endpoint)
		o := Offer{Endpoint: y.Endpoint, Consumers: y.Consumers, TokenFile: y.TokenFile}
		o.Interface = p.endpoint(e, y.Endpoint)
		if first, ok := offered[y.Endpoint]; ok {
			e.addf("endpoint %q is already offered by offers[%d]; list all its consumers in one entry", y.Endpoint, first)
		} else if y.Endpoint != "" {
			offered[y.Endpoint] = i
		}
		if len(y.Consumers) == 0 {
			e.addf("consumers: missing or empty; list the applications allowed to relate to %s, such as [web]", orThis(y.Endpoint))
		}
		p.appNames(e, "consumers", y.Consumers)
		o.Token = p.token(e, y.TokenFile)
		c.Offers = append(c.Offers, o)
	}
	keys := map[string]int{}           // Key -> index of its relation
	endpointApp := map[[2]string]int{} // endpoint, app -> index of its relation
	for i, y := range f.Relations {
		r := Relation{Endpoint: y.Endpoint, App: y.App, Offer: y.Offer, Addresses: y.Addresses, TokenFile: y.TokenFile}
		e := p.entry(lineOf(relationLines, i), fmt.Sprintf("relations[%d]", i), relationLabel(y))
		r.Interface = p.endpoint(e, y.Endpoint)
		if y.Interface != "" && r.Interface != "" && y.Interface != r.Interface {
			e.addf("interface %q: metadata.yaml gives endpoint %q the interface %q; write %q or leave interface out", y.Interface, y.Endpoint, r.Interface, r.Interface)
		}
		switch {
		case y.App == "":
			e.addf("app: missing; name the remote application, such as pg")
		default:
			p.appName(e, "app", y.App)
		}
		switch {
		case y.Offer == "":
			e.addf("offer: missing; name the endpoint %s offers, such as db", orRemote(y.App))
		case !state.ValidEndpointName(y.Offer):
			e.addf("offer %q: not a valid endpoint name; want lower-case letters and digits, single '-' or '_' between them, starting with a letter, such as db", y.Offer)
		}
		if len(y.Addresses) == 0 {
			e.addf("addresses: missing or empty; list the host:port of one or more members of %s, such as [pg-0.pg:7402]", orRemote(y.App))
		}
		seen := map[string]int{}
		for j, a := range y.Addresses {
			if first, ok := seen[a]; ok {
				e.addf("addresses[%d] %q: already listed as addresses[%d]; list each address once", j, a, first)
				continue
			}
			seen[a] = j
			if reason := checkAddress(a); reason != "" {
				e.addf("addresses[%d] %q: %s; want host:port with a port from 1 to 65535, such as pg-0.pg:7402 or [fd00::5]:7402", j, a, reason)
			}
		}
		if y.Endpoint != "" && y.App != "" && y.Offer != "" {
			ea := [2]string{y.Endpoint, y.App}
			if first, ok := keys[r.Key()]; ok {
				e.addf("the same relation as relations[%d]; remove one of them", first)
			} else if first, ok := endpointApp[ea]; ok {
				e.addf("endpoint %q already relates to %s in relations[%d] (%s); an endpoint relates to an application at most once", y.Endpoint, y.App, first, f.Relations[first].key())
			} else {
				keys[r.Key()] = i
				endpointApp[ea] = i
			}
		}
		r.Token = p.token(e, y.TokenFile)
		c.Relations = append(c.Relations, r)
	}
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return c, nil
}

// The file's form. It has types of its own: Token, and an offer's
// Interface, are not fields of the file.
type (
	fileYAML struct {
		Offers    []offerYAML    `yaml:"offers"`
		Relations []relationYAML `yaml:"relations"`
	}
	offerYAML struct {
		Endpoint  string   `yaml:"endpoint"`
		Consumers []string `yaml:"consumers"`
		TokenFile string   `yaml:"token-file"`
	}
	relationYAML struct {
		Endpoint  string   `yaml:"endpoint"`
		App       string   `yaml:"app"`
		Offer     string   `yaml:"offer"`
		Interface string   `yaml:"interface"`
		Addresses []string `yaml:"addresses"`
		TokenFile string   `yaml:"token-file"`
	}
)

func (y relationYAML) key() string {
	return Relation{Endpoint: y.Endpoint, App: y.App, Offer: y.Offer}.Key()
}

// relationLabel names a relation entry in errors: its key, with a '?' for
// each part missing, or nothing if all are.
func relationLabel(y relationYAML) string {
	if y.Endpoint == "" && y.App == "" && y.Offer == "" {
		return ""
	}
	q := func(s string) string {
		if s == "" {
			return "?"
		}
		return s
	}
	return Relation{Endpoint: q(y.Endpoint), App: q(y.App), Offer: q(y.Offer)}.Key()
}

// unknownField matches yaml's message about a field its type does not have.
var unknownField = regexp.MustCompile(`^(line \d+: )field (.*) not found in type (\S+)$`)

// fieldsOf says, for each of the file's types, what it is and its fields.
var fieldsOf = map[string]struct{ what, fields string }{
	"relconf.fileYAML":     {"at the top level", "offers and relations"},
	"relconf.offerYAML":    {"in an offer", "endpoint, consumers and token-file"},
	"relconf.relationYAML": {"in a relation", "endpoint, app, offer, interface, addresses and token-file"},
}

// typeNames replaces the Go types in yaml's messages.
var typeNames = strings.NewReplacer(
	"[]relconf.offerYAML", "a list of offers",
	"[]relconf.relationYAML", "a list of relations",
	"relconf.fileYAML", "a map with offers and relations",
	"relconf.offerYAML", "an offer (a map with endpoint, consumers and token-file)",
	"relconf.relationYAML", "a relation (a map with endpoint, app, offer, interface, addresses and token-file)",
	"[]string", "a list of strings",
)

// decode decodes data. It returns nil and the problems if the file cannot
// be checked further; otherwise the decoded file and the problems so far:
// fields the file's types do not have.
func decode(data []byte) (*fileYAML, []error) {
	d := yaml.NewDecoder(bytes.NewReader(data))
	d.KnownFields(true)
	var f fileYAML
	err := d.Decode(&f)
	if errors.Is(err, io.EOF) {
		return &f, nil // no document: empty, or only comments
	}
	var terr *yaml.TypeError
	if err != nil && !errors.As(err, &terr) {
		return nil, []error{err}
	}
	var (
		errs     []error
		typeErrs bool
	)
	if terr != nil {
		for _, msg := range terr.Errors {
			if m := unknownField.FindStringSubmatch(msg); m != nil {
				if t, ok := fieldsOf[m[3]]; ok {
					errs = append(errs, fmt.Errorf("%sunknown field %q %s; the fields there are %s", m[1], m[2], t.what, t.fields))
					continue
				}
			}
			typeErrs = true
			errs = append(errs, errors.New(typeNames.Replace(msg)))
		}
	}
	var next yaml.Node
	if err := d.Decode(&next); !errors.Is(err, io.EOF) {
		return nil, append(errs, errors.New("the file holds more than one YAML document; want one"))
	}
	if typeErrs {
		// A value of the wrong type is left out, and it would be reported
		// once more as missing.
		return nil, errs
	}
	return &f, errs
}

// entryLines returns the line of each entry of the offers and the relations
// lists, or nil where the file is not of the expected form.
func entryLines(data []byte) (offers, relations []int) {
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, nil
	}
	top := doc.Content[0]
	if top.Kind != yaml.MappingNode {
		return nil, nil
	}
	lines := func(n *yaml.Node) []int {
		if n.Kind != yaml.SequenceNode {
			return nil
		}
		var out []int
		for _, item := range n.Content {
			out = append(out, item.Line)
		}
		return out
	}
	for i := 0; i+1 < len(top.Content); i += 2 {
		switch top.Content[i].Value {
		case "offers":
			offers = lines(top.Content[i+1])
		case "relations":
			relations = lines(top.Content[i+1])
		}
	}
	return offers, relations
}

func lineOf(lines []int, i int) int {
	if i < len(lines) {
		return lines[i]
	}
	return 0
}

// parser holds what checking the entries needs, and their problems.
type parser struct {
	app      string
	charm    *agent.Charm
	readFile func(string) ([]byte, error)
	errs     []error
}

// entry is one entry of the file, for its problems.
type entry struct {
	p      *parser
	prefix string
}

// entry returns the entry at line (0 if unknown) called name, with label
// (if not empty) to say what it is.
func (p *parser) entry(line int, name, label string) entry {
	prefix := name
	if label != "" {
		prefix += " (" + label + ")"
	}
	if line > 0 {
		prefix = fmt.Sprintf("line %d: %s", line, prefix)
	}
	return entry{p: p, prefix: prefix + ": "}
}

func (e entry) addf(format string, args ...any) {
	e.p.errs = append(e.p.errs, errors.New(e.prefix+fmt.Sprintf(format, args...)))
}

// endpoint checks that name is a provides or requires endpoint of the charm
// and returns its interface.
func (p *parser) endpoint(e entry, name string) string {
	if iface, ok := p.charm.Provides[name]; ok {
		return iface
	}
	if iface, ok := p.charm.Requires[name]; ok {
		return iface
	}
	switch _, peer := p.charm.Peers[name]; {
	case name == "":
		e.addf("endpoint: missing; %s", p.endpointChoice())
	case peer:
		e.addf("endpoint %q is a peer endpoint; peer relations need no declaration (the agent creates them from metadata.yaml)", name)
	default:
		e.addf("endpoint %q: metadata.yaml has no such provides or requires endpoint; %s", name, p.endpointChoice())
	}
	return ""
}

// endpointChoice says which endpoints an entry may name.
func (p *parser) endpointChoice() string {
	eps := slices.Sorted(maps.Keys(p.charm.Provides))
	eps = append(eps, slices.Sorted(maps.Keys(p.charm.Requires))...)
	if len(eps) == 0 {
		return fmt.Sprintf("charm %s has no provides or requires endpoints in metadata.yaml, so it can have no offers or relations", p.charm.Name)
	}
	return "want one of the provides or requires endpoints of metadata.yaml: " + strings.Join(eps, ", ")
}

// appNames checks the application names of list field.
func (p *parser) appNames(e entry, field string, names []string) {
	seen := map[string]int{}
	for i, name := range names {
		f := fmt.Sprintf("%s[%d]", field, i)
		if first, ok := seen[name]; ok {
			e.addf("%s %q: already listed as %s[%d]; list each application once", f, name, field, first)
			continue
		}
		seen[name] = i
		p.appName(e, f, name)
	}
}

// appName checks the remote application name of field.
func (p *parser) appName(e entry, field, name string) {
	switch {
	case !state.ValidAppName(name):
		e.addf("%s %q: not a valid application name; want lower-case letters and digits in parts joined by single '-', starting with a letter, each part with a letter, such as web or my-app2", field, name)
	case name == p.app:
		e.addf("%s %q: that is this application; an application cannot relate to itself (its units share peer relations instead)", field, name)
	}
}

// token reads the token file path, if not empty.
func (p *parser) token(e entry, path string) []byte {
	if path == "" {
		return nil
	}
	if !filepath.IsAbs(path) {
		e.addf("token-file %q: a relative path; want an absolute path, such as /etc/bagkeeper/tokens/db.token", path)
		return nil
	}
	b, err := p.readFile(path)
	if err != nil {
		var perr *fs.PathError
		if errors.As(err, &perr) {
			err = perr.Err
		}
		e.addf("token-file %q: cannot read it: %v", path, err)
		return nil
	}
	b = bytes.TrimRightFunc(b, unicode.IsSpace)
	if len(b) == 0 {
		e.addf("token-file %q is empty; it must hold the token", path)
		return nil
	}
	return b
}

// checkAddress returns why s is not host:port, or "".
func checkAddress(s string) string {
	if strings.Contains(s, "://") {
		return "looks like a URL"
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		var aerr *net.AddrError
		if errors.As(err, &aerr) {
			return aerr.Err
		}
		return err.Error()
	}
	switch {
	case host == "":
		return "missing host"
	case strings.ContainsFunc(host, func(r rune) bool { return unicode.IsSpace(r) || r == '/' }):
		return fmt.Sprintf("host %q has white space or '/'", host)
	case port == "":
		return "missing port"
	case strings.Trim(port, "0123456789") != "":
		return fmt.Sprintf("port %q is not a number", port)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Sprintf("port %s is out of range", port)
	}
	return ""
}

// orThis names endpoint, or says "this endpoint" if it is missing.
func orThis(endpoint string) string {
	if endpoint == "" {
		return "this endpoint"
	}
	return endpoint
}

// orRemote names app, or says "the remote application" if it is missing.
func orRemote(app string) string {
	if app == "" {
		return "the remote application"
	}
	return app
}
