package transport

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// outbound is what the raft layer dialed to one (member-tagged) address:
// the TCP connections it handed to raft that are still open, and the dials
// in progress.
type outbound struct {
	conns map[net.Conn]time.Time // when the dial started
	dials map[*pendingDial]struct{}
}

// pendingDial is a raft dial in progress.
type pendingDial struct {
	started   time.Time
	cancel    context.CancelFunc
	abandoned bool
}

// Abandon closes the raft connections this layer dialed to address (a
// member-tagged address, see [MemberAddress]) and fails its dials to
// address in progress, those that started before since; it returns how
// many of both it stopped. Raft's requests blocked on them fail at once
// and raft dials again, at the address it is given then.
//
// It is for an address a member has left, and for a member that came back
// under the same name (a Kubernetes pod's DNS name, now on a new IP): a
// connection to the old pod, or a dial to it, where its address now drops
// packets, would make each request raft sent there wait out its whole
// timeout (seconds) before raft tried again — heartbeats included, so the
// member would not hear the leader and would stand for election
// meanwhile.
func (r raftLayer) Abandon(address raft.ServerAddress, since time.Time) int {
	l := r.l
	l.mu.Lock()
	o := l.raftOut[address]
	var conns []net.Conn
	n := 0
	if o != nil {
		for c, started := range o.conns {
			if started.Before(since) {
				delete(o.conns, c)
				delete(l.conns, c)
				conns = append(conns, c)
			}
		}
		for d := range o.dials {
			if d.started.Before(since) {
				delete(o.dials, d)
				d.abandoned = true
				d.cancel()
				n++
			}
		}
		l.dropIfEmpty(address, o)
	}
	l.mu.Unlock()
	// The TCP connection, not the TLS one over it: closing a TLS
	// connection writes an alert first, which a peer that drops packets
	// can hold up.
	for _, c := range conns {
		_ = c.Close()
	}
	return n + len(conns)
}

// startDial records a raft dial to address in progress; cancel stops it.
func (l *Listener) startDial(address raft.ServerAddress, cancel context.CancelFunc) *pendingDial {
	d := &pendingDial{started: time.Now(), cancel: cancel}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.outbound(address).dials[d] = struct{}{}
	return d
}

// finishDial ends the dial d to address and reports whether address was
// abandoned meanwhile. With raw (the dial succeeded) it tracks raw as a
// raft connection to address, or returns an error if raw must not be used:
// the Listener is closed or the address abandoned.
func (l *Listener) finishDial(address raft.ServerAddress, d *pendingDial, raw net.Conn) (abandoned bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d.abandoned {
		if raw != nil {
			return true, fmt.Errorf("dial peer %s: abandoned (the member left that address)", address)
		}
		return true, nil
	}
	if o := l.raftOut[address]; o != nil {
		delete(o.dials, d)
		l.dropIfEmpty(address, o)
	}
	switch {
	case raw == nil:
		return false, nil
	case l.closed:
		return false, fmt.Errorf("dial peer %s: %w", address, net.ErrClosed)
	}
	l.conns[raw] = struct{}{}
	l.outbound(address).conns[raw] = d.started
	return false, nil
}

// outbound returns the record of address, made if need be; l.mu is held.
func (l *Listener) outbound(address raft.ServerAddress) *outbound {
	o := l.raftOut[address]
	if o == nil {
		o = &outbound{conns: map[net.Conn]time.Time{}, dials: map[*pendingDial]struct{}{}}
		l.raftOut[address] = o
	}
	return o
}

// forgetOutbound drops raw from the raft connections to address; l.mu is
// held.
func (l *Listener) forgetOutbound(address raft.ServerAddress, raw net.Conn) {
	o := l.raftOut[address]
	if o == nil {
		return
	}
	delete(o.conns, raw)
	l.dropIfEmpty(address, o)
}

// dropIfEmpty forgets o, the record of address, once it holds neither
// connections nor dials; l.mu is held.
func (l *Listener) dropIfEmpty(address raft.ServerAddress, o *outbound) {
	if len(o.dials) == 0 && len(o.conns) == 0 {
		delete(l.raftOut, address)
	}
}
