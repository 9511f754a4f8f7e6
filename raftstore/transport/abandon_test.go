package transport

import (
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// mutePeer is a NetworkTransport over a Listener's raft layer that takes
// requests and never answers them: a member that stopped answering with
// its connections left open (a pod gone whose address drops packets).
func mutePeer(t *testing.T, l *Listener) (taken func() int) {
	t.Helper()
	var mu sync.Mutex
	n := 0
	consume(t, raft.NewNetworkTransport(l.RaftLayer(), 3, time.Hour, io.Discard), func(raft.RPC) {
		mu.Lock()
		n++
		mu.Unlock()
	})
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}

// TestAbandonFailsWhatWaitsOnAnAddressAMemberLeft: a request blocked on a
// member that stopped answering, and a dial blocked on an address that
// takes connections and never completes the handshake, both wait out
// timeouts of an hour here; abandoning the address fails them at once.
// Raft's connections to another member stay as they were, and the
// abandoned address can be dialed again.
func TestAbandonFailsWhatWaitsOnAnAddressAMemberLeft(t *testing.T) {
	t.Parallel()
	cfg, _ := testCfg("wordpress", "")
	cfg.DialTimeout = time.Hour
	al := listen(t, "", cfg)
	a := &raftPeer{l: al, trans: raft.NewNetworkTransport(al.RaftLayer(), 3, time.Hour, io.Discard)}
	t.Cleanup(func() { _ = a.trans.Close() })
	layer := al.RaftLayer().(raftLayer)

	// The mute member: the request reaches it and is never answered.
	muteL := listen(t, "", cfg)
	muteL.SetLocalID("mute")
	taken := mutePeer(t, muteL)
	mute := MemberAddress(muteL.Advertise(), "mute")
	// A member that answers, with pooled connections from a dialed after
	// since.
	since := time.Now()
	c := newRaftPeer(t, listen(t, "", cfg))
	appendAndVote(t, a, c, 1, []byte("before"))

	done := make(chan error, 1)
	go func() {
		var resp raft.AppendEntriesResponse
		done <- a.trans.AppendEntries("mute", mute, &raft.AppendEntriesRequest{RPCHeader: a.header(), Term: 2}, &resp)
	}()
	eventually(t, "the request to reach the mute member", func() bool { return taken() == 1 })
	select {
	case err := <-done:
		t.Fatalf("the request to the mute member returned before its address was abandoned: %v", err)
	default:
	}
	if n := layer.Abandon(mute, time.Now()); n != 1 {
		t.Errorf("Abandon stopped %d connections and dials, want 1", n)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the request to the mute member succeeded")
		}
	case <-time.After(waitTimeout):
		t.Fatal("the request to the mute member still waits after its address was abandoned")
	}
	if n := layer.Abandon(mute, time.Now()); n != 0 {
		t.Errorf("a second Abandon stopped %d, want 0", n)
	}

	// A dial stuck in the handshake: the address takes TCP connections and
	// says nothing.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held sync.WaitGroup
	held.Add(1)
	conns := make(chan net.Conn, 4)
	go func() {
		defer held.Done()
		for {
			conn, err := silent.Accept()
			if err != nil {
				return
			}
			conns <- conn
		}
	}()
	t.Cleanup(func() {
		_ = silent.Close()
		held.Wait()
		close(conns)
		for conn := range conns {
			_ = conn.Close()
		}
	})
	stuck := MemberAddress(silent.Addr().String(), "gone")
	dialed := make(chan error, 1)
	go func() {
		conn, err := layer.Dial(stuck, time.Hour)
		if conn != nil {
			_ = conn.Close()
		}
		dialed <- err
	}()
	eventually(t, "Abandon to stop the dial in progress", func() bool { return layer.Abandon(stuck, time.Now()) == 1 })
	select {
	case err := <-dialed:
		if err == nil || !strings.Contains(err.Error(), "abandoned") {
			t.Fatalf("the abandoned dial returned %v, want an error saying it was abandoned", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("the dial still waits after its address was abandoned")
	}

	// The other member's pooled connections are untouched, and so are
	// those dialed after since: a closed one would fail the next request
	// (the transport does not retry).
	cAddr := raft.ServerAddress(c.l.Advertise())
	if n := layer.Abandon(cAddr, since); n != 0 {
		t.Errorf("Abandon of what was dialed before since stopped %d of the connections dialed after it", n)
	}
	if err := appendEntries(a, c, 3, []byte("after")); err != nil {
		t.Fatalf("the answering member after another address was abandoned: %v", err)
	}
	if n := layer.Abandon(cAddr, time.Now()); n == 0 {
		t.Error("Abandon stopped none of the connections to the answering member")
	}
	if err := appendEntries(a, c, 4, []byte("on a closed connection")); err == nil {
		t.Error("a request on a pooled connection Abandon closed succeeded")
	}
	if err := appendEntries(a, c, 5, []byte("redialed")); err != nil {
		t.Fatalf("a request after the pooled connections were abandoned: %v", err)
	}
	// An abandoned address is not barred: a member back there is reached.
	backL := listen(t, "", cfg)
	backL.SetLocalID("back")
	newRaftPeer(t, backL)
	back := MemberAddress(backL.Advertise(), "back")
	layer.Abandon(back, time.Now())
	var resp raft.AppendEntriesResponse
	if err := a.trans.AppendEntries("back", back, &raft.AppendEntriesRequest{RPCHeader: a.header(), Term: 6}, &resp); err != nil {
		t.Fatalf("a request to an address abandoned before: %v", err)
	}
}
