package transport

import (
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"io"
	"net"
)

// Wire constants; see the package documentation for the format.
const (
	magic       = "BKP"
	version     = 1
	nonceLen    = 32
	macLen      = sha256.Size
	helloHeader = len(magic) + 3 // magic, version, kind, len(app)

	proofNone = 0x00
	proofMAC  = 0x01

	labelDialer   = "bagkeeper handshake v1 dialer"
	labelAcceptor = "bagkeeper handshake v1 acceptor"
	exporterLabel = "EXPORTER-bagkeeper-peer-handshake"
	bindingLen    = 32

	// tlsRequiredDetail is sent in plaintext to a dialer that did not start
	// TLS; the dialer recognises it.
	tlsRequiredDetail = "this node requires TLS"
)

type status byte

const (
	statusOK status = iota
	statusAppMismatch
	statusTokenMismatch
	statusTokenRequired
	statusTokenUnexpected
	statusBadVersion
	statusBadRequest
	statusKindUnavailable
	statusWrongMember
)

// params is what one end brings to a handshake.
type params struct {
	app string
	// target is, on the dialing side, the raft id the dialer expects to
	// reach ("" for the peer API, which may reach any member).
	target string
	// localID returns, on the accepting side, this node's raft id ("" while
	// it is not known yet).
	localID func() string
	token   []byte
	rand    io.Reader // nonces
	binding []byte    // TLS exported keying material; nil without TLS
}

// proof is the HMAC described in the package documentation.
func proof(p params, label string, dialerNonce, acceptorNonce []byte, kind Kind, target string) []byte {
	m := hmac.New(sha256.New, p.token)
	m.Write([]byte(label))
	m.Write(dialerNonce)
	m.Write(acceptorNonce)
	m.Write([]byte{byte(kind), byte(len(p.app))})
	m.Write([]byte(p.app))
	m.Write([]byte{byte(len(target))})
	m.Write([]byte(target))
	m.Write(p.binding)
	return m.Sum(nil)
}

func isRemoteTLSAlert(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "remote error"
}

func isMagicPrefix(b []byte) bool {
	n := min(len(b), len(magic))
	return string(b[:n]) == magic[:n]
}

// looksLikeTLS reports whether b starts like a TLS record (handshake or
// alert, version 3.x).
func looksLikeTLS(b []byte) bool {
	return len(b) >= 2 && (b[0] == 0x16 || b[0] == 0x15) && b[1] == 0x03
}
