package agent

import (
	"fmt"
	"testing"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
)

// TestTheUnitsAddressIsKeptInEachOfItsBags: the agent seeds its address
// in a relation it enters, and puts it back when something else changes
// it in the unit's bag, while writes to other bags (which it does not look
// at) go on.
func TestTheUnitsAddressIsKeptInEachOfItsBags(t *testing.T) {
	s := newMemStore(t)
	rel := twoUnits(s)
	startAgent(t, s, charm(t, ""))
	addressIn := func(rel int64) func() error {
		return func() error {
			if got := bag(s, rel, "app/0")["ingress-address"]; got != "10.1.2.3" {
				return fmt.Errorf("ingress-address %q in relation %d", got, rel)
			}
			return nil
		}
	}
	waitFor(t, "the address seeded in the peer relation", addressIn(rel))

	// Writes the agent need not look at its bags for.
	for i := range 20 {
		s.Must(state.UpdateBagOp(rel, "app/1", map[string]string{"n": fmt.Sprint(i)}))
	}
	// Someone else changes the unit's address in its bag.
	s.Must(state.UpdateBagOp(rel, "app/0", map[string]string{"ingress-address": "10.9.9.9"}))
	waitFor(t, "the address put back", addressIn(rel))

	// A relation the unit enters later.
	db := s.Must(state.EnsureRelationOp("db", "", false, "pg", "db")).GetOps()[0].GetRelationId()
	waitFor(t, "the address seeded in the new relation", addressIn(db))

	// Keys deleted from the unit's bag by an outside write come back too.
	s.Must(state.UpdateBagOp(db, "app/0", nil, "ingress-address", "private-address"))
	waitFor(t, "the address put back in the new relation", addressIn(db))
}
