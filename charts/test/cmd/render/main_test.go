package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestRun(t *testing.T) {
	vals := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(vals, []byte("greeting: from-file\nreplicas: 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errs strings.Builder
	code := run([]string{"--chart", "../../testdata/fixture-app", "--kube-version", "1.31.0", "--release", "web", "--namespace", "ns1",
		"-f", vals, "--set", "replicas=4"}, &out, &errs)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	docs := strings.Split(strings.TrimPrefix(out.String(), "---\n"), "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("want 2 documents, got %d:\n%s", len(docs), out.String())
	}
	var cm struct {
		Metadata struct{ Name, Namespace string }
		Data     map[string]string
	}
	if err := yaml.Unmarshal([]byte(docs[0]), &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Metadata.Name != "web-config" || cm.Metadata.Namespace != "ns1" || cm.Data["greeting"] != "from-file" || cm.Data["replicas"] != "4" || cm.Data["kube"] != "v1.31.0" {
		t.Errorf("config map: %+v", cm)
	}
	if !strings.Contains(docs[1], "helm.sh/hook: test") {
		t.Errorf("second document is not the test pod:\n%s", docs[1])
	}
	if strings.Contains(out.String(), "says") {
		t.Error("NOTES.txt printed")
	}
}

func TestRunFails(t *testing.T) {
	for name, argv := range map[string][]string{
		"no chart":     {"--release", "web"},
		"an argument":  {"--chart", "../../testdata/fixture-app", "extra"},
		"bad value":    {"--chart", "../../testdata/fixture-app", "--set", "replicas=three"},
		"unknown flag": {"--chart", "../../testdata/fixture-app", "--values", "x.yaml"},
	} {
		t.Run(name, func(t *testing.T) {
			var out, errs strings.Builder
			if code := run(argv, &out, &errs); code == 0 {
				t.Fatalf("exit 0:\n%s", out.String())
			}
			if out.Len() != 0 {
				t.Errorf("printed on failure:\n%s", out.String())
			}
		})
	}
}
