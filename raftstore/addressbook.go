package raftstore

import (
	"fmt"
	"sync"

	"github.com/hashicorp/raft"
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

// ServerAddr implements raft.ServerAddressProvider. An unknown id is an
// error, which makes raft fall back to the configured address.
func (b *addressBook) ServerAddr(id raft.ServerID) (raft.ServerAddress, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if a, ok := b.addrs[id]; ok {
		return a, nil
	}
	return "", fmt.Errorf("no address learned for %s", id)
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
