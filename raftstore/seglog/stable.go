package seglog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"golang.org/x/sys/unix"
)

// stableStore is raft's stable store (its current term, and its vote) in
// one small file of two slots of stableSlotSize bytes. A change writes the
// whole map to the slot that does not hold the current version, with a
// sequence number one higher, and syncs it: after a crash the file holds
// the old version or the new one. Writing in place, in blocks the file
// already has, needs no free space: on a full disk raft can still record
// a new term (it panics when it cannot), as with raft-boltdb, which
// rewrites pages bbolt already has.
//
// A slot is [uint32 CRC-32C of the rest of the slot][uint32 length]
// [uint64 sequence][payload][zeros to the end of the slot]; the payload is
// a version byte, a uvarint count, and each key and value as a uvarint
// length and its bytes. A slot never written is all zeros. The values raft
// stores take a few dozen bytes, inside the slot's first disk sector, which
// a disk writes whole: a slot that is not intact is damage, not a torn
// write. A missing file is an empty store; the file is created (two slots,
// through a temporary file renamed into place) at the first change.
type stableStore struct {
	mu   sync.Mutex // a change at a time; not the log's locks, so that it does not wait for an append
	path string
	f    *os.File // nil until the file exists
	// closed is the store's Close, said here so that the stable store's
	// methods need none of the log's locks.
	closed bool
	seq    uint64
	kv     map[string][]byte
}

const (
	stableVersion   = 1
	stableSlotSize  = 4096
	stableSlotHdr   = 16
	stableMaxLength = stableSlotSize - stableSlotHdr
)

// load reads the file; with write, it keeps it open for changes.
func (s *stableStore) load(write bool) error {
	s.kv = map[string][]byte{}
	flag := os.O_RDONLY
	if write {
		flag = os.O_RDWR
	}
	f, err := os.OpenFile(s.path, flag, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	b, err := io.ReadAll(f)
	if err == nil && len(b) != 2*stableSlotSize {
		err = damage(s.path, -1, "%d bytes, want %d", len(b), 2*stableSlotSize)
	}
	if err == nil {
		err = s.decode(b)
	}
	if err != nil || !write {
		f.Close()
		return err
	}
	s.f = f
	return nil
}

func (s *stableStore) decode(b []byte) error {
	found := false
	for i := range 2 {
		slot := b[i*stableSlotSize : (i+1)*stableSlotSize]
		if allZero(slot) {
			continue
		}
		seq, kv, err := decodeSlot(slot)
		if err != nil {
			return damage(s.path, int64(i*stableSlotSize), "%v", err)
		}
		if !found || seq > s.seq {
			s.seq, s.kv = seq, kv
		}
		found = true
	}
	if !found {
		return damage(s.path, -1, "no slot was ever written")
	}
	return nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func decodeSlot(slot []byte) (uint64, map[string][]byte, error) {
	if crc32.Checksum(slot[4:], crcTable) != binary.LittleEndian.Uint32(slot) {
		return 0, nil, errors.New("its checksum does not match")
	}
	n := binary.LittleEndian.Uint32(slot[4:])
	if n > stableMaxLength || n == 0 {
		return 0, nil, fmt.Errorf("a length of %d", n)
	}
	seq := binary.LittleEndian.Uint64(slot[8:])
	p := slot[stableSlotHdr : stableSlotHdr+n]
	if p[0] != stableVersion {
		return 0, nil, fmt.Errorf("unknown version %d", p[0])
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
		return 0, nil, errors.New("cut short")
	}
	p = p[k:]
	kv := map[string][]byte{}
	for range count {
		key, err := field()
		if err != nil {
			return 0, nil, err
		}
		val, err := field()
		if err != nil {
			return 0, nil, err
		}
		kv[string(key)] = val
	}
	if len(p) != 0 {
		return 0, nil, fmt.Errorf("%d bytes after the last value", len(p))
	}
	return seq, kv, nil
}

// encodeSlot encodes kv with seq as a slot.
func encodeSlot(seq uint64, kv map[string][]byte) ([]byte, error) {
	p := []byte{stableVersion}
	p = binary.AppendUvarint(p, uint64(len(kv)))
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		p = binary.AppendUvarint(p, uint64(len(k)))
		p = append(p, k...)
		p = binary.AppendUvarint(p, uint64(len(kv[k])))
		p = append(p, kv[k]...)
	}
	if len(p) > stableMaxLength {
		return nil, fmt.Errorf("the stable store's values take %d bytes, more than its %d", len(p), stableMaxLength)
	}
	slot := make([]byte, stableSlotSize)
	binary.LittleEndian.PutUint32(slot[4:], uint32(len(p)))
	binary.LittleEndian.PutUint64(slot[8:], seq)
	copy(slot[stableSlotHdr:], p)
	binary.LittleEndian.PutUint32(slot, crc32.Checksum(slot[4:], crcTable))
	return slot, nil
}

// set stores kv with key set to val.
func (s *stableStore) set(key, val []byte) error {
	next := make(map[string][]byte, len(s.kv)+1)
	for k, v := range s.kv {
		next[k] = v
	}
	next[string(key)] = append([]byte{}, val...)
	slot, err := encodeSlot(s.seq+1, next)
	if err != nil {
		return err
	}
	if s.f == nil {
		if err := s.create(slot); err != nil {
			return err
		}
	} else {
		if _, err := s.f.WriteAt(slot, int64((s.seq+1)%2)*stableSlotSize); err != nil {
			return fmt.Errorf("writing %s: %w", s.path, err)
		}
		if err := unix.Fdatasync(int(s.f.Fd())); err != nil {
			return fmt.Errorf("syncing %s: %w", s.path, err)
		}
	}
	s.seq++
	s.kv = next
	return nil
}

// create makes the file with slot as the slot of sequence 1, through a
// temporary file renamed into place.
func (s *stableStore) create(slot []byte) error {
	b := make([]byte, 2*stableSlotSize)
	copy(b[stableSlotSize:], slot) // sequence 1 is in slot 1
	tmp := s.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = os.Rename(tmp, s.path)
	}
	if err == nil {
		err = syncDir(filepath.Dir(s.path))
	}
	if err != nil {
		f.Close()
		_ = os.Remove(tmp)
		return fmt.Errorf("creating %s: %w", s.path, err)
	}
	s.f = f
	return nil
}

func (s *stableStore) close() error {
	s.closed = true
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}

// Set implements raft.StableStore.
func (s *Store) Set(key, val []byte) error {
	s.stable.mu.Lock()
	defer s.stable.mu.Unlock()
	if s.stable.closed {
		return ErrClosed
	}
	return s.stable.set(key, val)
}

// Get implements raft.StableStore: an empty value for a key never set.
func (s *Store) Get(key []byte) ([]byte, error) {
	s.stable.mu.Lock()
	defer s.stable.mu.Unlock()
	if s.stable.closed {
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
