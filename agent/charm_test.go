package agent

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// charmDir writes a charm directory with metadata.yaml holding metadata.
func charmDir(t *testing.T, metadata string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "metadata.yaml"), []byte(metadata), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestLoadCharmReadsEveryEndpointWithItsInterface(t *testing.T) {
	ch, err := LoadCharm(charmDir(t, `name: app
peers:
  cluster:
    interface: app-peers
provides:
  db:
    interface: pgsql
  metrics:
    interface: prometheus
requires:
  cache:
    interface: redis
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what      string
		got, want map[string]string
	}{
		{"peers", ch.Peers, map[string]string{"cluster": "app-peers"}},
		{"provides", ch.Provides, map[string]string{"db": "pgsql", "metrics": "prometheus"}},
		{"requires", ch.Requires, map[string]string{"cache": "redis"}},
	} {
		if !maps.Equal(c.got, c.want) {
			t.Errorf("%s: got %v, want %v", c.what, c.got, c.want)
		}
	}
	want := map[string]bool{"cluster": true, "db": true, "metrics": true, "cache": true}
	if !maps.Equal(ch.Endpoints, want) {
		t.Errorf("endpoints: got %v, want %v", ch.Endpoints, want)
	}
}

func TestLoadCharmWithoutRelationsHasEmptyMaps(t *testing.T) {
	ch, err := LoadCharm(charmDir(t, "name: app\n"))
	if err != nil {
		t.Fatal(err)
	}
	if ch.Peers == nil || ch.Provides == nil || ch.Requires == nil || ch.Endpoints == nil {
		t.Fatalf("nil endpoint maps: peers %v, provides %v, requires %v, endpoints %v", ch.Peers, ch.Provides, ch.Requires, ch.Endpoints)
	}
	if len(ch.Peers)+len(ch.Provides)+len(ch.Requires)+len(ch.Endpoints) != 0 {
		t.Fatalf("endpoints of a charm that declares none: %+v", ch)
	}
}

func TestLoadCharmRefusesBadEndpoints(t *testing.T) {
	for _, c := range []struct {
		name, metadata, want string
	}{{
		name:     "peer without interface",
		metadata: "name: app\npeers:\n  cluster: {}\n",
		want:     `peer endpoint "cluster" has no interface`,
	}, {
		name:     "provides without interface",
		metadata: "name: app\nprovides:\n  db:\n    interface: \"\"\n",
		want:     `provides endpoint "db" has no interface`,
	}, {
		name:     "requires without interface",
		metadata: "name: app\nrequires:\n  cache:\n",
		want:     `requires endpoint "cache" has no interface`,
	}, {
		name:     "peer and provides",
		metadata: "name: app\npeers:\n  db:\n    interface: app-peers\nprovides:\n  db:\n    interface: pgsql\n",
		want:     `endpoint "db" is declared in both peers and provides; each endpoint name must be used once`,
	}, {
		name:     "provides and requires",
		metadata: "name: app\nprovides:\n  db:\n    interface: pgsql\nrequires:\n  db:\n    interface: pgsql\n",
		want:     `endpoint "db" is declared in both provides and requires`,
	}, {
		name:     "peer and requires",
		metadata: "name: app\npeers:\n  cache:\n    interface: app-peers\nrequires:\n  cache:\n    interface: redis\n",
		want:     `endpoint "cache" is declared in both peers and requires`,
	}, {
		name:     "twice in one section",
		metadata: "name: app\nrequires:\n  cache:\n    interface: redis\n  cache:\n    interface: redis\n",
		want:     `mapping key "cache" already defined`,
	}} {
		t.Run(c.name, func(t *testing.T) {
			ch, err := LoadCharm(charmDir(t, c.metadata))
			if err == nil {
				t.Fatalf("loaded %+v, want an error containing %q", ch, c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not contain %q", err, c.want)
			}
		})
	}
}
