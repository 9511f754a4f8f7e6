//go:build linux

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRelationsFileMistakesAndTokenRotation: a sidecar refuses to start on
// an offer that nothing protects (no token, no TLS), saying so; and a
// consumer refused for a wrong token relates as soon as its token file —
// alone, as when a mounted Secret is updated — holds the right one.
func TestRelationsFileMistakesAndTokenRotation(t *testing.T) {
	ap := newAppPair(t)

	t.Run("an offer without a token or TLS", func(t *testing.T) {
		bad := filepath.Join(ap.dir, "pg-relations", "bad.yaml")
		ap.writeFile(bad, "offers:\n  - endpoint: db\n    consumers: [web]\n")
		p := ap.pg.newPod("pg-9")
		ap.pg.freshPod(p)
		args := append(p.args(), "--relations-file", bad)
		r := runCLI(t, 30*time.Second, args...)
		if r.code == 0 || !strings.Contains(r.stderr, `offer "db" has no token-file`) || !strings.Contains(r.stderr, "without TLS") {
			t.Fatalf("bagkeeper run with an unprotected offer: %v", r)
		}
	})

	t.Run("the token file alone is fixed", func(t *testing.T) {
		ap.pg.startPods(3)
		webToken := filepath.Join(ap.dir, "web-relations", "pg.token")
		ap.writeFile(webToken, "not-the-token\n")
		var addrs []string
		for _, p := range ap.pg.runningPods() {
			addrs = append(addrs, p.relAddr())
		}
		ap.writeFile(ap.webFile, fmt.Sprintf("relations:\n  - endpoint: database\n    app: pg\n    offer: db\n    addresses: [%s]\n    token-file: %s\n", strings.Join(addrs, ", "), webToken))
		_, before := ap.web.startDeployment(3)
		leader := ap.web.leaderPod(before)
		waitFor(t, startTimeout, "the provider to refuse the wrong token", func() (bool, string) {
			r := runCLI(t, 30*time.Second, "status", "--admin-socket", leader.sock)
			return strings.Contains(r.stdout, "wrong or missing token"), strings.ReplaceAll(r.stdout, "\n", " / ")
		})
		right, err := os.ReadFile(ap.tokenFile)
		if err != nil {
			t.Fatal(err)
		}
		ap.writeFile(webToken, string(right))
		waitFor(t, startTimeout, "the two applications to see each other", func() (bool, string) {
			p := ap.linked(before.unitNames())
			return p == "", p
		})
	})
}
