// Package transport carries a node's raft RPCs and its peer gRPC API over a
// single TCP listener.
//
// Every connection starts with a short handshake that says which protocol
// follows ([KindRaft] or [KindGRPC]), proves that both ends serve the same
// application, and, when a join token is configured, proves that both ends
// know it without sending it. With [Config.TLS] set the whole connection,
// handshake included, runs inside mutual TLS 1.3 whose certificate files are
// reloaded when they change (see [CertReloader]).
//
// Peers are addressed by advertised "host:port" strings. Names are resolved
// on every dial and never cached, so a pod that comes back with a new IP
// under the same DNS name is reached at its new address. The raft side is a
// [github.com/hashicorp/raft.StreamLayer] whose Addr reports the advertised
// name, which raft's own TCP transport cannot do.
//
// # Handshake wire format (version 1)
//
// All lengths are single unsigned bytes; there are no other integers.
// "D" is the dialer, "A" the accepting node.
//
//	D→A hello:     "BKP" | version=1 | kind | len(app) 1..253 | app
//	               | len(member) 0..253 | member | dialerNonce[32]
//	A→D challenge: "BKP" | version=1 | status
//	               status OK:   acceptorNonce[32]
//	               otherwise:   len(detail) | detail, then A closes
//	D→A proof:     0x00                      (no token configured)
//	            or 0x01 | HMAC[32]
//	A→D result:    status
//	               status OK:   0x00             (no token configured)
//	                         or 0x01 | HMAC[32]  (the acceptor's proof)
//	               otherwise:   len(detail) | detail, then A closes
//
// The two proofs are HMAC-SHA256 keyed with the join token over
//
//	label | dialerNonce | acceptorNonce | kind | len(app) | app
//	      | len(member) | member | binding
//
// where label is "bagkeeper handshake v1 dialer" or
// "bagkeeper handshake v1 acceptor" (so one side's proof can never be
// replayed as the other's), and binding is 32 bytes of TLS keying material
// exported under the label "EXPORTER-bagkeeper-peer-handshake" when TLS is
// on, and empty otherwise (so a proof cannot be relayed into another TLS
// session). Fresh nonces on both sides prevent replay. The dialer sends
// 0x00 only when it has no token; the acceptor then answers
// TokenRequired if it has one. The acceptor answers TokenUnexpected when it
// has no token but receives a proof, so the two nodes always agree on
// whether a token is in use. Proofs are compared with hmac.Equal.
//
// member is the raft id the dialer expects to reach, for raft connections
// dialed to a tagged address ([MemberAddress]); it is empty for the peer
// API. An accepting node whose own raft id (see [Listener.SetLocalID])
// differs answers WrongMember: a node that took over another member's
// address — a pod back with an empty disk and a new incarnation — can
// never answer raft RPCs meant for the member it replaced, so it can never
// cast that member's vote.
//
// Status bytes: 0 OK, 1 AppMismatch (detail = the acceptor's application
// name), 2 TokenMismatch, 3 TokenRequired, 4 TokenUnexpected, 5 BadVersion
// (the challenge's version byte is the acceptor's version), 6 BadRequest
// (bad magic, bad length, unknown kind; detail says which),
// 7 KindUnavailable (the acceptor no longer serves that kind, e.g. it is
// shutting down), 8 WrongMember (detail = the acceptor's raft id, empty if
// its member has not started). Details are at most 255 bytes and are only ever shown
// quoted.
//
// An acceptor that requires TLS and receives this plaintext hello instead
// of a TLS ClientHello answers a plaintext BadRequest challenge with the
// detail "this node requires TLS", so the dialer can say what is wrong.
//
// After a successful result the connection carries the chosen protocol
// unchanged. Neither side reads past the handshake, so bytes that follow
// are never lost.
//
// Without TLS the token authenticates only the handshake: the stream after
// it is neither encrypted nor integrity protected. Use TLS wherever the
// network is not trusted.
//
// # Errors
//
// Both ends of a failed handshake get a [*HandshakeError] whose message says
// what differs and which node to fix; errors.Is matches it against
// [ErrAppMismatch], [ErrTokenMismatch], [ErrTokenRequired],
// [ErrTokenUnexpected], [ErrProtocol], [ErrKindUnavailable], [ErrWrongMember] and [ErrTLS]. The
// accepting side logs one line per rejected connection with the fields
// "remote" and "reason".
package transport
