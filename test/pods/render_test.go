package pods

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// kubeVersion is the Kubernetes version the chart is rendered for: 1.29 or
// later, so the sidecar is a native sidecar (an init container with
// restartPolicy Always).
const kubeVersion = "1.31.0"

// repoRoot is the repository's top directory.
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// renderer is the chart renderer of charts/test (its own module), built
// once per test binary.
var renderer struct {
	once sync.Once
	path string
	err  error
}

// renderCommand is the renderer's command line up to its flags:
// PODS_RENDER when set (another renderer with the same flags, e.g. for a
// chart being worked on), else charts/test's cmd/render.
func renderCommand(t testing.TB, root string) []string {
	t.Helper()
	if s := os.Getenv("PODS_RENDER"); s != "" {
		return strings.Fields(s)
	}
	renderer.once.Do(func() {
		dir, err := os.MkdirTemp("", "pods-render")
		if err != nil {
			renderer.err = err
			return
		}
		renderer.path = filepath.Join(dir, "render")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "go", "-C", filepath.Join(root, "charts", "test"), "build", "-o", renderer.path, "./cmd/render").CombinedOutput()
		if err != nil {
			renderer.err = fmt.Errorf("building charts/test/cmd/render: %v\n%s", err, out)
		}
	})
	if renderer.err != nil {
		t.Fatal(renderer.err)
	}
	return []string{renderer.path}
}

// render renders the demo chart for Kubernetes kubeVersion with the image
// under test and the given --set values, and decodes the manifests.
func render(t testing.TB, sets ...string) *manifests {
	t.Helper()
	root := repoRoot(t)
	repo, tag, _ := strings.Cut(imageRef(), ":")
	args := append(renderCommand(t, root), "--chart", filepath.Join(root, "charts", "bagkeeper-demo"),
		"--kube-version", kubeVersion, "--release", release, "--namespace", namespace,
		"--set", "image.repository="+repo, "--set", "image.tag="+tag)
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("rendering the chart: %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	m, err := parseManifests(out)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// tlsSecrets are the Secrets the pod's volumes name that the chart does not
// render (cert-manager's, or an existing secret the values name) and that
// hold a certificate: the test issues them.
func tlsSecrets(m *manifests) []string {
	var out []string
	for _, v := range m.workload.Template.Spec.Volumes {
		if v.Secret != nil && m.secrets[v.Secret.SecretName] == nil {
			out = append(out, v.Secret.SecretName)
		}
	}
	return out
}
