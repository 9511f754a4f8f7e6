package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseCallTimes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "calls-bench-0.log")
	data := "tools 100.5 104.75 hello 104.75 107.25\ntools 111.5 115.0 hello 108.0 111.5\n"
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	tools, hello, err := parseCallTimes(path)
	if err != nil {
		t.Fatal(err)
	}
	wantTools := []time.Duration{4250 * time.Millisecond, 3500 * time.Millisecond}
	wantHello := []time.Duration{2500 * time.Millisecond, 3500 * time.Millisecond}
	if !slices.Equal(tools, wantTools) || !slices.Equal(hello, wantHello) {
		t.Errorf("got tools %v hello %v, want %v %v", tools, hello, wantTools, wantHello)
	}

	for _, bad := range []string{"tools 1 2 hello 3\n", "tools 1 2 other 3 4\n", "tools 1 x hello 3 4\n"} {
		if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, _, err := parseCallTimes(path); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// The hook charm's dispatch, run by bash with stand-ins for the tools
// and the hello-world binary, makes the calls it says and writes one
// line of loop times that parseCallTimes reads, in either order of the
// loops.
func TestHookCharmWritesItsCallTimes(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	calls := filepath.Join(dir, "calls.txt")
	stub := func(name, body string) {
		t.Helper()
		script := "#!/bin/sh\necho " + name + " >> " + calls + "\n" + body + "\n"
		if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	stub("config-get", "echo $N")
	stub("relation-ids", "echo cluster:1")
	stub("relation-get", "")
	stub("relation-set", "")
	stub("hello", "")
	dispatch := filepath.Join(dir, "dispatch")
	text := strings.ReplaceAll(hookCharm["dispatch"], "HELLO", filepath.Join(bin, "hello"))
	if err := os.WriteFile(dispatch, []byte(text), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"1", "2"} {
		cmd := exec.Command(bash, dispatch)
		cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin", "JUJU_HOOK_NAME=config-changed",
			"JUJU_CHARM_DIR=" + dir, "JUJU_UNIT_NAME=bench/2", "N=" + n}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("n=%s: %v\n%s", n, err, out)
		}
	}
	got, err := os.ReadFile(calls)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, name := range strings.Fields(string(got)) {
		count[name]++
	}
	want := map[string]int{"config-get": 2, "relation-ids": 2, "relation-get": 200, "relation-set": 40, "hello": 240}
	for name, n := range want {
		if count[name] != n {
			t.Errorf("%s called %d times, want %d", name, count[name], n)
		}
	}
	tools, hello, err := parseCallTimes(filepath.Join(dir, "calls-bench-2.log"))
	if err != nil {
		t.Fatal(err)
	}
	if len(tools) != 2 || len(hello) != 2 {
		t.Fatalf("got %d tool loops and %d hello loops, want 2 of each", len(tools), len(hello))
	}
	for i := range tools {
		if tools[i] <= 0 || hello[i] <= 0 {
			t.Errorf("run %d: tools %v, hello %v: want both positive", i, tools[i], hello[i])
		}
	}
}
