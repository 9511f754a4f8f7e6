package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

func TestActionParamsAreYAMLScalarsWithDottedKeys(t *testing.T) {
	file := writeFile(t, "target: disk\ncount: 1\nopts:\n  fast: false\n")
	got, err := actionParams(file, []string{"count=3", "name='007'", "flag=true", "opts.level=2", "empty=", "ratio=0.5"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(got)
	want := `{"count":3,"empty":"","flag":true,"name":"007","opts":{"fast":false,"level":2},"ratio":0.5,"target":"disk"}`
	if string(b) != want {
		t.Fatalf("%s\nwant %s", b, want)
	}
	if _, err := actionParams("", []string{"novalue"}); err == nil || !strings.Contains(err.Error(), `argument "novalue" must be of the form key=value`) {
		t.Fatalf("%v", err)
	}
}

func TestActionsUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		text string
	}{
		{[]string{"actions"}, 2, "expected 'actions run', 'actions show' or 'actions list'"},
		{[]string{"actions", "frob"}, 2, `unknown subcommand "frob"`},
		{[]string{"actions", "run", "app/0"}, 2, "expected UNIT ACTION [key=value ...]"},
		{[]string{"actions", "run", "--format", "xml", "app/0", "x"}, 2, "--format must be one of plain, yaml, json"},
		{[]string{"actions", "show"}, 2, "expected exactly one action ID"},
		{[]string{"actions", "show", "abc"}, 2, `invalid action ID "abc"`},
		{[]string{"actions", "list", "extra"}, 2, "unexpected arguments"},
	} {
		e, _, errb := testEnv(nil)
		if code := runMain(e, c.args); code != c.code || !strings.Contains(errb.String(), c.text) {
			t.Errorf("%q: exit %d, stderr %q; want %d with %q", c.args, code, errb.String(), c.code, c.text)
		}
	}
	e, out, _ := testEnv(nil)
	if code := runMain(e, []string{"actions", "run", "--help"}); code != 0 || !strings.Contains(out.String(), "--background") {
		t.Fatalf("help: %d %q", code, out.String())
	}
}

func TestActionResultPrintedAsJujuRunAndShowTask(t *testing.T) {
	t0 := int64(1764547200) * 1e9 // 2025-12-01 00:00:00 UTC
	act := &adminpb.Action{
		Id: 7, Unit: "web/1", Name: "greet", Status: "failed", Message: "disk full",
		ParamsJson:       []byte(`{"times":3}`),
		ResultsJson:      []byte(`{"greeting":"hello","return-code":0,"stdout":"out\n","stderr":"err\n"}`),
		Log:              []*adminpb.ActionLogLine{{TimeUnixNano: t0 + 1e9, Message: "halfway"}},
		EnqueuedUnixNano: t0, StartedUnixNano: t0 + 1e9, CompletedUnixNano: t0 + 2e9, Pod: "web-1",
	}
	e, out, errb := testEnv(nil)
	if err := printRunResult(e, act, "plain"); err != nil {
		t.Fatal(err)
	}
	if out.String() != "greeting: hello\nout\n" || errb.String() != "err\nAction id 7 failed: disk full\n" {
		t.Fatalf("plain: stdout %q stderr %q", out.String(), errb.String())
	}
	e, out, _ = testEnv(nil)
	if err := printRunResult(e, act, "yaml"); err != nil {
		t.Fatal(err)
	}
	want := `web/1:
  action: greet
  id: "7"
  log:
    - 2025-12-01 00:00:01 +0000 UTC halfway
  message: disk full
  parameters:
    times: 3
  pod: web-1
  results:
    greeting: hello
    return-code: 0
    stderr: |
      err
    stdout: |
      out
  status: failed
  timing:
    completed: 2025-12-01 00:00:02 +0000 UTC
    enqueued: 2025-12-01 00:00:00 +0000 UTC
    started: 2025-12-01 00:00:01 +0000 UTC
  unit: web/1
`
	if out.String() != want {
		t.Fatalf("yaml:\n%s\nwant:\n%s", out.String(), want)
	}
	if returnCode(act) != 0 {
		t.Fatal("return code")
	}
}
