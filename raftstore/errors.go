package raftstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

// The errors a caller of Apply or Read can see, and what each says about
// the write: one table, so that every condition has one text and one gRPC
// code wherever it is reported (compare etcd's toGRPCErrorMap).
//
//	condition                                   code                 committed?
//	the state machine refused the command       by its error code    no
//	  (invalid, not found, conflict, not the
//	  leader, taken over, too large, ...)
//	this member is damaged, diverged, or        Unavailable          no
//	  cannot write its raft log
//	the command is over the size of one entry   InvalidArgument      no
//	no leader was ever known in time            Unavailable          no
//	a leader was reached but did not answer     DeadlineExceeded     maybe
//	  in time
//	committed, but not applied here in time     DeadlineExceeded     yes
//	this member is shutting down                Unavailable          maybe

// CommittedError is a command that committed, whose result this member
// had not applied yet when the caller stopped waiting.
type CommittedError struct {
	Index uint64
	Err   error
}

func (e *CommittedError) Error() string {
	return fmt.Sprintf("committed at raft index %d, but this member had not applied it yet when the call ended: %v", e.Index, e.Err)
}

func (e *CommittedError) Unwrap() error { return e.Err }

// GRPCStatus returns the gRPC status that reports err to a client.
func GRPCStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok && !isOurs(err) {
		return err
	}
	var ce *state.CommandError
	var nc *NotCommittedError
	var committed *CommittedError
	switch {
	case errors.As(err, &ce):
		return status.Error(commandCode(ce.Code), ce.Msg+" (refused; nothing was committed)")
	case errors.Is(err, ErrDamaged), errors.Is(err, ErrDiverged), errors.Is(err, ErrCannotWrite), errors.Is(err, ErrOutdated):
		return status.Error(codes.Unavailable, err.Error()+"; not committed")
	case errors.As(err, &nc):
		if nc.MaySucceed {
			return status.Error(codes.DeadlineExceeded, nc.Error())
		}
		return status.Error(codes.Unavailable, nc.Error())
	case errors.As(err, &committed):
		return status.Error(codes.DeadlineExceeded, committed.Error())
	case errors.Is(err, raft.ErrRaftShutdown):
		return status.Error(codes.Unavailable, "this member is shutting down; the call may or may not have been committed")
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Unavailable, err.Error())
}

// isOurs reports whether err is one of the errors of the table, which
// GRPCStatus words itself even if it also carries a status.
func isOurs(err error) bool {
	var ce *state.CommandError
	var nc *NotCommittedError
	var committed *CommittedError
	return errors.As(err, &ce) || errors.As(err, &nc) || errors.As(err, &committed) ||
		errors.Is(err, ErrDamaged) || errors.Is(err, ErrDiverged) || errors.Is(err, ErrCannotWrite) || errors.Is(err, ErrOutdated)
}

func commandCode(c storepb.ErrorCode) codes.Code {
	switch c {
	case storepb.ErrorCode_NOT_FOUND:
		return codes.NotFound
	case storepb.ErrorCode_INVALID, storepb.ErrorCode_TOO_LARGE:
		return codes.InvalidArgument
	case storepb.ErrorCode_UNSUPPORTED:
		return codes.Unimplemented
	}
	return codes.FailedPrecondition
}
