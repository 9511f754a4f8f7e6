package relconf

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/bagkeeper/bagkeeper/agent"
)

// ownApp is the application whose relations file the tests parse.
const ownApp = "shop"

// testCharm is the charm of ownApp.
func testCharm() *agent.Charm {
	return &agent.Charm{
		Name:     "shop",
		Peers:    map[string]string{"cluster": "shop-peers"},
		Provides: map[string]string{"api": "http", "metrics": "prometheus"},
		Requires: map[string]string{"database": "pgsql", "cache": "redis"},
	}
}

// tokenFiles returns a readFile that reads files from files.
func tokenFiles(files map[string]string) func(string) ([]byte, error) {
	return func(path string) ([]byte, error) {
		s, ok := files[path]
		if !ok {
			return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
		}
		return []byte(s), nil
	}
}

var testTokens = tokenFiles(map[string]string{
	"/tokens/api":   "api-secret\n",
	"/tokens/pg":    "  pg secret \t\r\n\n",
	"/tokens/blank": " \n\t\n",
})

// problems returns the problems err joins (err itself if it joins none).
func problems(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

const validFile = `# What shop offers.
offers:
  - endpoint: api
    consumers: [web, mobile-gw]
    token-file: /tokens/api
  - endpoint: database   # a requires endpoint may be offered too
    consumers:
      - reports
# What shop consumes.
relations:
  - endpoint: database
    app: pg
    offer: db
    interface: pgsql
    addresses: [pg-0.pg:7402, pg.default.svc:7402, "10.0.0.5:7402", "[fd00::5]:7402"]
    token-file: /tokens/pg
  - endpoint: database   # the same endpoint, another application
    app: pg-replica
    offer: db
    addresses: [pg-replica-0.pg-replica:7402]
  - endpoint: metrics    # a provides endpoint may relate too
    app: prom
    offer: scrape_target
    addresses: [prom:9090]
`

func TestParseValidFile(t *testing.T) {
	c, err := Parse([]byte(validFile), ownApp, testCharm(), testTokens)
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		Offers: []Offer{
			{Endpoint: "api", Interface: "http", Consumers: []string{"web", "mobile-gw"}, TokenFile: "/tokens/api", Token: []byte("api-secret")},
			{Endpoint: "database", Interface: "pgsql", Consumers: []string{"reports"}},
		},
		Relations: []Relation{
			{
				Endpoint: "database", Interface: "pgsql", App: "pg", Offer: "db",
				Addresses: []string{"pg-0.pg:7402", "pg.default.svc:7402", "10.0.0.5:7402", "[fd00::5]:7402"},
				TokenFile: "/tokens/pg", Token: []byte("  pg secret"),
			},
			{Endpoint: "database", Interface: "pgsql", App: "pg-replica", Offer: "db", Addresses: []string{"pg-replica-0.pg-replica:7402"}},
			{Endpoint: "metrics", Interface: "prometheus", App: "prom", Offer: "scrape_target", Addresses: []string{"prom:9090"}},
		},
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("got\n %+v\nwant\n %+v", c, want)
	}
}

func TestParseEmptyFileIsEmptyConfig(t *testing.T) {
	for name, data := range map[string]string{
		"empty":         "",
		"white space":   "\n  \n",
		"only comments": "# no relations yet\n\n# offers: []\n",
		"empty lists":   "offers: []\nrelations: []\n",
		"null lists":    "offers:\nrelations:\n",
		"empty map":     "{}\n",
		"empty doc":     "---\n",
	} {
		t.Run(name, func(t *testing.T) {
			c, err := Parse([]byte(data), ownApp, testCharm(), testTokens)
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Offers) != 0 || len(c.Relations) != 0 {
				t.Fatalf("got %+v, want an empty config", c)
			}
		})
	}
}

func TestParseRefusesEachMistake(t *testing.T) {
	const rel = "relations:\n  - endpoint: database\n    app: pg\n    offer: db\n"
	const addrs = "    addresses: [pg-0.pg:7402]\n"
	for _, c := range []struct {
		name, data, want string
	}{
		// The file's form.
		{"yaml syntax", "offers: [\n", "yaml: line"},
		{"not a map", "- endpoint: api\n", "line 1: cannot unmarshal !!seq into a map with offers and relations"},
		{"unknown top-level field", "offer:\n  - endpoint: api\n", `line 1: unknown field "offer" at the top level; the fields there are offers and relations`},
		{"unknown offer field", "offers:\n  - endpoint: api\n    consumers: [web]\n    token: x\n", `line 4: unknown field "token" in an offer; the fields there are endpoint, consumers and token-file`},
		{"unknown relation field", rel + addrs + "    address: pg-0.pg:7402\n", `line 6: unknown field "address" in a relation; the fields there are endpoint, app, offer, interface, addresses and token-file`},
		{"wrong type", "offers:\n  - endpoint: api\n    consumers: web\n", "line 3: cannot unmarshal !!str `web` into a list of strings"},
		{"duplicate key", "offers:\n  - endpoint: api\n    endpoint: metrics\n    consumers: [web]\n", `line 3: mapping key "endpoint" already defined at line 2`},
		{"two documents", "offers: []\n---\nrelations: []\n", "the file holds more than one YAML document; want one"},

		// Offers.
		{"offer without endpoint", "offers:\n  - consumers: [web]\n", "line 2: offers[0]: endpoint: missing; want one of the provides or requires endpoints of metadata.yaml: api, metrics, cache, database"},
		{"offer of an unknown endpoint", "offers:\n  - endpoint: apis\n    consumers: [web]\n", `line 2: offers[0] (apis): endpoint "apis": metadata.yaml has no such provides or requires endpoint; want one of`},
		{"offer of a peer endpoint", "offers:\n  - endpoint: cluster\n    consumers: [web]\n", `offers[0] (cluster): endpoint "cluster" is a peer endpoint; peer relations need no declaration`},
		{"offer without consumers", "offers:\n  - endpoint: api\n", "offers[0] (api): consumers: missing or empty; list the applications allowed to relate to api"},
		{"offer with empty consumers", "offers:\n  - endpoint: api\n    consumers: []\n", "offers[0] (api): consumers: missing or empty"},
		{"invalid consumer", "offers:\n  - endpoint: api\n    consumers: [web, Mobile_GW]\n", `offers[0] (api): consumers[1] "Mobile_GW": not a valid application name; want lower-case letters`},
		{"consumer is this application", "offers:\n  - endpoint: api\n    consumers: [shop]\n", `offers[0] (api): consumers[0] "shop": that is this application; an application cannot relate to itself`},
		{"consumer twice", "offers:\n  - endpoint: api\n    consumers: [web, api-gw, web]\n", `offers[0] (api): consumers[2] "web": already listed as consumers[0]; list each application once`},
		{"endpoint offered twice", "offers:\n  - endpoint: api\n    consumers: [web]\n  - endpoint: api\n    consumers: [mobile]\n", `line 4: offers[1] (api): endpoint "api" is already offered by offers[0]; list all its consumers in one entry`},
		{"offer token file unreadable", "offers:\n  - endpoint: api\n    consumers: [web]\n    token-file: /tokens/missing\n", `offers[0] (api): token-file "/tokens/missing": cannot read it: file does not exist`},
		{"offer token file empty", "offers:\n  - endpoint: api\n    consumers: [web]\n    token-file: /tokens/blank\n", `offers[0] (api): token-file "/tokens/blank" is empty; it must hold the token`},
		{"offer token file relative", "offers:\n  - endpoint: api\n    consumers: [web]\n    token-file: tokens/api\n", `offers[0] (api): token-file "tokens/api": a relative path; want an absolute path`},

		// Relations.
		{"relation without endpoint", "relations:\n  - app: pg\n    offer: db\n" + addrs, "line 2: relations[0] (? -> pg:db): endpoint: missing; want one of the provides or requires endpoints"},
		{"relation of an unknown endpoint", "relations:\n  - endpoint: db\n    app: pg\n    offer: db\n" + addrs, `relations[0] (db -> pg:db): endpoint "db": metadata.yaml has no such provides or requires endpoint; want one of the provides or requires endpoints of metadata.yaml: api, metrics, cache, database`},
		{"relation of a peer endpoint", "relations:\n  - endpoint: cluster\n    app: pg\n    offer: db\n" + addrs, `relations[0] (cluster -> pg:db): endpoint "cluster" is a peer endpoint; peer relations need no declaration`},
		{"wrong interface", rel + addrs + "    interface: mysql\n", `relations[0] (database -> pg:db): interface "mysql": metadata.yaml gives endpoint "database" the interface "pgsql"; write "pgsql" or leave interface out`},
		{"relation without app", "relations:\n  - endpoint: database\n    offer: db\n" + addrs, "relations[0] (database -> ?:db): app: missing; name the remote application"},
		{"invalid app", "relations:\n  - endpoint: database\n    app: 9pg\n    offer: db\n" + addrs, `relations[0] (database -> 9pg:db): app "9pg": not a valid application name`},
		{"app is this application", "relations:\n  - endpoint: database\n    app: shop\n    offer: db\n" + addrs, `relations[0] (database -> shop:db): app "shop": that is this application; an application cannot relate to itself`},
		{"relation without offer", "relations:\n  - endpoint: database\n    app: pg\n" + addrs, "relations[0] (database -> pg:?): offer: missing; name the endpoint pg offers"},
		{"invalid offer", "relations:\n  - endpoint: database\n    app: pg\n    offer: Db\n" + addrs, `relations[0] (database -> pg:Db): offer "Db": not a valid endpoint name`},
		{"relation without addresses", rel, "relations[0] (database -> pg:db): addresses: missing or empty; list the host:port of one or more members of pg"},
		{"relation with empty addresses", rel + "    addresses: []\n", "relations[0] (database -> pg:db): addresses: missing or empty"},
		{"address without port", rel + "    addresses: [pg-0.pg]\n", `relations[0] (database -> pg:db): addresses[0] "pg-0.pg": missing port in address; want host:port with a port from 1 to 65535`},
		{"address without host", rel + "    addresses: [\":7402\"]\n", `addresses[0] ":7402": missing host`},
		{"address with port 0", rel + "    addresses: [pg-0.pg:7402, pg-1.pg:0]\n", `addresses[1] "pg-1.pg:0": port 0 is out of range`},
		{"address with too high a port", rel + "    addresses: [pg-0.pg:65536]\n", `addresses[0] "pg-0.pg:65536": port 65536 is out of range`},
		{"address with a named port", rel + "    addresses: [pg-0.pg:postgres]\n", `addresses[0] "pg-0.pg:postgres": port "postgres" is not a number`},
		{"address is a URL", rel + "    addresses: [\"http://pg-0.pg:7402\"]\n", `addresses[0] "http://pg-0.pg:7402": looks like a URL`},
		{"bare IPv6 address", rel + "    addresses: [\"fd00::5\"]\n", `addresses[0] "fd00::5": too many colons in address`},
		{"address twice", rel + "    addresses: [pg-0.pg:7402, pg-1.pg:7402, pg-0.pg:7402]\n", `addresses[2] "pg-0.pg:7402": already listed as addresses[0]; list each address once`},
		{"relation twice", rel + addrs + rel[len("relations:\n"):] + "    addresses: [pg-1.pg:7402]\n", "line 6: relations[1] (database -> pg:db): the same relation as relations[0]; remove one of them"},
		{"endpoint to one app twice", rel + addrs + "  - endpoint: database\n    app: pg\n    offer: db2\n" + addrs, `relations[1] (database -> pg:db2): endpoint "database" already relates to pg in relations[0] (database -> pg:db); an endpoint relates to an application at most once`},
		{"relation token file unreadable", rel + addrs + "    token-file: /tokens/pg-missing\n", `relations[0] (database -> pg:db): token-file "/tokens/pg-missing": cannot read it: file does not exist`},
		{"relation token file empty", rel + addrs + "    token-file: /tokens/blank\n", `relations[0] (database -> pg:db): token-file "/tokens/blank" is empty`},
		{"relation token file relative", rel + addrs + "    token-file: pg.token\n", `relations[0] (database -> pg:db): token-file "pg.token": a relative path`},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Parse([]byte(c.data), ownApp, testCharm(), testTokens)
			if err == nil {
				t.Fatalf("parsed into %+v, want an error containing %q", cfg, c.want)
			}
			if cfg != nil {
				t.Errorf("got config %+v with the error, want nil", cfg)
			}
			if ps := problems(err); len(ps) != 1 {
				t.Errorf("%d problems, want 1:\n%v", len(ps), err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error\n %q\ndoes not contain\n %q", err, c.want)
			}
		})
	}
}

func TestParseReportsEveryProblemOfAFile(t *testing.T) {
	data := `offers:
  - endpoint: api
    consumers: [web, shop]
    colour: blue
  - endpoint: cluster
    consumers: [web]
relations:
  - endpoint: database
    app: pg
    offer: db
    addresses: [pg-0.pg]
    token-file: /tokens/nothing
`
	_, err := Parse([]byte(data), ownApp, testCharm(), testTokens)
	want := []string{
		`line 4: unknown field "colour" in an offer`,
		`line 2: offers[0] (api): consumers[1] "shop": that is this application`,
		`line 5: offers[1] (cluster): endpoint "cluster" is a peer endpoint`,
		`line 8: relations[0] (database -> pg:db): addresses[0] "pg-0.pg": missing port`,
		`line 8: relations[0] (database -> pg:db): token-file "/tokens/nothing": cannot read it`,
	}
	ps := problems(err)
	if len(ps) != len(want) {
		t.Fatalf("%d problems, want %d:\n%v", len(ps), len(want), err)
	}
	for i, w := range want {
		if !strings.Contains(ps[i].Error(), w) {
			t.Errorf("problem %d\n %q\ndoes not contain\n %q", i, ps[i], w)
		}
	}
}

func TestParseOfACharmWithoutRelationEndpoints(t *testing.T) {
	ch := &agent.Charm{Name: "loner", Peers: map[string]string{"cluster": "loner-peers"}}
	_, err := Parse([]byte("offers:\n  - endpoint: api\n    consumers: [web]\n"), "loner", ch, testTokens)
	want := `endpoint "api": metadata.yaml has no such provides or requires endpoint; charm loner has no provides or requires endpoints in metadata.yaml, so it can have no offers or relations`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want one containing %q", err, want)
	}
}

func TestParseRefusesAnInvalidOwnApplicationOrNoCharm(t *testing.T) {
	if _, err := Parse(nil, "Shop", testCharm(), testTokens); err == nil || !strings.Contains(err.Error(), `this application's name "Shop" is not a valid application name`) {
		t.Errorf("invalid own application: error %v", err)
	}
	if _, err := Parse(nil, ownApp, nil, testTokens); err == nil || !strings.Contains(err.Error(), "no charm") {
		t.Errorf("no charm: error %v", err)
	}
}

func TestConfigOfferAndAllows(t *testing.T) {
	c, err := Parse([]byte(validFile), ownApp, testCharm(), testTokens)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := c.Offer("api")
	if !ok || o.Endpoint != "api" || o.Interface != "http" {
		t.Errorf("Offer(api) = %+v, %v", o, ok)
	}
	if o, ok := c.Offer("metrics"); ok {
		t.Errorf("Offer(metrics) = %+v, true; metrics is not offered", o)
	}
	for _, a := range []struct {
		endpoint, app string
		want          bool
	}{
		{"api", "web", true},
		{"api", "mobile-gw", true},
		{"api", "reports", false},
		{"database", "reports", true},
		{"database", "web", false},
		{"metrics", "prom", false}, // related to, not offered
		{"cluster", "web", false},
	} {
		if got := c.Allows(a.endpoint, a.app); got != a.want {
			t.Errorf("Allows(%s, %s) = %v, want %v", a.endpoint, a.app, got, a.want)
		}
	}
	var none *Config
	if _, ok := none.Offer("api"); ok || none.Allows("api", "web") {
		t.Error("a nil config offers something")
	}
}

func TestRelationKey(t *testing.T) {
	r := Relation{Endpoint: "database", App: "pg", Offer: "db"}
	if got, want := r.Key(), "database -> pg:db"; got != want {
		t.Fatalf("Key() = %q, want %q", got, want)
	}
}

func TestLoadReadsTheFileAndItsTokens(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "api.token")
	if err := os.WriteFile(token, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "relations.yaml")
	data := "offers:\n  - endpoint: api\n    consumers: [web]\n    token-file: " + token + "\n"
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path, ownApp, testCharm(), false)
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := c.Offer("api"); !ok || string(o.Token) != "s3cret" {
		t.Fatalf("offer %+v, %v; want api with token s3cret", o, ok)
	}
}

func TestLoadMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "relations.yaml")
	t.Run("allowed", func(t *testing.T) {
		c, err := Load(path, ownApp, testCharm(), true)
		if err != nil {
			t.Fatal(err)
		}
		if c == nil || len(c.Offers) != 0 || len(c.Relations) != 0 {
			t.Fatalf("got %+v, want an empty config", c)
		}
	})
	t.Run("not allowed", func(t *testing.T) {
		c, err := Load(path, ownApp, testCharm(), false)
		if err == nil {
			t.Fatalf("got %+v and no error", c)
		}
		if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), path) {
			t.Fatalf("error %v, want one naming %s and wrapping fs.ErrNotExist", err, path)
		}
	})
}

func TestLoadNamesTheFileInEveryProblem(t *testing.T) {
	path := filepath.Join(t.TempDir(), "relations.yaml")
	data := "offers:\n  - endpoint: cluster\n    consumers: [web]\n  - endpoint: api\n"
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path, ownApp, testCharm(), true)
	ps := problems(err)
	if len(ps) != 2 {
		t.Fatalf("%d problems, want 2:\n%v", len(ps), err)
	}
	for _, p := range ps {
		if !strings.HasPrefix(p.Error(), "relations file "+path+": line ") {
			t.Errorf("problem %q does not start with the file's path and the line", p)
		}
	}
}
