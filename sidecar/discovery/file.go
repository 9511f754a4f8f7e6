package discovery

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"

	"github.com/bagkeeper/bagkeeper/sidecar/filewatch"
)

// File finds peers in a text file and watches it for changes.
//
// The format is one address (host:port, see [ParseAddr]) per line. Blank
// lines are ignored, and so is everything from a '#' to the end of a line.
// YAML, JSON and several addresses on one line are not accepted.
//
// The file is read again on every Lookup, so the answer is always the
// current content. The file's directory is watched, not the file, which
// covers a file that does not exist yet, editors that replace the file by
// renaming a new one over it, and Kubernetes ConfigMap volumes, whose
// updates swap the "..data" symlink of the directory. The directory must
// exist when NewFile is called. A file that is a symlink to another
// directory is followed when reading, but only changes visible in its own
// directory are noticed (the ConfigMap layout is such a case and is
// covered).
//
// File is safe for concurrent use. Close it to stop watching.
type File struct {
	path    string
	logger  *slog.Logger
	watcher *filewatch.Watcher
}

var (
	_ Source   = (*File)(nil)
	_ Notifier = (*File)(nil)
)

// NewFile returns a source reading path and starts watching its directory.
// path need not exist yet; its directory must. A nil logger discards logs.
// The caller must Close the File.
func NewFile(path string, logger *slog.Logger) (*File, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if path == "" {
		return nil, errors.New("peers file: empty path")
	}
	w, err := filewatch.New(path, logger)
	if err != nil {
		return nil, fmt.Errorf("peers file %q: %w", path, err)
	}
	return &File{path: w.Path(), logger: logger.With(slog.String("peers_file", w.Path())), watcher: w}, nil
}

// Name returns `file "path"` with the absolute path.
func (f *File) Name() string {
	return fmt.Sprintf("file %q", f.path)
}

// Lookup reads the file and returns its addresses, sorted and de-duplicated.
//
// A file that does not exist is an empty answer with a nil error. A file
// that cannot be read is an error. Malformed lines do not hide the others:
// Lookup returns the valid addresses together with an error that names the
// file and the line number of each malformed line and wraps
// [ErrInvalidAddress].
func (f *File) Lookup(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return []string{}, fmt.Errorf("peers file %q: %w", f.path, err)
	}
	data, err := os.ReadFile(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		return []string{}, nil
	}
	if err != nil {
		return []string{}, fmt.Errorf("reading peers file: %w", err)
	}
	return parsePeers(f.path, data)
}

// parsePeers parses the content of a peers file; path is only for errors.
func parsePeers(path string, data []byte) ([]string, error) {
	text := strings.TrimPrefix(string(data), "\uFEFF")
	var (
		addrs []string
		errs  []error
	)
	for i, line := range strings.Split(text, "\n") {
		if j := strings.IndexByte(line, '#'); j >= 0 {
			line = line[:j]
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		n := i + 1
		if looksStructured(line) {
			errs = append(errs, fmt.Errorf("%s:%d: %w %q: YAML and JSON are not accepted; write one host:port per line", path, n, ErrInvalidAddress, line))
			continue
		}
		if strings.ContainsAny(line, " \t") {
			errs = append(errs, fmt.Errorf("%s:%d: %w %q: several words on one line; write one host:port per line", path, n, ErrInvalidAddress, line))
			continue
		}
		addr, err := ParseAddr(line)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: %w", path, n, err))
			continue
		}
		addrs = append(addrs, addr)
	}
	return sortedUnique(addrs), errors.Join(errs...)
}

// looksStructured reports whether line looks like part of a YAML or JSON
// document rather than an address, to give a helpful error.
func looksStructured(line string) bool {
	switch {
	case strings.HasPrefix(line, "-"), // YAML list item; no host starts with '-'
		strings.ContainsAny(line[:1], "{}]\""),
		line == "[", strings.HasPrefix(line, "[\""), strings.HasPrefix(line, "[]"),
		strings.HasSuffix(line, ","):
		return true
	}
	return false
}

// Changes implements [Notifier]: a value is sent whenever the file may have
// changed (written, created, removed, renamed, or the ConfigMap "..data"
// symlink swapped), and when the watcher lost events. The channel is never
// closed, not even by Close.
func (f *File) Changes() <-chan struct{} { return f.watcher.Changes() }

// Close stops watching. Lookup still works after Close. Close is safe to call
// more than once.
func (f *File) Close() error {
	if err := f.watcher.Close(); err != nil {
		return fmt.Errorf("peers file %q: closing watcher: %w", f.path, err)
	}
	return nil
}
