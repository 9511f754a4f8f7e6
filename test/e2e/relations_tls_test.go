//go:build linux

package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeTLS writes a CA and, for each application, a certificate naming it
// by the URI SAN bagkeeper://app/<name>, as cert-manager would issue them
// into each application's secret. It returns each application's flags.
func writeTLS(t *testing.T, dir string, apps ...string) map[string][]string {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "e2e CA"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	write := func(name, typ string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	caFile := write("ca.crt", "CERTIFICATE", caDER)
	out := map[string][]string{}
	for i, app := range apps {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse("bagkeeper://app/" + app)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(int64(i + 2)), Subject: pkix.Name{CommonName: app}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			URIs: []*url.URL{u}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		out[app] = []string{"--tls-cert", write(app+".crt", "CERTIFICATE", der), "--tls-key", write(app+".key", "PRIVATE KEY", keyDER), "--tls-ca", caFile}
	}
	return out
}

// TestRelationOverTLSNamesEachApplicationByItsCertificate: with TLS, the
// relations port runs mutual TLS with the pods' certificates and the
// offer needs no token: the consumer is the application its certificate
// names, and so is the provider.
func TestRelationOverTLSNamesEachApplicationByItsCertificate(t *testing.T) {
	ap := newAppPair(t)
	tlsFlags := writeTLS(t, ap.dir, "pg", "web")
	ap.pg.flags = append(ap.pg.flags, tlsFlags["pg"]...)
	ap.web.flags = append(ap.web.flags, tlsFlags["web"]...)
	ap.writeFile(ap.pgFile, "offers:\n  - endpoint: db\n    consumers: [web]\n")
	ap.pg.startPods(3)
	var addrs []string
	for _, p := range ap.pg.runningPods() {
		addrs = append(addrs, p.relAddr())
	}
	ap.writeFile(ap.webFile, fmt.Sprintf("relations:\n  - endpoint: database\n    app: pg\n    offer: db\n    addresses: [%s]\n", strings.Join(addrs, ", ")))
	_, before := ap.web.startDeployment(3)
	waitFor(t, startTimeout, "the two applications to see each other over TLS", func() (bool, string) {
		p := ap.linked(before.unitNames())
		return p == "", p
	})
	// bagkeeper status on the consumer's leader shows the stream open.
	leader := ap.web.leaderPod(ap.web.waitOneCluster(startTimeout, "a leader", allUnitsActive))
	r := runCLI(t, 30*time.Second, "status", "--admin-socket", leader.sock)
	if r.code != 0 || !strings.Contains(r.stdout, "pg:db (offer we consume)") || !strings.Contains(r.stdout, "open to 127.") {
		t.Errorf("bagkeeper status on %s: %v", leader.name, r)
	}
}
