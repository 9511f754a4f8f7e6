package transport

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// Listener is one node's TCP listener, shared by raft and the peer gRPC API.
// It accepts connections in the background, runs TLS and the handshake for
// each in its own goroutine bounded by DialTimeout, and hands each
// connection to the raft layer or the gRPC listener according to its kind.
// Connections whose handshake fails are logged and closed, as are
// connections beyond MaxPendingHandshakes and connections of a kind that is
// not Accepted within DialTimeout.
//
// SetLocalID sets this node's raft id. Until it is set, raft connections
// that name the member they expect are refused; afterwards only those that
// name this id are accepted. Connections that name no member (the peer API)
// are not affected.
func (l *Listener) SetLocalID(id string) { l.localID.Store(id) }

// LocalID returns the raft id set with SetLocalID ("" before).
func (l *Listener) LocalID() string {
	id, _ := l.localID.Load().(string)
	return id
}

// Close the Listener to stop everything; closing the raft layer or the gRPC
// listener alone only stops that kind.
type Listener struct {
	cfg       Config
	advertise string
	ln        net.Listener
	certs     *CertReloader // nil without TLS
	tlsConfig *tls.Config   // server side; nil without TLS
	dialer    *dialer
	rand      io.Reader
	logger    *slog.Logger
	raft      *kindListener
	grpc      *kindListener
	pending   chan struct{} // one token per connection in handshake

	done      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup // accept loop and per-connection goroutines

	localID atomic.Value // string

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{} // TCP conns in handshake, accepted, or dialed by the raft layer
	// raftOut is what the raft layer dialed, by member-tagged address
	// (see Abandon).
	raftOut map[raft.ServerAddress]*outbound
}

// Listen binds bind (for example "0.0.0.0:7400" or "127.0.0.5:7400") and
// advertises advertise ("host:port"; host may be a DNS name). A port of 0 in
// advertise is replaced by the bound port, and an empty advertise means the
// bound address, which must then not be unspecified. With cfg.TLS set the
// certificate files must load now; they are then watched until Close.
func Listen(bind, advertise string, cfg Config) (*Listener, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("listen for peers on %s: %w", bind, err)
	}
	adv, err := advertiseAddr(advertise, ln.Addr())
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	l := &Listener{
		cfg:       c,
		advertise: adv,
		ln:        ln,
		rand:      rand.Reader,
		logger:    c.Logger,
		pending:   make(chan struct{}, c.MaxPendingHandshakes),
		done:      make(chan struct{}),
		conns:     map[net.Conn]struct{}{},
		raftOut:   map[raft.ServerAddress]*outbound{},
	}
	if c.TLS != nil {
		if l.certs, err = NewCertReloader(*c.TLS, c.Logger); err != nil {
			_ = ln.Close()
			return nil, err
		}
		l.tlsConfig = l.certs.ServerConfig()
	}
	l.dialer = newDialer(c, l.certs)
	if a, ok := ln.Addr().(*net.TCPAddr); ok && !a.IP.IsUnspecified() {
		l.dialer.localIP = a.IP
	}
	l.raft = newKindListener(l)
	l.grpc = newKindListener(l)
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

// Advertise returns the advertised "host:port".
func (l *Listener) Advertise() string { return l.advertise }

// RaftLayer returns the stream layer for raft.NewNetworkTransport. Its
// Accept blocks until a raft connection has passed the handshake or the
// layer or Listener is closed; its Dial dials a raft connection within the
// smaller of its timeout argument and DialTimeout; its Addr reports the
// advertised address; its Abandon (see [raftLayer.Abandon]) closes what it
// dialed to an address a member left. Closing it (as NetworkTransport.Close
// does) stops raft connections only. Connections it returned are closed by
// Listener.Close.
func (l *Listener) RaftLayer() raft.StreamLayer { return raftLayer{l.raft} }

// GRPCListener returns a net.Listener for grpc.Server.Serve. Accept blocks
// until a gRPC connection has passed the handshake or the listener or
// Listener is closed; Addr reports the advertised address. Closing it (as
// grpc.Server.Stop does) stops gRPC connections only.
func (l *Listener) GRPCListener() net.Listener { return l.grpc }

// Dialer returns a gRPC context dialer like the package-level [Dialer], for
// this Listener's Config and sharing its watched certificates. Connections
// it returns are the caller's; Listener.Close does not close them.
func (l *Listener) Dialer() func(ctx context.Context, addr string) (net.Conn, error) {
	return l.dialer.grpc
}

// Close stops accepting, closes every connection in handshake or handed out
// by this Listener (accepted ones and those dialed by the raft layer), stops
// the certificate watcher and waits for its goroutines. Blocked Accepts
// return errors matching net.ErrClosed. Only the first call does anything.
func (l *Listener) Close() error {
	var err error
	l.closeOnce.Do(func() {
		l.mu.Lock()
		l.closed = true
		conns := l.conns
		l.conns = nil
		l.mu.Unlock()
		close(l.done)
		err = l.ln.Close()
		for c := range conns {
			_ = c.Close()
		}
		if l.certs != nil {
			_ = l.certs.Close()
		}
		l.wg.Wait()
	})
	return err
}

// track records a TCP connection for Close; false if already closed.
func (l *Listener) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.conns[c] = struct{}{}
	return true
}

func (l *Listener) untrack(c net.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.conns, c)
}

// pendingHandshakes reports how many connections are in handshake.
func (l *Listener) pendingHandshakes() int { return len(l.pending) }

// trackedConn is a connection handed out by a Listener; closing it forgets it.
type trackedConn struct {
	net.Conn
	raw    net.Conn
	l      *Listener
	target raft.ServerAddress // the address the raft layer dialed ("" if accepted)
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.l.mu.Lock()
	delete(c.l.conns, c.raw)
	if c.target != "" {
		c.l.forgetOutbound(c.target, c.raw)
	}
	c.l.mu.Unlock()
	return err
}
