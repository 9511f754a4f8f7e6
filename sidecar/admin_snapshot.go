package sidecar

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bagkeeper/bagkeeper/raftstore/backup"
	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

// snapshotChunk is the size of the pieces SaveSnapshot sends.
const snapshotChunk = 1 << 20

// snapshotReadTimeout bounds the linearizable read SaveSnapshot starts
// with (the stream itself has no deadline but the caller's).
const snapshotReadTimeout = 30 * time.Second

// SaveSnapshot streams a snapshot file of the state as of a linearizable
// read: the leader's commit index when the call arrived, applied here.
// The State read never changes, so it is encoded while raft goes on.
func (a *adminServer) SaveSnapshot(_ *adminpb.SaveSnapshotRequest, stream grpc.ServerStreamingServer[adminpb.SnapshotChunk]) error {
	ctx := stream.Context()
	rctx, cancel := context.WithTimeout(ctx, snapshotReadTimeout)
	rctx, cancel2 := answerBefore(rctx)
	st, err := a.n.Read(rctx)
	cancel2()
	cancel()
	if err != nil {
		return commandStatus(err)
	}
	if st.App() == "" {
		return status.Error(codes.FailedPrecondition, "the group is not initialised yet: there is nothing to save")
	}
	ms := a.n.Status()
	snap, err := backup.New(backup.Header{Term: ms.Term, Member: ms.ID, Version: a.version}, st)
	if err != nil {
		return status.Errorf(codes.Internal, "encoding the snapshot: %v", err)
	}
	pr, pw := io.Pipe()
	go func() {
		_, _, err := snap.Write(pw)
		pw.CloseWithError(err)
	}()
	defer pr.Close()
	first := &adminpb.SnapshotChunk{Size: snap.Size(), Index: snap.Header.Index, ClusterId: snap.Header.ClusterID}
	for {
		// A new buffer each time: gRPC may hold on to a message sent.
		buf := make([]byte, snapshotChunk)
		n, err := io.ReadFull(pr, buf)
		if n > 0 || first != nil {
			msg := &adminpb.SnapshotChunk{}
			if first != nil {
				msg, first = first, nil
			}
			msg.Data = buf[:n]
			if serr := stream.Send(msg); serr != nil {
				return serr
			}
		}
		switch {
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			return nil
		case err != nil:
			return status.Errorf(codes.Internal, "writing the snapshot: %v", err)
		}
		if ctx.Err() != nil {
			return status.FromContextError(ctx.Err()).Err()
		}
	}
}
