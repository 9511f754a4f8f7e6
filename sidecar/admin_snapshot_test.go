package sidecar

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc"

	"github.com/bagkeeper/bagkeeper/raftstore"
	"github.com/bagkeeper/bagkeeper/raftstore/backup"
	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/state/statetest"
	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

// snapshotStore is a member whose own state lags behind what a
// linearizable read returns (a follower that has not applied the last
// write yet), or whose reads fail.
type snapshotStore struct {
	adminStore
	stale, fresh *state.State
	readErr      error
}

func (s *snapshotStore) State() *state.State { return s.stale }
func (s *snapshotStore) Read(context.Context) (*state.State, error) {
	return s.fresh, s.readErr
}
func (s *snapshotStore) Status() raftstore.Status { return raftstore.Status{ID: "web-1/x", Term: 4} }

type chunkStream struct {
	grpc.ServerStream
	ctx    context.Context
	chunks []*adminpb.SnapshotChunk
}

func (c *chunkStream) Context() context.Context { return c.ctx }
func (c *chunkStream) Send(m *adminpb.SnapshotChunk) error {
	c.chunks = append(c.chunks, m)
	return nil
}

// TestSaveSnapshotSendsALinearizableRead: the file holds the state a
// linearizable read returns, not the member's own (maybe lagging) state;
// a read that fails fails the call.
func TestSaveSnapshotSendsALinearizableRead(t *testing.T) {
	s := statetest.New(t, "web")
	s.Must(state.EnsureRelationOp("replicas", "web-peers", true, "", ""))
	stale := s.State()
	s.Must(state.UpdateBagOp(0, "web", map[string]string{"last": "write"}))
	fresh := s.State()
	a := &adminServer{n: &snapshotStore{stale: stale, fresh: fresh}, version: "test"}
	stream := &chunkStream{ctx: context.Background()}
	if err := a.SaveSnapshot(&adminpb.SaveSnapshotRequest{}, stream); err != nil {
		t.Fatal(err)
	}
	var file bytes.Buffer
	for _, c := range stream.chunks {
		file.Write(c.GetData())
	}
	first := stream.chunks[0]
	if first.GetSize() != int64(file.Len()) || first.GetIndex() != fresh.Index() || first.GetClusterId() != "cluster-web" {
		t.Fatalf("first chunk says size %d index %d cluster %s; the file has %d bytes, the read index %d", first.GetSize(), first.GetIndex(), first.GetClusterId(), file.Len(), fresh.Index())
	}
	hdr, _, err := backup.Verify(bytes.NewReader(file.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if hdr.Index != fresh.Index() || hdr.Term != 4 || hdr.Member != "web-1/x" || hdr.Version != "test" {
		t.Fatalf("header %+v, want index %d (the stale state is at %d)", hdr, fresh.Index(), stale.Index())
	}

	a.n = &snapshotStore{stale: stale, readErr: errors.New("no leader known")}
	if err := a.SaveSnapshot(&adminpb.SaveSnapshotRequest{}, &chunkStream{ctx: context.Background()}); err == nil {
		t.Fatal("a failed read saved a snapshot")
	}
}
