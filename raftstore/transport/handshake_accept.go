package transport

import (
	"crypto/hmac"
	"errors"
	"fmt"
	"io"
	"os"
)

// acceptHandshake runs the accepting side over rw. available reports whether
// a kind may be handed out now. On failure it has already told the dialer
// why, as far as the connection allows; the caller closes the connection and
// should bound the call with a deadline. It reads exactly the handshake's
// bytes, never more.
func acceptHandshake(rw io.ReadWriter, peer string, p params, available func(Kind) error) (Kind, error) {
	var hdr [helloHeader]byte
	if n, err := io.ReadFull(rw, hdr[:]); err != nil {
		if n > 0 && !isMagicPrefix(hdr[:n]) {
			return 0, rejectBadMagic(rw, peer, hdr[:n])
		}
		return 0, acceptIOErr(peer, "hello", err)
	}
	if string(hdr[:len(magic)]) != magic {
		return 0, rejectBadMagic(rw, peer, hdr[:])
	}
	if v := hdr[3]; v != version {
		reject(rw, true, statusBadVersion, "")
		return 0, handshakeErr(peer, ReasonProtocol, nil,
			"dialer speaks handshake version %d, this node speaks version %d (run the same bagkeeper version on both nodes)", v, version)
	}
	kind, appLen := Kind(hdr[4]), int(hdr[5])
	if appLen == 0 || appLen > maxAppLen {
		msg := fmt.Sprintf("application name length %d is outside 1..%d", appLen, maxAppLen)
		reject(rw, true, statusBadRequest, msg)
		return 0, handshakeErr(peer, ReasonProtocol, nil, "malformed handshake from dialer: %s", msg)
	}
	rest := make([]byte, appLen+1)
	if _, err := io.ReadFull(rw, rest); err != nil {
		return 0, acceptIOErr(peer, "hello", err)
	}
	app, targetLen := string(rest[:appLen]), int(rest[appLen])
	if targetLen > maxAppLen {
		msg := fmt.Sprintf("member id length %d is over %d", targetLen, maxAppLen)
		reject(rw, true, statusBadRequest, msg)
		return 0, handshakeErr(peer, ReasonProtocol, nil, "malformed handshake from dialer: %s", msg)
	}
	rest = make([]byte, targetLen+nonceLen)
	if _, err := io.ReadFull(rw, rest); err != nil {
		return 0, acceptIOErr(peer, "hello", err)
	}
	target, dialerNonce := string(rest[:targetLen]), rest[targetLen:]
	if kind != KindRaft && kind != KindGRPC {
		msg := fmt.Sprintf("unknown connection kind 0x%02x", byte(kind))
		reject(rw, true, statusBadRequest, msg)
		return 0, handshakeErr(peer, ReasonProtocol, nil, "malformed handshake from dialer: %s", msg)
	}
	if app != p.app {
		reject(rw, true, statusAppMismatch, p.app)
		return 0, handshakeErr(peer, ReasonAppMismatch, nil,
			"dialer serves application %q, this node serves %q", app, p.app)
	}
	if target != "" {
		local := ""
		if p.localID != nil {
			local = p.localID()
		}
		if local != target {
			reject(rw, true, statusWrongMember, local)
			if local == "" {
				return 0, handshakeErr(peer, ReasonWrongMember, nil, "dialer expects member %s, but this node's raft member has not started", target)
			}
			return 0, handshakeErr(peer, ReasonWrongMember, nil, "dialer expects member %s at this address, but this node is %s", target, local)
		}
	}
	if err := available(kind); err != nil {
		reject(rw, true, statusKindUnavailable, err.Error())
		return 0, handshakeErr(peer, ReasonKindUnavailable, err, "refused a %s connection", kind)
	}

	acceptorNonce := make([]byte, nonceLen)
	if _, err := io.ReadFull(p.rand, acceptorNonce); err != nil {
		return 0, fmt.Errorf("read random nonce: %w", err)
	}
	challenge := append([]byte(magic), version, byte(statusOK))
	if _, err := rw.Write(append(challenge, acceptorNonce...)); err != nil {
		return 0, acceptIOErr(peer, "challenge", err)
	}

	var kindOfProof [1]byte
	if _, err := io.ReadFull(rw, kindOfProof[:]); err != nil {
		return 0, acceptIOErr(peer, "proof", err)
	}
	var got []byte
	switch kindOfProof[0] {
	case proofNone:
	case proofMAC:
		got = make([]byte, macLen)
		if _, err := io.ReadFull(rw, got); err != nil {
			return 0, acceptIOErr(peer, "proof", err)
		}
	default:
		msg := fmt.Sprintf("unknown proof type 0x%02x", kindOfProof[0])
		reject(rw, false, statusBadRequest, msg)
		return 0, handshakeErr(peer, ReasonProtocol, nil, "malformed handshake from dialer: %s", msg)
	}
	hasToken := len(p.token) > 0
	switch {
	case !hasToken && got != nil:
		reject(rw, false, statusTokenUnexpected, "")
		return 0, handshakeErr(peer, ReasonTokenUnexpected, nil,
			"dialer sent a join token proof but no join token is configured on this node (configure the same token on both nodes, or none on either)")
	case hasToken && got == nil:
		reject(rw, false, statusTokenRequired, "")
		return 0, handshakeErr(peer, ReasonTokenRequired, nil,
			"dialer has no join token configured but this node requires one")
	case hasToken && !hmac.Equal(got, proof(p, labelDialer, dialerNonce, acceptorNonce, kind, target)):
		reject(rw, false, statusTokenMismatch, "")
		return 0, handshakeErr(peer, ReasonTokenMismatch, nil,
			"dialer's join token differs from this node's (tokens differ on the two nodes)")
	}

	result := []byte{byte(statusOK), proofNone}
	if hasToken {
		result[1] = proofMAC
		result = append(result, proof(p, labelAcceptor, dialerNonce, acceptorNonce, kind, target)...)
	}
	if _, err := rw.Write(result); err != nil {
		return 0, acceptIOErr(peer, "result", err)
	}
	return kind, nil
}

// reject tells the dialer why its handshake failed. Errors are ignored: the
// connection is closed next either way, and the accepting side logs.
func reject(w io.Writer, withHeader bool, st status, detail string) {
	if len(detail) > 255 {
		detail = detail[:255]
	}
	var msg []byte
	if withHeader {
		msg = append([]byte(magic), version)
	}
	msg = append(msg, byte(st), byte(len(detail)))
	_, _ = w.Write(append(msg, detail...))
}

func rejectBadMagic(w io.Writer, peer string, got []byte) error {
	if looksLikeTLS(got) {
		reject(w, true, statusBadRequest, "this node does not use TLS")
		return handshakeErr(peer, ReasonProtocol, nil,
			"dialer started TLS but TLS is not configured on this node (configure TLS on both nodes or on neither)")
	}
	reject(w, true, statusBadRequest, "not a bagkeeper peer handshake")
	return handshakeErr(peer, ReasonProtocol, nil,
		"dialer does not speak the bagkeeper peer protocol (first bytes %q)", got)
}

func acceptIOErr(peer, step string, err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return handshakeErr(peer, ReasonIO, err, "dialer did not complete the handshake in time (%s)", step)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return handshakeErr(peer, ReasonIO, err, "dialer closed the connection during the handshake (%s)", step)
	}
	return handshakeErr(peer, ReasonIO, err, "handshake with dialer failed (%s)", step)
}
