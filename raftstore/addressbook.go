package raftstore

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/bagkeeper/bagkeeper/raftstore/transport"
)

// addressBook is what this node learned of where members are now, keyed by
// raft ServerID. Raft asks it before every dial (raft.ServerAddressProvider),
// so a member whose address changed is reachable before the configuration
// is updated — and a cluster whose members ALL came back on new addresses
// can still elect a leader, which the configuration alone cannot do.
//
// Each round of the cluster loop rebuilds the book from what it held,
// overridden by what members said of themselves in that round (a peer's
// Info answer); a join request updates it at once; a member the book never
// heard of is at its configured address. So a member that moved is not
// sent back to its configured (old) address for a round in which it was
// slow to answer, and an id always resolves (raft logs a warning on every
// dial it cannot resolve).
//
// When a member's entry changes or goes, left is told of the address it
// had (the Node abandons raft's connections and dials there, see
// transport's Abandon).
type addressBook struct {
	mu    sync.RWMutex
	addrs map[raft.ServerID]raft.ServerAddress
	left  func(id raft.ServerID, from raft.ServerAddress)
}

func newAddressBook() *addressBook {
	return &addressBook{addrs: map[raft.ServerID]raft.ServerAddress{}}
}

// ServerAddr implements raft.ServerAddressProvider. The address it returns
// names the member expected there (transport.MemberAddress), so the other
// end refuses the connection unless it is that member. An unknown id gets
// an address that fails to dial rather than an error, because on an error
// raft would fall back to the configured address, which names no member.
func (b *addressBook) ServerAddr(id raft.ServerID) (raft.ServerAddress, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return transport.MemberAddress(string(b.addrs[id]), string(id)), nil
}

// lookup returns the plain address known for id.
func (b *addressBook) lookup(id raft.ServerID) (raft.ServerAddress, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	a, ok := b.addrs[id]
	return a, ok
}

// mergeConfiguration adds the members of a configuration the book does not
// know yet.
func (b *addressBook) mergeConfiguration(cfg raft.Configuration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range cfg.Servers {
		if _, ok := b.addrs[s.ID]; !ok {
			b.addrs[s.ID] = s.Address
		}
	}
}

// entries returns a copy of the book.
func (b *addressBook) entries() map[raft.ServerID]raft.ServerAddress {
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := make(map[raft.ServerID]raft.ServerAddress, len(b.addrs))
	for id, a := range b.addrs {
		out[id] = a
	}
	return out
}

// replace swaps in a freshly built book.
func (b *addressBook) replace(addrs map[raft.ServerID]raft.ServerAddress) {
	var left []gone
	b.mu.Lock()
	for id, a := range b.addrs {
		if addrs[id] != a {
			left = append(left, gone{id, a})
		}
	}
	b.addrs = addrs
	b.mu.Unlock()
	for _, g := range left {
		b.tellLeft(g.id, g.from)
	}
}

// gone is an address a member's entry no longer names.
type gone struct {
	id   raft.ServerID
	from raft.ServerAddress
}

// learn records that id answers at addr. An address moves to its newest
// owner: if another id was recorded at addr, that entry is dropped.
func (b *addressBook) learn(id raft.ServerID, addr raft.ServerAddress) {
	if id == "" || addr == "" {
		return
	}
	var left []gone
	b.mu.Lock()
	for other, a := range b.addrs {
		if a == addr && other != id {
			delete(b.addrs, other)
			left = append(left, gone{other, a})
		}
	}
	if a, ok := b.addrs[id]; ok && a != addr {
		left = append(left, gone{id, a})
	}
	b.addrs[id] = addr
	b.mu.Unlock()
	for _, g := range left {
		b.tellLeft(g.id, g.from)
	}
}

func (b *addressBook) tellLeft(id raft.ServerID, from raft.ServerAddress) {
	if b.left != nil && from != "" {
		b.left(id, from)
	}
}

// addressOf returns where to reach member id now: what the book learned,
// else fallback (its configured address).
func (n *Node) addressOf(id raft.ServerID, fallback raft.ServerAddress) string {
	if a, ok := n.book.lookup(id); ok {
		return string(a)
	}
	return string(fallback)
}

// abandonRaft stops raft's connections and dials to member id at addr that
// started before since (see transport's Abandon), so that raft's next
// request to it, heartbeats included, goes where the book says it is now.
func (n *Node) abandonRaft(id raft.ServerID, addr raft.ServerAddress, since time.Time, why string) {
	a, ok := n.cfg.RaftLayer.(interface {
		Abandon(raft.ServerAddress, time.Time) int
	})
	if !ok || id == n.id {
		return
	}
	if k := a.Abandon(transport.MemberAddress(string(addr), string(id)), since); k > 0 {
		n.log.Info("dropped raft connections to a member's former process", "peer", string(id), "address", string(addr), "dropped", k, "why", why)
	}
}
