package transport

import (
	"errors"
	"fmt"
)

// Sentinel errors that a [*HandshakeError] matches with errors.Is, one per
// [Reason] that callers may want to act on.
var (
	// ErrAppMismatch: the two nodes serve different applications.
	ErrAppMismatch = errors.New("application mismatch")
	// ErrTokenMismatch: both nodes have a join token, and they differ (or
	// the accepting node could not prove it knows the dialer's token).
	ErrTokenMismatch = errors.New("join token mismatch")
	// ErrTokenRequired: the accepting node requires a join token and the
	// dialer has none configured.
	ErrTokenRequired = errors.New("join token required")
	// ErrTokenUnexpected: the dialer has a join token and the accepting node
	// has none configured.
	ErrTokenUnexpected = errors.New("join token not configured on the accepting node")
	// ErrProtocol: the other end does not speak this handshake (wrong
	// magic, version, lengths or kind).
	ErrProtocol = errors.New("peer protocol error")
	// ErrKindUnavailable: the accepting node no longer accepts this kind of
	// connection, typically because it is shutting down.
	ErrKindUnavailable = errors.New("connection kind unavailable")
	// ErrWrongMember: a raft connection reached a node that is not the
	// member it was meant for (its address now belongs to another member,
	// or its raft member has not started).
	ErrWrongMember = errors.New("wrong member")
	// ErrTLS: the TLS handshake failed or a certificate was refused.
	ErrTLS = errors.New("TLS handshake failed")
)

// Reason classifies a failed handshake.
type Reason uint8

// Reasons of a [*HandshakeError].
const (
	// ReasonIO: the connection failed, timed out or was closed before the
	// handshake finished. The wrapped error says why.
	ReasonIO              Reason = iota + 1
	ReasonTLS                    // matches ErrTLS
	ReasonProtocol               // matches ErrProtocol
	ReasonAppMismatch            // matches ErrAppMismatch
	ReasonTokenMismatch          // matches ErrTokenMismatch
	ReasonTokenRequired          // matches ErrTokenRequired
	ReasonTokenUnexpected        // matches ErrTokenUnexpected
	ReasonKindUnavailable        // matches ErrKindUnavailable
	ReasonWrongMember            // matches ErrWrongMember
)

var reasonNames = map[Reason]string{
	ReasonIO:              "io",
	ReasonTLS:             "tls",
	ReasonProtocol:        "protocol",
	ReasonAppMismatch:     "app_mismatch",
	ReasonTokenMismatch:   "token_mismatch",
	ReasonTokenRequired:   "token_required",
	ReasonTokenUnexpected: "token_unexpected",
	ReasonKindUnavailable: "kind_unavailable",
	ReasonWrongMember:     "wrong_member",
}

var reasonSentinels = map[Reason]error{
	ReasonTLS:             ErrTLS,
	ReasonProtocol:        ErrProtocol,
	ReasonAppMismatch:     ErrAppMismatch,
	ReasonTokenMismatch:   ErrTokenMismatch,
	ReasonTokenRequired:   ErrTokenRequired,
	ReasonTokenUnexpected: ErrTokenUnexpected,
	ReasonKindUnavailable: ErrKindUnavailable,
	ReasonWrongMember:     ErrWrongMember,
}

// String returns a short snake_case name, stable for logs and metrics.
func (r Reason) String() string {
	if s, ok := reasonNames[r]; ok {
		return s
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// HandshakeError reports a failed connection handshake, on either end.
//
// Msg is a complete sentence for a person: on the dialing side it names the
// peer ("peer 10.0.0.2:7400 serves application ..."); on the accepting side
// it speaks of "the dialer" and Peer holds its remote address.
type HandshakeError struct {
	Peer   string // the other end's address as dialed or as seen
	Reason Reason
	Msg    string
	Err    error // underlying cause (I/O, TLS); may be nil
}

// Error returns Msg followed by the underlying cause, if any.
func (e *HandshakeError) Error() string {
	if e.Err != nil {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}

// Unwrap returns the underlying cause, if any.
func (e *HandshakeError) Unwrap() error { return e.Err }

// Is reports whether target is the sentinel error for e's Reason.
func (e *HandshakeError) Is(target error) bool {
	s, ok := reasonSentinels[e.Reason]
	return ok && s == target
}

func handshakeErr(peer string, reason Reason, err error, format string, args ...any) *HandshakeError {
	return &HandshakeError{Peer: peer, Reason: reason, Msg: fmt.Sprintf(format, args...), Err: err}
}
