// Package unixsock listens on a Unix socket path without stealing it from
// a live process, and removes the socket file on close only if it is
// still the one it created.
package unixsock

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Listener is a Unix socket listener that owns its socket file.
type Listener struct {
	net.Listener
	path string
	ino  uint64
}

// Listen creates the socket at path with the given file mode (the
// directory is created 0750 if missing). A stale socket file left by a dead
// process is replaced; a socket some live process answers on is not.
func Listen(path string, mode os.FileMode) (*Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("socket directory: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("socket %s is in use by another running process", path)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("removing the stale socket %s: %w", path, err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	// The listener must not remove the file itself: Close decides.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		return nil, err
	}
	l := &Listener{Listener: ln, path: path}
	l.ino, _ = inode(path)
	return l, nil
}

// Path is the socket's path.
func (l *Listener) Path() string { return l.path }

// Close stops listening and removes the socket file if it is still ours.
func (l *Listener) Close() error {
	err := l.Listener.Close()
	if ino, ierr := inode(l.path); ierr == nil && ino == l.ino {
		os.Remove(l.path)
	}
	return err
}

func inode(path string) (uint64, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return 0, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, errors.New("no inode")
	}
	return st.Ino, nil
}
