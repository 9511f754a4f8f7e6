package link

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
)

// AppURIPrefix starts the URI SAN that names a certificate's application:
// "bagkeeper://app/<application>". With TLS on the relations port, the
// application of a caller, and of a provider a consumer reaches, is the
// one its certificate names this way, never the one a request claims.
const AppURIPrefix = "bagkeeper://app/"

// CertApp returns the application named by a certificate's URI SANs
// (AppURIPrefix + name). A certificate naming none, or more than one, names
// no application.
func CertApp(cert *x509.Certificate) (string, error) {
	app := ""
	for _, u := range cert.URIs {
		if u.Scheme != "bagkeeper" || u.Host != "app" {
			continue
		}
		name, err := url.PathUnescape(u.Path)
		if err != nil || len(name) < 2 || !state.ValidAppName(name[1:]) {
			return "", fmt.Errorf("certificate %q has URI SAN %q, which names no valid application", cert.Subject, u)
		}
		if app != "" && app != name[1:] {
			return "", fmt.Errorf("certificate %q names two applications, %q and %q", cert.Subject, app, name[1:])
		}
		app = name[1:]
	}
	if app == "" {
		return "", fmt.Errorf("certificate %q names no application: it needs the URI SAN %s<application>", cert.Subject, AppURIPrefix)
	}
	return app, nil
}

// PeerApp returns the application named by the verified certificate of
// the other end of a gRPC call or stream.
func PeerApp(p *peer.Peer) (string, error) {
	if p == nil {
		return "", errors.New("no peer")
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.PeerCertificates) == 0 {
		return "", errors.New("the connection has no client certificate")
	}
	return CertApp(ti.State.PeerCertificates[0])
}

// CallerApp is ServerConfig.CertApp for a relations port with TLS.
func CallerApp(ctx context.Context) (string, error) {
	p, _ := peer.FromContext(ctx)
	return PeerApp(p)
}

// ServerTLS adapts a server TLS config whose GetConfigForClient returns
// the config in force (transport.CertReloader.ServerConfig) to gRPC: the
// config returned for each connection offers HTTP/2 by ALPN, as gRPC
// requires.
func ServerTLS(base *tls.Config) *tls.Config {
	c := base.Clone()
	c.NextProtos = []string{"h2"}
	if get := base.GetConfigForClient; get != nil {
		c.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			cc, err := get(hello)
			if err != nil || cc == nil {
				return cc, err
			}
			cc = cc.Clone()
			cc.NextProtos = []string{"h2"}
			return cc, nil
		}
	}
	return c
}

// ClientTLS returns base (transport.CertReloader.ClientConfig) that also
// refuses a server whose certificate does not name application app: a
// consumer never believes a member of another application, not even its
// Goodbye.
func ClientTLS(base *tls.Config, app string) *tls.Config {
	c := base.Clone()
	verify := base.VerifyConnection
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if verify != nil {
			if err := verify(cs); err != nil {
				return err
			}
		}
		if len(cs.PeerCertificates) == 0 {
			return errors.New("the server presented no certificate")
		}
		got, err := CertApp(cs.PeerCertificates[0])
		if err != nil {
			return err
		}
		if got != app {
			return fmt.Errorf("the server's certificate names application %q, not %q", got, app)
		}
		return nil
	}
	return c
}
