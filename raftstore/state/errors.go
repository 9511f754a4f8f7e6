package state

import (
	"errors"
	"fmt"

	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

// Sentinel errors a command can fail with; test with errors.Is.
var (
	// ErrInvalid: the command is malformed (bad name, bad key, ...).
	ErrInvalid = errors.New("invalid command")
	// ErrNotFound: the command names a relation or unit that does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: a compare-and-set precondition did not hold.
	ErrConflict = errors.New("conflict")
	// ErrNotLeader: the unit does not hold the leadership lease.
	ErrNotLeader = errors.New("not the leader")
	// ErrTooLarge: a size limit would be exceeded.
	ErrTooLarge = errors.New("too large")
	// ErrUnsupported: the command needs a newer bagkeeper.
	ErrUnsupported = errors.New("unsupported command")
	// ErrFenced: the command was made for a unit holder whose unit has been
	// taken over since (see storepb.Fence).
	ErrFenced = errors.New("unit taken over")
	// ErrStaleRetry: a retry of a command its client no longer waits for.
	ErrStaleRetry = errors.New("stale retry")
)

// CommandError is a command that the state machine refused. Nothing of a
// refused command was applied.
type CommandError struct {
	Code storepb.ErrorCode
	// Op is the index of the operation that failed.
	Op  int
	Msg string
}

func (e *CommandError) Error() string { return e.Msg }

// Is maps the error code onto the sentinel errors.
func (e *CommandError) Is(target error) bool {
	return codeError(e.Code) == target
}

func codeError(c storepb.ErrorCode) error {
	switch c {
	case storepb.ErrorCode_INVALID:
		return ErrInvalid
	case storepb.ErrorCode_NOT_FOUND:
		return ErrNotFound
	case storepb.ErrorCode_CONFLICT:
		return ErrConflict
	case storepb.ErrorCode_NOT_LEADER:
		return ErrNotLeader
	case storepb.ErrorCode_TOO_LARGE:
		return ErrTooLarge
	case storepb.ErrorCode_UNSUPPORTED:
		return ErrUnsupported
	case storepb.ErrorCode_FENCED:
		return ErrFenced
	case storepb.ErrorCode_STALE_RETRY:
		return ErrStaleRetry
	}
	return nil
}

func opErr(code storepb.ErrorCode, format string, args ...any) *CommandError {
	return &CommandError{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// ResultError turns a stored result into the error a caller sees.
func ResultError(r *storepb.Result) error {
	if r.GetErrorCode() == storepb.ErrorCode_OK {
		return nil
	}
	return &CommandError{Code: r.GetErrorCode(), Op: int(r.GetFailedOp()), Msg: r.GetErrorMessage()}
}
