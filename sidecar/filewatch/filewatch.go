// Package filewatch tells when a file may have changed. It watches the
// file's directory, not the file, which covers a file that does not exist
// yet, editors that rename a new file over the old one, and Kubernetes
// ConfigMap and Secret volumes, whose updates swap the directory's "..data"
// symlink.
package filewatch

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"

	"github.com/fsnotify/fsnotify"
)

// kubeDataLink is the symlink Kubernetes swaps to update a mounted
// ConfigMap or Secret atomically.
const kubeDataLink = "..data"

// Watcher watches one file. It is safe for concurrent use.
type Watcher struct {
	path    string
	base    string
	logger  *slog.Logger
	watcher *fsnotify.Watcher
	changes chan struct{}

	closeOnce sync.Once
	closeErr  error
	done      chan struct{}
}

// New starts watching path. Its directory must exist; the file need not.
// A nil logger discards logs. The caller must Close the Watcher.
func New(path string, logger *slog.Logger) (*Watcher, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if path == "" {
		return nil, errors.New("empty path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	dir, base := filepath.Split(abs)
	if base == "" {
		return nil, fmt.Errorf("%q names a directory, want a file", path)
	}
	dir = filepath.Clean(dir)
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("creating a file watcher: %w", err)
	}
	if err := fw.Add(dir); err != nil {
		_ = fw.Close()
		return nil, fmt.Errorf("watching directory %q (it must exist; the file itself may be created later): %w", dir, err)
	}
	w := &Watcher{
		path:    abs,
		base:    base,
		logger:  logger.With(slog.String("file", abs)),
		watcher: fw,
		changes: make(chan struct{}, 1),
		done:    make(chan struct{}),
	}
	go w.watch()
	return w, nil
}

// Path is the absolute path watched.
func (w *Watcher) Path() string { return w.path }

// Changes receives a value (coalesced, never blocking the watcher) when the
// file may have changed: written, created, removed, replaced, its
// ConfigMap symlink swapped, or events lost. It is never closed.
func (w *Watcher) Changes() <-chan struct{} { return w.changes }

// Close stops watching; it is safe to call more than once.
func (w *Watcher) Close() error {
	w.closeOnce.Do(func() {
		w.closeErr = w.watcher.Close()
		<-w.done
	})
	return w.closeErr
}

func (w *Watcher) notify() {
	select {
	case w.changes <- struct{}{}:
	default:
	}
}

func (w *Watcher) watch() {
	defer close(w.done)
	for {
		select {
		case ev, ok := <-w.watcher.Events:
			if !ok {
				return
			}
			w.handle(ev)
		case err, ok := <-w.watcher.Errors:
			if !ok {
				return
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				w.logger.Warn("file watcher lost events; re-reading the file", slog.Any("error", err))
				w.notify()
				continue
			}
			w.logger.Error("file watcher failed", slog.Any("error", err))
		}
	}
}

// handle notifies for events on the file's own name and on the ConfigMap
// "..data" symlink; chmod-only events are ignored.
func (w *Watcher) handle(ev fsnotify.Event) {
	if ev.Op == fsnotify.Chmod {
		return
	}
	dir := filepath.Dir(w.path)
	if filepath.Clean(ev.Name) == dir && ev.Has(fsnotify.Remove|fsnotify.Rename) {
		w.logger.Warn("the watched file's directory was removed or renamed; changes are no longer noticed until restart", slog.String("directory", dir))
		w.notify()
		return
	}
	name := filepath.Base(ev.Name)
	if name != w.base && name != kubeDataLink {
		return
	}
	w.notify()
}
