package hooktools

import (
	"errors"
	"maps"
	"strings"
	"testing"
)

// relationGetFixture is §3's fixture: the shared one, with peer0's u/0
// private-address "foo: bar\n", and peer1 members m/0 {pew: "pew\npew\n"}
// and u/1 {value: "12345"}.
func relationGetFixture(relid int, remoteUnit, remoteApp string) *fakeContext {
	f := newFakeContext(relid, remoteUnit, remoteApp)
	f.relations[0].local["private-address"] = "foo: bar\n"
	f.relations[1].members["m/0"] = map[string]string{"pew": "pew\npew\n"}
	f.relations[1].members["u/1"] = map[string]string{"value": "12345"}
	return f
}

// §3.1–3.3 relation-get.
func TestGoldenRelationGet(t *testing.T) {
	rg := func(id, tag string, ctx *fakeContext, argv []string, exit int, stdout, stderr string) gcase {
		return gcase{id: id, tag: tag, tool: "relation-get", ctx: ctx, argv: argv, exit: exit, stdout: stdout, stderr: stderr}
	}
	fx := relationGetFixture
	cases := []gcase{
		rg("RG01", "T", fx(-1, "", ""), args(), 2, "", "ERROR no relation id specified\n"),
		rg("RG02", "T", fx(-1, "", ""), args("-r", "burble:123"), 2, "", "ERROR invalid value \"burble:123\" for option -r: relation not found\n"),
		rg("RG03", "T", fx(1, "", ""), args(), 2, "", "ERROR no unit or application specified\n"),
		rg("RG04", "T", fx(-1, "", ""), args("-r", "burble:1"), 2, "", "ERROR no unit or application specified\n"),
		rg("RG05", "T", fx(1, "m/0", ""), args("ker-plunk"), 0, "", ""),
		rg("RG06", "T", fx(1, "bad/0", ""), args(), 1, "", "ERROR unknown unit bad/0\n"),
		rg("RG07", "T", fx(1, "", ""), args("-", "u/1"), 0, "value: \"12345\"\n", ""),
		rg("RG08", "T", fx(1, "m/0", ""), args("pew"), 0, "pew\npew\n\n", ""),
		rg("RG09", "T", fx(1, "", ""), args("pew", "m/0"), 0, "pew\npew\n\n", ""),
		rg("RG10", "T", fx(1, "", ""), args("value", "u/1"), 0, "12345\n", ""),
		rg("RG11", "T", fx(0, "", ""), args("private-address", "u/0"), 0, "foo: bar\n\n", ""),
		rg("RG12", "T", fx(1, "m/0", ""), args(), 0, "pew: |\n  pew\n  pew\n", ""),
		rg("RG13", "T", fx(1, "", ""), args("-", "m/0"), 0, "pew: |\n  pew\n  pew\n", ""),
		rg("RG14", "T", fx(0, "", ""), args("-", "u/0"), 0, "private-address: |\n  foo: bar\n", ""),
		rg("RG15", "T", fx(1, "m/0", ""), args("--format", "smart"), 0, "pew: |\n  pew\n  pew\n", ""),
		rg("RG16", "T", fx(1, "m/0", ""), args("pew", "--format", "smart"), 0, "pew\npew\n\n", ""),
		rg("RG17", "T", fx(1, "", ""), args("value", "u/1", "--format", "smart"), 0, "12345\n", ""),
		rg("RG18", "T", fx(1, "", ""), args("missing", "u/1", "--format", "smart"), 0, "", ""),

		rg("RGF1y", "T~", fx(1, "m/0", ""), args("--format", "yaml"), 0, "pew: |\n  pew\n  pew\n", ""),
		rg("RGF1j", "T~", fx(1, "m/0", ""), args("--format", "json"), 0, "{\"pew\":\"pew\\npew\\n\"}\n", ""),
		rg("RGF2y", "T~", fx(1, "m/0", ""), args("pew", "--format", "yaml"), 0, "|\n  pew\n  pew\n", ""),
		rg("RGF2j", "T~", fx(1, "m/0", ""), args("pew", "--format", "json"), 0, "\"pew\\npew\\n\"\n", ""),
		rg("RGF3y", "T~", fx(1, "", ""), args("value", "u/1", "--format", "yaml"), 0, "\"12345\"\n", ""),
		rg("RGF3j", "T~", fx(1, "", ""), args("value", "u/1", "--format", "json"), 0, "\"12345\"\n", ""),
		rg("RGF4y", "T~", fx(1, "", ""), args("missing", "u/1", "--format", "yaml"), 0, "", ""),
		rg("RGF4j", "T~", fx(1, "", ""), args("missing", "u/1", "--format", "json"), 0, "null\n", ""),

		{id: "RGO1", tag: "T", tool: "relation-get", ctx: fx(1, "m/0", ""), argv: args("--output", "some-file", "pew"),
			outFile: "some-file", outData: "pew\npew\n\n"},
	}
	runGolden(t, cases)
}

// §3.3 relation-get help: the usage line and the default unit depend on
// the hook; -r shows the hook relation as its default.
func TestGoldenRelationGetHelp(t *testing.T) {
	const options = "--app  (= false)\n    Read the application data bag instead of a unit's\n" +
		"--format  (= smart)\n    Specify output format (json|smart|yaml)\n" +
		"-o, --output (= \"\")\n    Specify an output file\n" +
		"-r, --relation  (= %s)\n    Select the relation by id (endpoint:id or id)\n"
	for _, tc := range []struct {
		id          string
		ctx         *fakeContext
		usage       string
		defaultUnit string // "" when help must not name one
		rDefault    string
	}{
		{"RGH1", relationGetFixture(-1, "", ""), "Usage: relation-get [options] <key> <unit id>\n", "", ""},
		{"RGH2", relationGetFixture(1, "", ""), "Usage: relation-get [options] <key> <unit id>\n", "", "peer1:1"},
		{"RGH3", relationGetFixture(1, "any/1", ""), "Usage: relation-get [options] [<key> [<unit id>]]\n", "any/1", "peer1:1"},
	} {
		t.Run(tc.id, func(t *testing.T) {
			resp, err := Run(tc.ctx, Request{Command: "relation-get", Args: args("--help"), Dir: "/"})
			if err != nil || resp.Code != 0 || len(resp.Stderr) != 0 {
				t.Fatalf("resp = %+v, err = %v", resp, err)
			}
			out := string(resp.Stdout)
			if !strings.HasPrefix(out, tc.usage) {
				t.Errorf("usage: %q", out)
			}
			if want := "\nOptions:\n" + strings.Replace(options, "%s", tc.rDefault, 1) + "\nDetails:\n"; !strings.Contains(out, want) {
				t.Errorf("options: %q\nwant %q", out, want)
			}
			hasDefault := strings.Contains(out, "The default unit of this hook is")
			if tc.defaultUnit == "" && hasDefault {
				t.Errorf("names a default unit: %q", out)
			}
			if tc.defaultUnit != "" && !strings.Contains(out, "The default unit of this hook is \""+tc.defaultUnit+"\".\n") {
				t.Errorf("default unit missing: %q", out)
			}
		})
	}
}

// §3.4 relation-get TestInit: the parsed relation id, key and target, or
// the Init error (exit 2 through Run).
func TestGoldenRelationGetInit(t *testing.T) {
	for _, tc := range []struct {
		id              string
		rel             int
		unit, app       string
		argv            []string
		err             string
		relid           int // checked when >= 0
		key, target     string
		application     bool
		checkRelationID bool
	}{
		{id: "RGI01", rel: -1, argv: args(), err: "no relation id specified"},
		{id: "RGI02", rel: -1, argv: args("-r", "one"), err: `invalid value "one" for option -r: invalid relation id`},
		{id: "RGI03", rel: 1, argv: args("-r", "one"), err: `invalid value "one" for option -r: invalid relation id`},
		{id: "RGI04", rel: -1, argv: args("-r", "2"), err: `invalid value "2" for option -r: relation not found`},
		{id: "RGI05", rel: 1, unit: "u/0", argv: args("-r", "ignored:0"), relid: 0, key: "", target: "u/0", checkRelationID: true},
		{id: "RGI06", rel: 1, unit: "u/0", argv: args("key=value"), relid: 1, key: "key=value", target: "u/0", checkRelationID: true},
		{id: "RGI07", rel: 1, unit: "u/0", argv: args("key"), relid: 1, key: "key", target: "u/0", checkRelationID: true},
		{id: "RGI08", rel: 0, unit: "u/0", argv: args("-"), relid: 0, key: "", target: "u/0", checkRelationID: true},
		{id: "RGI09", rel: 0, unit: "u/0", argv: args("key", "u/1"), key: "key", target: "u/1"},
		{id: "RGI10", rel: 0, unit: "u/0", argv: args("-", "u/1"), key: "", target: "u/1"},
		{id: "RGI11", rel: 0, unit: "u/0", app: "u", argv: args("--app"), target: "u", application: true},
		{id: "RGI12", rel: 0, unit: "u/0", argv: args("--app", "-", "mysql"), target: "mysql", application: true},
		{id: "RGI13", rel: 0, unit: "u/0", app: "u", argv: args("--app", "-", "mysql/0"), target: "mysql", application: true},
		{id: "RGI14", rel: 0, argv: args("--app"), err: "no unit or application specified"},
		{id: "RGI15", rel: 0, app: "u", argv: args(), target: "u", application: true},
		{id: "RGI16", rel: 0, app: "u", argv: args("-", "mysql/0"), target: "mysql/0"},
		{id: "RGI17", rel: 0, unit: "u/0", app: "u", argv: args("-", "--app", "mysql", "args"), err: `unrecognized args: ["args"]`},
		{id: "RGI18", rel: 0, app: "u", argv: args("-", "--app", "mysql"), target: "mysql", application: true},
		{id: "RGI19", rel: 0, unit: "u/0", app: "u", argv: args("-", "mysql"), err: `expected unit name, got application name "mysql"`},
		{id: "RGI20", rel: 0, unit: "u/0", app: "u", argv: args("-", "unit//0"), err: `invalid unit name "unit//0"`},
	} {
		t.Run(tc.id, func(t *testing.T) {
			ctx := newFakeContext(tc.rel, tc.unit, tc.app)
			if tc.err != "" {
				resp, err := Run(ctx, Request{Command: "relation-get", Args: tc.argv, Dir: "/"})
				if err != nil || resp.Code != 2 || string(resp.Stderr) != "ERROR "+tc.err+"\n" || len(resp.Stdout) != 0 {
					t.Fatalf("resp = %d %q %q, err = %v; want error %q", resp.Code, resp.Stdout, resp.Stderr, err, tc.err)
				}
				return
			}
			cmd, err := initTool(ctx, "relation-get", tc.argv)
			if err != nil {
				t.Fatalf("init: %v", err)
			}
			c := cmd.(*relationGet)
			if tc.checkRelationID && c.relation.id != tc.relid {
				t.Errorf("relation id = %d, want %d", c.relation.id, tc.relid)
			}
			if c.key != tc.key || c.target != tc.target || c.app != tc.application {
				t.Errorf("key=%q target=%q app=%v, want key=%q target=%q app=%v", c.key, c.target, c.app, tc.key, tc.target, tc.application)
			}
		})
	}
}

// wrote checks that relation-set wrote settings once to relation relid (its
// app bag when app) and nothing elsewhere.
func wrote(relid int, app bool, settings map[string]string) func(*testing.T, *fakeContext) {
	return func(t *testing.T, f *fakeContext) {
		t.Helper()
		for id, r := range f.relations {
			writes := r.unitWrites
			other := r.appWrites
			if app {
				writes, other = other, writes
			}
			if len(other) != 0 {
				t.Errorf("relation %d: unexpected writes %v", id, other)
			}
			switch {
			case id != relid && len(writes) != 0:
				t.Errorf("relation %d: unexpected writes %v", id, writes)
			case id == relid && (len(writes) != 1 || !maps.Equal(writes[0], settings)):
				t.Errorf("relation %d: writes %v, want [%v]", id, writes, settings)
			}
		}
	}
}

// §4 relation-set.
func TestGoldenRelationSet(t *testing.T) {
	rs := func(id, tag string, relid int, argv []string) gcase {
		return gcase{id: id, tag: tag, tool: "relation-set", ctx: newFakeContext(relid, "", ""), argv: argv}
	}
	ok := func(c gcase, relid int, settings map[string]string) gcase {
		c.check = wrote(relid, false, settings)
		return c
	}
	fail := func(c gcase, exit int, msg string) gcase {
		c.exit, c.stderr = exit, "ERROR "+msg+"\n"
		c.check = wrote(-1, false, nil)
		return c
	}
	withFile := func(c gcase, content string) gcase {
		c.files = map[string]string{"spam": content}
		return c
	}
	leader := func(c gcase) gcase {
		c.ctx.leader = true
		return c
	}
	type m = map[string]string
	cases := []gcase{
		ok(rs("RSI01", "T~", 0, args()), 0, m{}),
		fail(rs("RSI02", "T~", -1, args()), 2, "no relation id specified"),
		fail(rs("RSI03", "T~", -1, args("-r", "one")), 2, `invalid value "one" for option -r: invalid relation id`),
		fail(rs("RSI04", "T~", 1, args("-r", "one")), 2, `invalid value "one" for option -r: invalid relation id`),
		fail(rs("RSI05", "T~", -1, args("-r", "ignored:one")), 2, `invalid value "ignored:one" for option -r: invalid relation id`),
		fail(rs("RSI06", "T~", 1, args("-r", "ignored:one")), 2, `invalid value "ignored:one" for option -r: invalid relation id`),
		fail(rs("RSI07", "T~", -1, args("-r", "2")), 2, `invalid value "2" for option -r: relation not found`),
		fail(rs("RSI08", "T~", 1, args("-r", "ignored:2")), 2, `invalid value "ignored:2" for option -r: relation not found`),
		ok(rs("RSI09", "T~", 1, args("-r", "ignored:0")), 0, m{}),
		ok(rs("RSI10", "T~", 1, args("-r", "0")), 0, m{}),
		ok(rs("RSI11", "T~", -1, args("-r", "1")), 1, m{}),
		ok(rs("RSI12", "T~", 0, args("-r", "1")), 1, m{}),
		fail(rs("RSI13", "T~", 1, args("haha")), 2, `expected "key=value", got "haha"`),
		fail(rs("RSI14", "T~", 1, args("=haha")), 2, `expected "key=value", got "=haha"`),
		ok(rs("RSI15", "T~", 1, args("foo=")), 1, m{"foo": ""}),
		ok(rs("RSI16", "T~", 1, args("foo='")), 1, m{"foo": "'"}),
		ok(rs("RSI17", "T~", 1, args("foo=bar")), 1, m{"foo": "bar"}),
		ok(rs("RSI18", "T~", 1, args("foo=bar=baz=qux")), 1, m{"foo": "bar=baz=qux"}),
		ok(rs("RSI19", "T~", 1, args("foo=foo: bar")), 1, m{"foo": "foo: bar"}),
		ok(rs("RSI20", "T~", 0, args("-r", "1", "foo=bar")), 1, m{"foo": "bar"}),
		ok(rs("RSI21", "T~", 1, args("foo=123", "bar=true", "baz=4.5", "qux=")), 1, m{"bar": "true", "baz": "4.5", "foo": "123", "qux": ""}),
		ok(withFile(rs("RSI22", "T~", 0, args("--file", "spam")), "{foo: bar}"), 0, m{"foo": "bar"}),
		ok(withFile(rs("RSI23", "T~", 0, args("--file", "spam")), "{foo: bar, spam: eggs}"), 0, m{"foo": "bar", "spam": "eggs"}),
		ok(withFile(rs("RSI24", "T~", 0, args("--file", "spam")), "{\n  foo: bar,\n  spam: eggs\n}"), 0, m{"foo": "bar", "spam": "eggs"}),
		ok(withFile(rs("RSI25", "T~", 0, args("--file", "spam")), ""), 0, m{}),
		ok(withFile(rs("RSI26", "T~", 0, args("--file", "spam")), "{}"), 0, m{}),
		fail(withFile(rs("RSI27", "T~", 0, args("--file", "spam")), "foo=bar ham=eggs good=bad"), 1, "yaml: unmarshal errors:\n  line 1: cannot unmarshal !!str `foo=bar...` into map[string]string"),
		fail(withFile(rs("RSI28", "T~", 0, args("--file", "spam")), "haha"), 1, "yaml: unmarshal errors:\n  line 1: cannot unmarshal !!str `haha` into map[string]string"),
		fail(withFile(rs("RSI29", "T~", 0, args("--file", "spam")), "[haha]"), 1, "yaml: unmarshal errors:\n  line 1: cannot unmarshal !!seq into map[string]string"),
		ok(withFile(rs("RSI30", "T~", 0, args("--file", "spam")), "{a: b}\n{c: d}"), 0, m{"a": "b"}),
		ok(withFile(rs("RSI31", "T~", 0, args("--file", "spam")), "{foo: 'bar baz'}"), 0, m{"foo": "bar baz"}),
		ok(withFile(rs("RSI32", "T~", 0, args("--file", "spam")), "{foo: foo=bar, base64: YmFzZTY0IGV4YW1wbGU=}"), 0, m{"base64": "YmFzZTY0IGV4YW1wbGU=", "foo": "foo=bar"}),
		ok(withFile(rs("RSI33", "T~", 0, args("--file", "spam")), "{foo: '[x]', bar: '{y}'}"), 0, m{"bar": "{y}", "foo": "[x]"}),
		ok(withFile(rs("RSI34", "T~", 0, args("--file", "spam")), "\n {  \n # a comment \n\n  \nfoo: bar,  \nham: eggs,\n\n  good: bad,\nup: down, left: right\n}\n"), 0, m{"foo": "bar", "good": "bad", "ham": "eggs", "left": "right", "up": "down"}),
		ok(withFile(rs("RSI35", "T~", 0, args("--file", "spam", "foo=bar")), "{ham: eggs}"), 0, m{"foo": "bar", "ham": "eggs"}),
		ok(withFile(rs("RSI36", "T~", 0, args("--file", "spam", "foo=bar")), "{foo: baz}"), 0, m{"foo": "bar"}),
		func() gcase {
			c := ok(rs("RSI37", "T~", 0, args("--file", "-")), 0, m{"foo": "bar"})
			c.stdin = str("{foo: bar}")
			return c
		}(),
		func() gcase {
			c := leader(rs("RSI38", "T~", 0, args("--app", "baz=qux")))
			c.check = wrote(0, true, m{"baz": "qux"})
			return c
		}(),

		{id: "RSD1", tag: "T", tool: "relation-set", ctx: newFakeContext(0, "", ""), argv: args("--format", "foo", "rel="),
			stderr: "--format flag deprecated for command \"relation-set\"", check: wrote(0, false, m{"rel": ""})},
		{id: "RSX1", tag: "D", tool: "relation-set", ctx: newFakeContext(0, "", ""), argv: args("--app", "k=v"),
			exit: 1, stderr: "ERROR cannot write relation settings\n", check: wrote(-1, true, nil)},
		fail(rs("RSX2a", "D", 0, args("a=1", "a=2")), 2, `key "a" specified more than once`),
		ok(rs("RSX2b", "D", 0, args(" key = value ")), 0, m{"key": "value"}),
		ok(rs("RSX2c", "D", 0, args("")), 0, m{}),
	}
	runGolden(t, cases)
}

// §4.2 TestRun: changes to peer1's bag, peer0's untouched.
func TestGoldenRelationSetRun(t *testing.T) {
	fixture := func() *fakeContext {
		f := newFakeContext(0, "", "")
		f.relations[0].local = map[string]string{"pristine": "untouched"}
		f.relations[1].local = map[string]string{"base": "value"}
		return f
	}
	bags := func(peer1 map[string]string) func(*testing.T, *fakeContext) {
		return func(t *testing.T, f *fakeContext) {
			if got := f.relations[1].local; !maps.Equal(got, peer1) {
				t.Errorf("peer1 u/0 = %v, want %v", got, peer1)
			}
			if got := f.relations[0].local; !maps.Equal(got, map[string]string{"pristine": "untouched"}) {
				t.Errorf("peer0 u/0 = %v", got)
			}
		}
	}
	runGolden(t, []gcase{
		{id: "RSR1", tag: "T", tool: "relation-set", ctx: fixture(), argv: args("-r", "1", "base="), check: bags(map[string]string{})},
		{id: "RSR2", tag: "T", tool: "relation-set", ctx: fixture(), argv: args("-r", "1", "foo=bar"), check: bags(map[string]string{"base": "value", "foo": "bar"})},
		{id: "RSR3", tag: "T", tool: "relation-set", ctx: fixture(), argv: args("-r", "1", "base=changed"), check: bags(map[string]string{"base": "changed"})},
	})
}

// RSH1: relation-set help at relid -1 and 0 (the -r default shown).
func TestGoldenRelationSetHelp(t *testing.T) {
	for _, tc := range []struct {
		id   string
		ctx  *fakeContext
		want string
	}{
		{"RSH1a", newFakeContext(-1, "", ""), "-r, --relation  (= )\n"},
		{"RSH1b", newFakeContext(0, "", ""), "-r, --relation  (= peer0:0)\n"},
	} {
		resp, err := Run(tc.ctx, Request{Command: "relation-set", Args: args("--help"), Dir: "/"})
		if err != nil || resp.Code != 0 || !strings.Contains(string(resp.Stdout), tc.want) {
			t.Errorf("%s: %d %q %v", tc.id, resp.Code, resp.Stdout, err)
		}
	}
}

// relationIDsFixture is §5's: relations 0, 1 and 2 on endpoint x, 3 on y,
// the hook running in relation relid.
func relationIDsFixture(relid int) *fakeContext {
	f := newFakeContext(relid, "", "")
	f.relations = map[int]*fakeRelation{}
	for id, ep := range []string{"x", "x", "x", "y"} {
		f.addRelation(id, ep)
	}
	return f
}

// §5 relation-ids.
func TestGoldenRelationIDs(t *testing.T) {
	ri := func(id, tag string, ctx *fakeContext, argv []string, exit int, stdout, stderr string) gcase {
		return gcase{id: id, tag: tag, tool: "relation-ids", ctx: ctx, argv: argv, exit: exit, stdout: stdout, stderr: stderr}
	}
	fx := relationIDsFixture
	dead0 := fx(1)
	dead0.relations[0].dead = true
	runGolden(t, []gcase{
		ri("RI01", "T", fx(-1), args(), 2, "", "ERROR no endpoint name specified\n"),
		ri("RI02", "T", fx(1), args(), 0, "x:0\nx:1\nx:2\n", ""),
		ri("RI03", "T", fx(-1), args("x"), 0, "x:0\nx:1\nx:2\n", ""),
		ri("RI04", "T", fx(-1), args("y"), 0, "y:3\n", ""),
		ri("RI05", "T", fx(-1), args("z"), 0, "", ""),
		ri("RI06", "T", fx(0), args("--format", "smart", "x"), 0, "x:0\nx:1\nx:2\n", ""),
		ri("RI07", "T", fx(0), args("--format", "smart", "y"), 0, "y:3\n", ""),
		ri("RI08", "T", fx(0), args("--format", "smart", "z"), 0, "", ""),
		ri("RI09", "T", fx(0), args("--format", "json", "x"), 0, "[\"x:0\",\"x:1\",\"x:2\"]\n", ""),
		ri("RI10", "T", fx(0), args("--format", "json", "y"), 0, "[\"y:3\"]\n", ""),
		ri("RI11", "T", fx(0), args("--format", "json", "z"), 0, "[]\n", ""),
		ri("RI12", "T", fx(0), args("--format", "yaml", "x"), 0, "- x:0\n- x:1\n- x:2\n", ""),
		ri("RI13", "T", fx(0), args("--format", "yaml", "y"), 0, "- y:3\n", ""),
		ri("RI14", "T", fx(0), args("--format", "yaml", "z"), 0, "[]\n", ""),
		ri("RI15", "T", fx(1), args(), 0, "x:0\nx:1\nx:2\n", ""),
		ri("RI16", "T", fx(1), args(), 0, "x:0\nx:1\nx:2\n", ""), // a dying relation is still listed
		ri("RI17", "T", dead0, args(), 0, "x:1\nx:2\n", ""),
		ri("RI18", "D", fx(-1), args("x", "y"), 2, "", "ERROR unrecognized args: [\"y\"]\n"),
	})
	// Sorted as strings, as Juju does.
	f := fx(-1)
	f.addRelation(10, "x")
	runGolden(t, []gcase{ri("RI-sort", "D", f, args("x"), 0, "x:0\nx:1\nx:10\nx:2\n", "")})
}

// §5 relation-ids help.
func TestGoldenRelationIDsHelp(t *testing.T) {
	for _, tc := range []struct {
		relid    int
		usage    string
		endpoint string
	}{
		{-1, "Usage: relation-ids [options] <name>\n", ""},
		{0, "Usage: relation-ids [options] [<name>]\n", "x"},
		{3, "Usage: relation-ids [options] [<name>]\n", "y"},
	} {
		resp, _ := Run(relationIDsFixture(tc.relid), Request{Command: "relation-ids", Args: args("-h"), Dir: "/"})
		out := string(resp.Stdout)
		if resp.Code != 0 || !strings.HasPrefix(out, tc.usage) {
			t.Errorf("relid %d: %q", tc.relid, out)
		}
		named := strings.Contains(out, "\nDetails:\nThe default endpoint of this hook is \""+tc.endpoint+"\".\n")
		if named != (tc.endpoint != "") {
			t.Errorf("relid %d: default endpoint: %q", tc.relid, out)
		}
	}
}

// §6 relation-list.
func TestGoldenRelationList(t *testing.T) {
	fx := func(relid int, members0, members1 []string) *fakeContext {
		f := newFakeContext(relid, "", "")
		for id, members := range [][]string{members0, members1} {
			f.relations[id].members = map[string]map[string]string{}
			for _, u := range members {
				f.relations[id].members[u] = nil
			}
		}
		return f
	}
	rl := func(id, tag string, ctx *fakeContext, argv []string, exit int, stdout, stderr string) gcase {
		return gcase{id: id, tag: tag, tool: "relation-list", ctx: ctx, argv: argv, exit: exit, stdout: stdout, stderr: stderr}
	}
	fbb := []string{"foo", "bar", "baz"}
	galaxy := fx(1, nil, nil)
	galaxy.relations[1].remoteApp = "galaxy"
	runGolden(t, []gcase{
		rl("RL01", "T", fx(-1, nil, nil), args(), 2, "", "ERROR no relation id specified\n"),
		rl("RL02", "T", fx(-1, nil, nil), args("-r", "bad"), 2, "", "ERROR invalid value \"bad\" for option -r: invalid relation id\n"),
		rl("RL03", "T", fx(-1, nil, nil), args("-r", "unknown:123"), 2, "", "ERROR invalid value \"unknown:123\" for option -r: relation not found\n"),
		rl("RL04", "T", fx(1, nil, nil), args("-r", "bad"), 2, "", "ERROR invalid value \"bad\" for option -r: invalid relation id\n"),
		rl("RL05", "T", fx(1, nil, nil), args("-r", "unknown:123"), 2, "", "ERROR invalid value \"unknown:123\" for option -r: relation not found\n"),
		rl("RL06", "T", fx(1, nil, nil), args(), 0, "", ""),
		rl("RL07", "T", fx(1, nil, fbb), args(), 0, "bar\nbaz\nfoo\n", ""),
		rl("RL08", "T", fx(1, []string{"pew", "pow", "paw"}, nil), args("-r", "ignored:0"), 0, "paw\npew\npow\n", ""),
		rl("RL09", "T", fx(1, nil, nil), args("--format", "smart"), 0, "", ""),
		rl("RL10", "T", fx(1, nil, fbb), args("--format", "smart"), 0, "bar\nbaz\nfoo\n", ""),
		rl("RL11", "T", fx(1, nil, nil), args("--format", "json"), 0, "[]\n", ""),
		rl("RL12", "T", fx(1, nil, fbb), args("--format", "json"), 0, "[\"bar\",\"baz\",\"foo\"]\n", ""),
		rl("RL13", "T", fx(1, nil, nil), args("--format", "yaml"), 0, "[]\n", ""),
		rl("RL14", "T", fx(1, nil, fbb), args("--format", "yaml"), 0, "- bar\n- baz\n- foo\n", ""),
		rl("RL15", "T", galaxy, args("--app"), 0, "galaxy\n", ""),
		rl("RL16", "D", fx(1, nil, nil), args("extra"), 2, "", "ERROR unrecognized args: [\"extra\"]\n"),
	})
	// Help: outside a relation hook the details say -r is needed; in one,
	// the -r default is shown and there are no details.
	resp, _ := Run(fx(-1, nil, nil), Request{Command: "relation-list", Args: args("--help"), Dir: "/"})
	if !strings.Contains(string(resp.Stdout), "\nDetails:\n") || !strings.Contains(string(resp.Stdout), "-r must name the relation") {
		t.Errorf("help at relid -1: %q", resp.Stdout)
	}
	resp, _ = Run(fx(0, nil, nil), Request{Command: "relation-list", Args: args("--help"), Dir: "/"})
	if strings.Contains(string(resp.Stdout), "Details:") || !strings.Contains(string(resp.Stdout), "(= peer0:0)") {
		t.Errorf("help at relid 0: %q", resp.Stdout)
	}
}

// §20 relation-model-get.
func TestGoldenRelationModelGet(t *testing.T) {
	runGolden(t, []gcase{
		{id: "RM01", tag: "T", tool: "relation-model-get", ctx: newFakeContext(0, "", ""), argv: args(), stdout: "uuid: deadbeef-0bad-400d-8000-4b1d0d06f00d\n"},
		{id: "RM02", tag: "T", tool: "relation-model-get", ctx: newFakeContext(0, "", ""), argv: args("--format", "json"), stdout: "{\"uuid\":\"deadbeef-0bad-400d-8000-4b1d0d06f00d\"}\n"},
		{id: "RM03", tag: "T~", tool: "relation-model-get", ctx: newFakeContext(-1, "", ""), argv: args(), exit: 2, stderr: "ERROR no relation id specified\n"},
	})
}

// Errors of the Context's writes (a size limit, say) are Run errors.
func TestRelationSetContextError(t *testing.T) {
	tooBig := newFakeContext(0, "", "")
	tooBig.relations[0].writeErr = errors.New("relation data too large: 16777300 bytes, limit 16777216")
	tooBigApp := newFakeContext(0, "", "")
	tooBigApp.leader = true
	tooBigApp.relations[0].writeErr = tooBig.relations[0].writeErr
	state := newFakeContext(-1, "", "")
	state.stateErr = errors.New(`value of "k" is too large`)
	runGolden(t, []gcase{
		{id: "RS-limit", tag: "-", tool: "relation-set", ctx: tooBig, argv: args("k=v"), exit: 1,
			stderr: "ERROR relation data too large: 16777300 bytes, limit 16777216\n"},
		{id: "RS-limit-app", tag: "-", tool: "relation-set", ctx: tooBigApp, argv: args("--app", "k=v"), exit: 1,
			stderr: "ERROR relation data too large: 16777300 bytes, limit 16777216\n"},
		{id: "SS-limit", tag: "-", tool: "state-set", ctx: state, argv: args("k=v"), exit: 1,
			stderr: "ERROR value of \"k\" is too large\n"},
	})
	// A missing --file is a Run error naming the file, relative to the
	// caller's directory: the client's error reading it, which is the one
	// Juju's tool would print.
	resp := clientRun(t, newFakeContext(0, "", ""), Request{Command: "relation-set", Args: args("--file", "nope"), Dir: "/charm"}, nil, newMemFiles())
	if resp.Code != 1 || string(resp.Stderr) != "ERROR open /charm/nope: file does not exist\n" {
		t.Errorf("missing file: %d %q", resp.Code, resp.Stderr)
	}
}

// Keys: one that is empty or holds "=" or white space is refused, in an
// argument (exit 2) as in the --file map (exit 1), with the text of Juju's
// leader-get for such a key. (Juju's relation-set has no such rule: a key
// with "=" written from a file could never be deleted with key= again.)
func TestRelationSetKeys(t *testing.T) {
	type m = map[string]string
	wrote := func(want m) func(t *testing.T, f *fakeContext) {
		return func(t *testing.T, f *fakeContext) {
			t.Helper()
			if w := f.relations[0].unitWrites; want == nil && len(w) != 0 || want != nil && (len(w) != 1 || !maps.Equal(w[0], want)) {
				t.Errorf("wrote %v, want %v", w, want)
			}
		}
	}
	rs := func(id string, argv []string, file string, exit int, stderr string, want m) gcase {
		c := gcase{id: id, tag: "-", tool: "relation-set", ctx: newFakeContext(0, "", ""), argv: argv,
			exit: exit, stderr: stderr, check: wrote(want)}
		if file != "" {
			c.files = map[string]string{"spam": file}
		}
		return c
	}
	file := args("--file", "spam")
	runGolden(t, []gcase{
		rs("RSK01", args("a b=c"), "", 2, "ERROR invalid key \"a b\"\n", nil),
		rs("RSK02", args("ok=1", "a\tb=c"), "", 2, "ERROR invalid key \"a\\tb\"\n", nil),
		rs("RSK03", args(" a = c "), "", 0, "", m{"a": "c"}),
		rs("RSK04", file, "{a=b: x}", 1, "ERROR invalid key \"a=b\"\n", nil),
		rs("RSK05", file, "{'a b': x, c: d}", 1, "ERROR invalid key \"a b\"\n", nil),
		rs("RSK06", file, "{'a=b': ''}", 1, "ERROR invalid key \"a=b\"\n", nil),
		rs("RSK07", file, "{'': x}", 1, "ERROR invalid key \"\"\n", nil),
		rs("RSK08", file, "{' a': x}", 1, "ERROR invalid key \" a\"\n", nil),
		rs("RSK09", file, "{\"a\\u00a0b\": x}", 1, "ERROR invalid key \"a\\u00a0b\"\n", nil),
		rs("RSK10", append(file, "k=v"), "{clé: é, x.y/z-_: '='}", 0, "", m{"clé": "é", "x.y/z-_": "=", "k": "v"}),
		func() gcase {
			c := rs("RSK11", args("--file", "-"), "", 1, "ERROR invalid key \"a=b\"\n", nil)
			c.stdin = str(`{"a=b": "x"}`)
			return c
		}(),
	})
}
