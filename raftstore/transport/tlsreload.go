package transport

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// current returns the certificates in use.
func (r *CertReloader) current() *certState { return r.state.Load() }

// maybeRecheck reloads if the files changed since the last check and the
// last check is older than the re-check interval.
func (r *CertReloader) maybeRecheck() {
	if r.recheck <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if now.Sub(r.lastCheck) < r.recheck {
		return
	}
	r.lastCheck = now
	if statFiles(r.files).equal(r.sig) {
		return
	}
	_ = r.reloadLocked("files changed")
}

// reloadLocked loads the files and, on success, makes them current. The
// file signature is taken first, so a write that races with the read is
// seen by the next check.
func (r *CertReloader) reloadLocked(cause string) error {
	r.sig = statFiles(r.files)
	st, err := loadCertState(r.files)
	if err != nil {
		r.logger.Error("TLS reload failed; keeping the previous certificates",
			"cause", cause, "error", err)
		return err
	}
	prev := r.state.Load()
	if bytes.Equal(prev.leaf.Raw, st.leaf.Raw) && bytes.Equal(prev.caPEM, st.caPEM) {
		return nil
	}
	r.state.Store(st)
	r.logger.Info("TLS certificates reloaded", "cause", cause,
		"serial", st.leaf.SerialNumber.String(), "subject", st.leaf.Subject.String(),
		"not_after", st.leaf.NotAfter)
	return nil
}

func loadCertState(f TLSFiles) (*certState, error) {
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("load TLS key pair (cert %s, key %s): %w", f.CertFile, f.KeyFile, err)
	}
	leaf := cert.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("parse TLS certificate %s: %w", f.CertFile, err)
		}
	}
	caPEM, err := os.ReadFile(f.CAFile)
	if err != nil {
		return nil, fmt.Errorf("read TLS CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("TLS CA file %s holds no PEM certificate", f.CAFile)
	}
	return &certState{cert: &cert, leaf: leaf, pool: pool, caPEM: caPEM}, nil
}

func (r *CertReloader) startWatch() error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("create file watcher: %w", err)
	}
	seen := map[string]bool{}
	for _, f := range []string{r.files.CertFile, r.files.KeyFile, r.files.CAFile} {
		dir := filepath.Dir(f)
		if seen[dir] {
			continue
		}
		seen[dir] = true
		if err := w.Add(dir); err != nil {
			_ = w.Close()
			return fmt.Errorf("watch directory %s: %w", dir, err)
		}
	}
	r.watcher = w
	r.wg.Add(1)
	go r.watch()
	return nil
}

func (r *CertReloader) watch() {
	defer r.wg.Done()
	timer := time.NewTimer(r.debounce)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-r.done:
			return
		case ev, ok := <-r.watcher.Events:
			if !ok {
				return
			}
			if ev.Op == fsnotify.Chmod {
				continue
			}
			timer.Reset(r.debounce)
		case err, ok := <-r.watcher.Errors:
			if !ok {
				return
			}
			r.logger.Warn("TLS file watcher error", "error", err)
		case <-timer.C:
			r.mu.Lock()
			_ = r.reloadLocked("files changed")
			r.mu.Unlock()
		}
	}
}

// fileSig identifies the versions of the three files; os.Stat follows
// symlinks, so a swapped "..data" link shows as a different file.
type fileSig [3]os.FileInfo

func statFiles(f TLSFiles) fileSig {
	var s fileSig
	for i, name := range []string{f.CertFile, f.KeyFile, f.CAFile} {
		s[i], _ = os.Stat(name)
	}
	return s
}

func (s fileSig) equal(o fileSig) bool {
	for i := range s {
		a, b := s[i], o[i]
		if a == nil || b == nil {
			if a != b {
				return false
			}
			continue
		}
		if !os.SameFile(a, b) || !a.ModTime().Equal(b.ModTime()) || a.Size() != b.Size() {
			return false
		}
	}
	return true
}
