package pods

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// render renders the demo chart (PODS_RENDER: another command with the
// flags of charts/test's render, e.g. for a chart being worked on) with the image under test and the given
// --set values and decodes the manifests. Without the chart in the
// repository it reads testdata/fallback.yaml, the layout the chart is
// expected to render.
func render(t testing.TB, sets ...string) *manifests {
	t.Helper()
	root := repoRoot(t)
	var out []byte
	fallback := false
	renderCmd := []string{"go", "-C", filepath.Join(root, "charts", "test"), "run", "./cmd/render", "--chart", "../bagkeeper-demo"}
	if s := os.Getenv("PODS_RENDER"); s != "" {
		// Another renderer with the same flags; --chart is given.
		renderCmd = append(strings.Fields(s), "--chart", filepath.Join(root, "charts", "bagkeeper-demo"))
	}
	if _, err := os.Stat(filepath.Join(root, "charts", "test", "cmd", "render")); err == nil || os.Getenv("PODS_RENDER") != "" {
		repo, tag, _ := strings.Cut(imageRef(), ":")
		args := []string{"--kube-version", kubeVersion,
			"--release", release, "--namespace", namespace,
			"--set", "image.repository=" + repo, "--set", "image.tag=" + tag}
		for _, s := range sets {
			args = append(args, "--set", s)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		args = append(renderCmd[1:], args...)
		cmd := exec.CommandContext(ctx, renderCmd[0], args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		var err error
		if out, err = cmd.Output(); err != nil {
			t.Fatalf("rendering the chart: %s %s: %v\n%s", renderCmd[0], strings.Join(args, " "), err, stderr.String())
		}
	} else {
		t.Logf("no chart in this tree: the pods run from testdata/fallback.yaml")
		fallback = true
		b, err := os.ReadFile("testdata/fallback.yaml")
		if err != nil {
			t.Fatal(err)
		}
		out = b
	}
	m, err := parseManifests(out)
	if err != nil {
		t.Fatal(err)
	}
	if fallback {
		for _, s := range sets {
			if s == "tls.enabled=false" {
				fallbackJoinToken(m)
			}
			if s == "persistence.enabled=false" {
				m.workload.VolumeClaimTemplates = nil
				m.workload.Template.Spec.Volumes = append(m.workload.Template.Spec.Volumes, volume{Name: "data", EmptyDir: &struct {
					Medium    string `json:"medium"`
					SizeLimit string `json:"sizeLimit"`
				}{}})
			}
		}
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

// fallbackJoinToken turns the fallback's TLS into the join token the chart
// uses when TLS is off.
func fallbackJoinToken(m *manifests) {
	spec := &m.workload.Template.Spec
	secret := m.name + "-join-token"
	m.secrets[secret] = map[string][]byte{"token": []byte(randHex(16))}
	for i, v := range spec.Volumes {
		if v.Name == "tls" {
			spec.Volumes[i].Secret.SecretName = secret
		}
	}
	for i := range spec.InitContainers {
		ct := &spec.InitContainers[i]
		var args []string
		for _, a := range ct.Args {
			if !strings.HasPrefix(a, "--tls-") {
				args = append(args, a)
			}
		}
		if len(args) != len(ct.Args) {
			ct.Args = append(args, "--join-token-file=/etc/bagkeeper/tls/token")
		}
	}
}
