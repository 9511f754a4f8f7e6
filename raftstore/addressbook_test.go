package raftstore

import (
	"maps"
	"slices"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/bagkeeper/bagkeeper/raftstore/peerpb"
)

// TestTheBookKeepsWhereAMemberSaidItIs: a member that moved stays at the
// address it gave in a round in which it did not answer, instead of going
// back to its configured (old) address; the configured address is for
// members the book never heard of; an address that answers as someone
// else is dropped; members out of the configuration are dropped unless
// they answered.
func TestTheBookKeepsWhereAMemberSaidItIs(t *testing.T) {
	servers := []raft.Server{
		{ID: "a", Address: "10.0.0.1:7400"},
		{ID: "b", Address: "10.0.0.2:7400"},
		{ID: "c", Address: "10.0.0.3:7400"},
		{ID: "d", Address: "10.0.0.4:7400"},
	}
	had := map[raft.ServerID]raft.ServerAddress{
		"a":    "10.0.0.1:7400",
		"b":    "10.0.9.2:7400", // moved; said so in an earlier round
		"gone": "10.0.0.9:7400", // no longer in the configuration
	}
	infos := []peerInfo{
		// c answers at the address d is configured at.
		{addr: "10.0.0.4:7400", info: &peerpb.InfoResponse{ServerId: "c", Address: "10.0.0.4:7400"}},
		// e is not in the configuration (yet) and answered.
		{addr: "10.0.0.5:7400", info: &peerpb.InfoResponse{ServerId: "e"}},
	}
	got, twice := rebuildBook(had, servers, "a", "10.0.7.1:7400", infos)
	if twice != nil {
		t.Errorf("twice = %v, want none", twice)
	}
	want := map[raft.ServerID]raft.ServerAddress{
		"a": "10.0.7.1:7400", // self: where it advertises itself
		"b": "10.0.9.2:7400", // kept, not its configured address
		"c": "10.0.0.4:7400", // where it answered
		"e": "10.0.0.5:7400", // where discovery reached it
	}
	if !maps.Equal(got, want) {
		t.Fatalf("book = %v, want %v", got, want)
	}
}

// TestTheBookTellsOfAddressesLeft: left hears of each address a member's
// entry no longer names, whether a join or an answer moved it, another
// member took it, or the member went.
func TestTheBookTellsOfAddressesLeft(t *testing.T) {
	var left []gone
	b := newAddressBook()
	b.left = func(id raft.ServerID, from raft.ServerAddress) { left = append(left, gone{id, from}) }
	expect := func(what string, want ...gone) {
		t.Helper()
		if len(left) != len(want) {
			t.Fatalf("%s: left told of %v, want %v", what, left, want)
		}
		for i := range want {
			if left[i] != want[i] {
				t.Fatalf("%s: left told of %v, want %v", what, left, want)
			}
		}
		left = nil
	}
	b.learn("a", "h1:7400")
	b.learn("b", "h2:7400")
	b.learn("a", "h1:7400")
	expect("first addresses and the same again")
	b.learn("a", "h3:7400")
	expect("a moved", gone{"a", "h1:7400"})
	b.learn("c", "h2:7400")
	expect("c took b's address", gone{"b", "h2:7400"})
	b.replace(map[raft.ServerID]raft.ServerAddress{"a": "h3:7400", "c": "h4:7400"})
	expect("a rebuilt book moving c", gone{"c", "h2:7400"})
	b.replace(map[raft.ServerID]raft.ServerAddress{"c": "h4:7400"})
	expect("a rebuilt book without a", gone{"a", "h3:7400"})
}

// TestTheBookDoesNotSwingBetweenTwoProcessesOfOneMember: two processes
// answer as the same member (a data dir copied and run twice). The book
// keeps the address it had if it is one of theirs, else takes the first
// in order, whatever order the answers came in, and reports both.
func TestTheBookDoesNotSwingBetweenTwoProcessesOfOneMember(t *testing.T) {
	servers := []raft.Server{{ID: "a", Address: "10.0.0.1:7400"}, {ID: "b", Address: "10.0.0.2:7400"}}
	answer := func(addr string) peerInfo {
		return peerInfo{addr: addr, info: &peerpb.InfoResponse{ServerId: "b", Address: addr}}
	}
	one, other := answer("10.0.0.2:7400"), answer("10.0.9.2:7400")
	for _, had := range []raft.ServerAddress{"10.0.0.2:7400", "10.0.9.2:7400"} {
		for _, infos := range [][]peerInfo{{one, other}, {other, one}} {
			book, twice := rebuildBook(map[raft.ServerID]raft.ServerAddress{"b": had}, servers, "a", "10.0.0.1:7400", infos)
			if book["b"] != had {
				t.Errorf("had %s, answers %v: the book has b at %s", had, []string{infos[0].addr, infos[1].addr}, book["b"])
			}
			if want := []string{"10.0.0.2:7400", "10.0.9.2:7400"}; !slices.Equal(twice["b"], want) {
				t.Errorf("twice = %v, want b at %v", twice, want)
			}
		}
	}
	for _, infos := range [][]peerInfo{{one, other}, {other, one}} {
		book, _ := rebuildBook(map[raft.ServerID]raft.ServerAddress{"b": "10.0.5.5:7400"}, servers, "a", "10.0.0.1:7400", infos)
		if book["b"] != "10.0.0.2:7400" {
			t.Errorf("had neither: the book has b at %s, want the first in order", book["b"])
		}
	}
}
