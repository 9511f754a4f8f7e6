package transport

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// Dialer returns a gRPC context dialer (for grpc.WithContextDialer) that
// dials addr ("host:port", resolved on every call), runs TLS when cfg.TLS is
// set, and performs the [KindGRPC] handshake, all within cfg.DialTimeout and
// ctx. Use it with insecure gRPC transport credentials: the connection is
// already authenticated and, with TLS, encrypted. The caller owns and
// closes the returned connection.
//
// An invalid cfg makes every call fail with the validation error. With TLS,
// the files are loaded on first use and re-checked for changes at most every
// few seconds during handshakes; no goroutine is started. A node that has a
// [Listener] should prefer [Listener.Dialer], which shares its watched
// certificates.
func Dialer(cfg Config) func(ctx context.Context, addr string) (net.Conn, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return func(context.Context, string) (net.Conn, error) { return nil, err }
	}
	d := newDialer(c, nil)
	return d.grpc
}

// dialer dials peers and runs the dialing side of the handshake.
type dialer struct {
	cfg  Config
	rand io.Reader
	// localIP, if set, is the source address of dialed connections: the
	// listener's, when it is bound to one address (so a peer sees, and a
	// firewall rule can tell, which member a connection comes from).
	localIP net.IP

	mu    sync.Mutex
	certs *CertReloader // loaded lazily when nil and cfg.TLS is set
}

func newDialer(cfg Config, certs *CertReloader) *dialer {
	return &dialer{cfg: cfg, rand: rand.Reader, certs: certs}
}

func (d *dialer) grpc(ctx context.Context, addr string) (net.Conn, error) {
	conn, _, err := d.dial(ctx, addr, KindGRPC, "")
	return conn, err
}

func (d *dialer) tlsCerts() (*CertReloader, error) {
	if d.cfg.TLS == nil {
		return nil, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.certs == nil {
		r, err := newCertReloader(*d.cfg.TLS, d.cfg.Logger, reloaderOptions{recheck: defaultRecheck})
		if err != nil {
			return nil, err
		}
		d.certs = r
	}
	return d.certs, nil
}

// dial connects to addr and runs TLS and the handshake for kind, bounded by
// ctx and the dial timeout. It returns the connection to use and the
// underlying TCP connection (the same unless TLS is on).
func (d *dialer) dial(ctx context.Context, addr string, kind Kind, target string) (conn, raw net.Conn, err error) {
	certs, err := d.tlsCerts()
	if err != nil {
		return nil, nil, fmt.Errorf("dial peer %s: %w", addr, err)
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.DialTimeout)
	defer cancel()
	var nd net.Dialer // resolves addr on every call; nothing is cached
	if d.localIP != nil {
		nd.LocalAddr = &net.TCPAddr{IP: d.localIP}
	}
	raw, err = nd.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("dial peer %s: %w", addr, err)
	}
	conn, err = d.handshake(ctx, raw, addr, kind, target, certs)
	if err != nil {
		_ = raw.Close()
		return nil, nil, err
	}
	return conn, raw, nil
}

func (d *dialer) handshake(ctx context.Context, raw net.Conn, addr string, kind Kind, target string, certs *CertReloader) (net.Conn, error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(dl)
	}
	// Cancellation has no deadline to lean on: unblock I/O by hand.
	stop := context.AfterFunc(ctx, func() { _ = raw.SetDeadline(time.Unix(1, 0)) })
	conn, err := d.handshakeConn(ctx, raw, addr, kind, target, certs)
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		if cause := timeoutCause(ctx, err); cause != nil {
			return nil, handshakeErr(addr, ReasonIO, cause,
				"handshake with peer %s did not complete in time (is it a bagkeeper peer port, and is the peer overloaded?)", addr)
		}
		return nil, err
	}
	if err := raw.SetDeadline(time.Time{}); err != nil {
		return nil, fmt.Errorf("handshake with peer %s: clear deadline: %w", addr, err)
	}
	return conn, nil
}

func (d *dialer) handshakeConn(ctx context.Context, raw net.Conn, addr string, kind Kind, target string, certs *CertReloader) (net.Conn, error) {
	p := params{app: d.cfg.App, token: d.cfg.Token, rand: d.rand, target: target}
	conn := raw
	if certs != nil {
		tc := tls.Client(raw, certs.ClientConfig())
		if err := tc.HandshakeContext(ctx); err != nil {
			var rh tls.RecordHeaderError
			if errors.As(err, &rh) && string(rh.RecordHeader[:len(magic)]) == magic {
				return nil, handshakeErr(addr, ReasonTLS, err,
					"peer %s does not use TLS but this node does (configure TLS on both nodes or on neither)", addr)
			}
			if isRemoteTLSAlert(err) {
				return nil, handshakeErr(addr, ReasonTLS, err,
					"peer %s refused the TLS session (is this node's certificate signed by a CA in the peer's CA file?)", addr)
			}
			return nil, handshakeErr(addr, ReasonTLS, err,
				"TLS handshake with peer %s failed (is TLS configured on both nodes, with certificates from the same CA?)", addr)
		}
		b, err := exportBinding(tc)
		if err != nil {
			return nil, handshakeErr(addr, ReasonTLS, err, "TLS handshake with peer %s failed", addr)
		}
		p.binding, conn = b, tc
	}
	if err := dialHandshake(conn, addr, kind, p); err != nil {
		return nil, err
	}
	return conn, nil
}

func exportBinding(tc *tls.Conn) ([]byte, error) {
	cs := tc.ConnectionState()
	b, err := cs.ExportKeyingMaterial(exporterLabel, nil, bindingLen)
	if err != nil {
		return nil, fmt.Errorf("export TLS keying material: %w", err)
	}
	return b, nil
}

// timeoutCause returns why err is a timeout or cancellation rather than a
// decision of the peer, or nil.
func timeoutCause(ctx context.Context, err error) error {
	var he *HandshakeError
	if errors.As(err, &he) && he.Reason != ReasonIO && he.Reason != ReasonTLS {
		return nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return nil
}
