package unixsock

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func shortDir(t *testing.T) string {
	d, err := os.MkdirTemp("", "us")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func TestLiveSocketIsNotStolenAndStaleOneIsReplaced(t *testing.T) {
	path := filepath.Join(shortDir(t), "s.sock")
	first, err := Listen(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := first.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if _, err := Listen(path, 0o600); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second listener on a live socket: %v", err)
	}
	if c, err := net.Dial("unix", path); err != nil {
		t.Fatalf("first listener lost its socket: %v", err)
	} else {
		c.Close()
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v %v", fi, err)
	}
	first.Close()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("socket file left behind: %v", err)
	}

	// A stale socket file (its process died) is replaced.
	raw, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	raw.(*net.UnixListener).SetUnlinkOnClose(false)
	raw.Close()
	second, err := Listen(path, 0o660)
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	// A newer socket at the path is not removed by an older owner's Close.
	os.Remove(path)
	third, err := Listen(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	second.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("closing an old listener removed the new socket: %v", err)
	}
	third.Close()
}

func TestRegularFileIsNotReplaced(t *testing.T) {
	path := filepath.Join(shortDir(t), "f")
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(path, 0o600); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("got %v", err)
	}
}
