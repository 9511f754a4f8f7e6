package link_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/bagkeeper/bagkeeper/sidecar/link"
	"github.com/bagkeeper/bagkeeper/sidecar/link/linkpb"
	"github.com/bagkeeper/bagkeeper/sidecar/relconf"
)

// testCA issues certificates for the tests.
type testCA struct {
	t    *testing.T
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{t: t, cert: cert, key: key, pool: pool}
}

// issue returns a certificate with the given URI SANs.
func (ca *testCA) issue(cn string, uris ...string) tls.Certificate {
	ca.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		ca.t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	for _, u := range uris {
		pu, err := url.Parse(u)
		if err != nil {
			ca.t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		ca.t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// server and client configs shaped as transport.CertReloader's: the chain
// is verified against the pool, host names are not.
func (ca *testCA) server(cert tls.Certificate) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.pool}
}

func (ca *testCA) client(cert tls.Certificate) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: ca.pool})
			return err
		}}
}

func (ca *testCA) dial(cert tls.Certificate) func(addr, app string) (*grpc.ClientConn, error) {
	return func(addr, app string) (*grpc.ClientConn, error) {
		return grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(link.ClientTLS(ca.client(cert), app))))
	}
}

func TestCertAppReadsTheURISAN(t *testing.T) {
	ca := newCA(t)
	for _, tc := range []struct {
		uris []string
		want string
		err  string
	}{
		{[]string{"bagkeeper://app/web"}, "web", ""},
		{[]string{"spiffe://cluster.local/ns/x/sa/y", "bagkeeper://app/pg"}, "pg", ""},
		{[]string{"bagkeeper://app/web", "bagkeeper://app/web"}, "web", ""},
		{nil, "", "names no application"},
		{[]string{"bagkeeper://app/Web!"}, "", "no valid application"},
		{[]string{"bagkeeper://app/"}, "", "no valid application"},
		{[]string{"bagkeeper://app/web", "bagkeeper://app/api"}, "", "two applications"},
	} {
		c := ca.issue("x", tc.uris...)
		leaf, _ := x509.ParseCertificate(c.Certificate[0])
		got, err := link.CertApp(leaf)
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%v: got %q, %v; want %q, error containing %q", tc.uris, got, err, tc.want, tc.err)
		}
	}
}

// TestTLSNamesTheApplication: with TLS on the relations port, each side is
// the application its certificate names. An offer needs no token then.
func TestTLSNamesTheApplication(t *testing.T) {
	ca := newCA(t)
	pgCert, webCert := ca.issue("pg-0", "bagkeeper://app/pg"), ca.issue("web-0", "bagkeeper://app/web")
	creds := credentials.NewTLS(link.ServerTLS(ca.server(pgCert)))
	p := newPairWith(t, creds, link.CallerApp, ca.dial(pgCert), ca.dial(webCert))
	p.pgCfg.Store(&relconf.Config{Offers: []relconf.Offer{{Endpoint: "db", Interface: "pgsql", Consumers: []string{"web"}}}})
	p.webCfg.Store(p.relation(""))
	p.start()
	p.linked()

	hello := &linkpb.Hello{ConsumerApp: "web", ConsumerEndpoint: "database", Offer: "db", Interface: "pgsql", ProviderApp: "pg"}
	for _, tc := range []struct {
		name string
		cert tls.Certificate
		code codes.Code
	}{
		{"a certificate of another application", ca.issue("api-0", "bagkeeper://app/api"), codes.PermissionDenied},
		{"a certificate naming no application", ca.issue("web-0"), codes.Unauthenticated},
		{"a certificate of another CA", newCA(t).issue("web-0", "bagkeeper://app/web"), codes.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := ca.dial(tc.cert)(p.addr, "pg")
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			s, err := linkpb.NewRelationsClient(conn).Relate(ctx)
			if err == nil {
				if err = s.Send(&linkpb.Message{Msg: &linkpb.Message_Hello{Hello: hello}}); err == nil {
					_, err = s.Recv()
				}
			}
			if status.Code(err) != tc.code {
				t.Fatalf("got %v, want %v", err, tc.code)
			}
			t.Logf("refused: %v", err)
		})
	}
}

// TestConsumerBelievesOnlyTheProviderItsCertificateNames: a member of
// another application at the provider's address (a wrong address, a
// hijacked name) is never believed, not even its Goodbye.
func TestConsumerBelievesOnlyTheProviderItsCertificateNames(t *testing.T) {
	ca := newCA(t)
	impostor, webCert := ca.issue("mysql-0", "bagkeeper://app/mysql"), ca.issue("web-0", "bagkeeper://app/web")
	creds := credentials.NewTLS(link.ServerTLS(ca.server(impostor)))
	p := newPairWith(t, creds, link.CallerApp, ca.dial(impostor), ca.dial(webCert))
	// The impostor would say Goodbye to anyone: it offers nothing.
	p.pgCfg.Store(&relconf.Config{})
	p.start()
	p.waitFor("the consumer to refuse the server", func() (bool, string) {
		st := p.webMgr.Status()
		return len(st) == 1 && strings.Contains(st[0].LastError, "certificate names application") && strings.Contains(st[0].LastError, "mysql"), fmt.Sprint(st)
	})
	if _, wr := bags(p.web.State(), "database"); wr != nil {
		t.Fatalf("the consumer made the relation with an impostor")
	}
}
