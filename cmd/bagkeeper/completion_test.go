package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestCompletionScriptsComplete loads the scripts in a real bash (and zsh,
// when it is installed) and asks them what they complete.
func TestCompletionScriptsComplete(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("bash: %v", err)
	}
	e, out, errb := testEnv(nil)
	if code := runMain(e, []string{"completion", "bash"}); code != 0 {
		t.Fatalf("completion bash: exit %d: %s", code, errb)
	}
	script := filepath.Join(t.TempDir(), "bagkeeper.bash")
	if err := os.WriteFile(script, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	complete := func(words ...string) string {
		t.Helper()
		quoted := make([]string, len(words))
		for i, w := range words {
			quoted[i] = "'" + w + "'"
		}
		prog := "source " + script + "; COMP_WORDS=(" + strings.Join(quoted, " ") + "); COMP_CWORD=" + strconv.Itoa(len(words)-1) + "; _bagkeeper; echo \"${COMPREPLY[*]}\""
		b, err := exec.Command(bash, "--norc", "-c", prog).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v: %s", words, err, b)
		}
		return strings.TrimSpace(string(b))
	}
	for _, c := range []struct {
		words []string
		want  string
	}{
		{[]string{"bagkeeper", "sta"}, "status"},
		{[]string{"bagkeeper", "re"}, "relation recover"},
		{[]string{"bagkeeper", "unit", ""}, "remove retry"},
		{[]string{"bagkeeper", "unit", "remove", "--f"}, "--force --format"},
		{[]string{"bagkeeper", "relation", "r"}, "remove"},
		{[]string{"bagkeeper", "leader", "transfer", "--adm"}, "--admin-socket"},
		{[]string{"bagkeeper", "bags", "s"}, "set"},
		{[]string{"bagkeeper", "bags", "--rel"}, "--relation"},
		{[]string{"bagkeeper", "run", "--unit-t"}, "--unit-takeover-after"},
		{[]string{"bagkeeper", "snapshot", ""}, "save status verify restore"},
		{[]string{"bagkeeper", "snapshot", "save", "--f"}, "--force --format"},
		{[]string{"bagkeeper", "snapshot", "restore", "--"}, "--app --data-dir"},
		{[]string{"bagkeeper", "status", "--"}, "--admin-socket --check --config --data-dir --format --timeout --url"},
	} {
		if got := complete(c.words...); got != c.want {
			t.Errorf("%q completes to %q, want %q", c.words, got, c.want)
		}
	}
	e, _, errb = testEnv(nil)
	if code := runMain(e, []string{"completion", "fish"}); code != 2 || !strings.Contains(errb.String(), "completion bash' or 'completion zsh") {
		t.Errorf("completion fish: exit %d, %s", code, errb)
	}
	zsh, err := exec.LookPath("zsh")
	if err != nil && os.Getenv("CI") != "" {
		t.Fatalf("zsh: %v (CI installs it)", err)
	}
	if err == nil {
		e, out, _ := testEnv(nil)
		runMain(e, []string{"completion", "zsh"})
		if b, err := exec.Command(zsh, "-f", "-c", out.String()+"\n(( $+_comps[bagkeeper] )) && echo loaded").CombinedOutput(); err != nil || !strings.Contains(string(b), "loaded") {
			t.Errorf("the zsh script does not load: %v: %s", err, b)
		}
	}
}
