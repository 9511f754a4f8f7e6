package discovery

import (
	"context"
	"net"
	"time"
)

// dialCancellable dials address and makes every blocked read or write on
// the connection return as soon as ctx ends.
func dialCancellable(ctx context.Context, network, address string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	c := &cancellableConn{Conn: conn, ctx: ctx}
	c.stop = context.AfterFunc(ctx, func() { _ = conn.SetDeadline(expired) })
	if pc, ok := conn.(net.PacketConn); ok {
		// Go's resolver frames messages by whether the connection is a
		// PacketConn, so a UDP connection must stay one.
		return &cancellablePacketConn{cancellableConn: c, pc: pc}, nil
	}
	return c, nil
}

// expired is a deadline in the past: setting it unblocks reads and writes.
var expired = time.Unix(1, 0)

// cancellableConn is a connection whose deadlines are expired once its
// context has ended, even when its user sets a later deadline afterwards.
type cancellableConn struct {
	net.Conn
	ctx  context.Context
	stop func() bool
}

// deadline returns t, or an expired deadline once the context has ended.
func (c *cancellableConn) deadline(t time.Time) time.Time {
	if c.ctx.Err() != nil {
		return expired
	}
	return t
}

// SetDeadline implements net.Conn; it keeps the deadline expired once the
// context has ended.
func (c *cancellableConn) SetDeadline(t time.Time) error {
	return c.Conn.SetDeadline(c.deadline(t))
}

// SetReadDeadline implements net.Conn; it keeps the deadline expired once the
// context has ended.
func (c *cancellableConn) SetReadDeadline(t time.Time) error {
	return c.Conn.SetReadDeadline(c.deadline(t))
}

// SetWriteDeadline implements net.Conn; it keeps the deadline expired once the
// context has ended.
func (c *cancellableConn) SetWriteDeadline(t time.Time) error {
	return c.Conn.SetWriteDeadline(c.deadline(t))
}

// Close implements net.Conn and stops watching the context.
func (c *cancellableConn) Close() error {
	c.stop()
	return c.Conn.Close()
}

// cancellablePacketConn is a cancellableConn over a packet connection.
type cancellablePacketConn struct {
	*cancellableConn
	pc net.PacketConn
}

// ReadFrom implements net.PacketConn.
func (c *cancellablePacketConn) ReadFrom(b []byte) (int, net.Addr, error) {
	return c.pc.ReadFrom(b)
}

// WriteTo implements net.PacketConn.
func (c *cancellablePacketConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	return c.pc.WriteTo(b, addr)
}
