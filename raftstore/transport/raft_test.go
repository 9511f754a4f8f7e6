package transport

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// raftPeer is a NetworkTransport over a Listener's raft layer whose
// consumer answers every AppendEntries and RequestVote and records them.
type raftPeer struct {
	l     *Listener
	trans *raft.NetworkTransport

	mu       sync.Mutex
	appended [][]byte // Data of every log entry received
	votes    []uint64 // Term of every vote request received
}

func newRaftPeer(t *testing.T, l *Listener) *raftPeer {
	t.Helper()
	p := &raftPeer{l: l, trans: raft.NewNetworkTransport(l.RaftLayer(), 3, 10*time.Second, io.Discard)}
	consume(t, p.trans, p.answer)
	return p
}

// consume hands every request trans receives to handle until the test
// ends, then closes trans.
func consume(t *testing.T, trans *raft.NetworkTransport, handle func(raft.RPC)) {
	t.Helper()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case rpc := <-trans.Consumer():
				handle(rpc)
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		wg.Wait()
		_ = trans.Close()
	})
}

func (p *raftPeer) answer(rpc raft.RPC) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch cmd := rpc.Command.(type) {
	case *raft.AppendEntriesRequest:
		var last uint64
		for _, e := range cmd.Entries {
			p.appended = append(p.appended, e.Data)
			last = e.Index
		}
		rpc.Respond(&raft.AppendEntriesResponse{Term: cmd.Term, LastLog: last, Success: true}, nil)
	case *raft.RequestVoteRequest:
		p.votes = append(p.votes, cmd.Term)
		rpc.Respond(&raft.RequestVoteResponse{Term: cmd.Term, Granted: true}, nil)
	default:
		rpc.Respond(nil, io.ErrUnexpectedEOF)
	}
}

// appendEntries sends one AppendEntries carrying data from a to b.
func appendEntries(a, b *raftPeer, term uint64, data []byte) error {
	var resp raft.AppendEntriesResponse
	err := a.trans.AppendEntries("b", raft.ServerAddress(b.l.Advertise()), &raft.AppendEntriesRequest{
		RPCHeader: a.header(), Term: term,
		Entries: []*raft.Log{{Index: term, Term: term, Type: raft.LogCommand, Data: data}},
	}, &resp)
	if err != nil {
		return fmt.Errorf("AppendEntries: %w", err)
	}
	if !resp.Success || resp.Term != term || resp.LastLog != term {
		return fmt.Errorf("AppendEntries response = %+v", resp)
	}
	return nil
}

// requestVote sends one RequestVote from a to b.
func requestVote(a, b *raftPeer, term uint64) error {
	var resp raft.RequestVoteResponse
	if err := a.trans.RequestVote("b", raft.ServerAddress(b.l.Advertise()), &raft.RequestVoteRequest{
		RPCHeader: a.header(), Term: term, LastLogIndex: term, LastLogTerm: term,
	}, &resp); err != nil {
		return fmt.Errorf("RequestVote: %w", err)
	}
	if !resp.Granted || resp.Term != term {
		return fmt.Errorf("RequestVote response = %+v", resp)
	}
	return nil
}

func (p *raftPeer) header() raft.RPCHeader {
	return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(p.l.Advertise()), Addr: []byte(p.trans.LocalAddr())}
}

func appendAndVote(t *testing.T, a, b *raftPeer, term uint64, data []byte) {
	t.Helper()
	if err := appendEntries(a, b, term, data); err != nil {
		t.Fatal(err)
	}
	if err := requestVote(a, b, term); err != nil {
		t.Fatal(err)
	}
}

func (p *raftPeer) received(data []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, d := range p.appended {
		if bytes.Equal(d, data) {
			return true
		}
	}
	return false
}

func TestRaftNetworkTransportRoundTrip(t *testing.T) {
	t.Parallel()
	cfg, _ := testCfg("wordpress", "join-token")
	a := newRaftPeer(t, listen(t, "", cfg))
	b := newRaftPeer(t, listen(t, "", cfg))

	if got, want := a.trans.LocalAddr(), raft.ServerAddress(a.l.Advertise()); got != want {
		t.Fatalf("LocalAddr = %q, want %q", got, want)
	}
	appendAndVote(t, a, b, 7, []byte("hello"))
	appendAndVote(t, b, a, 8, []byte("back"))
	if !b.received([]byte("hello")) || !a.received([]byte("back")) {
		t.Fatal("log entries did not arrive")
	}
}

func TestRaftLayerCloseStopsOnlyRaft(t *testing.T) {
	t.Parallel()
	cfg, rec := testCfg("wordpress", "")
	l := listen(t, "", cfg)
	layer := l.RaftLayer()
	if err := layer.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := layer.Accept(); !isClosed(err) {
		t.Fatalf("Accept after Close = %v, want net.ErrClosed", err)
	}
	_, err := dialKind(t, cfg, l.Advertise(), KindRaft)
	if !errors.Is(err, ErrKindUnavailable) {
		t.Fatalf("raft dial to closed layer: %v, want ErrKindUnavailable", err)
	}
	rec.waitRejection(t, "no longer accepts raft connections")

	wg := drainAccepts(t, l.GRPCListener())
	conn, err := dialKind(t, cfg, l.Advertise(), KindGRPC)
	if err != nil {
		t.Fatalf("gRPC dial after raft layer closed: %v", err)
	}
	_ = conn.Close()
	_ = l.Close()
	wg.Wait()
}
