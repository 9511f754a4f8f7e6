package hooktools

import (
	"reflect"
	"testing"
)

// fakeAction is a Context running an action.
type fakeAction struct {
	*fakeContext
	params  map[string]any
	results map[string]any
	log     []string
	message string
	failed  bool
}

func newFakeAction(params map[string]any) *fakeAction {
	return &fakeAction{fakeContext: newFakeContext(-1, "", ""), params: params, results: map[string]any{}}
}

func (f *fakeAction) ActionParams() (map[string]any, error) { return f.params, nil }
func (f *fakeAction) UpdateActionResults(keys []string, value string) error {
	SetActionResult(f.results, keys, value)
	return nil
}
func (f *fakeAction) LogActionMessage(m string) error { f.log = append(f.log, m); return nil }
func (f *fakeAction) SetActionMessage(m string) error { f.message = m; return nil }
func (f *fakeAction) SetActionFailed() error          { f.failed = true; return nil }

// runAction runs one tool against ctx and checks exit code and output.
func runAction(t *testing.T, ctx Context, id, tool string, argv []string, exit int, stdout, stderr string) {
	t.Helper()
	resp, err := Run(ctx, Request{Command: tool, Args: argv, Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	if resp.Code != exit || string(resp.Stdout) != stdout || string(resp.Stderr) != stderr {
		t.Errorf("%s %s %q:\n got exit=%d stdout=%q stderr=%q\nwant exit=%d stdout=%q stderr=%q",
			id, tool, argv, resp.Code, resp.Stdout, resp.Stderr, exit, stdout, stderr)
	}
}

// The action tools outside an action fail as Juju's do.
func TestGoldenActionToolsOutsideAnAction(t *testing.T) {
	f := newFakeContext(-1, "", "")
	runAction(t, f, "ACT01", "action-get", args(), 1, "", "ERROR not running an action\n")
	runAction(t, f, "ACT02", "action-set", args("a=b"), 1, "", "ERROR not running an action\n")
	runAction(t, f, "ACT03", "action-log", args("hello"), 1, "", "ERROR not running an action\n")
	runAction(t, f, "ACT04", "action-fail", args(), 1, "", "ERROR not running an action\n")
}

func TestGoldenActionGet(t *testing.T) {
	f := newFakeAction(map[string]any{
		"outfile": map[string]any{"name": "foo.bz2", "format": "bz2"},
		"count":   int64(3),
		"force":   true,
	})
	runAction(t, f, "AG01", "action-get", args(), 0, "count: 3\nforce: true\noutfile:\n  format: bz2\n  name: foo.bz2\n", "")
	runAction(t, f, "AG02", "action-get", args("outfile.name"), 0, "foo.bz2\n", "")
	runAction(t, f, "AG03", "action-get", args("outfile"), 0, "format: bz2\nname: foo.bz2\n", "")
	runAction(t, f, "AG04", "action-get", args("force"), 0, "True\n", "")
	runAction(t, f, "AG05", "action-get", args("missing"), 0, "", "")
	runAction(t, f, "AG06", "action-get", args("count.deeper"), 0, "", "")
	runAction(t, f, "AG07", "action-get", args("--format", "json"), 0, `{"count":3,"force":true,"outfile":{"format":"bz2","name":"foo.bz2"}}`+"\n", "")
	runAction(t, f, "AG08", "action-get", args("--format=json", "missing"), 0, "null\n", "")
	runAction(t, f, "AG09", "action-get", args("--format", "yaml", "count"), 0, "3\n", "")
	runAction(t, f, "AG10", "action-get", args("a", "b"), 2, "", "ERROR unrecognized args: [\"b\"]\n")
	runAction(t, newFakeAction(nil), "AG11", "action-get", args(), 0, "{}\n", "")
	runAction(t, newFakeAction(nil), "AG12", "action-get", args("--format", "json"), 0, "{}\n", "")
}

func TestGoldenActionSet(t *testing.T) {
	f := newFakeAction(nil)
	runAction(t, f, "AS01", "action-set", args("outfile.size=10G", "foo.bar=2", "foo.baz.val=3", "foo.bar.zab=4", "foo.baz=1", "empty="), 0, "", "")
	want := map[string]any{
		"outfile": map[string]any{"size": "10G"},
		"foo":     map[string]any{"bar": map[string]any{"zab": "4"}, "baz": "1"},
		"empty":   "",
	}
	if !reflect.DeepEqual(f.results, want) {
		t.Fatalf("results %v, want %v", f.results, want)
	}
	runAction(t, f, "AS02", "action-set", args("result"), 2, "", "ERROR argument \"result\" must be of the form key...=value\n")
	runAction(t, f, "AS03", "action-set", args("Result=x"), 2, "", "ERROR key \"Result\" must start and end with lowercase alphanumeric, and contain only lowercase alphanumeric, hyphens and periods\n")
	runAction(t, f, "AS04", "action-set", args("a..b=x"), 2, "", "ERROR key \"\" must start and end with lowercase alphanumeric, and contain only lowercase alphanumeric, hyphens and periods\n")
	runAction(t, f, "AS05", "action-set", args("foo-=x"), 2, "", "ERROR key \"foo-\" must start and end with lowercase alphanumeric, and contain only lowercase alphanumeric, hyphens and periods\n")
	runAction(t, f, "AS06", "action-set", args("stdout=x"), 2, "", "ERROR cannot set reserved action key \"stdout\"\n")
	runAction(t, f, "AS07", "action-set", args("a.stderr-encoding=x"), 2, "", "ERROR cannot set reserved action key \"stderr-encoding\"\n")
	runAction(t, f, "AS08", "action-set", args("ok=1", "bad_key=2"), 2, "", "ERROR key \"bad_key\" must start and end with lowercase alphanumeric, and contain only lowercase alphanumeric, hyphens and periods\n")
	if _, ok := f.results["ok"]; ok {
		t.Fatal("a refused action-set set a key")
	}
	runAction(t, f, "AS09", "action-set", args("eq=a=b"), 0, "", "")
	if f.results["eq"] != "a=b" {
		t.Fatalf("%v", f.results)
	}
	runAction(t, f, "AS10", "action-set", args(), 0, "", "")
}

func TestGoldenActionLogAndFail(t *testing.T) {
	f := newFakeAction(nil)
	runAction(t, f, "AL01", "action-log", args(), 2, "", "ERROR no message specified\n")
	runAction(t, f, "AL02", "action-log", args("halfway", "there"), 0, "", "")
	if !reflect.DeepEqual(f.log, []string{"halfway there"}) {
		t.Fatalf("%q", f.log)
	}
	runAction(t, f, "AF01", "action-fail", args("a", "b"), 2, "", "ERROR unrecognized args: [\"b\"]\n")
	if f.failed {
		t.Fatal("a refused action-fail failed the action")
	}
	runAction(t, f, "AF02", "action-fail", args(), 0, "", "")
	if !f.failed || f.message != "action failed without reason given, check action for errors" {
		t.Fatalf("%v %q", f.failed, f.message)
	}
	runAction(t, f, "AF03", "action-fail", args("disk full"), 0, "", "")
	if f.message != "disk full" {
		t.Fatalf("%q", f.message)
	}
}
