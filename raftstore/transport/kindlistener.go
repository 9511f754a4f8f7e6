package transport

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// kindListener hands out the connections of one kind that passed the
// handshake.
type kindListener struct {
	l         *Listener
	ch        chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
}

func newKindListener(l *Listener) *kindListener {
	return &kindListener{l: l, ch: make(chan net.Conn), done: make(chan struct{})}
}

// Accept waits for the next connection of its kind.
func (k *kindListener) Accept() (net.Conn, error) {
	select {
	case <-k.done:
		return nil, k.closedErr()
	case <-k.l.done:
		return nil, k.closedErr()
	default:
	}
	select {
	case c := <-k.ch:
		return c, nil
	case <-k.done:
		return nil, k.closedErr()
	case <-k.l.done:
		return nil, k.closedErr()
	}
}

func (k *kindListener) closedErr() error {
	return &net.OpError{Op: "accept", Net: "tcp", Addr: k.Addr(), Err: net.ErrClosed}
}

// Close stops handing out connections of this kind; the Listener keeps
// serving the other kind. It is idempotent and returns nil.
func (k *kindListener) Close() error {
	k.closeOnce.Do(func() { close(k.done) })
	return nil
}

// Addr returns the advertised address.
func (k *kindListener) Addr() net.Addr { return advertisedAddr(k.l.advertise) }

// raftLayer adds raft's Dial to the raft kindListener.
type raftLayer struct{ *kindListener }

// SetLocalID tells the layer this node's raft id; see [Listener.SetLocalID].
func (r raftLayer) SetLocalID(id string) { r.l.SetLocalID(id) }

// MemberAddress tags a raft address with the id of the member expected
// there: "host:port|id". A raft connection dialed to a tagged address is
// refused by the other end unless that end is the named member, so an
// address taken over by another member (a pod that came back with an
// empty disk at its old address) can never answer for the old one — in
// particular it can never vote in its place.
func MemberAddress(addr, id string) raft.ServerAddress {
	return raft.ServerAddress(addr + "|" + id)
}

// SplitMemberAddress splits a tagged address; an untagged one has no id.
func SplitMemberAddress(a raft.ServerAddress) (addr, id string) {
	s := string(a)
	if i := strings.LastIndexByte(s, '|'); i >= 0 {
		return s[:i], s[i+1:]
	}
	return s, ""
}

// Dial dials a raft connection to address within the smaller of timeout
// (when positive) and the Listener's DialTimeout. A failed handshake is a
// [*HandshakeError]; after Listener.Close the error matches net.ErrClosed.
func (r raftLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	l := r.l
	select {
	case <-l.done:
		return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: advertisedAddr(address), Err: net.ErrClosed}
	default:
	}
	addr, target := SplitMemberAddress(address)
	if addr == "" {
		return nil, &HandshakeError{Peer: string(address), Reason: ReasonWrongMember, Msg: "no address is known for member " + target}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if timeout > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeout(ctx, timeout)
		defer stop()
	}
	d := l.startDial(address, cancel)
	conn, raw, err := l.dialer.dial(ctx, addr, KindRaft, target)
	abandoned, ferr := l.finishDial(address, d, raw)
	if ferr != nil {
		_ = conn.Close()
		return nil, ferr
	}
	if err != nil {
		if abandoned {
			return nil, fmt.Errorf("dial peer %s: abandoned (the member left that address): %w", address, err)
		}
		return nil, err
	}
	return &trackedConn{Conn: conn, raw: raw, l: l, target: address}, nil
}
