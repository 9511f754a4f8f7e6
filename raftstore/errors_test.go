package raftstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

func TestOneErrorTableSaysWhetherAWriteWasCommitted(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code codes.Code
		says string
	}{
		{&state.CommandError{Code: storepb.ErrorCode_NOT_FOUND, Msg: "relation 4 not found"}, codes.NotFound, "relation 4 not found (refused; nothing was committed)"},
		{&state.CommandError{Code: storepb.ErrorCode_TOO_LARGE, Msg: "too big"}, codes.InvalidArgument, "nothing was committed"},
		{&state.CommandError{Code: storepb.ErrorCode_FENCED, Msg: "taken over"}, codes.FailedPrecondition, "nothing was committed"},
		{fmt.Errorf("%w: full", ErrCannotWrite), codes.Unavailable, "full; not committed"},
		{fmt.Errorf("%w: bad entry", ErrDamaged), codes.Unavailable, "not committed"},
		{fmt.Errorf("%w: other hash", ErrDiverged), codes.Unavailable, "not committed"},
		{&NotCommittedError{What: "command", Attempts: 9, Last: errNoLeader, Err: context.DeadlineExceeded, Voters: 3, Reachable: 1}, codes.Unavailable, "no raft leader (1 of 3 voters reachable; a leader needs 2); not committed"},
		{&NotCommittedError{What: "command", Attempts: 3, Last: errAttemptTimeout, Err: context.DeadlineExceeded, MaySucceed: true}, codes.DeadlineExceeded, "may or may not have been committed"},
		{&CommittedError{Index: 42, Err: context.DeadlineExceeded}, codes.DeadlineExceeded, "committed at raft index 42"},
		{raft.ErrRaftShutdown, codes.Unavailable, "may or may not have been committed"},
	} {
		s, _ := status.FromError(GRPCStatus(tc.err))
		if s.Code() != tc.code || !strings.Contains(s.Message(), tc.says) {
			t.Errorf("%v: got %s %q, want %s saying %q", tc.err, s.Code(), s.Message(), tc.code, tc.says)
		}
	}
	if GRPCStatus(nil) != nil {
		t.Error("no error is no status")
	}
	if !errors.Is(&CommittedError{Err: context.DeadlineExceeded}, context.DeadlineExceeded) {
		t.Error("CommittedError does not unwrap")
	}
}
