package pods

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// docker runs the docker CLI and returns its trimmed stdout; stderr goes
// into the error.
func docker(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "docker", args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return strings.TrimSpace(out.String()), fmt.Errorf("docker %s: %v: %s", strings.Join(short(args), " "), err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

// short keeps an error message readable: long arguments are cut.
func short(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if len(a) > 120 {
			a = a[:120] + "…"
		}
		out[i] = a
	}
	return out
}

// dockerT is docker that fails the test.
func dockerT(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := docker(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// imageRef is the image the tests run: BAGKEEPER_IMAGE, or bagkeeper:dev,
// which `make image` tags.
func imageRef() string {
	if s := os.Getenv("BAGKEEPER_IMAGE"); s != "" {
		return s
	}
	return "bagkeeper:dev"
}

// needDocker skips the test without a Docker daemon or without the image;
// under CI=true a missing image fails (CI runs `make pods-test`, which builds
// it, only when the daemon is there).
func needDocker(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("docker: container e2e tests are not short")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("docker: no docker CLI on PATH")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := docker(ctx, "info", "--format", "{{.ServerVersion}}"); err != nil {
		t.Skipf("docker: no Docker daemon: %v", err)
	}
	if _, err := docker(ctx, "image", "inspect", "--format", "{{.Id}}", imageRef()); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("docker: image %s missing (run `make image`): %v", imageRef(), err)
		}
		t.Skipf("docker: image %s missing: run `make image` (or `make pods-test`)", imageRef())
	}
}

// dockerCombined is docker with stdout and stderr together (container
// logs go to both).
func dockerCombined(ctx context.Context, args ...string) (string, error) {
	b, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	return string(b), err
}
