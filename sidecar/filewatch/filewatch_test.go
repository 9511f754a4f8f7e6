package filewatch

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func waitChange(t *testing.T, w *Watcher, what string) {
	t.Helper()
	select {
	case <-w.Changes():
	case <-time.After(10 * time.Second):
		t.Fatalf("no change noticed: %s", what)
	}
}

// drain empties the coalesced channel so the next wait sees a new event.
func drain(w *Watcher) {
	for {
		select {
		case <-w.Changes():
		default:
			return
		}
	}
}

func TestWatcherSeesWritesReplacesAndConfigMapSwaps(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	w, err := New(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	if err := os.WriteFile(path, []byte("a: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitChange(t, w, "file created")
	drain(w)

	tmp := filepath.Join(dir, ".config.yaml.tmp")
	if err := os.WriteFile(tmp, []byte("a: 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	waitChange(t, w, "file replaced by rename")
	drain(w)

	// A write to an unrelated file in the directory is not a change.
	if err := os.WriteFile(filepath.Join(dir, "other"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Kubernetes ConfigMap update: a new "..data" symlink renamed over the old.
	if err := os.Symlink("v2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	waitChange(t, w, "..data symlink swapped")
}

func TestWatcherNeedsTheDirectory(t *testing.T) {
	if _, err := New(filepath.Join(t.TempDir(), "missing", "f"), nil); err == nil {
		t.Fatal("watching a file in a missing directory succeeded")
	}
	if _, err := New("", nil); err == nil {
		t.Fatal("empty path accepted")
	}
}
