package raftstore

import (
	"sync"

	"github.com/hashicorp/raft"

	"github.com/bagkeeper/bagkeeper/raftstore/transport"
)

// addressBook is what this node learned of where members are now, keyed by
// raft ServerID. Raft asks it before every dial (raft.ServerAddressProvider),
// so a member whose address changed is reachable before the configuration
// is updated — and a cluster whose members ALL came back on new addresses
// can still elect a leader, which the configuration alone cannot do.
//
// Each round of the cluster loop rebuilds the book from the configuration,
// overridden by what members said of themselves in that round (a peer's
// Info answer); a join request updates it at once. So an entry is never
// older than one round, and an id always resolves (raft logs a warning on
// every dial it cannot resolve).
type addressBook struct {
	mu    sync.RWMutex
	addrs map[raft.ServerID]raft.ServerAddress
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

// replace swaps in a freshly built book.
func (b *addressBook) replace(addrs map[raft.ServerID]raft.ServerAddress) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.addrs = addrs
}

// learn records that id answers at addr. An address moves to its newest
// owner: if another id was recorded at addr, that entry is dropped.
func (b *addressBook) learn(id raft.ServerID, addr raft.ServerAddress) {
	if id == "" || addr == "" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for other, a := range b.addrs {
		if a == addr && other != id {
			delete(b.addrs, other)
		}
	}
	b.addrs[id] = addr
}

// addressOf returns where to reach member id now: what the book learned,
// else fallback (its configured address).
func (n *Node) addressOf(id raft.ServerID, fallback raft.ServerAddress) string {
	if a, ok := n.book.lookup(id); ok {
		return string(a)
	}
	return string(fallback)
}
