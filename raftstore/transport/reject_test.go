package transport

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"
)

// TestMismatchedPeersAreRejectedAndServerKeepsServing covers app and token
// mismatches end to end: the dialer gets a *HandshakeError that says what
// differs, the accepting node logs one line with remote and reason, and a
// well-configured client still gets through afterwards.
func TestMismatchedPeersAreRejectedAndServerKeepsServing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                   string
		serverApp, serverToken string
		clientApp, clientToken string
		kind                   Kind
		want                   error
		clientMsg, serverMsg   string
	}{
		{
			name: "app mismatch", serverApp: "mysql", clientApp: "wordpress", kind: KindGRPC,
			want:      ErrAppMismatch,
			clientMsg: `serves application "mysql", this node serves "wordpress"`,
			serverMsg: `dialer serves application "wordpress", this node serves "mysql"`,
		},
		{
			name: "token mismatch", serverApp: "wp", serverToken: "alpha", clientApp: "wp", clientToken: "beta", kind: KindRaft,
			want:      ErrTokenMismatch,
			clientMsg: "rejected the join token (tokens differ on the two nodes)",
			serverMsg: "join token differs",
		},
		{
			name: "token missing on dialer", serverApp: "wp", serverToken: "alpha", clientApp: "wp", kind: KindGRPC,
			want:      ErrTokenRequired,
			clientMsg: "requires a join token but none is configured here",
			serverMsg: "dialer has no join token configured",
		},
		{
			name: "token missing on server", serverApp: "wp", clientApp: "wp", clientToken: "alpha", kind: KindRaft,
			want:      ErrTokenUnexpected,
			clientMsg: "has no join token configured but this node has one",
			serverMsg: "no join token is configured on this node",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			serverCfg, rec := testCfg(tt.serverApp, tt.serverToken)
			l := listen(t, "", serverCfg)
			serveHealth(t, l)
			clientCfg, _ := testCfg(tt.clientApp, tt.clientToken)

			conn, err := dialKind(t, clientCfg, l.Advertise(), tt.kind)
			if err == nil {
				_ = conn.Close()
				t.Fatal("dial succeeded, want a handshake error")
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("dial error %v, want errors.Is %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.clientMsg) || !strings.Contains(err.Error(), l.Advertise()) {
				t.Errorf("dial error %q should name the peer %s and contain %q", err, l.Advertise(), tt.clientMsg)
			}
			rec.waitRejection(t, tt.serverMsg)

			good := healthClient(t, l.Advertise(), Dialer(serverCfg))
			if err := checkServing(context.Background(), good); err != nil {
				t.Fatalf("well-configured client after a rejection: %v", err)
			}
		})
	}
}

// TestSilentClientsDoNotBlockHandshakes: clients that connect and send
// nothing hold a handshake slot each, but other clients get through, and
// the silent ones are dropped at the handshake deadline.
func TestSilentClientsDoNotBlockHandshakes(t *testing.T) {
	t.Parallel()
	cfg, _ := testCfg("wp", "tok")
	cfg.DialTimeout = time.Minute // longer than the test: the silent clients stay pending
	l := listen(t, "", cfg)
	const silent = 5
	for range silent {
		c, err := net.Dial("tcp", l.Advertise())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	eventually(t, "silent clients pending", func() bool { return l.pendingHandshakes() == silent })

	client := cfg
	client.DialTimeout = 10 * time.Second
	conn, err := dialKind(t, client, l.Advertise(), KindGRPC)
	if err != nil {
		t.Fatalf("dial while silent clients are pending: %v", err)
	}
	_ = conn.Close()
	// The good handshake's slot is released just after the dialer returns.
	eventually(t, "only the silent clients pending", func() bool { return l.pendingHandshakes() == silent })
}

func TestHandshakeDeadlineDropsSilentClient(t *testing.T) {
	t.Parallel()
	cfg, rec := testCfg("wp", "")
	cfg.DialTimeout = 200 * time.Millisecond
	l := listen(t, "", cfg)
	c, err := net.Dial("tcp", l.Advertise())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(waitTimeout))
	if n, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("silent client read = %d, %v; want EOF when the server drops it", n, err)
	}
	rec.waitRejection(t, "did not complete the handshake in time")
}

func TestPendingHandshakeLimitClosesExtraConnections(t *testing.T) {
	t.Parallel()
	cfg, rec := testCfg("wp", "")
	cfg.DialTimeout = time.Minute
	cfg.MaxPendingHandshakes = 2
	l := listen(t, "", cfg)
	var silent []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", l.Advertise())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		silent = append(silent, c)
	}
	eventually(t, "two pending handshakes", func() bool { return l.pendingHandshakes() == 2 })

	_, err := dialKind(t, cfg, l.Advertise(), KindGRPC)
	if err == nil {
		t.Fatal("dial beyond the pending limit succeeded")
	}
	rec.waitRejection(t, "too many connections in handshake (limit 2)")

	_ = silent[0].Close()
	eventually(t, "a slot to free", func() bool { return l.pendingHandshakes() == 1 })
	conn, err := dialKind(t, cfg, l.Advertise(), KindGRPC)
	if err != nil {
		t.Fatalf("dial after a slot freed: %v", err)
	}
	_ = conn.Close()
}

// TestGarbageGetsClearErrorAndServerSurvives sends non-handshakes to the
// listener: each gets a readable rejection where one is possible, and the
// listener keeps serving.
func TestGarbageGetsClearErrorAndServerSurvives(t *testing.T) {
	t.Parallel()
	cfg, rec := testCfg("wp", "")
	l := listen(t, "", cfg)
	rng := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 512)
	for i := range random {
		random[i] = byte(rng.UintN(256))
	}
	random[0] = 'x' // never a magic prefix
	tests := []struct {
		name, send, wantReply, wantLog string
	}{
		{"http", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", "not a bagkeeper peer handshake", "does not speak the bagkeeper peer protocol"},
		{"random bytes", string(random), "not a bagkeeper peer handshake", "does not speak the bagkeeper peer protocol"},
		{"tls client hello", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", "this node does not use TLS", "dialer started TLS but TLS is not configured"},
		{"future version", "BKP\x09R\x02wp", "", "dialer speaks handshake version 9, this node speaks version 1"},
		{"unknown kind", string(validHello("wp", 'Q')), "unknown connection kind 0x51", "unknown connection kind 0x51"},
		{"empty app", "BKP\x01R\x00", "application name length 0", "application name length 0"},
		{"truncated", "BKP\x01R\x05wp", "", "dialer closed the connection during the handshake"},
	}
	for _, tt := range tests {
		c, err := net.Dial("tcp", l.Advertise())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(waitTimeout))
		if _, err := io.WriteString(c, tt.send); err != nil {
			t.Fatalf("%s: write: %v", tt.name, err)
		}
		if tt.name == "truncated" {
			_ = c.(*net.TCPConn).CloseWrite()
		}
		reply, err := io.ReadAll(c)
		if err != nil {
			t.Fatalf("%s: reading the reply: %v", tt.name, err)
		}
		_ = c.Close()
		if tt.name != "truncated" && !bytes.HasPrefix(reply, []byte("BKP\x01")) {
			t.Errorf("%s: reply %q does not start with the handshake magic", tt.name, reply)
		}
		if !bytes.Contains(reply, []byte(tt.wantReply)) {
			t.Errorf("%s: reply %q does not contain %q", tt.name, reply, tt.wantReply)
		}
		rec.waitRejection(t, tt.wantLog)
	}
	conn, err := dialKind(t, cfg, l.Advertise(), KindRaft)
	if err != nil {
		t.Fatalf("dial after garbage: %v", err)
	}
	_ = conn.Close()
}

// TestDialingAnotherServiceSaysSo dials a port that answers with something
// else than the handshake.
func TestDialingAnotherServiceSaysSo(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.WriteString(c, "HTTP/1.0 400 Bad Request\r\n\r\n")
		_, _ = io.Copy(io.Discard, c)
	}()
	cfg, _ := testCfg("wp", "")
	_, err = dialKind(t, cfg, ln.Addr().String(), KindGRPC)
	<-done
	if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "does not speak the bagkeeper peer protocol") {
		t.Fatalf("dial error %v, want ErrProtocol saying the peer does not speak the protocol", err)
	}
}

func TestDialTimesOutOnSilentPeer(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.Copy(io.Discard, c) // never answers
	}()
	cfg, _ := testCfg("wp", "")
	cfg.DialTimeout = 200 * time.Millisecond
	_, err = dialKind(t, cfg, ln.Addr().String(), KindGRPC)
	_ = ln.Close()
	<-done
	var he *HandshakeError
	if !errors.As(err, &he) || he.Reason != ReasonIO || !errors.Is(err, context.DeadlineExceeded) ||
		!strings.Contains(err.Error(), "did not complete in time") {
		t.Fatalf("dial error %v, want a ReasonIO timeout", err)
	}
}
