//go:build !unix

package main

import (
	"errors"
	"io"
	"os"
	"time"
)

// dial fails: the agent's socket is a Unix socket.
func dial(addr string, timeout time.Duration) (io.ReadWriteCloser, error) {
	return nil, errors.New("hook tools need a Unix socket, which this system lacks")
}

// ioError describes an error reading or writing the agent's socket.
func ioError(what string, err error) error {
	return errors.New(what + ": " + err.Error())
}

// isTimeout reports whether err is a timeout.
func isTimeout(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded)
}
