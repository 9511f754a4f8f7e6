//go:build unix

package main

import (
	"errors"
	"io"
	"syscall"
	"time"
)

// dial connects to the agent's Unix socket at addr (a leading '@' names an
// abstract socket). The socket is left blocking and used with plain system
// calls, which spares the runtime's poller, and every single wait on it
// (connect, each read and write) is bounded by timeout through SO_SNDTIMEO
// and SO_RCVTIMEO: a wait that times out fails with EAGAIN, which ioError
// reports as a timeout.
func dial(addr string, timeout time.Duration) (io.ReadWriteCloser, error) {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		return nil, errors.New("cannot create a socket: " + err.Error())
	}
	syscall.CloseOnExec(fd)
	if timeout > 0 {
		tv := syscall.NsecToTimeval(timeout.Nanoseconds())
		for _, opt := range []int{syscall.SO_SNDTIMEO, syscall.SO_RCVTIMEO} {
			if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, opt, &tv); err != nil {
				syscall.Close(fd)
				return nil, errors.New("cannot set a socket timeout: " + err.Error())
			}
		}
	}
	for {
		err = syscall.Connect(fd, &syscall.SockaddrUnix{Name: addr})
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		syscall.Close(fd)
		if err == syscall.EAGAIN || err == syscall.EINPROGRESS {
			return nil, errors.New("cannot reach the unit agent at " + addr + ": it did not accept the connection within " + timeout.String())
		}
		return nil, errors.New("cannot reach the unit agent at " + addr + ": " + err.Error())
	}
	return sock(fd), nil
}

// sock is a connected blocking socket.
type sock int

func (s sock) Read(p []byte) (int, error) {
	for {
		n, err := syscall.Read(int(s), p)
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return 0, err
		case n == 0 && len(p) > 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

func (s sock) Write(p []byte) (int, error) {
	written := 0
	for written < len(p) {
		n, err := syscall.Write(int(s), p[written:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return written, err
		}
		written += n
	}
	return written, nil
}

func (s sock) Close() error { return syscall.Close(int(s)) }

// ioError describes an error reading or writing the agent's socket.
func ioError(what string, err error) error {
	switch {
	case isTimeout(err):
		return errors.New(what + ": the unit agent did not answer in time")
	case errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET):
		return errClosed
	}
	return errors.New(what + ": " + err.Error())
}

// isTimeout reports whether err is a socket timeout.
func isTimeout(err error) bool {
	return errors.Is(err, syscall.EAGAIN)
}
