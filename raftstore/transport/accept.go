package transport

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

const (
	lingerTimeout  = time.Second
	lingerMaxBytes = 64 << 10
)

// acceptLoop accepts TCP connections until Close and starts a handshake
// goroutine for each; it never waits on a client.
func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	var delay time.Duration
	for {
		raw, err := l.ln.Accept()
		if err != nil {
			if l.isClosed() {
				return
			}
			// Temporary failures such as running out of file descriptors.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			l.logger.Error("accept peer connection failed", "error", err, "retry_in", delay)
			t := time.NewTimer(delay)
			select {
			case <-l.done:
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		delay = 0
		select {
		case l.pending <- struct{}{}:
		default:
			l.logger.Warn("rejected peer connection", "remote", raw.RemoteAddr().String(),
				"reason", fmt.Sprintf("too many connections in handshake (limit %d)", cap(l.pending)))
			_ = raw.Close()
			continue
		}
		if !l.track(raw) {
			_ = raw.Close()
			<-l.pending
			return
		}
		l.wg.Add(1)
		go l.serveConn(raw)
	}
}

// serveConn handshakes raw and hands it to the listener for its kind.
func (l *Listener) serveConn(raw net.Conn) {
	defer l.wg.Done()
	remote := raw.RemoteAddr().String()
	conn, kind, err := l.handshake(raw, remote)
	if err != nil {
		if !l.isClosed() { // else the error is just Close at work
			attrs := []any{"remote", remote, "reason", err.Error()}
			var he *HandshakeError
			if errors.As(err, &he) {
				attrs = append(attrs, "code", he.Reason.String())
			}
			l.logger.Warn("rejected peer connection", attrs...)
		}
		lingerClose(raw)
		l.untrack(raw)
		<-l.pending
		return
	}
	<-l.pending

	// Hand over, but do not hold a connection forever for a kind that
	// nobody accepts (for example before the gRPC server starts).
	k := l.kind(kind)
	tc := &trackedConn{Conn: conn, raw: raw, l: l}
	timer := time.NewTimer(l.cfg.DialTimeout)
	defer timer.Stop()
	select {
	case k.ch <- tc:
	case <-k.done:
		_ = tc.Close()
	case <-l.done:
		_ = tc.Close()
	case <-timer.C:
		l.logger.Warn("dropped peer connection", "remote", remote,
			"reason", fmt.Sprintf("no %s Accept within %s", kind, l.cfg.DialTimeout))
		_ = tc.Close()
	}
}

func (l *Listener) isClosed() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

func (l *Listener) handshake(raw net.Conn, remote string) (net.Conn, Kind, error) {
	if err := raw.SetDeadline(time.Now().Add(l.cfg.DialTimeout)); err != nil {
		return nil, 0, fmt.Errorf("set handshake deadline: %w", err)
	}
	p := params{app: l.cfg.App, token: l.cfg.Token, rand: l.rand, localID: l.LocalID}
	conn := raw
	if l.tlsConfig != nil {
		tc := tls.Server(raw, l.tlsConfig)
		if err := tc.Handshake(); err != nil {
			return nil, 0, acceptTLSErr(raw, remote, err)
		}
		b, err := exportBinding(tc)
		if err != nil {
			return nil, 0, handshakeErr(remote, ReasonTLS, err, "TLS handshake with dialer failed")
		}
		p.binding, conn = b, tc
	}
	kind, err := acceptHandshake(conn, remote, p, l.available)
	if err != nil {
		return nil, 0, err
	}
	if err := raw.SetDeadline(time.Time{}); err != nil {
		return nil, 0, fmt.Errorf("clear handshake deadline: %w", err)
	}
	return conn, kind, nil
}

// acceptTLSErr explains a failed TLS handshake; a dialer that sent a
// plaintext hello is told in plaintext that TLS is required.
func acceptTLSErr(raw net.Conn, remote string, err error) error {
	var rh tls.RecordHeaderError
	switch {
	case errors.As(err, &rh) && string(rh.RecordHeader[:len(magic)]) == magic:
		reject(raw, true, statusBadRequest, tlsRequiredDetail)
		return handshakeErr(remote, ReasonTLS, err,
			"dialer did not start TLS but this node requires it (configure TLS on both nodes or on neither)")
	case isRemoteTLSAlert(err):
		return handshakeErr(remote, ReasonTLS, err,
			"dialer refused the TLS session (is this node's certificate signed by a CA in the dialer's CA file?)")
	}
	return handshakeErr(remote, ReasonTLS, err, "TLS handshake with dialer failed")
}

// lingerClose closes a rejected connection so that the dialer reads the
// rejection: closing a socket with unread input makes the kernel send a
// reset, which can destroy the rejection (or the TLS alert) before the
// dialer reads it. So it half-closes, then discards input until the dialer
// closes or a short timeout passes.
func lingerClose(raw net.Conn) {
	if tcp, ok := raw.(*net.TCPConn); ok && tcp.CloseWrite() == nil &&
		raw.SetReadDeadline(time.Now().Add(lingerTimeout)) == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(raw, lingerMaxBytes))
	}
	_ = raw.Close()
}

// available reports whether connections of kind are still accepted.
func (l *Listener) available(kind Kind) error {
	select {
	case <-l.kind(kind).done:
		return fmt.Errorf("this node no longer accepts %s connections (shutting down?)", kind)
	default:
		return nil
	}
}

func (l *Listener) kind(k Kind) *kindListener {
	if k == KindRaft {
		return l.raft
	}
	return l.grpc
}
