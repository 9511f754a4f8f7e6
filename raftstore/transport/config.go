package transport

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Kind says which protocol a connection carries after the handshake.
type Kind byte

// Connection kinds.
const (
	KindRaft Kind = 'R'
	KindGRPC Kind = 'G'
)

// String returns "raft", "gRPC" or the byte in hex for unknown kinds.
func (k Kind) String() string {
	switch k {
	case KindRaft:
		return "raft"
	case KindGRPC:
		return "gRPC"
	}
	return fmt.Sprintf("kind 0x%02x", byte(k))
}

// Defaults applied by [Listen] and [Dialer] to zero fields of [Config].
const (
	DefaultDialTimeout          = 5 * time.Second
	DefaultMaxPendingHandshakes = 128
	maxAppLen                   = 253
)

// Config is shared by both ends of a connection. Two nodes can talk only if
// their App, Token and TLS trust agree.
type Config struct {
	// App is the application name; both ends must agree, else the handshake
	// fails. Required, at most 253 bytes.
	App string
	// Token is the shared join token; empty means none. Both ends must have
	// the same token, or both none. It never crosses the wire.
	Token []byte
	// TLS turns on mutual TLS when non-nil.
	TLS *TLSFiles
	// DialTimeout bounds a whole dial: name resolution, TCP connect, TLS and
	// handshake. On the accepting side it bounds TLS plus handshake.
	// Zero means DefaultDialTimeout.
	DialTimeout time.Duration
	// MaxPendingHandshakes bounds the connections a Listener handshakes at
	// once; connections beyond it are closed at once and logged. Zero means
	// DefaultMaxPendingHandshakes.
	MaxPendingHandshakes int
	// Logger receives structured logs; nil means slog.Default().
	Logger *slog.Logger
}

// TLSFiles names PEM files: this node's certificate (chain) and key, and the
// CA bundle that peers' certificates must chain to. Kubernetes secret mounts
// work as they are: the files are re-read when their directory changes.
type TLSFiles struct{ CertFile, KeyFile, CAFile string }

// withDefaults validates c and returns a copy with defaults filled in and
// its own copy of Token.
func (c Config) withDefaults() (Config, error) {
	switch {
	case c.App == "":
		return c, errors.New("transport config: App is empty; set the application name that all nodes of the group share")
	case len(c.App) > maxAppLen:
		return c, fmt.Errorf("transport config: App is %d bytes long, at most %d are allowed", len(c.App), maxAppLen)
	case c.DialTimeout < 0:
		return c, fmt.Errorf("transport config: DialTimeout %s is negative", c.DialTimeout)
	case c.MaxPendingHandshakes < 0:
		return c, fmt.Errorf("transport config: MaxPendingHandshakes %d is negative", c.MaxPendingHandshakes)
	}
	if c.TLS != nil {
		if c.TLS.CertFile == "" || c.TLS.KeyFile == "" || c.TLS.CAFile == "" {
			return c, errors.New("transport config: TLS needs CertFile, KeyFile and CAFile")
		}
		files := *c.TLS
		c.TLS = &files
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.MaxPendingHandshakes == 0 {
		c.MaxPendingHandshakes = DefaultMaxPendingHandshakes
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Token = append([]byte(nil), c.Token...)
	return c, nil
}
