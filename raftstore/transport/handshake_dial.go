package transport

import (
	"crypto/hmac"
	"errors"
	"fmt"
	"io"
)

// dialHandshake runs the dialing side over rw for a connection to peer. The
// caller bounds it with a deadline and closes the connection on error. It
// reads exactly the handshake's bytes, never more.
func dialHandshake(rw io.ReadWriter, peer string, kind Kind, p params) error {
	dialerNonce := make([]byte, nonceLen)
	if _, err := io.ReadFull(p.rand, dialerNonce); err != nil {
		return fmt.Errorf("read random nonce: %w", err)
	}
	if len(p.target) > maxAppLen {
		return handshakeErr(peer, ReasonProtocol, nil, "member id %q is too long", p.target)
	}
	hello := append([]byte(magic), version, byte(kind), byte(len(p.app)))
	hello = append(hello, p.app...)
	hello = append(hello, byte(len(p.target)))
	hello = append(append(hello, p.target...), dialerNonce...)
	if _, err := rw.Write(hello); err != nil {
		return dialIOErr(peer, "send hello", err)
	}

	var hdr [len(magic) + 2]byte
	if n, err := io.ReadFull(rw, hdr[:]); err != nil {
		if n > 0 && !isMagicPrefix(hdr[:n]) {
			return dialBadMagic(peer, hdr[:n])
		}
		return dialIOErr(peer, "read challenge", err)
	}
	if string(hdr[:len(magic)]) != magic {
		return dialBadMagic(peer, hdr[:])
	}
	peerVersion, st := hdr[3], status(hdr[4])
	if st != statusOK {
		return dialRejected(rw, peer, kind, p, st, peerVersion)
	}
	if peerVersion != version {
		return handshakeErr(peer, ReasonProtocol, nil,
			"peer %s answered with handshake version %d, this node speaks version %d", peer, peerVersion, version)
	}
	acceptorNonce := make([]byte, nonceLen)
	if _, err := io.ReadFull(rw, acceptorNonce); err != nil {
		return dialIOErr(peer, "read challenge", err)
	}

	msg := []byte{proofNone}
	if len(p.token) > 0 {
		msg[0] = proofMAC
		msg = append(msg, proof(p, labelDialer, dialerNonce, acceptorNonce, kind, p.target)...)
	}
	if _, err := rw.Write(msg); err != nil {
		return dialIOErr(peer, "send proof", err)
	}

	var res [2]byte
	if _, err := io.ReadFull(rw, res[:1]); err != nil {
		return dialIOErr(peer, "read result", err)
	}
	if st := status(res[0]); st != statusOK {
		return dialRejected(rw, peer, kind, p, st, version)
	}
	if _, err := io.ReadFull(rw, res[1:]); err != nil {
		return dialIOErr(peer, "read result", err)
	}
	switch res[1] {
	case proofNone:
		if len(p.token) > 0 {
			return handshakeErr(peer, ReasonTokenMismatch, nil,
				"peer %s accepted without proving it knows the join token; is another service listening on that address?", peer)
		}
	case proofMAC:
		got := make([]byte, macLen)
		if _, err := io.ReadFull(rw, got); err != nil {
			return dialIOErr(peer, "read result", err)
		}
		if len(p.token) == 0 {
			return handshakeErr(peer, ReasonProtocol, nil,
				"peer %s sent a join token proof although this node sent none", peer)
		}
		if !hmac.Equal(got, proof(p, labelAcceptor, dialerNonce, acceptorNonce, kind, p.target)) {
			return handshakeErr(peer, ReasonTokenMismatch, nil,
				"peer %s could not prove it knows the join token; is another service listening on that address?", peer)
		}
	default:
		return handshakeErr(peer, ReasonProtocol, nil,
			"peer %s sent an unknown proof type 0x%02x", peer, res[1])
	}
	return nil
}

// dialRejected reads the detail of a rejection and turns it into the
// dialing side's error.
func dialRejected(r io.Reader, peer string, kind Kind, p params, st status, peerVersion byte) error {
	detail := readDetail(r)
	switch st {
	case statusAppMismatch:
		return handshakeErr(peer, ReasonAppMismatch, nil,
			"peer %s serves application %q, this node serves %q", peer, detail, p.app)
	case statusTokenMismatch:
		return handshakeErr(peer, ReasonTokenMismatch, nil,
			"peer %s rejected the join token (tokens differ on the two nodes)", peer)
	case statusTokenRequired:
		return handshakeErr(peer, ReasonTokenRequired, nil,
			"peer %s requires a join token but none is configured here", peer)
	case statusTokenUnexpected:
		return handshakeErr(peer, ReasonTokenUnexpected, nil,
			"peer %s has no join token configured but this node has one (configure the same token on both nodes, or none on either)", peer)
	case statusBadVersion:
		return handshakeErr(peer, ReasonProtocol, nil,
			"peer %s speaks handshake version %d, this node speaks version %d (run the same bagkeeper version on both nodes)", peer, peerVersion, version)
	case statusBadRequest:
		if detail == tlsRequiredDetail {
			return handshakeErr(peer, ReasonProtocol, nil,
				"peer %s requires TLS but TLS is not configured on this node (configure TLS on both nodes or on neither)", peer)
		}
		return handshakeErr(peer, ReasonProtocol, nil,
			"peer %s rejected the handshake as malformed: %q", peer, detail)
	case statusWrongMember:
		if detail == "" {
			return handshakeErr(peer, ReasonWrongMember, nil,
				"peer %s has not started its raft member yet (expected %s)", peer, p.target)
		}
		return handshakeErr(peer, ReasonWrongMember, nil,
			"peer %s is member %s now, not %s (its address was taken over)", peer, detail, p.target)
	case statusKindUnavailable:
		return handshakeErr(peer, ReasonKindUnavailable, nil,
			"peer %s does not accept %s connections now: %q", peer, kind, detail)
	}
	return handshakeErr(peer, ReasonProtocol, nil,
		"peer %s answered the handshake with unknown status %d", peer, byte(st))
}

// readDetail reads a length-prefixed detail, or as much of it as arrives.
func readDetail(r io.Reader) string {
	var n [1]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return ""
	}
	buf := make([]byte, n[0])
	k, _ := io.ReadFull(r, buf)
	return string(buf[:k])
}

func dialBadMagic(peer string, got []byte) error {
	if looksLikeTLS(got) {
		return handshakeErr(peer, ReasonProtocol, nil,
			"peer %s answered with TLS but TLS is not configured on this node (configure TLS on both nodes or on neither)", peer)
	}
	return handshakeErr(peer, ReasonProtocol, nil,
		"peer %s does not speak the bagkeeper peer protocol (it answered %q); is that the right address and port?", peer, got)
}

// dialIOErr wraps a failed read or write on the dialing side. A TLS alert
// from the peer means it refused this node's certificate.
func dialIOErr(peer, step string, err error) error {
	if isRemoteTLSAlert(err) {
		return handshakeErr(peer, ReasonTLS, err,
			"peer %s refused the TLS session (is this node's certificate signed by a CA in the peer's CA file?)", peer)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return handshakeErr(peer, ReasonIO, err,
			"peer %s closed the connection during the handshake (%s); check its log for the reason, and that TLS is configured the same way on both nodes", peer, step)
	}
	return handshakeErr(peer, ReasonIO, err, "handshake with peer %s failed (%s)", peer, step)
}
