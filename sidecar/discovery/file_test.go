package discovery

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// newTestFile starts a File on path, closed when the test ends.
func newTestFile(t *testing.T, path string) *File {
	t.Helper()
	f, err := NewFile(path, nil)
	if err != nil {
		t.Fatalf("NewFile: %v", err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return f
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// waitForChange requires that Changes fires (after the change the caller
// just made, or still pending from it) and that Lookup then answers want
// without error. It waits on the channel, bounded by testTimeout.
func waitForChange(t *testing.T, f *File, want []string) {
	t.Helper()
	ctx := testContext(t)
	var (
		got []string
		err error
	)
	for {
		select {
		case <-f.Changes():
		case <-ctx.Done():
			t.Fatalf("no change seen with the expected content: last Lookup = %q, %v; want %q", got, err, want)
		}
		got, err = f.Lookup(ctx)
		if err == nil && slices.Equal(got, want) {
			return
		}
	}
}

func TestFileSourceReadsInitialContents(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "peers")
	writeFile(t, path, "\uFEFF# peers of app\r\n"+
		"peer-1.app:7000\r\n"+
		"\n"+
		"   peer-0.app:7000   # the first pod\n"+
		"\t# indented comment\n"+
		"[fd00::1]:7000\n"+
		"PEER-1.app:7000\n"+
		"10.0.0.1:7000") // no final newline
	f := newTestFile(t, path)
	got, err := f.Lookup(testContext(t))
	if err != nil {
		t.Fatalf("Lookup: %v", err)
	}
	assertAddrs(t, got, []string{"10.0.0.1:7000", "[fd00::1]:7000", "peer-0.app:7000", "peer-1.app:7000"})
}

func TestFileSourceMissingFileIsEmptyAnswer(t *testing.T) {
	t.Parallel()
	f := newTestFile(t, filepath.Join(t.TempDir(), "peers"))
	got, err := f.Lookup(testContext(t))
	if err != nil {
		t.Fatalf("Lookup of a missing file: %v, want an empty answer", err)
	}
	assertAddrs(t, got, nil)
}

func TestFileSourceSeesWrite(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "peers")
	writeFile(t, path, "peer-0.app:7000\n")
	f := newTestFile(t, path)
	writeFile(t, path, "peer-0.app:7000\npeer-1.app:7000\n")
	waitForChange(t, f, []string{"peer-0.app:7000", "peer-1.app:7000"})

	// Appending to the open file is seen too.
	fh, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fh.WriteString("peer-2.app:7000\n"); err != nil {
		t.Fatal(err)
	}
	if err := fh.Close(); err != nil {
		t.Fatal(err)
	}
	waitForChange(t, f, []string{"peer-0.app:7000", "peer-1.app:7000", "peer-2.app:7000"})
}

func TestFileSourceSeesAtomicReplace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "peers")
	writeFile(t, path, "peer-0.app:7000\n")
	f := newTestFile(t, path)

	tmp := filepath.Join(dir, ".peers.swp")
	writeFile(t, tmp, "peer-5.app:7000\n")
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	waitForChange(t, f, []string{"peer-5.app:7000"})
}

func TestFileSourceSeesDeletionAsEmptyAnswer(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "peers")
	writeFile(t, path, "peer-0.app:7000\n")
	f := newTestFile(t, path)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waitForChange(t, f, []string{})
}

func TestFileSourceSeesFileCreatedAfterStart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "peers")
	f := newTestFile(t, path)
	writeFile(t, path, "peer-0.app:7000\n")
	waitForChange(t, f, []string{"peer-0.app:7000"})
}

// TestFileSourceSeesConfigMapSymlinkSwap reproduces how the kubelet updates
// a ConfigMap volume: each key is a symlink through "..data", which points
// at a timestamped directory; an update writes a new directory, points
// "..data_tmp" at it and renames "..data_tmp" over "..data".
func TestFileSourceSeesConfigMapSymlinkSwap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	publish := func(version, content string) {
		t.Helper()
		data := filepath.Join(dir, "..2025_01_01_00_00_0"+version)
		if err := os.Mkdir(data, 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(data, "peers"), content)
		tmpLink := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(filepath.Base(data), tmpLink); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmpLink, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	publish("1", "peer-0.app:7000\n")
	path := filepath.Join(dir, "peers")
	if err := os.Symlink(filepath.Join("..data", "peers"), path); err != nil {
		t.Fatal(err)
	}

	f := newTestFile(t, path)
	got, err := f.Lookup(testContext(t))
	if err != nil {
		t.Fatalf("Lookup: %v", err)
	}
	assertAddrs(t, got, []string{"peer-0.app:7000"})

	publish("2", "peer-0.app:7000\npeer-1.app:7000\n")
	if err := os.RemoveAll(filepath.Join(dir, "..2025_01_01_00_00_01")); err != nil {
		t.Fatal(err)
	}
	waitForChange(t, f, []string{"peer-0.app:7000", "peer-1.app:7000"})
}

func TestFileSourceReportsMalformedLinesAndKeepsTheOthers(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "peers")
	writeFile(t, path, "peer-0.app:7000\n"+
		"# comment\n"+
		"peer-1.app\n"+
		"peer-2.app:7000\n"+
		"peer-3.app:7000 peer-4.app:7000\n")
	f := newTestFile(t, path)
	got, err := f.Lookup(testContext(t))
	assertAddrs(t, got, []string{"peer-0.app:7000", "peer-2.app:7000"})
	if !errors.Is(err, ErrInvalidAddress) {
		t.Fatalf("error %v, want one wrapping ErrInvalidAddress", err)
	}
	for _, want := range []string{
		path + `:3: invalid peer address "peer-1.app": missing port`,
		path + `:5: invalid peer address "peer-3.app:7000 peer-4.app:7000": several words`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}

func TestFileSourceExplainsThatYAMLAndJSONAreNotAccepted(t *testing.T) {
	t.Parallel()
	for _, content := range []string{
		"- peer-0.app:7000\n",
		`["peer-0.app:7000"]`,
		"[\n  \"peer-0.app:7000\",\n]\n",
		`{"peers": ["peer-0.app:7000"]}`,
	} {
		_, err := parsePeers("peers", []byte(content))
		if err == nil || !strings.Contains(err.Error(), "YAML and JSON are not accepted") {
			t.Errorf("content %q: error %v, want one saying YAML and JSON are not accepted", content, err)
		}
	}
}

func TestFileSourceUnreadableFileIsError(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "peers")
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	f := newTestFile(t, path)
	if got, err := f.Lookup(testContext(t)); err == nil {
		t.Fatalf("Lookup of a directory returned %q and no error", got)
	}
}

func TestNewFileFailsWhenDirectoryIsMissing(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "missing", "peers")
	f, err := NewFile(path, nil)
	if err == nil {
		f.Close()
		t.Fatal("NewFile succeeded in a directory that does not exist")
	}
	if !strings.Contains(err.Error(), "must exist") {
		t.Errorf("error %q does not say the directory must exist", err)
	}
}

func TestFileSourceLookupWorksAfterCloseAndCloseIsIdempotent(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "peers")
	writeFile(t, path, "peer-0.app:7000\n")
	f, err := NewFile(path, nil)
	if err != nil {
		t.Fatalf("NewFile: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	got, err := f.Lookup(testContext(t))
	if err != nil {
		t.Fatalf("Lookup after Close: %v", err)
	}
	assertAddrs(t, got, []string{"peer-0.app:7000"})
}

func TestFileSourceLookupFailsOnEndedContext(t *testing.T) {
	t.Parallel()
	f := newTestFile(t, filepath.Join(t.TempDir(), "peers"))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := f.Lookup(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Lookup on a cancelled context: error %v, want context.Canceled", err)
	}
}

func TestFileSourceNameIsAbsolutePath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f := newTestFile(t, filepath.Join(dir, "peers"))
	if want := `file "` + filepath.Join(dir, "peers") + `"`; f.Name() != want {
		t.Errorf("Name() = %q, want %q", f.Name(), want)
	}
}
