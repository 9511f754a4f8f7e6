package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bagkeeper/bagkeeper/agent/hooktools"
)

func TestInstallCopiesBinariesAndTools(t *testing.T) {
	src := t.TempDir()
	tool := filepath.Join(src, "jujuc")
	if err := os.WriteFile(tool, []byte("#!/bin/sh\necho tool\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	to := filepath.Join(t.TempDir(), "shared")
	e, out, errb := testEnv(nil)
	if code := runMain(e, []string{"install", "--to", to, "--hook-tool", tool}); code != 0 {
		t.Fatalf("install exited %d: %s", code, errb)
	}
	got, err := os.ReadFile(filepath.Join(to, "bin", "jujuc"))
	if err != nil || string(got) != "#!/bin/sh\necho tool\n" {
		t.Fatalf("bin/jujuc = %q, %v", got, err)
	}
	for _, name := range []string{"bagkeeper", "jujuc"} {
		fi, err := os.Stat(filepath.Join(to, "bin", name))
		if err != nil || fi.Mode().Perm() != 0o755 {
			t.Fatalf("bin/%s: %v %v, want mode 0755", name, fi, err)
		}
	}
	for _, name := range hooktools.Names() {
		link, err := os.Readlink(filepath.Join(to, "tools", name))
		if err != nil || link != filepath.Join(to, "bin", "jujuc") {
			t.Fatalf("tools/%s -> %q, %v", name, link, err)
		}
	}
	if !strings.Contains(out.String(), "hook tools linked") {
		t.Errorf("output %q", out)
	}
	// Again, over the first copy (an init container that restarts).
	if code := runMain(e, []string{"install", "--to", to, "--hook-tool", tool}); code != 0 {
		t.Fatalf("second install exited %d: %s", code, errb)
	}
}

func TestInstallCopiesTheCharm(t *testing.T) {
	src := t.TempDir()
	files := map[string]string{"metadata.yaml": "name: x\n", "dispatch": "#!/bin/sh\n", "hooks/install": "#!/bin/sh\n", "src/lib/a.py": "pass\n"}
	for name, body := range files {
		p := filepath.Join(src, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		mode := os.FileMode(0o644)
		if strings.HasPrefix(body, "#!") {
			mode = 0o755
		}
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("dispatch", filepath.Join(src, "hooks", "start")); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	os.WriteFile(filepath.Join(dst, "dispatch"), []byte("old"), 0o644)
	e, out, errb := testEnv(nil)
	if code := runMain(e, []string{"install", "--charm", src, "--charm-to", dst}); code != 0 {
		t.Fatalf("install exited %d: %s", code, errb)
	}
	for name, body := range files {
		got, err := os.ReadFile(filepath.Join(dst, name))
		if err != nil || string(got) != body {
			t.Errorf("%s = %q, %v; want %q", name, got, err, body)
		}
	}
	if fi, _ := os.Stat(filepath.Join(dst, "dispatch")); fi == nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("dispatch mode %v, want 0755", fi)
	}
	if link, err := os.Readlink(filepath.Join(dst, "hooks", "start")); err != nil || link != "dispatch" {
		t.Errorf("hooks/start -> %q, %v", link, err)
	}
	if !strings.Contains(out.String(), "(4 files)") {
		t.Errorf("output %q", out)
	}

	for _, c := range []struct {
		args []string
		code int
		text string
	}{
		{[]string{"install"}, 2, "nothing to do"},
		{[]string{"install", "--charm", src}, 2, "go together"},
		{[]string{"install", "--charm", t.TempDir(), "--charm-to", dst}, 1, "is not a charm directory"},
	} {
		e, _, errb := testEnv(nil)
		if code := runMain(e, c.args); code != c.code || !strings.Contains(errb.String(), c.text) {
			t.Errorf("%v: exit %d, %q; want %d and %q", c.args, code, errb, c.code, c.text)
		}
	}
}
