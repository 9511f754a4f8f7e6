package discovery

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/fsnotify/fsnotify"
)

// kubeDataLink is the symlink that Kubernetes swaps atomically when it
// updates a ConfigMap or Secret volume: the files of the volume are symlinks
// through it, so they change without an event of their own.
const kubeDataLink = "..data"

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
	base    string
	logger  *slog.Logger
	watcher *fsnotify.Watcher
	changes chan struct{}

	closeOnce sync.Once
	closeErr  error
	done      chan struct{}
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
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("peers file %q: %w", path, err)
	}
	dir, base := filepath.Split(abs)
	if base == "" {
		return nil, fmt.Errorf("peers file %q: path names a directory, want a file", path)
	}
	dir = filepath.Clean(dir)
	watcher, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("peers file %q: creating file watcher: %w", abs, err)
	}
	if err := watcher.Add(dir); err != nil {
		_ = watcher.Close()
		return nil, fmt.Errorf("peers file %q: watching directory %q (it must exist; the file itself may be created later): %w", abs, dir, err)
	}
	f := &File{
		path:    abs,
		base:    base,
		logger:  logger.With(slog.String("peers_file", abs)),
		watcher: watcher,
		changes: make(chan struct{}, 1),
		done:    make(chan struct{}),
	}
	go f.watch()
	return f, nil
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
func (f *File) Changes() <-chan struct{} { return f.changes }

// Close stops watching. Lookup still works after Close. Close is safe to call
// more than once; later calls return the first call's result.
func (f *File) Close() error {
	f.closeOnce.Do(func() {
		f.closeErr = f.watcher.Close()
		<-f.done
		if f.closeErr != nil {
			f.closeErr = fmt.Errorf("peers file %q: closing watcher: %w", f.path, f.closeErr)
		}
	})
	return f.closeErr
}

// notify sends a coalesced value on the changes channel without blocking.
func (f *File) notify() {
	select {
	case f.changes <- struct{}{}:
	default:
	}
}

// watch forwards relevant watcher events to the changes channel until the
// watcher is closed.
func (f *File) watch() {
	defer close(f.done)
	for {
		select {
		case ev, ok := <-f.watcher.Events:
			if !ok {
				return
			}
			f.handle(ev)
		case err, ok := <-f.watcher.Errors:
			if !ok {
				return
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				f.logger.Warn("peers file watcher lost events; re-reading the file", slog.Any("error", err))
				f.notify()
				continue
			}
			f.logger.Error("peers file watcher failed", slog.Any("error", err))
		}
	}
}

// handle notifies for events that may change what Lookup reads: those on
// the file's own name and on the ConfigMap "..data" symlink. Chmod-only
// events are ignored.
func (f *File) handle(ev fsnotify.Event) {
	if ev.Op == fsnotify.Chmod {
		return
	}
	dir := filepath.Dir(f.path)
	if filepath.Clean(ev.Name) == dir && ev.Has(fsnotify.Remove|fsnotify.Rename) {
		f.logger.Warn("directory of the peers file was removed or renamed; changes are no longer noticed until restart",
			slog.String("directory", dir))
		f.notify()
		return
	}
	name := filepath.Base(ev.Name)
	if name != f.base && name != kubeDataLink {
		return
	}
	f.logger.Debug("peers file may have changed", slog.String("event", ev.String()))
	f.notify()
}
