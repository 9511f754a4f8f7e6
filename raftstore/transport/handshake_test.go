package transport

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// pipeHandshake runs both sides of a handshake over an in-memory pipe.
func pipeHandshake(t *testing.T, kind Kind, dialer, acceptor params, available func(Kind) error) (gotKind Kind, dialErr, acceptErr error) {
	t.Helper()
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	deadline := time.Now().Add(waitTimeout)
	_ = c.SetDeadline(deadline)
	_ = s.SetDeadline(deadline)
	type res struct {
		kind Kind
		err  error
	}
	done := make(chan res, 1)
	go func() {
		k, err := acceptHandshake(s, "dialer-addr", acceptor, available)
		if err != nil {
			_ = s.Close() // as the listener does: the dialer sees EOF
		}
		done <- res{k, err}
	}()
	dialErr = dialHandshake(c, "peer-addr", kind, dialer)
	if dialErr != nil {
		_ = c.Close()
	}
	r := <-done
	return r.kind, dialErr, r.err
}

func always(Kind) error { return nil }

func TestHandshakeOutcomes(t *testing.T) {
	t.Parallel()
	p := func(app, token string) params {
		pp := params{app: app, rand: rand.Reader}
		if token != "" {
			pp.token = []byte(token)
		}
		return pp
	}
	tests := []struct {
		name               string
		kind               Kind
		dialer, acceptor   params
		available          func(Kind) error
		wantDial, wantAcc  error // nil = success
		dialMsg, acceptMsg string
	}{
		{name: "same app no token", kind: KindRaft, dialer: p("wp", ""), acceptor: p("wp", "")},
		{name: "same app same token", kind: KindGRPC, dialer: p("wp", "s3cret"), acceptor: p("wp", "s3cret")},
		{
			name: "app mismatch", kind: KindRaft, dialer: p("wordpress", ""), acceptor: p("mysql", ""),
			wantDial: ErrAppMismatch, wantAcc: ErrAppMismatch,
			dialMsg:   `peer peer-addr serves application "mysql", this node serves "wordpress"`,
			acceptMsg: `dialer serves application "wordpress", this node serves "mysql"`,
		},
		{
			name: "token mismatch", kind: KindGRPC, dialer: p("wp", "one"), acceptor: p("wp", "two"),
			wantDial: ErrTokenMismatch, wantAcc: ErrTokenMismatch,
			dialMsg:   "peer peer-addr rejected the join token (tokens differ on the two nodes)",
			acceptMsg: "join token differs",
		},
		{
			name: "token missing on dialer", kind: KindRaft, dialer: p("wp", ""), acceptor: p("wp", "two"),
			wantDial: ErrTokenRequired, wantAcc: ErrTokenRequired,
			dialMsg:   "peer peer-addr requires a join token but none is configured here",
			acceptMsg: "dialer has no join token configured but this node requires one",
		},
		{
			name: "token missing on acceptor", kind: KindRaft, dialer: p("wp", "one"), acceptor: p("wp", ""),
			wantDial: ErrTokenUnexpected, wantAcc: ErrTokenUnexpected,
			dialMsg:   "peer peer-addr has no join token configured but this node has one",
			acceptMsg: "no join token is configured on this node",
		},
		{
			name: "kind unavailable", kind: KindRaft, dialer: p("wp", ""), acceptor: p("wp", ""),
			available: func(Kind) error { return errors.New("shutting down") },
			wantDial:  ErrKindUnavailable, wantAcc: ErrKindUnavailable,
			dialMsg: `peer peer-addr does not accept raft connections now: "shutting down"`,
		},
		{
			name: "unknown kind", kind: Kind('X'), dialer: p("wp", ""), acceptor: p("wp", ""),
			wantDial: ErrProtocol, wantAcc: ErrProtocol,
			dialMsg: "unknown connection kind 0x58",
		},
		{
			name: "raft to the expected member", kind: KindRaft,
			dialer:   params{app: "wp", rand: rand.Reader, target: "wp-0/abc"},
			acceptor: params{app: "wp", rand: rand.Reader, localID: func() string { return "wp-0/abc" }},
		},
		{
			name: "raft to an address taken over by another member", kind: KindRaft,
			dialer:   params{app: "wp", rand: rand.Reader, target: "wp-0/abc"},
			acceptor: params{app: "wp", rand: rand.Reader, localID: func() string { return "wp-0/xyz" }},
			wantDial: ErrWrongMember, wantAcc: ErrWrongMember,
			dialMsg:   "peer peer-addr is member wp-0/xyz now, not wp-0/abc",
			acceptMsg: "dialer expects member wp-0/abc at this address, but this node is wp-0/xyz",
		},
		{
			name: "raft to a node whose member has not started", kind: KindRaft,
			dialer:   params{app: "wp", rand: rand.Reader, target: "wp-0/abc"},
			acceptor: params{app: "wp", rand: rand.Reader},
			wantDial: ErrWrongMember, wantAcc: ErrWrongMember,
			dialMsg: "has not started its raft member yet",
		},
		{
			name: "member tag is covered by the token proof", kind: KindRaft,
			dialer:   params{app: "wp", token: []byte("t"), rand: rand.Reader, target: "wp-0/abc"},
			acceptor: params{app: "wp", token: []byte("t"), rand: rand.Reader, localID: func() string { return "wp-0/abc" }},
		},
		{
			name: "tls binding differs", kind: KindRaft,
			dialer:   params{app: "wp", token: []byte("t"), rand: rand.Reader, binding: []byte("session one")},
			acceptor: params{app: "wp", token: []byte("t"), rand: rand.Reader, binding: []byte("session two")},
			wantDial: ErrTokenMismatch, wantAcc: ErrTokenMismatch,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			avail := tt.available
			if avail == nil {
				avail = always
			}
			kind, dErr, aErr := pipeHandshake(t, tt.kind, tt.dialer, tt.acceptor, avail)
			check := func(side string, err, want error, msg string) {
				t.Helper()
				if want == nil {
					if err != nil {
						t.Fatalf("%s: unexpected error: %v", side, err)
					}
					return
				}
				if !errors.Is(err, want) {
					t.Fatalf("%s: error %v, want errors.Is %v", side, err, want)
				}
				var he *HandshakeError
				if !errors.As(err, &he) {
					t.Fatalf("%s: error %T is not a *HandshakeError", side, err)
				}
				if msg != "" && !strings.Contains(err.Error(), msg) {
					t.Errorf("%s: error %q does not contain %q", side, err, msg)
				}
			}
			check("dialer", dErr, tt.wantDial, tt.dialMsg)
			check("acceptor", aErr, tt.wantAcc, tt.acceptMsg)
			if tt.wantAcc == nil && kind != tt.kind {
				t.Errorf("acceptor got kind %v, want %v", kind, tt.kind)
			}
		})
	}
}

// TestHandshakeWireFormat pins the bytes documented in the package doc.
func TestHandshakeWireFormat(t *testing.T) {
	t.Parallel()
	dialerNonce := bytes.Repeat([]byte{0xd1}, 32)
	acceptorNonce := bytes.Repeat([]byte{0xa2}, 32)
	token := []byte("join-token")
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(waitTimeout))
	done := make(chan error, 1)
	go func() {
		done <- dialHandshake(c, "peer", KindRaft, params{app: "wp", token: token, rand: bytes.NewReader(dialerNonce), target: "a/1"})
	}()

	mac := func(label string) []byte {
		m := hmac.New(sha256.New, token)
		m.Write([]byte(label))
		m.Write(dialerNonce)
		m.Write(acceptorNonce)
		m.Write([]byte{'R', 2, 'w', 'p', 3, 'a', '/', '1'})
		return m.Sum(nil)
	}
	read := func(n int) []byte {
		b := make([]byte, n)
		if _, err := io.ReadFull(s, b); err != nil {
			t.Fatalf("read: %v", err)
		}
		return b
	}
	wantHello := append([]byte("BKP\x01R\x02wp\x03a/1"), dialerNonce...)
	if got := read(len(wantHello)); !bytes.Equal(got, wantHello) {
		t.Fatalf("hello = %q, want %q", got, wantHello)
	}
	if _, err := s.Write(append([]byte("BKP\x01\x00"), acceptorNonce...)); err != nil {
		t.Fatal(err)
	}
	wantProof := append([]byte{0x01}, mac("bagkeeper handshake v1 dialer")...)
	if got := read(len(wantProof)); !bytes.Equal(got, wantProof) {
		t.Fatalf("proof = %x, want %x", got, wantProof)
	}
	if _, err := s.Write(append([]byte{0x00, 0x01}, mac("bagkeeper handshake v1 acceptor")...)); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("dialer: %v", err)
	}
}

// TestHandshakeDetectsImpostorAcceptor: an acceptor that does not know the
// token cannot make the dialer believe it does.
func TestHandshakeDetectsImpostorAcceptor(t *testing.T) {
	t.Parallel()
	for _, result := range [][]byte{
		{0x00, 0x00}, // claims success without a proof
		append([]byte{0x00, 0x01}, make([]byte, 32)...), // wrong proof
	} {
		c, s := net.Pipe()
		_ = s.SetDeadline(time.Now().Add(waitTimeout))
		done := make(chan error, 1)
		go func() {
			done <- dialHandshake(c, "peer", KindGRPC, params{app: "wp", token: []byte("t"), rand: rand.Reader})
		}()
		_, _ = io.ReadFull(s, make([]byte, 6+2+1+32))
		_, _ = s.Write(append([]byte("BKP\x01\x00"), make([]byte, 32)...))
		_, _ = io.ReadFull(s, make([]byte, 33))
		_, _ = s.Write(result)
		err := <-done
		if !errors.Is(err, ErrTokenMismatch) {
			t.Errorf("result %x: error %v, want ErrTokenMismatch", result[:2], err)
		}
		_ = c.Close()
		_ = s.Close()
	}
}

type scriptedConn struct {
	io.Reader
	io.Writer
}

func validHello(app string, kind Kind) []byte {
	b := append([]byte("BKP\x01"), byte(kind), byte(len(app)))
	b = append(append(b, app...), 0)
	return append(b, make([]byte, 32)...)
}

// FuzzHandshake feeds arbitrary bytes to the accepting side: it must never
// panic or hang, and must accept only well-formed handshakes.
func FuzzHandshake(f *testing.F) {
	f.Add(append(validHello("wp", KindRaft), proofNone))
	f.Add(append(append(validHello("wp", KindGRPC), proofMAC), make([]byte, 32)...))
	f.Add(append(validHello("other", KindRaft), proofNone))
	f.Add(validHello("wp", 'Z'))
	f.Add([]byte("BKP\x02R\x02wp"))
	f.Add([]byte("BKP\x01R\xffwp"))
	f.Add([]byte("BKP\x01R\x00"))
	f.Add(append([]byte("BKP\x01R\x02wp\x06wp-0/a"), make([]byte, 33)...))
	f.Add(append([]byte("BKP\x01R\x02wp\x06wp-0/b"), make([]byte, 33)...))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	f.Add([]byte{0x16, 0x03, 0x01, 0x00, 0x10})
	f.Add([]byte("BK"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, token := range [][]byte{nil, []byte("t")} {
			var out bytes.Buffer
			rw := scriptedConn{Reader: bytes.NewReader(data), Writer: &out}
			p := params{app: "wp", token: token, rand: bytes.NewReader(make([]byte, 32)), localID: func() string { return "wp-0/a" }}
			kind, err := acceptHandshake(rw, "fuzz", p, always)
			if err != nil {
				var he *HandshakeError
				if !errors.As(err, &he) {
					t.Fatalf("error %T is not a *HandshakeError: %v", err, err)
				}
				continue
			}
			if kind != KindRaft && kind != KindGRPC {
				t.Fatalf("accepted unknown kind %v", kind)
			}
			if !bytes.HasPrefix(data, validHello("wp", kind)[:8]) {
				t.Fatalf("accepted a malformed hello %q", data)
			}
		}
	})
}

// FuzzDialHandshake feeds arbitrary answers to the dialing side.
func FuzzDialHandshake(f *testing.F) {
	f.Add(append([]byte("BKP\x01\x00"), make([]byte, 32+2)...))
	f.Add([]byte("BKP\x01\x01\x05mysql"))
	f.Add([]byte("BKP\x01\x06\xff"))
	f.Add([]byte("HTTP/1.0 400 Bad Request\r\n\r\n"))
	f.Add([]byte{0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x28})
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, token := range [][]byte{nil, []byte("t")} {
			rw := scriptedConn{Reader: bytes.NewReader(data), Writer: io.Discard}
			err := dialHandshake(rw, "fuzz", KindRaft, params{app: "wp", token: token, rand: rand.Reader})
			if err == nil && token != nil {
				t.Fatalf("dialer accepted an unauthenticated answer %q", data)
			}
		}
	})
}
