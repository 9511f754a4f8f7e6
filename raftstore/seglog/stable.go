package seglog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

// stableStore is raft's stable store (its current term, and its vote) in
// one small file: [uint32 CRC-32C of the rest][version byte][uvarint
// count] and then each key and value, each a uvarint length and its bytes.
// A change writes the whole file to a temporary file, syncs it, renames it
// over the old one and syncs the directory: after a crash the file is the
// old one or the new one. A missing file is an empty store.
type stableStore struct {
	mu   sync.Mutex // a change at a time; not the log's locks, so that it does not wait for an append
	path string
	kv   map[string][]byte
}

const stableVersion = 1

func (s *stableStore) load() error {
	s.kv = map[string][]byte{}
	b, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	kv, err := decodeStable(b)
	if err != nil {
		return damage(s.path, -1, "%v", err)
	}
	s.kv = kv
	return nil
}

func decodeStable(b []byte) (map[string][]byte, error) {
	if len(b) < 5 {
		return nil, fmt.Errorf("%d bytes: too short", len(b))
	}
	if crc32.Checksum(b[4:], crcTable) != binary.LittleEndian.Uint32(b) {
		return nil, errors.New("its checksum does not match")
	}
	p := b[4:]
	if p[0] != stableVersion {
		return nil, fmt.Errorf("unknown version %d", p[0])
	}
	p = p[1:]
	field := func() ([]byte, error) {
		n, k := binary.Uvarint(p)
		if k <= 0 || n > uint64(len(p)-k) {
			return nil, errors.New("cut short")
		}
		v := append([]byte{}, p[k:k+int(n)]...)
		p = p[k+int(n):]
		return v, nil
	}
	count, k := binary.Uvarint(p)
	if k <= 0 {
		return nil, errors.New("cut short")
	}
	p = p[k:]
	kv := map[string][]byte{}
	for range count {
		key, err := field()
		if err != nil {
			return nil, err
		}
		val, err := field()
		if err != nil {
			return nil, err
		}
		kv[string(key)] = val
	}
	if len(p) != 0 {
		return nil, fmt.Errorf("%d bytes after the last value", len(p))
	}
	return kv, nil
}

func encodeStable(kv map[string][]byte) []byte {
	b := make([]byte, 4, 64)
	b = append(b, stableVersion)
	b = binary.AppendUvarint(b, uint64(len(kv)))
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(kv[k])))
		b = append(b, kv[k]...)
	}
	binary.LittleEndian.PutUint32(b, crc32.Checksum(b[4:], crcTable))
	return b
}

// set stores kv with key set to val.
func (s *stableStore) set(key, val []byte) error {
	next := make(map[string][]byte, len(s.kv)+1)
	for k, v := range s.kv {
		next[k] = v
	}
	next[string(key)] = append([]byte{}, val...)
	if err := writeFileAtomic(s.path, encodeStable(next)); err != nil {
		return err
	}
	s.kv = next
	return nil
}

func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return syncDir(filepath.Dir(path))
}

// Set implements raft.StableStore.
func (s *Store) Set(key, val []byte) error {
	s.stable.mu.Lock()
	defer s.stable.mu.Unlock()
	if s.isClosed() {
		return ErrClosed
	}
	return s.stable.set(key, val)
}

// Get implements raft.StableStore: an empty value for a key never set.
func (s *Store) Get(key []byte) ([]byte, error) {
	s.stable.mu.Lock()
	defer s.stable.mu.Unlock()
	if s.isClosed() {
		return nil, ErrClosed
	}
	return append([]byte{}, s.stable.kv[string(key)]...), nil
}

// SetUint64 implements raft.StableStore.
func (s *Store) SetUint64(key []byte, val uint64) error {
	return s.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

// GetUint64 implements raft.StableStore: 0 for a key never set.
func (s *Store) GetUint64(key []byte) (uint64, error) {
	v, err := s.Get(key)
	if err != nil || len(v) == 0 {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("stable store value %q is %d bytes, not a uint64", key, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

func (s *Store) isClosed() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.closed
}
