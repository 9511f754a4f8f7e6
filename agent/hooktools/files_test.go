package hooktools

import (
	"go/build"
	"reflect"
	"strings"
	"testing"
)

// The tools never open a path: the package does not even import what
// could. Files named on a tool's command line are in the hook's file
// system, which the client reads and writes.
func TestToolsCannotOpenFiles(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		switch {
		case imp == "os", imp == "io/ioutil", imp == "syscall", imp == "path/filepath",
			strings.HasPrefix(imp, "os/"), strings.HasPrefix(imp, "golang.org/x/sys"):
			t.Errorf("hooktools imports %s", imp)
		}
	}
}

// --file PATH: the tool asks the client for the file, by its absolute path
// in the caller's file system, and runs with what the client sends.
func TestFileIsAskedOfTheClient(t *testing.T) {
	for _, tc := range []struct {
		tool, arg, want string
	}{
		{"relation-set", "settings.yaml", "/charm/settings.yaml"},
		{"relation-set", "../x/./y", "/x/y"},
		{"state-set", "/abs//s.yaml", "/abs//s.yaml"},
	} {
		f := newFakeContext(0, "", "")
		req := Request{Command: tc.tool, Args: args("--file", tc.arg, "k=over"), Dir: "/charm", ClientFiles: true}
		resp, err := Run(f, req)
		if err != nil || !reflect.DeepEqual(resp, Response{NeedFile: tc.want}) {
			t.Fatalf("%s --file %s: got %+v %v, want NeedFile %q and nothing else", tc.tool, tc.arg, resp, err, tc.want)
		}
		req.FilePath, req.File = tc.want, []byte("{a: b, k: v}")
		if resp, err = Run(f, req); err != nil || resp.Code != 0 || len(resp.Stderr) != 0 {
			t.Fatalf("%s --file %s with the file: %+v %v", tc.tool, tc.arg, resp, err)
		}
		got := f.relations[0].local
		if tc.tool == "state-set" {
			got = f.state
		}
		if got["a"] != "b" || got["k"] != "over" {
			t.Errorf("%s: wrote %v", tc.tool, got)
		}
	}
}

// The client's error reading the file is the tool's error, exactly as the
// client worded it (Juju's tool prints os.ReadFile's error).
func TestFileErrorIsTheToolsError(t *testing.T) {
	f := newFakeContext(0, "", "")
	resp, err := Run(f, Request{
		Command: "relation-set", Args: args("--format=x", "--file", "s"), Dir: "/charm", ClientFiles: true,
		FilePath: "/charm/s", FileErr: "open /charm/s: permission denied",
	})
	want := "--format flag deprecated for command \"relation-set\"ERROR open /charm/s: permission denied\n"
	if err != nil || resp.Code != 1 || string(resp.Stderr) != want || len(f.relations[0].unitWrites) != 0 {
		t.Errorf("got %+v %v, want exit 1 and stderr %q", resp, err, want)
	}
}

// A file sent for another path than the tool reads is not used: the tool
// asks again.
func TestFileForAnotherPathIsNotUsed(t *testing.T) {
	resp, err := Run(newFakeContext(0, "", ""), Request{
		Command: "relation-set", Args: args("--file", "s"), Dir: "/charm", ClientFiles: true,
		FilePath: "/etc/s", File: []byte("{a: b}"),
	})
	if err != nil || resp.NeedFile != "/charm/s" {
		t.Errorf("got %+v %v", resp, err)
	}
}

// A client that does not read files itself (an older jujuc) gets an error,
// not a tool that reads the agent's file system.
func TestFileNeedsAClientThatReadsIt(t *testing.T) {
	f := newFakeContext(0, "", "")
	resp, err := Run(f, Request{Command: "relation-set", Args: args("--file", "/etc/passwd"), Dir: "/charm"})
	if err != nil || resp.Code != 1 || string(resp.Stderr) != "ERROR "+errNoClientFiles.Error()+"\n" || resp.NeedFile != "" {
		t.Errorf("got %+v %v", resp, err)
	}
}

// What the client sends is bounded as the client bounds it: a file or
// stdin over MaxFileSize fails the tool, whoever sent it.
func TestInputOverTheLimit(t *testing.T) {
	big := []byte("a: " + strings.Repeat("x", MaxFileSize-3+1))
	f := newFakeContext(0, "", "")
	resp, err := Run(f, Request{
		Command: "relation-set", Args: args("--file", "s"), Dir: "/charm", ClientFiles: true,
		FilePath: "/charm/s", File: big,
	})
	if want := "ERROR file /charm/s is over the 16777216 byte limit\n"; err != nil || resp.Code != 1 || string(resp.Stderr) != want {
		t.Errorf("file: got exit %d stderr %q %v, want %q", resp.Code, resp.Stderr, err, want)
	}
	resp, err = Run(f, Request{Command: "relation-set", Args: args("--file", "-"), Dir: "/charm", Stdin: big, StdinSet: true})
	if want := "ERROR stdin is over the 16777216 byte limit\n"; err != nil || resp.Code != 1 || string(resp.Stderr) != want {
		t.Errorf("stdin: got exit %d stderr %q %v, want %q", resp.Code, resp.Stderr, err, want)
	}
	if len(f.relations[0].unitWrites) != 0 {
		t.Errorf("wrote %v", f.relations[0].unitWrites)
	}
}
