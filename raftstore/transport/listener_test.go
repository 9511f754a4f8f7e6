package transport

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestAdvertisedDNSName: the raft layer and gRPC listener report the
// advertised name, not an IP, and raft can dial peers by name.
func TestAdvertisedDNSName(t *testing.T) {
	t.Parallel()
	cfg, _ := testCfg("wp", "tok")
	l := listen(t, "localhost:0", cfg)
	port := l.ln.Addr().(*net.TCPAddr).Port
	want := "localhost:" + strconv.Itoa(port)
	if l.Advertise() != want {
		t.Fatalf("Advertise() = %q, want %q", l.Advertise(), want)
	}
	for name, addr := range map[string]net.Addr{
		"RaftLayer": l.RaftLayer().Addr(), "GRPCListener": l.GRPCListener().Addr(),
	} {
		if addr.String() != want || addr.Network() != "tcp" {
			t.Errorf("%s().Addr() = %s/%q, want tcp/%q", name, addr.Network(), addr, want)
		}
	}

	b := newRaftPeer(t, l)
	a := newRaftPeer(t, listen(t, "localhost:0", cfg))
	if got := b.trans.LocalAddr(); got != raft.ServerAddress(want) {
		t.Fatalf("NetworkTransport.LocalAddr() = %q, want %q", got, want)
	}
	appendAndVote(t, a, b, 3, []byte("by name"))

	conn, err := Dialer(cfg)(context.Background(), want)
	if err != nil {
		t.Fatalf("gRPC dial by name: %v", err)
	}
	_ = conn.Close()
}

func TestAdvertiseAddr(t *testing.T) {
	t.Parallel()
	bound := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 5), Port: 7400}
	unspecified := &net.TCPAddr{IP: net.IPv4zero, Port: 7400}
	tests := []struct {
		advertise string
		bound     net.Addr
		want      string // "" = error
		errSubstr string
	}{
		{"pod-0.wp-peers.ns.svc:7400", unspecified, "pod-0.wp-peers.ns.svc:7400", ""},
		{"pod-0.wp-peers:0", unspecified, "pod-0.wp-peers:7400", ""},
		{"", bound, "127.0.0.5:7400", ""},
		{"[::1]:7400", bound, "[::1]:7400", ""},
		{"", unspecified, "", "advertise address needed"},
		{"0.0.0.0:7400", bound, "", "unspecified"},
		{"pod-0", bound, "", "not host:port"},
		{":7400", bound, "", "has no host"},
		{"pod-0:http", bound, "", "not a number"},
		{"pod-0:70000", bound, "", "not a number"},
	}
	for _, tt := range tests {
		got, err := advertiseAddr(tt.advertise, tt.bound)
		if tt.want != "" {
			if err != nil || got != tt.want {
				t.Errorf("advertiseAddr(%q, %v) = %q, %v; want %q", tt.advertise, tt.bound, got, err, tt.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.errSubstr) {
			t.Errorf("advertiseAddr(%q, %v) error = %v, want one containing %q", tt.advertise, tt.bound, err, tt.errSubstr)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cfg  Config
		want string
	}{
		{Config{}, "App is empty"},
		{Config{App: strings.Repeat("a", 254)}, "at most 253"},
		{Config{App: "wp", TLS: &TLSFiles{CertFile: "c"}}, "TLS needs CertFile, KeyFile and CAFile"},
		{Config{App: "wp", DialTimeout: -1}, "negative"},
	}
	for _, tt := range tests {
		if _, err := Listen("127.0.0.1:0", "", tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Listen(%+v) error = %v, want one containing %q", tt.cfg, err, tt.want)
		}
		if _, err := Dialer(tt.cfg)(context.Background(), "127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Dialer(%+v) error = %v, want one containing %q", tt.cfg, err, tt.want)
		}
	}
}

// TestCloseUnblocksAcceptsAndClosesConnections: Close makes pending and
// later Accepts fail with net.ErrClosed, closes handed-out connections, and
// makes the raft layer refuse to dial.
func TestCloseUnblocksAcceptsAndClosesConnections(t *testing.T) {
	t.Parallel()
	cfg, _ := testCfg("wp", "")
	l, err := Listen("127.0.0.1:0", "", cfg)
	if err != nil {
		t.Fatal(err)
	}
	peer := listen(t, "", cfg)

	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.RaftLayer().Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	dialed, err := peer.RaftLayer().Dial(raft.ServerAddress(l.Advertise()), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer dialed.Close()
	in := <-accepted
	if in == nil {
		t.Fatal("Accept failed")
	}

	grpcErr := make(chan error, 1)
	go func() {
		_, err := l.GRPCListener().Accept()
		grpcErr <- err
	}()
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-grpcErr; !isClosed(err) {
		t.Fatalf("pending gRPC Accept returned %v, want net.ErrClosed", err)
	}
	if _, err := l.RaftLayer().Accept(); !isClosed(err) {
		t.Fatalf("raft Accept after Close returned %v, want net.ErrClosed", err)
	}
	if _, err := in.Read(make([]byte, 1)); err == nil {
		t.Fatal("accepted connection still readable after Close")
	}
	if _, err := l.RaftLayer().Dial(raft.ServerAddress(peer.Advertise()), 0); !isClosed(err) {
		t.Fatalf("Dial after Close returned %v, want net.ErrClosed", err)
	}
	if _, err := dialed.Read(make([]byte, 1)); err == nil {
		t.Fatal("peer's connection still open after Close")
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestUnacceptedConnectionIsDropped: a kind that nobody Accepts does not
// hold connections forever.
func TestUnacceptedConnectionIsDropped(t *testing.T) {
	t.Parallel()
	cfg, rec := testCfg("wp", "")
	cfg.DialTimeout = 200 * time.Millisecond
	l := listen(t, "", cfg)
	conn, err := dialKind(t, cfg, l.Advertise(), KindGRPC)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(waitTimeout))
	if _, err := conn.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("read = %v, want EOF once the unaccepted connection is dropped", err)
	}
	if rec.find("dropped peer connection", "reason", "no gRPC Accept within 200ms") == nil {
		t.Error("drop was not logged")
	}
}
