// Command render prints the manifests a chart renders to, as one
// multi-document YAML stream on stdout: what `helm install --dry-run` would
// send to a cluster of the given Kubernetes version, the helm test hooks
// included, NOTES.txt left out.
//
//	go -C charts/test run ./cmd/render --chart ../bagkeeper-demo \
//	    --kube-version 1.31.0 --release web --namespace default \
//	    -f values.yaml --set replicas=3
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/bagkeeper/bagkeeper/charts/test/render"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(argv []string, stdout, stderr io.Writer) int {
	var o render.Options
	var files, sets list
	fs := flag.NewFlagSet("render", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.Chart, "chart", "", "chart `directory` (required)")
	fs.StringVar(&o.KubeVersion, "kube-version", "", "Kubernetes `version` the render is for, e.g. 1.31.0 (default: Helm's)")
	fs.StringVar(&o.Release, "release", "release-name", "release `name`")
	fs.StringVar(&o.Namespace, "namespace", "default", "release `namespace`")
	fs.Var(&files, "f", "values `file` (repeatable; later ones win)")
	fs.Var(&sets, "set", "`key=value` in Helm's --set syntax (repeatable; after the files)")
	if err := fs.Parse(argv); err != nil {
		return 2
	}
	if o.Chart == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "render: give --chart and no arguments")
		fs.Usage()
		return 2
	}
	o.ValueFiles, o.Set = files, sets
	res, err := render.Render(o)
	if err != nil {
		fmt.Fprintln(stderr, "render:", err)
		return 1
	}
	fmt.Fprint(stdout, res.YAML())
	return 0
}
