package render

import (
	"strings"
	"testing"
)

const fixture = "../testdata/fixture-app"

func TestRenderFixture(t *testing.T) {
	res, err := Render(Options{Chart: fixture, KubeVersion: "1.28.0", Release: "web", Namespace: "ns1", Set: []string{"greeting=hi", "replicas=3"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Docs) != 2 {
		t.Fatalf("want 2 documents (the comment-only one left out), got %d:\n%s", len(res.Docs), res.YAML())
	}
	cm, pod := res.Docs[0], res.Docs[1]
	if cm.Kind != "ConfigMap" || cm.Name != "web-config" || cm.Test {
		t.Errorf("first document: %+v", cm)
	}
	for _, want := range []string{`greeting: "hi"`, `replicas: "3"`, `kube: "v1.28.0"`, "namespace: ns1", "app.kubernetes.io/name: fixture-app"} {
		if !strings.Contains(cm.Content, want) {
			t.Errorf("config map lacks %q:\n%s", want, cm.Content)
		}
	}
	if pod.Kind != "Pod" || !pod.Test || pod.Hook != "test" {
		t.Errorf("test pod not flagged: %+v", pod)
	}
	if strings.TrimSpace(res.Notes) != "web says hi." {
		t.Errorf("notes: %q", res.Notes)
	}
	if strings.Contains(res.YAML(), "says") {
		t.Error("NOTES.txt among the manifests")
	}
	if res.Values["replicas"] != int64(3) && res.Values["replicas"] != 3 && res.Values["replicas"] != float64(3) {
		t.Errorf("values: replicas = %#v", res.Values["replicas"])
	}
}

func TestRenderRefuses(t *testing.T) {
	for name, o := range map[string]Options{
		"schema type":       {Set: []string{"replicas=three"}},
		"schema minimum":    {Set: []string{"replicas=0"}},
		"unknown key":       {Set: []string{"nosuchkey=1"}},
		"bad kube version":  {KubeVersion: "one"},
		"missing chart dir": {Chart: "../testdata/nosuchchart"},
		"library chart":     {Chart: "../testdata/fixture-lib"},
		"missing file":      {ValueFiles: []string{"../testdata/nosuchfile.yaml"}},
	} {
		t.Run(name, func(t *testing.T) {
			if o.Chart == "" {
				o.Chart = fixture
			}
			if _, err := Render(o); err == nil {
				t.Fatal("rendered")
			}
		})
	}
}

func TestMergeValuesOrder(t *testing.T) {
	vals, err := MergeValues(nil, []string{"a.b=1", "a.c=x", "a.b=2"}, map[string]any{"a": map[string]any{"c": "y"}})
	if err != nil {
		t.Fatal(err)
	}
	a := vals["a"].(map[string]any)
	if a["b"] != int64(2) || a["c"] != "y" {
		t.Fatalf("got %#v", a)
	}
}
