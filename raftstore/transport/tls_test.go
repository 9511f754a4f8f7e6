package transport

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newSerial(t *testing.T) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          newSerial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// leaf is a node certificate and key in PEM.
type leaf struct {
	serial       *big.Int
	certPEM, key []byte
}

// issue signs a node certificate. Its SAN deliberately matches none of the
// addresses used in the tests: peers are verified by chain only.
func (ca *testCA) issue(t *testing.T, cn string) leaf {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: newSerial(t),
		Subject:      pkix.Name{CommonName: cn},
		DNSNames:     []string{cn + ".invalid"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return leaf{
		serial:  tmpl.SerialNumber,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:     pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}
}

// secretDir lays files out as Kubernetes mounts a secret: each file is a
// symlink through "..data", and an update swaps "..data" atomically to a
// new timestamped directory.
type secretDir struct {
	dir string
	gen int
}

func newSecretDir(t *testing.T, l leaf, caPEM []byte) (*secretDir, TLSFiles) {
	t.Helper()
	s := &secretDir{dir: t.TempDir()}
	s.update(t, l, caPEM)
	for _, name := range []string{"tls.crt", "tls.key", "ca.crt"} {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(s.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return s, TLSFiles{
		CertFile: filepath.Join(s.dir, "tls.crt"),
		KeyFile:  filepath.Join(s.dir, "tls.key"),
		CAFile:   filepath.Join(s.dir, "ca.crt"),
	}
}

func (s *secretDir) update(t *testing.T, l leaf, caPEM []byte) {
	t.Helper()
	s.gen++
	ts := fmt.Sprintf("..2026_01_01_00_00_%02d.%d", s.gen, s.gen)
	if err := os.Mkdir(filepath.Join(s.dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"tls.crt": l.certPEM, "tls.key": l.key, "ca.crt": caPEM} {
		if err := os.WriteFile(filepath.Join(s.dir, ts, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(s.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// plainFiles writes the files directly into a fresh directory.
func plainFiles(t *testing.T, l leaf, caPEM []byte) TLSFiles {
	t.Helper()
	dir := t.TempDir()
	f := TLSFiles{
		CertFile: filepath.Join(dir, "cert.pem"),
		KeyFile:  filepath.Join(dir, "key.pem"),
		CAFile:   filepath.Join(dir, "ca.pem"),
	}
	writeFiles(t, f, l, caPEM)
	return f
}

func writeFiles(t *testing.T, f TLSFiles, l leaf, caPEM []byte) {
	t.Helper()
	for name, data := range map[string][]byte{f.CertFile: l.certPEM, f.KeyFile: l.key, f.CAFile: caPEM} {
		if err := os.WriteFile(name, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// peerSerial dials addr with dial and returns the serial of the
// certificate the peer presented.
func peerSerial(dial func(context.Context, string) (net.Conn, error), addr string) (*big.Int, error) {
	conn, err := dial(context.Background(), addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	tc, ok := conn.(*tls.Conn)
	if !ok {
		return nil, fmt.Errorf("connection is %T, not *tls.Conn", conn)
	}
	return tc.ConnectionState().PeerCertificates[0].SerialNumber, nil
}

func TestMutualTLS(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "group CA")
	serverLeaf := ca.issue(t, "pod-0")
	serverCfg, _ := testCfg("wp", "tok")
	serverCfg.TLS = ptr(plainFiles(t, serverLeaf, ca.pem))
	clientCfg, _ := testCfg("wp", "tok")
	clientCfg.TLS = ptr(plainFiles(t, ca.issue(t, "pod-1"), ca.pem))

	server := listen(t, "", serverCfg)
	serveHealth(t, server)
	b := newRaftPeer(t, server)
	a := newRaftPeer(t, listen(t, "localhost:0", clientCfg))
	appendAndVote(t, a, b, 1, []byte("over tls"))
	appendAndVote(t, b, a, 2, []byte("and back"))

	if err := checkServing(context.Background(), healthClient(t, server.Advertise(), Dialer(clientCfg))); err != nil {
		t.Fatal(err)
	}
	serial, err := peerSerial(Dialer(clientCfg), server.Advertise())
	if err != nil {
		t.Fatal(err)
	}
	if serial.Cmp(serverLeaf.serial) != 0 {
		t.Fatalf("server presented serial %s, want %s", serial, serverLeaf.serial)
	}
}

func TestTLSRefusesCertificatesFromAnotherCA(t *testing.T) {
	t.Parallel()
	ca, other := newTestCA(t, "group CA"), newTestCA(t, "other CA")
	tests := []struct {
		name                 string
		serverLeaf, client   leaf
		clientMsg, serverMsg string
	}{
		{
			name: "client certificate", serverLeaf: ca.issue(t, "pod-0"), client: other.issue(t, "intruder"),
			clientMsg: "refused the TLS session", serverMsg: "does not verify against CA file",
		},
		{
			name: "server certificate", serverLeaf: other.issue(t, "intruder"), client: ca.issue(t, "pod-1"),
			clientMsg: "does not verify against CA file", serverMsg: "dialer refused the TLS session",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			serverCfg, rec := testCfg("wp", "")
			serverCfg.TLS = ptr(plainFiles(t, tt.serverLeaf, ca.pem))
			clientCfg, _ := testCfg("wp", "")
			clientCfg.TLS = ptr(plainFiles(t, tt.client, ca.pem))
			l := listen(t, "", serverCfg)

			_, err := Dialer(clientCfg)(context.Background(), l.Advertise())
			if !errors.Is(err, ErrTLS) || !strings.Contains(err.Error(), tt.clientMsg) {
				t.Fatalf("dial error %v, want ErrTLS containing %q", err, tt.clientMsg)
			}
			rec.waitRejection(t, tt.serverMsg)
		})
	}
}

func TestTLSConfiguredOnOneSideOnly(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "group CA")
	tlsCfg, tlsRec := testCfg("wp", "")
	tlsCfg.TLS = ptr(plainFiles(t, ca.issue(t, "pod-0"), ca.pem))
	plainCfg, plainRec := testCfg("wp", "")

	t.Run("server only", func(t *testing.T) {
		l := listen(t, "", tlsCfg)
		_, err := Dialer(plainCfg)(context.Background(), l.Advertise())
		if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "requires TLS but TLS is not configured on this node") {
			t.Fatalf("dial error %v", err)
		}
		tlsRec.waitRejection(t, "dialer did not start TLS but this node requires it")
	})
	t.Run("dialer only", func(t *testing.T) {
		l := listen(t, "", plainCfg)
		_, err := Dialer(tlsCfg)(context.Background(), l.Advertise())
		if !errors.Is(err, ErrTLS) || !strings.Contains(err.Error(), "does not use TLS but this node does") {
			t.Fatalf("dial error %v", err)
		}
		plainRec.waitRejection(t, "dialer started TLS but TLS is not configured on this node")
	})
}

// TestTLSRotationReachesNewConnections rotates the server's certificate by
// a Kubernetes-style secret update; new connections see the new one.
func TestTLSRotationReachesNewConnections(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "group CA")
	first := ca.issue(t, "pod-0")
	secret, files := newSecretDir(t, first, ca.pem)
	serverCfg, rec := testCfg("wp", "tok")
	serverCfg.TLS = &files
	clientCfg, _ := testCfg("wp", "tok")
	clientCfg.TLS = ptr(plainFiles(t, ca.issue(t, "pod-1"), ca.pem))
	l := listen(t, "", serverCfg)
	dial := Dialer(clientCfg)

	serial, err := peerSerial(dial, l.Advertise())
	if err != nil || serial.Cmp(first.serial) != 0 {
		t.Fatalf("before rotation: serial %v, %v; want %s", serial, err, first.serial)
	}
	second := ca.issue(t, "pod-0")
	secret.update(t, second, ca.pem)
	eventually(t, "the rotated certificate on a new connection", func() bool {
		serial, err := peerSerial(dial, l.Advertise())
		if err != nil {
			t.Fatalf("dial during rotation: %v", err)
		}
		return serial.Cmp(second.serial) == 0
	})
	if rec.find("TLS certificates reloaded", "serial", second.serial.String()) == nil {
		t.Error("no log line for the reload")
	}
}

func TestCertReloaderKeepsPreviousCertsOnBadFiles(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "group CA")
	first := ca.issue(t, "pod-0")
	files := plainFiles(t, first, ca.pem)
	cfg, rec := testCfg("wp", "")
	r, err := newCertReloader(files, cfg.Logger, reloaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	second := ca.issue(t, "pod-0")
	// Half-written: the new certificate is there, its key is not yet.
	if err := os.WriteFile(files.CertFile, second.certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err == nil {
		t.Fatal("Reload of a mismatched key pair succeeded")
	}
	if got := r.current().leaf.SerialNumber; got.Cmp(first.serial) != 0 {
		t.Fatalf("serial after failed reload = %s, want the previous %s", got, first.serial)
	}
	if rec.find("TLS reload failed; keeping the previous certificates", "error", "key") == nil {
		t.Error("failed reload was not logged")
	}
	if err := os.WriteFile(files.KeyFile, second.key, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files.CAFile, []byte("-----BEGIN CERT"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err == nil || !strings.Contains(err.Error(), "holds no PEM certificate") {
		t.Fatalf("Reload with a truncated CA file = %v", err)
	}
	if err := os.WriteFile(files.CAFile, ca.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := r.current().leaf.SerialNumber; got.Cmp(second.serial) != 0 {
		t.Fatalf("serial after good reload = %s, want %s", got, second.serial)
	}
}

// TestCertReloaderWatchesDirectory relies on file events alone (no
// re-check) and also rotates to a new CA.
func TestCertReloaderWatchesDirectory(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "group CA")
	secret, files := newSecretDir(t, ca.issue(t, "pod-0"), ca.pem)
	cfg, rec := testCfg("wp", "")
	r, err := newCertReloader(files, cfg.Logger, reloaderOptions{watch: true, debounce: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	newCA := newTestCA(t, "next CA")
	next := newCA.issue(t, "pod-0")
	secret.update(t, next, newCA.pem)
	eventually(t, "watcher reload", func() bool {
		return r.current().leaf.SerialNumber.Cmp(next.serial) == 0
	})
	if r.current().pool.Equal(mustPool(t, ca.pem)) || !r.current().pool.Equal(mustPool(t, newCA.pem)) {
		t.Fatal("CA pool was not replaced")
	}

	broken := next
	broken.key = newCA.issue(t, "pod-0").key
	secret.update(t, broken, newCA.pem)
	eventually(t, "failed reload logged", func() bool {
		return rec.find("TLS reload failed; keeping the previous certificates", "cause", "files changed") != nil
	})
	if r.current().leaf.SerialNumber.Cmp(next.serial) != 0 {
		t.Fatal("certificates changed after a failed reload")
	}
}

// TestCertReloaderRecheckFallback: without file events, a handshake picks
// up changed files once the re-check interval has passed.
func TestCertReloaderRecheckFallback(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "group CA")
	first := ca.issue(t, "pod-0")
	files := plainFiles(t, first, ca.pem)
	now := time.Unix(1_000_000, 0)
	clock := func() time.Time { return now }
	cfg, _ := testCfg("wp", "")
	r, err := newCertReloader(files, cfg.Logger, reloaderOptions{recheck: time.Minute, now: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	presented := func() *big.Int {
		c, err := r.ClientConfig().GetClientCertificate(&tls.CertificateRequestInfo{})
		if err != nil {
			t.Fatal(err)
		}
		l, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return l.SerialNumber
	}
	second := ca.issue(t, "pod-0")
	writeFiles(t, files, second, ca.pem)
	if presented().Cmp(first.serial) != 0 {
		t.Fatal("reloaded before the re-check interval passed")
	}
	now = now.Add(time.Minute)
	if presented().Cmp(second.serial) != 0 {
		t.Fatal("did not reload after the re-check interval")
	}
}

func TestDialerReportsUnreadableTLSFiles(t *testing.T) {
	t.Parallel()
	cfg, _ := testCfg("wp", "")
	dir := t.TempDir()
	cfg.TLS = &TLSFiles{CertFile: filepath.Join(dir, "missing.crt"), KeyFile: filepath.Join(dir, "missing.key"), CAFile: filepath.Join(dir, "ca.crt")}
	_, err := Dialer(cfg)(context.Background(), "127.0.0.1:1")
	if err == nil || !strings.Contains(err.Error(), "load TLS key pair") || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("dial error %v, want the load failure", err)
	}
	if _, err := Listen("127.0.0.1:0", "", cfg); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Listen error %v, want the load failure", err)
	}
}

func mustPool(t *testing.T, caPEM []byte) *x509.CertPool {
	t.Helper()
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(caPEM) {
		t.Fatal("bad CA PEM")
	}
	return p
}

func ptr[T any](v T) *T { return &v }
