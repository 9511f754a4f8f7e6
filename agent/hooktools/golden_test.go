package hooktools

import (
	"os"
	"path/filepath"
	"testing"
)

// The golden tests replay the golden cases collected from Juju's own unit
// tests: byte-exact argv -> exit code, stdout and stderr. Each row is named
// by its case id in that collection and keeps its tag: T (asserted by
// Juju's test), T~ (bytes derived with Juju's formatter code) or D (derived
// from Juju's implementation). The sections (§n) are the collection's.
// Rows with ids of our own (COMnn, PEnn, ...) cover the rule lists that the
// collection gives without ids; a comment at each says which.

// gcase is one golden case.
type gcase struct {
	id   string
	tag  string // T, T~ or D
	tool string
	ctx  *fakeContext // the fixture; nil means newFakeContext(-1, "", "")
	argv []string

	stdin *string           // sent when the tool asks for stdin
	files map[string]string // files in the working directory before the run

	exit   int
	stdout string
	stderr string

	outFile string // a file the run must have written ...
	outData string // ... with exactly these bytes

	check func(t *testing.T, f *fakeContext) // effects on the context
}

// args makes an argv; args() is the empty one.
func args(a ...string) []string { return a }

// str returns a pointer to s (for gcase.stdin).
func str(s string) *string { return &s }

// runGolden runs each case as a subtest in a fresh working directory.
func runGolden(t *testing.T, cases []gcase) {
	t.Helper()
	seen := map[string]bool{}
	for _, c := range cases {
		if seen[c.id] {
			t.Fatalf("case id %s used twice", c.id)
		}
		seen[c.id] = true
		t.Run(c.id, func(t *testing.T) {
			f := c.ctx
			if f == nil {
				f = newFakeContext(-1, "", "")
			}
			resp := runCase(t, f, c)
			if resp.Code != c.exit || string(resp.Stdout) != c.stdout || string(resp.Stderr) != c.stderr {
				t.Errorf("%s [%s] %s %q:\n got exit=%d stdout=%q stderr=%q\nwant exit=%d stdout=%q stderr=%q",
					c.id, c.tag, c.tool, c.argv, resp.Code, resp.Stdout, resp.Stderr, c.exit, c.stdout, c.stderr)
			}
			if c.check != nil {
				c.check(t, f)
			}
		})
	}
}

// runCase runs one case through Run as the client would, in a fresh
// working directory that stands for the hook's: the client sends stdin
// and files when the tool asks for them, and writes the output file. It
// checks the output file if the case names one.
func runCase(t *testing.T, f *fakeContext, c gcase) Response {
	t.Helper()
	dir := t.TempDir()
	for name, data := range c.files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	resp := clientRun(t, f, Request{Command: c.tool, Args: c.argv, Dir: dir}, c.stdin, osFiles{})
	if c.outFile != "" {
		data, err := os.ReadFile(filepath.Join(dir, c.outFile))
		if err != nil {
			t.Fatalf("output file: %v", err)
		}
		if string(data) != c.outData {
			t.Errorf("output file %s = %q, want %q", c.outFile, data, c.outData)
		}
	}
	return resp
}

// osFiles is the test's own file system, standing for the hook's.
type osFiles struct{}

func (osFiles) ReadFile(path string) ([]byte, error) { return os.ReadFile(path) }

func (osFiles) WriteFile(path string, data []byte) error {
	return os.WriteFile(path, data, 0o666)
}

// initTool parses argv and runs init of a tool, without running it: the
// equivalent of Juju's TestInit cases, which check the parsed fields.
func initTool(ctx Context, name string, argv []string) (command, error) {
	newCmd, ok := lookup(name)
	if !ok {
		panic("no tool " + name)
	}
	cmd := newCmd(ctx)
	fs := newFlagSet()
	cmd.setFlags(fs)
	rest, err := fs.parse(argv)
	if err != nil {
		return cmd, err
	}
	return cmd, cmd.init(rest)
}

// §1: rules shared by every hook tool. The collection lists them without
// ids; COMnn number them in its order.
func TestGoldenCommon(t *testing.T) {
	runGolden(t, []gcase{
		{id: "COM01", tag: "T", tool: "relation-get", argv: args("--bogus"), exit: 2, stderr: "ERROR option provided but not defined: --bogus\n"},
		{id: "COM02", tag: "D", tool: "relation-get", argv: args("-x"), exit: 2, stderr: "ERROR option provided but not defined: -x\n"},
		{id: "COM03", tag: "D", tool: "open-port", argv: args("-42"), exit: 2, stderr: "ERROR option provided but not defined: -4\n"},
		{id: "COM04", tag: "T~", tool: "juju-log", argv: args("-l"), exit: 2, stderr: "ERROR option needs an argument: -l\n"},
		{id: "COM05", tag: "D", tool: "config-get", argv: args("--format"), exit: 2, stderr: "ERROR option needs an argument: --format\n"},
		{id: "COM06", tag: "T", tool: "is-leader", argv: args("--format", "bad"), exit: 2, stderr: "ERROR invalid value \"bad\" for option --format: unknown format \"bad\"\n"},
		{id: "COM07", tag: "D", tool: "relation-get", ctx: newFakeContext(1, "m/0", ""), argv: args("--app=maybe"), exit: 2, stderr: "ERROR invalid value \"maybe\" for option --app: strconv.ParseBool: parsing \"maybe\": invalid syntax\n"},
		{id: "COM08", tag: "T~", tool: "is-leader", argv: args("extra"), exit: 2, stderr: "ERROR unrecognized args: [\"extra\"]\n"},
		// §1.1: unknown format and the --format=json syntax (nil value).
		{id: "FMT01", tag: "T", tool: "config-get", argv: args("--format", "cuneiform"), exit: 2, stderr: "ERROR invalid value \"cuneiform\" for option --format: unknown format \"cuneiform\"\n"},
		{id: "FMT02", tag: "T", tool: "config-get", argv: args("--format=json", "missing"), exit: 0, stdout: "null\n"},
		// §1.2: the server's unknown-option case, through a hook tool.
		{id: "SRV01", tag: "T", tool: "goal-state", argv: args("--cheese"), exit: 2, stderr: "ERROR option provided but not defined: --cheese\n"},
	})
}

// §1.2: an unknown or missing command is a transport-level error.
func TestUnknownCommand(t *testing.T) {
	_, err := Run(newFakeContext(-1, "", ""), Request{Command: "witchcraft", Dir: "/"})
	if err == nil || err.Error() != `unknown command "witchcraft"` {
		t.Fatalf("err = %v", err)
	}
	if "bad request: "+err.Error() != `bad request: unknown command "witchcraft"` {
		t.Fatal("server text")
	}
	if _, err := Run(newFakeContext(-1, "", ""), Request{Dir: "/"}); err == nil || err.Error() != "command not specified" {
		t.Fatalf("err = %v", err)
	}
}

// §1.2: a tool that reads stdin asks for it when none was sent, and has no
// effect until it gets it.
func TestNeedStdin(t *testing.T) {
	f := newFakeContext(0, "", "")
	resp, err := Run(f, Request{Command: "relation-set", Args: args("--file", "-"), Dir: "/"})
	if err != nil || !resp.NeedStdin {
		t.Fatalf("resp = %+v, err = %v", resp, err)
	}
	if got := f.relations[0].local["foo"]; got != "" {
		t.Fatalf("wrote before stdin: %q", got)
	}
	resp, err = Run(f, Request{Command: "relation-set", Args: args("--file", "-"), Dir: "/", Stdin: []byte("foo: bar"), StdinSet: true})
	if err != nil || resp.NeedStdin || resp.Code != 0 {
		t.Fatalf("resp = %+v, err = %v", resp, err)
	}
	if got := f.relations[0].local["foo"]; got != "bar" {
		t.Fatalf("foo = %q", got)
	}
}

// panicking is a Context that fails badly.
type panicking struct{ *fakeContext }

func (panicking) IsLeader() (bool, error) { panic("lease table corrupt") }

// A panic fails the tool, not the agent.
func TestRunRecoversPanic(t *testing.T) {
	resp, err := Run(panicking{newFakeContext(-1, "", "")}, Request{Command: "is-leader", Dir: "/"})
	if err != nil || resp.Code != 1 || string(resp.Stderr) != "ERROR internal error in is-leader: lease table corrupt\n" {
		t.Fatalf("%+v %v", resp, err)
	}
}
