package hooktools

import (
	"errors"
	"fmt"
	"path"
)

// Files named on a tool's command line (--file PATH, -o/--output PATH) are
// in the hook's file system, which is not the agent's: the hook runs in
// another container of the pod, with other files and secrets. So the
// tools never open a path: the client reads and writes those files, in the
// hook's container, and carries their contents in the call.
//
//   - A tool that reads a file the request does not carry answers
//     Response.NeedFile with the absolute path; the client calls again with
//     the file's contents, or with the error reading it, which the tool
//     reports as its own error, as Juju's tool would have.
//   - A tool that writes its output to a file returns it in Response.Output
//     with the absolute path in Response.OutputPath; the client writes it.

// MaxFileSize bounds what a tool reads from a file or from stdin. It is the
// size of the largest relation bag (state.MaxBagSize, which the
// agent's tests check it against): the client stops reading past it, so a
// file such as /dev/zero costs at most this much, and fails the tool.
const MaxFileSize = 16 << 20

// errNoClientFiles is the error of a tool asked to read or write a file by
// a client that does not do so itself (an older jujuc).
var errNoClientFiles = errors.New("this hook tool client cannot read or write the hook's files; " +
	"use the hook tools (jujuc) of this agent's version")

// needFileError is returned by env.readFile when the request does not
// carry the file.
type needFileError struct{ path string }

func (e *needFileError) Error() string { return "hook tool requires the file " + e.path }

// readFile returns the contents of the file at the absolute path p as the
// client read them, or the error the client met reading it, or a
// *needFileError when the request does not carry that file.
func (e *env) readFile(p string) ([]byte, error) {
	r := e.req
	switch {
	case !r.ClientFiles:
		return nil, errNoClientFiles
	case r.FilePath != p:
		return nil, &needFileError{p}
	case r.FileErr != "":
		return nil, errors.New(r.FileErr)
	case len(r.File) > MaxFileSize:
		return nil, fmt.Errorf("file %s is over the %d byte limit", p, MaxFileSize)
	}
	return r.File, nil
}

// writeFile has the client create or truncate the file at the absolute
// path p and write data to it.
func (e *env) writeFile(p string, data []byte) error {
	if !e.req.ClientFiles {
		return errNoClientFiles
	}
	e.outputPath, e.output = p, data
	return nil
}

// absPath interprets p relative to dir, the caller's working directory (an
// absolute path, in the caller's file system), as Juju does: an absolute p
// is kept as it is.
func absPath(dir, p string) string {
	if path.IsAbs(p) {
		return p
	}
	return path.Join(dir, p)
}
