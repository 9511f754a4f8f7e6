package hooktools

import (
	"strings"
	"testing"
	"time"
)

// fuzzFixture is a context with something behind every tool.
func fuzzFixture() *fakeContext {
	f := relationGetFixture(1, "m/0", "")
	f.leader = true
	f.leaderSettings = map[string]string{"k": "v"}
	f.state["one"] = "two"
	f.network = networkFixture().network
	f.unitStatus = Status{Status: "active", Data: map[string]any{"a": 1}}
	f.unitStatuses = map[string]Status{"u/0": {Status: "active"}}
	_ = f.OpenPort("", PortRange{80, 80, "tcp"})
	since := time.Unix(0, 0)
	f.goalState = GoalState{Units: map[string]GoalStatus{"u/0": {Status: "active", Since: &since}}}
	return f
}

// splitArgv turns the fuzzer's string into an argv (NUL-separated).
func splitArgv(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, "\x00")
}

// FuzzRun runs every tool with arbitrary arguments and stdin: no panic,
// exit code 0, 1 or 2, and an error line on stderr whenever the code is 2.
func FuzzRun(f *testing.F) {
	seeds := []string{
		"", "--help", "-h", "--format=json", "-r\x00db:1\x00-\x00m/0\x00--app", "--app=True", "-42", "--",
		"--\x00-x", "-rX", "-abc", "--file\x00-", "--file\x00spam", "-o\x00out\x00key", "foo=bar\x00=x\x00a=1\x00a=2",
		"known-extra\x00--primary-address\x00--bind-address", "80/tcp\x00--endpoints\x00a, b", "icmp/udp", "10-5",
		"--log-level\x00bogus\x00--\x00msg", "--application=False\x00active\x00--\x00msg", "--all\x00key", "--strict\x00zzz",
		"private-address", "-\x00u/1", "--app\x00-\x00unit//0", "--format\x00cuneiform", "---", "--=", "-é",
	}
	names := Names()
	for i, s := range seeds {
		f.Add(uint8(i), s, "{a: b}")
		f.Add(uint8(i+7), s, "[")
	}
	f.Fuzz(func(t *testing.T, tool uint8, argv, stdin string) {
		name := names[int(tool)%len(names)]
		ctx := fuzzFixture()
		files := newMemFiles()
		files.files["/charm/spam"] = []byte(stdin)
		req := Request{Command: name, Args: splitArgv(argv), Dir: "/charm"}
		resp := clientRun(t, ctx, req, &stdin, files)
		switch resp.Code {
		case 0:
		case 1, 2:
			if !strings.Contains(string(resp.Stderr), "ERROR ") || !strings.HasSuffix(string(resp.Stderr), "\n") {
				t.Fatalf("%s %q: exit %d with stderr %q", name, req.Args, resp.Code, resp.Stderr)
			}
			if resp.Code == 2 && len(resp.Stdout) != 0 {
				t.Fatalf("%s %q: exit 2 with stdout %q", name, req.Args, resp.Stdout)
			}
		default:
			t.Fatalf("%s %q: exit %d", name, req.Args, resp.Code)
		}
	})
}

// FuzzParse checks the option parser alone: no panic, and on success the
// positional arguments are a subsequence of the input.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "-abr\x007", "x\x00--app=True\x00y", "--\x00-a", "-r", "--relation=", "-\x00\x00-a", "--=x", "-h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, argv string) {
		var tf testFlags
		in := splitArgv(argv)
		positional, err := tf.set().parse(in)
		if err != nil {
			return
		}
		i := 0
		for _, p := range positional {
			for i < len(in) && in[i] != p {
				i++
			}
			if i == len(in) {
				t.Fatalf("%q: positional %q not in input order", in, positional)
			}
			i++
		}
	})
}
