package pods

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// atomicDir is a ConfigMap or Secret volume laid out as the kubelet's
// AtomicWriter does: the files in a timestamped directory, a `..data`
// symlink to it, and each key a symlink `key -> ..data/key`. update writes
// a new timestamped directory and swaps `..data` with one rename, as a
// Secret update does.
type atomicDir struct {
	mu    sync.Mutex
	dir   string
	seq   int
	mode  os.FileMode
	group int // the pod's fsGroup owns the files (as the kubelet does), or -1
}

func newAtomicDir(dir string, files map[string][]byte, mode os.FileMode, group int) (*atomicDir, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	os.Chmod(dir, 0o755) // bind-mounted: readable by the pod's user
	a := &atomicDir{dir: dir, mode: mode, group: group}
	if err := a.update(files); err != nil {
		return nil, err
	}
	return a, nil
}

func (a *atomicDir) update(files map[string][]byte) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seq++
	ts := fmt.Sprintf("..%s.%d", time.Now().UTC().Format("2006_01_02_15_04_05"), a.seq)
	tsDir := filepath.Join(a.dir, ts)
	if err := os.Mkdir(tsDir, 0o755); err != nil {
		return err
	}
	for k, b := range files {
		p := filepath.Join(tsDir, k)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, b, a.mode); err != nil {
			return err
		}
		if err := os.Chmod(p, a.mode); err != nil { // not masked by the umask
			return err
		}
		if a.group >= 0 {
			if err := os.Lchown(p, -1, a.group); err != nil {
				return err
			}
		}
	}
	old, _ := os.Readlink(filepath.Join(a.dir, "..data"))
	tmp := filepath.Join(a.dir, "..data_tmp")
	os.Remove(tmp)
	if err := os.Symlink(ts, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(a.dir, "..data")); err != nil {
		return err
	}
	for k := range files {
		top := k
		if i := indexSlash(k); i >= 0 {
			top = k[:i]
		}
		link := filepath.Join(a.dir, top)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", top), link); err != nil {
			return err
		}
	}
	if old != "" {
		os.RemoveAll(filepath.Join(a.dir, old))
	}
	return nil
}

func indexSlash(s string) int {
	for i := range len(s) {
		if s[i] == '/' {
			return i
		}
	}
	return -1
}
