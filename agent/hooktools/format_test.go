package hooktools

import (
	"strings"
	"testing"
)

// §1.1: Juju's formatter table (internal/cmd/output_test.go).
func TestFormatters(t *testing.T) {
	type jujuPuppet struct {
		Juju   int
		Puppet bool
	}
	for _, tc := range []struct {
		name              string
		value             any
		smart, yaml, json string
	}{
		{"nil", nil, "", "", "null\n"},
		{"empty string", "", "", "\"\"\n", "\"\"\n"},
		{"1", 1, "1\n", "1\n", "1\n"},
		{"-1", -1, "-1\n", "-1\n", "-1\n"},
		{"1.1", 1.1, "1.1\n", "1.1\n", "1.1\n"},
		{"10000000", 10000000, "10000000\n", "10000000\n", "10000000\n"},
		{"true", true, "True\n", "true\n", "true\n"},
		{"false", false, "False\n", "false\n", "false\n"},
		{"hello", "hello", "hello\n", "hello\n", "\"hello\"\n"},
		{"newlines", "\n\n\n", "\n\n\n\n", "|2+\n", "\"\\n\\n\\n\"\n"},
		{"colon", "foo: bar", "foo: bar\n", "'foo: bar'\n", "\"foo: bar\"\n"},
		{"empty list", []string{}, "", "[]\n", "[]\n"},
		{"list", []string{"blam", "dink"}, "blam\ndink\n", "- blam\n- dink\n", "[\"blam\",\"dink\"]\n"},
		{"map", map[string]string{"foo": "bar"}, "foo: bar\n", "foo: bar\n", "{\"foo\":\"bar\"}\n"},
		{"struct", jujuPuppet{1, false}, "juju: 1\npuppet: false\n", "juju: 1\npuppet: false\n", "{\"Juju\":1,\"Puppet\":false}\n"},
		// The notes of §1.1.
		{"number-like string", "12345", "12345\n", "\"12345\"\n", "\"12345\"\n"},
		{"mac address", "00:11:22:33:44:22", "00:11:22:33:44:22\n", "\"00:11:22:33:44:22\"\n", "\"00:11:22:33:44:22\"\n"},
		{"float 45", 45.0, "45\n", "45\n", "45\n"},
		{"nil map value", map[string]any{"empty": nil}, "empty: null\n", "empty: null\n", "{\"empty\":null}\n"},
		{"sorted keys", map[string]any{"b": 1, "a": "x"}, "a: x\nb: 1\n", "a: x\nb: 1\n", "{\"a\":\"x\",\"b\":1}\n"},
	} {
		for _, f := range []struct {
			format string
			want   string
		}{{"smart", tc.smart}, {"yaml", tc.yaml}, {"json", tc.json}} {
			got, err := formatterFor(f.format)(tc.value)
			if err != nil || string(got) != f.want {
				t.Errorf("%s %s: got %q (%v), want %q", tc.name, f.format, got, err, f.want)
			}
		}
	}
}

// §1.3: the help layout, shown with is-leader.
func TestHelpLayout(t *testing.T) {
	resp, err := Run(newFakeContext(-1, "", ""), Request{Command: "is-leader", Args: args("--help"), Dir: "/"})
	if err != nil || resp.Code != 0 || len(resp.Stderr) != 0 {
		t.Fatalf("%+v %v", resp, err)
	}
	i := newIsLeader(nil).info()
	want := "Usage: is-leader [options]\n" +
		"\nSummary:\n" + strings.TrimSpace(i.purpose) + "\n" +
		"\nOptions:\n" +
		"--format  (= smart)\n    Specify output format (json|smart|yaml)\n" +
		"-o, --output (= \"\")\n    Specify an output file\n" +
		"\nDetails:\n" + strings.TrimSpace(i.doc) + "\n" +
		"\nExamples:\n" + i.examples
	if string(resp.Stdout) != want {
		t.Errorf("help:\n%s\nwant:\n%s", resp.Stdout, want)
	}
}

// Every tool's --help and -h exit 0 with the usage on stdout; a tool
// without options has no [options] and no Options section.
func TestEveryToolHelp(t *testing.T) {
	for _, name := range Names() {
		for _, flag := range []string{"--help", "-h"} {
			resp, err := Run(newFakeContext(0, "u/1", ""), Request{Command: name, Args: args(flag), Dir: "/"})
			if err != nil || resp.Code != 0 || len(resp.Stderr) != 0 {
				t.Fatalf("%s %s: %+v %v", name, flag, resp, err)
			}
			out := string(resp.Stdout)
			if !strings.HasPrefix(out, "Usage: "+name) || !strings.Contains(out, "\nSummary:\n") {
				t.Errorf("%s %s: %q", name, flag, out)
			}
			hasOptions := strings.Contains(out, "\nOptions:\n")
			if hasOptions != strings.HasPrefix(out, "Usage: "+name+" [options]") {
				t.Errorf("%s: usage line and options section disagree: %q", name, out)
			}
		}
	}
	// Help wins over later errors, not earlier ones.
	resp, _ := Run(newFakeContext(-1, "", ""), Request{Command: "relation-get", Args: args("--help", "--bogus"), Dir: "/"})
	if resp.Code != 0 {
		t.Errorf("--help --bogus: %+v", resp)
	}
	resp, _ = Run(newFakeContext(-1, "", ""), Request{Command: "relation-get", Args: args("--bogus", "--help"), Dir: "/"})
	if resp.Code != 2 {
		t.Errorf("--bogus --help: %+v", resp)
	}
}

// Names lists the tools sorted and every name runs.
func TestNames(t *testing.T) {
	names := Names()
	want := []string{
		"action-fail", "action-get", "action-log", "action-set",
		"application-version-set", "close-port", "config-get", "goal-state", "is-leader", "juju-log",
		"leader-get", "leader-set", "network-get", "open-port", "opened-ports", "relation-get",
		"relation-ids", "relation-list", "relation-model-get", "relation-set",
		"secret-add", "secret-get", "secret-grant", "secret-ids", "secret-info-get", "secret-remove", "secret-revoke", "secret-set",
		"state-delete",
		"state-get", "state-set", "status-get", "status-set", "unit-get",
	}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Fatalf("Names() = %q", names)
	}
}

// -o/--output: a relative path is taken from the caller's directory, an
// absolute one as is; the output file the client is to write gets exactly
// the bytes stdout would have had (an empty file for a nil value), and
// stdout gets nothing. The tool itself writes no file: the client does.
func TestOutputFile(t *testing.T) {
	f := newFakeContext(-1, "", "")
	for _, tc := range []struct {
		argv []string
		path string
		data string
	}{
		{args("-o", "out", "title"), "/charm/out", "My Title\n"},
		{args("--output=sub/../x", "--format=json", "monsters"), "/charm/x", "false\n"},
		{args("-o/abs//file", "missing"), "/abs//file", ""},
	} {
		resp, err := Run(f, Request{Command: "config-get", Args: tc.argv, Dir: "/charm", ClientFiles: true})
		if err != nil || resp.Code != 0 || len(resp.Stdout)+len(resp.Stderr) != 0 {
			t.Fatalf("%q: %+v %v", tc.argv, resp, err)
		}
		if resp.OutputPath != tc.path || string(resp.Output) != tc.data {
			t.Errorf("%q: output %q to %q, want %q to %q", tc.argv, resp.Output, resp.OutputPath, tc.data, tc.path)
		}
	}
	resp, err := Run(f, Request{Command: "config-get", Args: args("title"), Dir: "/charm", ClientFiles: true})
	if err != nil || string(resp.Stdout) != "My Title\n" || resp.OutputPath != "" || resp.Output != nil {
		t.Errorf("without -o: %+v %v", resp, err)
	}
}

// A client that does not write output files itself (an older jujuc) gets
// an error, not a tool that writes the file in the agent's file system.
func TestOutputFileNeedsAClientThatWritesIt(t *testing.T) {
	resp, err := Run(newFakeContext(-1, "", ""), Request{Command: "config-get", Args: args("-o", "out", "title"), Dir: "/charm"})
	if err != nil || resp.Code != 1 || string(resp.Stderr) != "ERROR "+errNoClientFiles.Error()+"\n" || resp.OutputPath != "" {
		t.Errorf("got %+v %v", resp, err)
	}
}
