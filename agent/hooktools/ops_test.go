package hooktools

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"
)

// The call forms of the Python ops library: current ops (3.x, --format=json
// first, -r endpoint:id) and ops 2.9 (--format=json last, bare -r id,
// --app=True, relation-set once per key with a YAML map on stdin).

// opsFixture: unit wordpress/0 (leader when leader is true), in relation
// db:3 with postgresql (member postgresql/0) and in peer relation
// cluster:1 with wordpress/1.
func opsFixture(leader bool, hookRelation int) *fakeContext {
	f := newFakeContext(hookRelation, "", "")
	f.unit = "wordpress/0"
	f.leader = leader
	f.relations = map[int]*fakeRelation{}
	db := f.addRelation(3, "db")
	db.remoteApp = "postgresql"
	db.members["postgresql/0"] = map[string]string{"host": "10.0.0.5", "port": "5432"}
	db.appBags["postgresql"] = map[string]string{"database": "wp"}
	db.local = map[string]string{"private-address": "10.1.1.1"}
	cluster := f.addRelation(1, "cluster")
	cluster.remoteApp = ""
	cluster.peer = true
	cluster.members["wordpress/1"] = map[string]string{"private-address": "10.1.1.2"}
	if hookRelation == 3 {
		f.remoteUnit, f.remoteApp = "postgresql/0", "postgresql"
	}
	f.config = map[string]any{"port": int64(80), "title": "blog", "debug": false, "ratio": 0.5, "unset": nil}
	f.unitStatus = Status{Status: "active", Message: "ready", Data: map[string]any{}}
	f.appStatus = Status{Status: "active", Message: "2 units"}
	f.unitStatuses = map[string]Status{"wordpress/0": {Status: "active", Message: "ready"}}
	f.network["db"] = NetworkInfo{
		Interfaces:       []NetworkInterface{{MACAddress: "", InterfaceName: "eth0", Addresses: []InterfaceAddress{{Address: "10.1.1.1", CIDR: "10.1.1.0/24"}}}},
		IngressAddresses: []string{"10.1.1.1"},
		EgressSubnets:    []string{"10.1.1.0/24"},
	}
	since := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	f.goalState = GoalState{
		Units:     map[string]GoalStatus{"wordpress/0": {Status: "active", Since: &since}},
		Relations: map[string]map[string]GoalStatus{"db": {"postgresql": {Status: "joined", Since: &since}}},
	}
	return f
}

// opsCall is one call as ops makes it.
type opsCall struct {
	name   string
	tool   string
	argv   []string
	stdin  *string
	exit   int
	stdout string
	stderr string
	check  func(*testing.T, *fakeContext)
}

func runOps(t *testing.T, f *fakeContext, calls []opsCall) {
	t.Helper()
	for _, c := range calls {
		resp := runCase(t, f, gcase{tool: c.tool, argv: c.argv, stdin: c.stdin})
		if resp.Code != c.exit || string(resp.Stdout) != c.stdout || string(resp.Stderr) != c.stderr {
			t.Errorf("%s: %s %q:\n got exit=%d stdout=%q stderr=%q\nwant exit=%d stdout=%q stderr=%q",
				c.name, c.tool, c.argv, resp.Code, resp.Stdout, resp.Stderr, c.exit, c.stdout, c.stderr)
		}
		if c.check != nil {
			c.check(t, f)
		}
	}
}

// bagIs checks a bag of relation 3: this unit's, or this application's.
func bagIs(app bool, want map[string]string) func(*testing.T, *fakeContext) {
	return func(t *testing.T, f *fakeContext) {
		t.Helper()
		got := f.relations[3].local
		if app {
			got = f.relations[3].appBags["wordpress"]
		}
		if !maps.Equal(got, want) {
			t.Errorf("bag = %v, want %v", got, want)
		}
	}
}

func TestOpsRelationCalls(t *testing.T) {
	const unitBag = "{\"host\":\"10.0.0.5\",\"port\":\"5432\"}\n"
	runOps(t, opsFixture(false, -1), []opsCall{
		{name: "relation_ids", tool: "relation-ids", argv: args("db", "--format=json"), stdout: "[\"db:3\"]\n"},
		{name: "relation_ids none", tool: "relation-ids", argv: args("website", "--format=json"), stdout: "[]\n"},
		{name: "relation_list", tool: "relation-list", argv: args("--format=json", "-r", "db:3"), stdout: "[\"postgresql/0\"]\n"},
		{name: "relation_list 2.9", tool: "relation-list", argv: args("-r", "3", "--format=json"), stdout: "[\"postgresql/0\"]\n"},
		{name: "remote app", tool: "relation-list", argv: args("--format=json", "--app", "-r", "db:3"), stdout: "\"postgresql\"\n"},
		{name: "remote app 2.9", tool: "relation-list", argv: args("-r", "3", "--app", "--format=json"), stdout: "\"postgresql\"\n"},
		{name: "peer app", tool: "relation-list", argv: args("--format=json", "--app", "-r", "cluster:1"), stdout: "\"wordpress\"\n"},
		{name: "relation_get unit", tool: "relation-get", argv: args("--format=json", "-r", "db:3", "-", "postgresql/0"), stdout: unitBag},
		{name: "relation_get unit 2.9", tool: "relation-get", argv: args("-r", "3", "-", "postgresql/0", "--format=json"), stdout: unitBag},
		{name: "relation_get app", tool: "relation-get", argv: args("--format=json", "-r", "db:3", "--app", "-", "postgresql"), stdout: "{\"database\":\"wp\"}\n"},
		{name: "relation_get app 2.9", tool: "relation-get", argv: args("-r", "3", "-", "postgresql", "--app", "--format=json"), stdout: "{\"database\":\"wp\"}\n"},
		{name: "relation_get --app=True", tool: "relation-get", argv: args("-r", "3", "-", "postgresql", "--app=True", "--format=json"), stdout: "{\"database\":\"wp\"}\n"},
		{name: "relation_get own unit", tool: "relation-get", argv: args("--format=json", "-r", "db:3", "-", "wordpress/0"), stdout: "{\"private-address\":\"10.1.1.1\"}\n"},
		{name: "relation_get own app, not leader", tool: "relation-get", argv: args("--format=json", "-r", "db:3", "--app", "-", "wordpress"), exit: 1, stderr: "ERROR permission denied\n"},
		{name: "relation_get peer member", tool: "relation-get", argv: args("--format=json", "-r", "cluster:1", "-", "wordpress/1"), stdout: "{\"private-address\":\"10.1.1.2\"}\n"},
		{name: "relation not found", tool: "relation-get", argv: args("--format=json", "-r", "db:99", "-", "postgresql/0"), exit: 2, stderr: "ERROR invalid value \"db:99\" for option -r: relation not found\n"},
		{name: "relation_model_get", tool: "relation-model-get", argv: args("--format=json", "-r", "db:3"), stdout: "{\"uuid\":\"deadbeef-0bad-400d-8000-4b1d0d06f00d\"}\n"},

		{name: "relation_set json", tool: "relation-set", argv: args("-r", "db:3", "--file", "-"), stdin: str(`{"user": "wp", "note": "caf\u00e9 \"quoted\"\nline", "private-address": ""}`),
			check: bagIs(false, map[string]string{"user": "wp", "note": "café \"quoted\"\nline"})},
		{name: "relation_set 2.9 per key", tool: "relation-set", argv: args("-r", "3", "--file", "-"), stdin: str("user: admin\n"),
			check: bagIs(false, map[string]string{"user": "admin", "note": "café \"quoted\"\nline"})},
		{name: "relation_set 2.9 multi-line", tool: "relation-set", argv: args("-r", "3", "--file", "-"), stdin: str("note: 'a\n\n  b'\n"),
			check: bagIs(false, map[string]string{"user": "admin", "note": "a\nb"})},
		{name: "relation_set 2.9 delete", tool: "relation-set", argv: args("-r", "3", "--file", "-"), stdin: str("note: ''\n"),
			check: bagIs(false, map[string]string{"user": "admin"})},
		{name: "relation_set app, not leader", tool: "relation-set", argv: args("-r", "db:3", "--app", "--file", "-"), stdin: str(`{"a": "b"}`),
			exit: 1, stderr: "ERROR cannot write relation settings\n"},
	})

	leader := opsFixture(true, 3)
	runOps(t, leader, []opsCall{
		{name: "relation_set app", tool: "relation-set", argv: args("-r", "db:3", "--app", "--file", "-"), stdin: str(`{"db": "wp", "x": ""}`),
			check: bagIs(true, map[string]string{"db": "wp"})},
		{name: "relation_set app 2.9", tool: "relation-set", argv: args("-r", "3", "--app=True", "--file", "-"), stdin: str("x: 'y'\n"),
			check: bagIs(true, map[string]string{"db": "wp", "x": "y"})},
		{name: "relation_get own app, leader", tool: "relation-get", argv: args("--format=json", "-r", "db:3", "--app", "-", "wordpress"), stdout: "{\"db\":\"wp\",\"x\":\"y\"}\n"},
		{name: "relation_get defaults", tool: "relation-get", argv: args("--format=json"), stdout: unitBag},
		{name: "relation_get default app", tool: "relation-get", argv: args("--format=json", "--app"), stdout: "{\"database\":\"wp\"}\n"},
	})
}

func TestOpsUnitCalls(t *testing.T) {
	f := opsFixture(true, -1)
	runOps(t, f, []opsCall{
		{name: "config_get", tool: "config-get", argv: args("--format=json"), stdout: "{\"debug\":false,\"port\":80,\"ratio\":0.5,\"title\":\"blog\"}\n"},
		{name: "is_leader", tool: "is-leader", argv: args("--format=json"), stdout: "true\n"},
		{name: "status_get unit", tool: "status-get", argv: args("--include-data", "--format=json", "--application=false"),
			stdout: "{\"message\":\"ready\",\"status\":\"active\",\"status-data\":{}}\n"},
		{name: "status_get app", tool: "status-get", argv: args("--include-data", "--format=json", "--application=true"),
			stdout: "{\"application-status\":{\"message\":\"2 units\",\"status\":\"active\",\"status-data\":{},\"units\":{\"wordpress/0\":{\"message\":\"ready\",\"status\":\"active\",\"status-data\":{}}}}}\n"},
		{name: "status_get app 2.9", tool: "status-get", argv: args("--include-data", "--application=True", "--format=json"),
			stdout: "{\"application-status\":{\"message\":\"2 units\",\"status\":\"active\",\"status-data\":{},\"units\":{\"wordpress/0\":{\"message\":\"ready\",\"status\":\"active\",\"status-data\":{}}}}}\n"},
		{name: "status_set unit", tool: "status-set", argv: args("--application=False", "maintenance", "--", "-installing"), check: statusSets("unit maintenance/-installing")},
		{name: "status_set app", tool: "status-set", argv: args("--application=True", "active"), check: statusSets("unit maintenance/-installing", "app active/")},
		{name: "status_set 2.9", tool: "status-set", argv: args("--application=False", "blocked", ""), check: statusSets("unit maintenance/-installing", "app active/", "unit blocked/")},
		{name: "juju_log", tool: "juju-log", argv: args("--log-level", "WARNING", "--", "--not an option"), check: logged("WARNING --not an option")},
		{name: "network_get", tool: "network-get", argv: args("--format=json", "-r", "3", "db"),
			stdout: "{\"bind-addresses\":[{\"mac-address\":\"\",\"interface-name\":\"eth0\",\"addresses\":[{\"hostname\":\"\",\"value\":\"10.1.1.1\",\"cidr\":\"10.1.1.0/24\"}]}],\"egress-subnets\":[\"10.1.1.0/24\"],\"ingress-addresses\":[\"10.1.1.1\"]}\n"},
		{name: "network_get 2.9", tool: "network-get", argv: args("db", "-r", "3", "--format=json"),
			stdout: "{\"bind-addresses\":[{\"mac-address\":\"\",\"interface-name\":\"eth0\",\"addresses\":[{\"hostname\":\"\",\"value\":\"10.1.1.1\",\"cidr\":\"10.1.1.0/24\"}]}],\"egress-subnets\":[\"10.1.1.0/24\"],\"ingress-addresses\":[\"10.1.1.1\"]}\n"},
		{name: "network_get relation not found", tool: "network-get", argv: args("--format=json", "-r", "9", "db"), exit: 2,
			stderr: "ERROR invalid value \"9\" for option -r: relation not found\n"},
		{name: "application_version_set", tool: "application-version-set", argv: args("--", "-1.2.3")},
		{name: "goal_state", tool: "goal-state", argv: args("--format=json"),
			stdout: "{\"units\":{\"wordpress/0\":{\"status\":\"active\",\"since\":\"2024-01-02 03:04:05Z\"}},\"relations\":{\"db\":{\"postgresql\":{\"status\":\"joined\",\"since\":\"2024-01-02 03:04:05Z\"}}}}\n"},
		{name: "open_port", tool: "open-port", argv: args("8080/tcp")},
		{name: "open_port endpoints", tool: "open-port", argv: args("--endpoints", "db,cluster", "53/udp")},
		{name: "open_port icmp", tool: "open-port", argv: args("icmp")},
		{name: "close_port", tool: "close-port", argv: args("--endpoints", "cluster", "53/udp")},
		{name: "opened_ports", tool: "opened-ports", argv: args("--format=json"), stdout: "[\"icmp\",\"8080/tcp\",\"53/udp\"]\n"},
	})
	if f.version != "-1.2.3" {
		t.Errorf("version = %q", f.version)
	}
}

// ops's controller-side storage: state-set with a map of key to YAML text
// (as PyYAML writes it with default_style='|'), state-get in smart format
// (empty output means missing), state-delete.
func TestOpsStorage(t *testing.T) {
	f := opsFixture(false, -1)
	runOps(t, f, []opsCall{
		{name: "set", tool: "state-set", argv: args("--file", "-"), stdin: str("\"#notices#\": |\n  - a\n  - b\n")},
		{name: "set another", tool: "state-set", argv: args("--file", "-"), stdin: str("\"stored\": |\n  x: 1\n")},
		{name: "get", tool: "state-get", argv: args("#notices#"), stdout: "- a\n- b\n\n"},
		{name: "get missing", tool: "state-get", argv: args("nothing")},
		{name: "get all", tool: "state-get", argv: args("--format=json"), stdout: "{\"#notices#\":\"- a\\n- b\\n\",\"stored\":\"x: 1\\n\"}\n"},
		{name: "delete", tool: "state-delete", argv: args("stored")},
		{name: "get deleted", tool: "state-get", argv: args("stored")},
	})
	if !strings.Contains(strings.Join(f.stateCalls, ";"), "delete stored") {
		t.Errorf("calls %q", f.stateCalls)
	}
}

// Reading this application's bag needs the leadership status; a failure to
// get it is reported as Juju does.
func TestRelationGetOwnAppLeadershipUnknown(t *testing.T) {
	f := opsFixture(false, -1)
	f.leaderErr = errors.New("lease unavailable")
	runOps(t, f, []opsCall{
		{name: "own app", tool: "relation-get", argv: args("--format=json", "-r", "db:3", "--app", "-", "wordpress"), exit: 1,
			stderr: "ERROR cannot determine leadership status: lease unavailable\n"},
		{name: "remote app", tool: "relation-get", argv: args("--format=json", "-r", "db:3", "--app", "-", "postgresql"), stdout: "{\"database\":\"wp\"}\n"},
		{name: "relation-set --app", tool: "relation-set", argv: args("-r", "db:3", "--app", "k=v"), exit: 1,
			stderr: "ERROR cannot determine leadership status: lease unavailable\n"},
	})
}
