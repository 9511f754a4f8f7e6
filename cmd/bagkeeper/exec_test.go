package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

func TestExecUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		text string
	}{
		{[]string{"exec"}, 2, "expected UNIT -- COMMAND"},
		{[]string{"exec", "app/0"}, 2, "no command given"},
		{[]string{"exec", "app/0", "--"}, 2, "no command given"},
		{[]string{"exec", "--all"}, 2, "no command given"},
		{[]string{"exec", "app/0", "--", " "}, 2, "the command is empty"},
		{[]string{"exec", "--timeout", "0s", "app/0", "--", "true"}, 2, "--timeout must be positive"},
		{[]string{"exec", "--format", "yaml", "app/0", "--", "true"}, 2, "--format must be one of plain, json"},
	} {
		e, _, errb := testEnv(nil)
		if code := runMain(e, c.args); code != c.code || !strings.Contains(errb.String(), c.text) {
			t.Errorf("%q: exit %d, stderr %q; want %d with %q", c.args, code, errb.String(), c.code, c.text)
		}
	}
	e, out, _ := testEnv(nil)
	if code := runMain(e, []string{"exec", "--help"}); code != 0 || !strings.Contains(out.String(), "--all") || !strings.Contains(out.String(), "not an action context") {
		t.Fatalf("help: %d %q", code, out.String())
	}
}

// Several arguments are one command with its arguments, each kept as it
// is by the shell that runs it.
func TestExecArgumentsAreQuotedForTheShell(t *testing.T) {
	args := []string{"printf", "%s|", "a b", "$HOME", "it's", "", "`x`", "--flag=1", "*"}
	out, err := exec.Command("/bin/sh", "-c", shellJoin(args)).Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Join(args[2:], "|") + "|"; string(out) != want {
		t.Fatalf("%q through the shell gave %q, want %q", shellJoin(args), out, want)
	}
}

// The exit status is the command's; a command with none (timed out) fails.
func TestExecResultFromTheActionsResults(t *testing.T) {
	o := execResult("app/0", &adminpb.Action{Status: "failed", Message: "exit status 3", ResultsJson: []byte(`{"return-code":3,"stdout":"out","stderr":"AAE=","stderr-encoding":"base64"}`)})
	if o.Code == nil || *o.Code != 3 || o.Stdout != "out" || o.Stderr != "\x00\x01" || o.Message != "" {
		t.Fatalf("%+v", o)
	}
	o = execResult("app/0", &adminpb.Action{Status: "failed", Message: "timed out after 1s", ResultsJson: []byte(`{"stdout":"x"}`)})
	if o.Code != nil || o.Message != "timed out after 1s" {
		t.Fatalf("%+v", o)
	}
}
