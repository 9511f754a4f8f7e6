// Package seglog is a raft log store and stable store in segment files: an
// append is one write at the end of the last segment and one fdatasync.
//
// A directory holds the segment files, each named by the index of its first
// entry (zero-padded, so that they sort by name) and holding consecutive
// entries, each segment's first following the previous one's last; and the
// stable file (raft's term and vote). In memory the store keeps, per
// segment, its first index and where each entry's record starts; entries
// are read from the file when asked for. Nothing is preallocated: a
// segment grows with its appends, and a new one is started once it is past
// the segment size.
package seglog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/hashicorp/raft"
	"golang.org/x/sys/unix"
)

// DefaultSegmentSize is the size past which appends go to a new segment.
// The log's front is removed a whole segment at a time, so besides the
// entries raft keeps, the log holds up to a segment of older ones: the
// smaller the segment, the closer the data dir stays to what raft keeps;
// the larger, the fewer files are created (one per 4 MiB appended).
const DefaultSegmentSize = 4 << 20

const (
	segmentSuffix = ".seg"
	nameDigits    = 20
	// StableFile is the name of the stable store's file in the directory.
	StableFile = "stable"
)

// Options configure a Store.
type Options struct {
	// SegmentSize is the size past which appends go to a new segment file
	// (0: DefaultSegmentSize).
	SegmentSize int64
	// openFile opens a segment file (nil: the os's; tests inject faults).
	openFile func(path string, flag int) (file, error)
}

// file is what the store does with a segment file.
type file interface {
	ReadAt(b []byte, off int64) (int, error)
	WriteAt(b []byte, off int64) (int, error)
	Truncate(size int64) error
	// Sync flushes the file's data (fdatasync).
	Sync() error
	Close() error
}

type osFile struct{ *os.File }

func (f osFile) Sync() error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			if err != nil {
				return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
			}
			return nil
		}
	}
}

func openOSFile(path string, flag int) (file, error) {
	f, err := os.OpenFile(path, flag, 0o600)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// segment is one segment file.
type segment struct {
	first   uint64  // the index of its first entry: its name
	offsets []int64 // where each entry's record starts
	size    int64   // the end of its last record
	// dirty is set when cutting a failed append away failed: the file may
	// hold its bytes past size, to be cut before the next append.
	dirty bool
	path  string
	f     file
}

func (s *segment) last() uint64 { return s.first + uint64(len(s.offsets)) - 1 }

// end is where entry i's record (i counted from the segment's first) ends.
func (s *segment) end(i int) int64 {
	if i+1 < len(s.offsets) {
		return s.offsets[i+1]
	}
	return s.size
}

// Store is a raft.LogStore, raft.StableStore and raft.MonotonicLogStore.
//
// raft calls it from several goroutines: it reads entries to replicate
// while its main loop appends. Appends and deletions hold wmu, one at a
// time; mu guards what readers see (the segment list, their offsets, the
// first and last index). An append writes and syncs past the end readers
// know of, holding only wmu, then takes mu to publish the new entries, so
// reads do not wait for its fsync. A deletion holds both throughout: it
// closes and truncates files readers could be reading.
type Store struct {
	dir  string
	opts Options

	wmu sync.Mutex
	// wbuf is StoreLogs' buffer for the records of an append, kept for the
	// next one when it is at most maxKeptBuffer (wmu held).
	wbuf []byte

	mu     sync.RWMutex
	segs   []*segment
	first  uint64 // the first index raft can read; 0 when empty
	last   uint64 // 0 when empty
	closed bool

	stable stableStore
}

var (
	_ raft.LogStore          = (*Store)(nil)
	_ raft.StableStore       = (*Store)(nil)
	_ raft.MonotonicLogStore = (*Store)(nil)
)

// ErrClosed is returned by a closed store.
var ErrClosed = errors.New("seglog: store closed")

// Open opens the store in dir, creating dir if it is not there. It reads
// every record of every segment, checking its checksum: the torn remains
// of an append that never finished, at the end of the last segment, are
// cut away (that append was never acknowledged); anything else that is not
// as written is a *DamageError naming the file and where in it.
func Open(dir string, opts Options) (*Store, error) {
	if opts.SegmentSize <= 0 {
		opts.SegmentSize = DefaultSegmentSize
	}
	if opts.openFile == nil {
		opts.openFile = openOSFile
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	s := &Store{dir: dir, opts: opts, stable: stableStore{path: filepath.Join(dir, StableFile)}}
	if err := s.stable.load(true); err != nil {
		return nil, err
	}
	segs, err := load(dir, opts.openFile, true, nil)
	if err != nil {
		s.stable.close()
		return nil, err
	}
	s.segs = segs
	s.setBounds()
	return s, nil
}

// Check reads the store in dir as Open does, without changing anything,
// and calls fn with every entry, in order. It returns the first and last
// index (0, 0 when empty). A torn last append is not an error: Open cuts
// it away.
func Check(dir string, fn func(*raft.Log) error) (first, last uint64, err error) {
	st := stableStore{path: filepath.Join(dir, StableFile)}
	if err := st.load(false); err != nil {
		return 0, 0, err
	}
	segs, err := load(dir, openOSFile, false, fn)
	for _, sg := range segs {
		sg.f.Close()
	}
	if err != nil {
		return 0, 0, err
	}
	s := Store{segs: segs}
	s.setBounds()
	return s.first, s.last, nil
}

// segmentFiles lists the segment files in dir by first index.
func segmentFiles(dir string) ([]uint64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var firsts []uint64
	for _, e := range entries {
		name := e.Name()
		num, ok := strings.CutSuffix(name, segmentSuffix)
		if !ok {
			continue
		}
		first, err := strconv.ParseUint(num, 10, 64)
		if err != nil || len(num) != nameDigits || !e.Type().IsRegular() {
			return nil, damage(filepath.Join(dir, name), -1, "not a segment file name, or not a regular file")
		}
		firsts = append(firsts, first)
	}
	slices.Sort(firsts)
	return firsts, nil
}

func segmentName(first uint64) string {
	return fmt.Sprintf("%0*d%s", nameDigits, first, segmentSuffix)
}

// load opens and scans every segment in dir. With repair, a torn tail of
// the last segment is cut away (the segments are opened for writing);
// without, nothing is changed.
func load(dir string, open func(string, int) (file, error), repair bool, fn func(*raft.Log) error) (segs []*segment, err error) {
	defer func() {
		if err != nil {
			for _, sg := range segs {
				sg.f.Close()
			}
			segs = nil
		}
	}()
	firsts, err := segmentFiles(dir)
	if err != nil {
		return nil, err
	}
	flag := os.O_RDONLY
	if repair {
		flag = os.O_RDWR
	}
	for i, first := range firsts {
		path := filepath.Join(dir, segmentName(first))
		if len(segs) > 0 {
			prev := segs[len(segs)-1]
			if len(prev.offsets) == 0 {
				return segs, damage(prev.path, -1, "an empty segment that is not the last one")
			}
			if first != prev.last()+1 {
				return segs, damage(path, -1, "the segment starts at entry %d but the one before it ends at entry %d", first, prev.last())
			}
		}
		fi, err := os.Stat(path)
		if err != nil {
			return segs, err
		}
		f, err := open(path, flag)
		if err != nil {
			return segs, err
		}
		sg := &segment{first: first, path: path, f: f}
		segs = append(segs, sg)
		last := i == len(firsts)-1
		sc, err := scanSegment(f, fi.Size(), path, first, last, fn)
		if err != nil {
			return segs, err
		}
		sg.offsets, sg.size = sc.offsets, sc.end
		if sc.torn != "" && repair {
			// The append that tore was never acknowledged.
			if err := f.Truncate(sc.end); err != nil {
				return segs, fmt.Errorf("cutting the torn last append from %s: %w", path, err)
			}
			if err := f.Sync(); err != nil {
				return segs, fmt.Errorf("cutting the torn last append from %s: %w", path, err)
			}
		}
	}
	return segs, nil
}

// setBounds sets first and last from the segments.
func (s *Store) setBounds() {
	s.first, s.last = 0, 0
	for _, sg := range s.segs {
		if len(sg.offsets) == 0 {
			continue
		}
		if s.first == 0 {
			s.first = sg.first
		}
		s.last = sg.last()
	}
}

// FirstIndex implements raft.LogStore.
func (s *Store) FirstIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return 0, ErrClosed
	}
	return s.first, nil
}

// LastIndex implements raft.LogStore.
func (s *Store) LastIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return 0, ErrClosed
	}
	return s.last, nil
}

// IsMonotonic implements raft.MonotonicLogStore: the store keeps only
// consecutive entries, so raft removes the whole log after installing a
// snapshot instead of leaving a gap.
func (s *Store) IsMonotonic() bool { return true }

// GetLog implements raft.LogStore.
func (s *Store) GetLog(index uint64, l *raft.Log) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	if s.last == 0 || index < s.first || index > s.last {
		return raft.ErrLogNotFound
	}
	i, _ := slices.BinarySearchFunc(s.segs, index, func(sg *segment, idx uint64) int {
		switch {
		case len(sg.offsets) > 0 && sg.last() < idx:
			return -1
		case sg.first > idx:
			return 1
		}
		return 0
	})
	if i == len(s.segs) {
		return raft.ErrLogNotFound
	}
	sg := s.segs[i]
	k := int(index - sg.first)
	if index < sg.first || k >= len(sg.offsets) {
		return raft.ErrLogNotFound
	}
	off := sg.offsets[k]
	buf := make([]byte, sg.end(k)-off)
	if _, err := sg.f.ReadAt(buf, off); err != nil {
		return fmt.Errorf("reading entry %d from %s: %w", index, sg.path, err)
	}
	payload := buf[recordHeaderLen:]
	if err := decodeLog(payload, l); err != nil || l.Index != index {
		return fmt.Errorf("entry %d in %s at offset %d: %w", index, sg.path, off, errors.Join(err, checkIndex(l.Index, index)))
	}
	return nil
}

func checkIndex(got, want uint64) error {
	if got != want {
		return fmt.Errorf("the record holds entry %d", got)
	}
	return nil
}

// StoreLog implements raft.LogStore.
func (s *Store) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs implements raft.LogStore: the entries must follow the last one
// (any index when the log is empty). They are encoded into one buffer,
// written at the end of the last segment (a new one, named by the first of
// them, when the last is past the segment size) and synced. A write or
// sync that fails (a full disk, an I/O error) is undone by cutting the file
// back to where it ended, and the store goes on: the next append succeeds
// once the cause is gone.
func (s *Store) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.RLock()
	closed, last, empty := s.closed, s.last, s.last == 0
	s.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	for i, l := range logs {
		want := last + 1
		if i > 0 {
			want = logs[i-1].Index + 1
		} else if empty {
			want = l.Index
		}
		if l.Index != want {
			return fmt.Errorf("seglog: storing entry %d after entry %d: entries must be consecutive", l.Index, want-1)
		}
	}
	size := 0
	for _, l := range logs {
		size += recordHeaderLen + maxLogOverhead + len(l.Data) + len(l.Extensions)
	}
	buf := s.wbuf[:0]
	if cap(buf) < size {
		buf = make([]byte, 0, size)
	}
	if cap(buf) <= maxKeptBuffer {
		s.wbuf = buf
	}
	for i, l := range logs {
		// The length's top bit is the end-of-append mark: leave room
		// for the header fields beside data and extensions.
		if len(l.Data)+len(l.Extensions) > maxPayload-64 {
			return fmt.Errorf("seglog: entry %d is too large (%d bytes)", l.Index, len(l.Data)+len(l.Extensions))
		}
		buf = appendRecord(buf, l, i == len(logs)-1)
	}

	// Writers only (wmu held): the segment list changes only here and in
	// DeleteRange, and readers do not look past a segment's published size.
	if empty && (len(s.segs) != 1 || s.segs[0].first != logs[0].Index) {
		// An empty log starts where the entries do: drop what is left
		// (an empty segment file of an append that failed).
		if err := s.dropAll(); err != nil {
			return err
		}
	}
	var sg *segment
	if n := len(s.segs); n > 0 && s.segs[n-1].size < s.opts.SegmentSize {
		sg = s.segs[n-1]
	} else {
		var err error
		if sg, err = s.newSegment(logs[0].Index); err != nil {
			return err
		}
	}
	at := sg.size
	if sg.dirty {
		if err := sg.f.Truncate(at); err != nil {
			return fmt.Errorf("cutting a failed append from %s: %w", sg.path, err)
		}
		sg.dirty = false
	}
	if _, err := sg.f.WriteAt(buf, at); err != nil {
		return s.undoAppend(sg, at, fmt.Errorf("appending to %s: %w", sg.path, err))
	}
	if err := sg.f.Sync(); err != nil {
		return s.undoAppend(sg, at, fmt.Errorf("syncing %s: %w", sg.path, err))
	}
	offsets := make([]int64, 0, len(logs))
	off := at
	for range logs {
		offsets = append(offsets, off)
		off += recordHeaderLen + recordLen(buf[off-at:])
	}
	s.mu.Lock()
	sg.offsets = append(sg.offsets, offsets...)
	sg.size = off
	if s.last == 0 {
		s.first = logs[0].Index
	}
	s.last = logs[len(logs)-1].Index
	s.mu.Unlock()
	return nil
}

// recordLen is the payload length in the record header at b.
func recordLen(b []byte) int64 {
	return int64(binary.LittleEndian.Uint32(b) &^ lastInAppend)
}

// undoAppend cuts sg back to size at after a failed append, and returns
// err. Whatever the write left on disk past at was never acknowledged;
// should the cut fail too, Open cuts it away as a torn append.
func (s *Store) undoAppend(sg *segment, at int64, err error) error {
	if terr := sg.f.Truncate(at); terr != nil {
		sg.dirty = true
		return fmt.Errorf("%w (and cutting it back to %d bytes: %v)", err, at, terr)
	}
	_ = sg.f.Sync()
	return err
}

// newSegment creates the segment file for entries from first and adds it,
// empty, to the list. Writers only.
func (s *Store) newSegment(first uint64) (*segment, error) {
	path := filepath.Join(s.dir, segmentName(first))
	f, err := s.opts.openFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC)
	if err != nil {
		return nil, fmt.Errorf("creating segment %s: %w", path, err)
	}
	if err := syncDir(s.dir); err != nil {
		f.Close()
		_ = os.Remove(path)
		return nil, fmt.Errorf("creating segment %s: %w", path, err)
	}
	sg := &segment{first: first, path: path, f: f}
	s.mu.Lock()
	s.segs = append(s.segs, sg)
	s.mu.Unlock()
	return sg, nil
}

// dropAll removes every segment file, first to last (a crash in between
// leaves the later ones, consecutive). Writers only.
func (s *Store) dropAll() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.removeFront(len(s.segs))
}

// removeFront removes the first n segments, first to last, syncing the
// directory after each: a crash leaves the later ones, without a gap
// between them. mu and wmu held.
func (s *Store) removeFront(n int) error {
	for ; n > 0; n-- {
		if err := s.remove(0); err != nil {
			return err
		}
	}
	return nil
}

// remove removes segment i from the list and its file, and syncs the
// directory. mu and wmu held.
func (s *Store) remove(i int) error {
	sg := s.segs[i]
	sg.f.Close()
	s.segs = slices.Delete(s.segs, i, i+1)
	if err := os.Remove(sg.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return syncDir(s.dir)
}

// DeleteRange implements raft.LogStore. raft deletes from the front (after
// a snapshot; after installing one, everything), or the end of the log
// (entries that conflict with a new leader's); nothing else is supported.
//
// From the front, it removes the segment files that hold only deleted
// entries and remembers the new first index in memory only: after a
// restart the store reports the first entry of its first segment again.
// That is harmless: those entries are intact and committed (raft deletes
// only what a snapshot holds), raft reads nothing before its snapshot, and
// deletes them again after its next one.
//
// From the end, it removes the later segment files, last to first, then
// cuts the one holding min at min's record and syncs it: a crash in
// between leaves a consecutive prefix of the log.
func (s *Store) DeleteRange(min, max uint64) error {
	if min > max {
		return nil
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.last == 0 || max < s.first || min > s.last {
		return nil
	}
	switch {
	case min <= s.first && max >= s.last:
		// Everything.
		err := s.removeFront(len(s.segs))
		s.first, s.last = 0, 0
		return err
	case min <= s.first:
		// From the front: drop the segments whose last entry is at most
		// max (never the last segment: it holds s.last > max).
		n := 0
		for n < len(s.segs)-1 && (len(s.segs[n].offsets) == 0 || s.segs[n].last() <= max) {
			n++
		}
		s.first = max + 1
		if n == 0 {
			return nil
		}
		return s.removeFront(n)
	case max >= s.last:
		return s.cutTail(min)
	}
	return fmt.Errorf("seglog: deleting entries %d to %d from the middle of the log (%d to %d)", min, max, s.first, s.last)
}

// cutTail deletes the entries from min (first < min <= last) to the end.
// mu and wmu held.
func (s *Store) cutTail(min uint64) error {
	// Later segments first, last to first, the directory synced after
	// each: a crash leaves the earlier ones.
	for len(s.segs) > 0 && s.segs[len(s.segs)-1].first >= min {
		if err := s.remove(len(s.segs) - 1); err != nil {
			s.setBoundsKeepFirst()
			return err
		}
	}
	sg := s.segs[len(s.segs)-1]
	k := int(min - sg.first)
	if k < len(sg.offsets) {
		at := sg.offsets[k]
		if err := sg.f.Truncate(at); err != nil {
			return fmt.Errorf("cutting %s: %w", sg.path, err)
		}
		if err := sg.f.Sync(); err != nil {
			return fmt.Errorf("cutting %s: %w", sg.path, err)
		}
		sg.offsets = sg.offsets[:k]
		sg.size = at
	}
	s.setBoundsKeepFirst()
	return nil
}

// setBoundsKeepFirst sets last from the segments, keeping first (which a
// deletion from the front may have moved past the first segment's start).
func (s *Store) setBoundsKeepFirst() {
	first := s.first
	s.setBounds()
	if s.last != 0 && first > s.first {
		s.first = first
	}
}

// Close implements io.Closer.
func (s *Store) Close() error {
	s.stable.mu.Lock()
	serr := s.stable.close()
	s.stable.mu.Unlock()
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	errs := []error{serr}
	for _, sg := range s.segs {
		errs = append(errs, sg.f.Close())
	}
	s.segs = nil
	return errors.Join(errs...)
}

// syncDir fsyncs a directory, so that files created or removed in it stay
// so after a crash.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	return nil
}
