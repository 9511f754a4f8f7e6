// Package render renders a Helm chart the way `helm install --dry-run` does
// on the client side (Helm's Go SDK: the chart loader, dependency processing,
// values coalescing and schema validation, the template engine), for a given
// Kubernetes version, release name and namespace, and returns each manifest
// document it produced.
package render

import (
	"fmt"
	"path"
	"runtime/debug"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/cli/values"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
	"sigs.k8s.io/yaml"
)

// Options says what to render: the chart directory, the values (files and
// --set expressions, applied in helm's order: files, then sets), and the
// release and cluster the render is for.
type Options struct {
	Chart       string   // chart directory; subcharts under charts/ may be symlinks
	KubeVersion string   // e.g. "1.31.0"; empty means Helm's default
	Release     string   // release name
	Namespace   string   // release namespace
	ValueFiles  []string // -f, in order
	Set         []string // --set, in order (Helm's strvals syntax)
	Values      map[string]any
	// Values, if not nil, is merged over the files and the sets, the way a
	// further -f would be.
}

// Doc is one rendered manifest document.
type Doc struct {
	Source     string // template path, e.g. bagkeeper-demo/templates/service.yaml
	Content    string // the YAML document, without its separator
	APIVersion string
	Kind       string
	Name       string
	Hook       string // the helm.sh/hook annotation, if any
	Test       bool   // a Helm test hook (helm.sh/hook: test or test-success)
}

// Result is what a render produced.
type Result struct {
	Docs   []Doc
	Notes  string         // the rendered templates/NOTES.txt of the chart itself
	Values map[string]any // the coalesced .Values the templates saw
	Chart  *chart.Chart
}

// Capabilities returns Helm's default capabilities with the Kubernetes
// version set to v (as `helm template --kube-version` does). Without v, the
// version is that of the k8s.io/client-go this is built with, as in a helm
// binary (the SDK alone would say v1.20.0).
func Capabilities(v string) (*chartutil.Capabilities, error) {
	caps := chartutil.DefaultCapabilities.Copy()
	if v == "" {
		v = clientGoKubeVersion()
		if v == "" {
			return caps, nil
		}
	}
	kv, err := chartutil.ParseKubeVersion(v)
	if err != nil {
		return nil, fmt.Errorf("kube version %q: %w", v, err)
	}
	caps.KubeVersion = *kv
	return caps, nil
}

// clientGoKubeVersion is 1.N.P for k8s.io/client-go v0.N.P.
func clientGoKubeVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, m := range bi.Deps {
		if m.Path != "k8s.io/client-go" {
			continue
		}
		if m.Replace != nil {
			m = m.Replace
		}
		if rest, ok := strings.CutPrefix(m.Version, "v0."); ok {
			return "1." + rest
		}
	}
	return ""
}

// MergeValues merges the value files, the --set expressions and extra the
// way the helm command line does.
func MergeValues(files, sets []string, extra map[string]any) (map[string]any, error) {
	vo := values.Options{ValueFiles: files, Values: sets}
	vals, err := vo.MergeValues(nil) // no getters: values files are local
	if err != nil {
		return nil, err
	}
	if extra != nil {
		vals = mergeMaps(vals, extra)
	}
	return vals, nil
}

// mergeMaps is helm's merge of one -f over the previous ones: tables merge
// key by key, anything else replaces.
func mergeMaps(a, b map[string]any) map[string]any {
	out := make(map[string]any, len(a))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if bv, ok := v.(map[string]any); ok {
			if av, ok := out[k].(map[string]any); ok {
				out[k] = mergeMaps(av, bv)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// Render renders the chart. It fails where helm install would fail before
// talking to a cluster: a chart that cannot load, a kubeVersion constraint the
// version does not meet, values the schema refuses, a template that fails.
func Render(o Options) (*Result, error) {
	ch, err := loader.Load(o.Chart)
	if err != nil {
		return nil, fmt.Errorf("load chart %s: %w", o.Chart, err)
	}
	if ch.Metadata.Type != "" && ch.Metadata.Type != "application" {
		return nil, fmt.Errorf("chart %s is of type %q: only application charts render", ch.Name(), ch.Metadata.Type)
	}
	caps, err := Capabilities(o.KubeVersion)
	if err != nil {
		return nil, err
	}
	if ch.Metadata.KubeVersion != "" && !chartutil.IsCompatibleRange(ch.Metadata.KubeVersion, caps.KubeVersion.String()) {
		return nil, fmt.Errorf("chart requires kubeVersion %s, which %s does not meet", ch.Metadata.KubeVersion, caps.KubeVersion.String())
	}
	vals, err := MergeValues(o.ValueFiles, o.Set, o.Values)
	if err != nil {
		return nil, err
	}
	if err := chartutil.ProcessDependenciesWithMerge(ch, vals); err != nil {
		return nil, fmt.Errorf("dependencies: %w", err)
	}
	opts := chartutil.ReleaseOptions{Name: o.Release, Namespace: o.Namespace, Revision: 1, IsInstall: true}
	top, err := chartutil.ToRenderValues(ch, vals, opts, caps)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(ch, top)
	if err != nil {
		return nil, err
	}
	res := &Result{Chart: ch}
	if v, ok := top["Values"].(chartutil.Values); ok {
		res.Values = v.AsMap()
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if path.Base(name) == "NOTES.txt" {
			// Helm shows only the top chart's notes.
			if name == path.Join(ch.Name(), "templates", "NOTES.txt") {
				res.Notes = files[name]
			}
			continue
		}
		if !strings.HasSuffix(name, ".yaml") && !strings.HasSuffix(name, ".yml") && !strings.HasSuffix(name, ".tpl") && !strings.HasSuffix(name, ".json") {
			continue
		}
		split := releaseutil.SplitManifests(files[name])
		keys := make([]string, 0, len(split))
		for k := range split {
			keys = append(keys, k)
		}
		sort.Sort(releaseutil.BySplitManifestsOrder(keys))
		for _, k := range keys {
			content := strings.TrimSpace(split[k])
			if content == "" || onlyComments(content) {
				continue
			}
			d, err := newDoc(name, content)
			if err != nil {
				return nil, err
			}
			res.Docs = append(res.Docs, d)
		}
	}
	return res, nil
}

func onlyComments(s string) bool {
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

func newDoc(source, content string) (Doc, error) {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name        string            `json:"name"`
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal([]byte(content), &head); err != nil {
		return Doc{}, fmt.Errorf("%s: not YAML: %w", source, err)
	}
	if head.APIVersion == "" || head.Kind == "" {
		return Doc{}, fmt.Errorf("%s: a document without apiVersion or kind:\n%s", source, content)
	}
	d := Doc{Source: source, Content: content, APIVersion: head.APIVersion, Kind: head.Kind, Name: head.Metadata.Name}
	d.Hook = head.Metadata.Annotations["helm.sh/hook"]
	for _, h := range strings.Split(d.Hook, ",") {
		switch strings.TrimSpace(h) {
		case "test", "test-success":
			d.Test = true
		}
	}
	return d, nil
}

// YAML returns the documents as one multi-document YAML stream, each
// preceded by a comment naming its template, as `helm template` prints them.
func (r *Result) YAML() string {
	var b strings.Builder
	for _, d := range r.Docs {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", d.Source, d.Content)
	}
	return b.String()
}

// Find returns the documents of the given kind (all of them if kind is "").
func (r *Result) Find(kind string) []Doc {
	var out []Doc
	for _, d := range r.Docs {
		if kind == "" || d.Kind == kind {
			out = append(out, d)
		}
	}
	return out
}
