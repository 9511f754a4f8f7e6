package hooktools

import (
	"errors"
	"maps"
	"slices"
	"testing"
)

// withLeader returns a fixture whose unit is (or is not) the leader.
func withLeader(leader bool) *fakeContext {
	f := newFakeContext(-1, "", "")
	f.leader = leader
	return f
}

// §7 is-leader.
func TestGoldenIsLeader(t *testing.T) {
	pow := newFakeContext(-1, "", "")
	pow.leaderErr = errors.New("pow")
	il := func(id, tag string, ctx *fakeContext, argv []string, exit int, stdout, stderr string) gcase {
		return gcase{id: id, tag: tag, tool: "is-leader", ctx: ctx, argv: argv, exit: exit, stdout: stdout, stderr: stderr}
	}
	runGolden(t, []gcase{
		il("IL01", "T~", nil, args("blah"), 2, "", "ERROR unrecognized args: [\"blah\"]\n"),
		il("IL02", "T", nil, args("--format", "bad"), 2, "", "ERROR invalid value \"bad\" for option --format: unknown format \"bad\"\n"),
		il("IL03", "T", pow, args(), 1, "", "ERROR leadership status unknown: pow\n"),
		il("IL04", "T", withLeader(true), args(), 0, "True\n", ""),
		il("IL05", "T", withLeader(false), args(), 0, "False\n", ""),
		il("IL06", "T", withLeader(true), args("--format", "smart"), 0, "True\n", ""),
		il("IL07", "T", withLeader(false), args("--format", "smart"), 0, "False\n", ""),
		il("IL08", "T~", withLeader(true), args("--format", "yaml"), 0, "true\n", ""),
		il("IL09", "T~", withLeader(false), args("--format", "yaml"), 0, "false\n", ""),
		il("IL10", "T~", withLeader(true), args("--format", "json"), 0, "true\n", ""),
		il("IL11", "T~", withLeader(false), args("--format", "json"), 0, "false\n", ""),
		il("IL12", "D", withLeader(true), args("--format=json"), 0, "true\n", ""),
	})
}

// §8 leader-get.
func TestGoldenLeaderGet(t *testing.T) {
	settings := func() *fakeContext {
		f := newFakeContext(-1, "", "")
		f.leaderSettings = map[string]string{"key": "value", "sample": "settings"}
		return f
	}
	zap := newFakeContext(-1, "", "")
	zap.leaderGetErr = errors.New("zap")
	lg := func(id, tag string, ctx *fakeContext, argv []string, exit int, stdout, stderr string) gcase {
		return gcase{id: id, tag: tag, tool: "leader-get", ctx: ctx, argv: argv, exit: exit, stdout: stdout, stderr: stderr}
	}
	const all = "key: value\nsample: settings\n"
	const allJSON = "{\"key\":\"value\",\"sample\":\"settings\"}\n"
	runGolden(t, []gcase{
		lg("LG01", "T~", settings(), args("x=x"), 2, "", "ERROR invalid key \"x=x\"\n"),
		lg("LG02", "T~", settings(), args("some-key"), 0, "", ""),
		lg("LG03", "T", settings(), args("--format", "bad"), 2, "", "ERROR invalid value \"bad\" for option --format: unknown format \"bad\"\n"),
		lg("LG04", "T", zap, args(), 1, "", "ERROR cannot read leadership settings: zap\n"),
		lg("LG05", "T", settings(), args("unknown"), 0, "", ""),
		lg("LG06", "T", settings(), args("key"), 0, "value\n", ""),
		lg("LG07", "T~", settings(), args("-"), 0, all, ""),
		lg("LG08", "T~", settings(), args(), 0, all, ""),
		lg("LG09", "T", settings(), args("--format", "smart", "unknown"), 0, "", ""),
		lg("LG10", "T", settings(), args("--format", "smart", "key"), 0, "value\n", ""),
		lg("LG11", "T~", settings(), args("--format", "smart", "-"), 0, all, ""),
		lg("LG12", "T~", settings(), args("--format", "smart"), 0, all, ""),
		lg("LG13", "T~", settings(), args("--format", "json", "unknown"), 0, "null\n", ""),
		lg("LG14", "T~", settings(), args("--format", "json", "key"), 0, "\"value\"\n", ""),
		lg("LG15", "T~", settings(), args("--format", "json", "-"), 0, allJSON, ""),
		lg("LG16", "T~", settings(), args("--format", "json"), 0, allJSON, ""),
		lg("LG17", "T~", settings(), args("--format", "yaml", "unknown"), 0, "", ""),
		lg("LG18", "T~", settings(), args("--format", "yaml", "key"), 0, "value\n", ""),
		lg("LG19", "T~", settings(), args("--format", "yaml", "-"), 0, all, ""),
		lg("LG20", "T~", settings(), args("--format", "yaml"), 0, all, ""),
		lg("LG21", "D", settings(), args("key", "extra"), 2, "", "ERROR unrecognized args: [\"extra\"]\n"),
	})
}

// leaderWrites checks the settings leader-set wrote.
func leaderWrites(want ...map[string]string) func(*testing.T, *fakeContext) {
	return func(t *testing.T, f *fakeContext) {
		t.Helper()
		if !slices.EqualFunc(f.leaderWrites, want, maps.Equal) {
			t.Errorf("leader writes %v, want %v", f.leaderWrites, want)
		}
	}
}

// §9 leader-set.
func TestGoldenLeaderSet(t *testing.T) {
	splat := newFakeContext(-1, "", "")
	splat.leaderSetErr = errors.New("splat")
	runGolden(t, []gcase{
		{id: "LS01", tag: "T", tool: "leader-set", argv: args(), check: leaderWrites(map[string]string{})},
		{id: "LS02", tag: "T", tool: "leader-set", argv: args("foo=bar", "baz=qux"), check: leaderWrites(map[string]string{"baz": "qux", "foo": "bar"})},
		{id: "LS03", tag: "T~", tool: "leader-set", argv: args("nonsense"), exit: 2, stderr: "ERROR expected \"key=value\", got \"nonsense\"\n", check: leaderWrites()},
		{id: "LS04", tag: "T", tool: "leader-set", ctx: splat, argv: args("foo=bar"), exit: 1, stderr: "ERROR cannot write leadership settings: splat\n", check: leaderWrites(map[string]string{"foo": "bar"})},
		{id: "LS05", tag: "D", tool: "leader-set", argv: args("k="), check: leaderWrites(map[string]string{"k": ""})},
	})
}

// §10 config-get.
func TestGoldenConfigGet(t *testing.T) {
	cg := func(id, tag string, argv []string, exit int, stdout, stderr string) gcase {
		return gcase{id: id, tag: tag, tool: "config-get", argv: argv, exit: exit, stdout: stdout, stderr: stderr}
	}
	const setYAML = "monsters: false\nspline-reticulation: 45\ntitle: My Title\nusername: admin001\n"
	const allYAML = "empty: null\n" + setYAML
	const allJSON = "{\"empty\":null,\"monsters\":false,\"spline-reticulation\":45,\"title\":\"My Title\",\"username\":\"admin001\"}\n"
	runGolden(t, []gcase{
		cg("CG01", "T", args("monsters"), 0, "False\n", ""),
		cg("CG02", "T", args("--format", "yaml", "monsters"), 0, "false\n", ""),
		cg("CG03", "T", args("--format", "json", "monsters"), 0, "false\n", ""),
		cg("CG04", "T", args("spline-reticulation"), 0, "45\n", ""),
		cg("CG05", "T", args("--format", "yaml", "spline-reticulation"), 0, "45\n", ""),
		cg("CG06", "T", args("--format", "json", "spline-reticulation"), 0, "45\n", ""),
		cg("CG07", "T", args("missing"), 0, "", ""),
		cg("CG08", "T", args("--format", "yaml", "missing"), 0, "", ""),
		cg("CG09", "T", args("--format", "json", "missing"), 0, "null\n", ""),
		cg("CG10", "T~", args(), 0, setYAML, ""),
		cg("CG11", "T~", args("--format", "yaml"), 0, setYAML, ""),
		cg("CG12", "T~", args("--format", "json"), 0, "{\"monsters\":false,\"spline-reticulation\":45,\"title\":\"My Title\",\"username\":\"admin001\"}\n", ""),
		cg("CG13", "T~", args("--all", "--format", "yaml"), 0, allYAML, ""),
		cg("CG14", "T~", args("--all", "--format", "json"), 0, allJSON, ""),
		cg("CG15", "T~", args("-a", "--format", "yaml"), 0, allYAML, ""),
		cg("CG16", "T~", args("-a", "--format", "json"), 0, allJSON, ""),
		{id: "CG17", tag: "T", tool: "config-get", argv: args("--output", "some-file", "monsters"), outFile: "some-file", outData: "False\n"},
		cg("CG18", "T~", args("multiple", "keys"), 2, "", "ERROR unrecognized args: [\"keys\"]\n"),
		cg("CG19", "T", args("--all", "--format", "json", "monsters"), 2, "", "ERROR cannot use argument --all together with key \"monsters\"\n"),
		cg("CG20", "D", args("title"), 0, "My Title\n", ""),
		cg("CG21", "D", args("empty"), 0, "", ""),
		cg("CG22", "D", args("--all"), 0, allYAML, ""),
	})
}

// stateCalls checks the Context calls of state-set and state-delete.
func stateCalls(want ...string) func(*testing.T, *fakeContext) {
	return func(t *testing.T, f *fakeContext) {
		t.Helper()
		if !slices.Equal(f.stateCalls, want) {
			t.Errorf("state calls %q, want %q", f.stateCalls, want)
		}
	}
}

// §11 state-get, state-set, state-delete.
func TestGoldenState(t *testing.T) {
	state := func(kv ...string) *fakeContext {
		f := newFakeContext(-1, "", "")
		for i := 0; i+1 < len(kv); i += 2 {
			f.state[kv[i]] = kv[i+1]
		}
		return f
	}
	oneThree := func() *fakeContext { return state("one", "two", "three", "four") }
	runGolden(t, []gcase{
		{id: "SG01", tag: "T", tool: "state-get", ctx: oneThree(), argv: args(), stdout: "one: two\nthree: four\n"},
		{id: "SG02", tag: "T", tool: "state-get", ctx: oneThree(), argv: args("-"), stdout: "one: two\nthree: four\n"},
		{id: "SG03", tag: "T", tool: "state-get", ctx: oneThree(), argv: args("one"), stdout: "two\n"},
		{id: "SG04", tag: "T", tool: "state-get", ctx: oneThree(), argv: args("--strict", "five"), exit: 1, stderr: "ERROR \"five\" not found\n"},
		{id: "SG05", tag: "T", tool: "state-get", ctx: oneThree(), argv: args("five")},
		{id: "SG06", tag: "T", tool: "state-get", ctx: state("five", ""), argv: args("five")},
		{id: "SG07", tag: "D", tool: "state-get", ctx: state("five", ""), argv: args("--format", "json", "five"), stdout: "\"\"\n"},
		{id: "SG08", tag: "D", tool: "state-get", argv: args("a", "b"), exit: 2, stderr: "ERROR unrecognized args: [\"b\"]\n"},

		{id: "SS01", tag: "T", tool: "state-set", argv: args(), check: stateCalls()},
		{id: "SS02", tag: "T", tool: "state-set", argv: args("one=two"), check: stateCalls("set one=two")},
		{id: "SS03", tag: "T", tool: "state-set", argv: args("one=two", "three=four"), check: stateCalls("set one=two", "set three=four")},
		{id: "SS04", tag: "T", tool: "state-set", argv: args("--file", "-"), stdin: str("{one: two, three: four}"), check: stateCalls("set one=two", "set three=four")},
		{id: "SS05", tag: "T", tool: "state-set", argv: args("--file", "-"), stdin: str("one = two"), exit: 1,
			stderr: "ERROR yaml: unmarshal errors:\n  line 1: cannot unmarshal !!str `one = two` into map[string]string\n", check: stateCalls()},
		{id: "SS06", tag: "T", tool: "state-set", argv: args("five"), exit: 2, stderr: "ERROR expected \"key=value\", got \"five\"\n", check: stateCalls()},
		{id: "SS07", tag: "T", tool: "state-set", argv: args("one="), check: stateCalls("set one=")},

		{id: "SD01", tag: "T", tool: "state-delete", argv: args("five"), check: stateCalls("delete five")},
		{id: "SD02", tag: "T", tool: "state-delete", argv: args(""), check: stateCalls()},
		{id: "SD03", tag: "D", tool: "state-delete", argv: args(), check: stateCalls()},
	})

	// SS08 [T]: the same command run twice on one context.
	f := newFakeContext(-1, "", "")
	for _, argv := range [][]string{args("one=two"), args("one=")} {
		resp, err := Run(f, Request{Command: "state-set", Args: argv, Dir: "/"})
		if err != nil || resp.Code != 0 || len(resp.Stdout)+len(resp.Stderr) != 0 {
			t.Fatalf("SS08 %q: %+v %v", argv, resp, err)
		}
	}
	stateCalls("set one=two", "set one=")(t, f)
}
