package raftstore

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
	"go.etcd.io/bbolt"
)

// The layout of raft-wal's files (raft-wal v0.4.0, segment/format.go and
// metadb/metadb.go), which the check reads without raft-wal.
//
// A segment file is a 32-byte header (magic, version, base index, segment
// id, codec) and then frames, each 8-byte aligned: an 8-byte header (type,
// three zero bytes, then the payload length, or for a commit frame the
// CRC-32C of everything written since the previous commit frame, or since
// the start of the file for the first) and the padded payload. An append
// writes its entries' frames and a commit frame and fsyncs them; a sealed
// segment ends with an index frame and a commit frame. The file is
// preallocated, so what follows the last commit is zeros, or the torn
// remains of an append that was never acknowledged.
const (
	walFileHeaderLen  = 32
	walFrameHeaderLen = 8
	walMagic          = 0x58eb6b0d
	walFrameEntry     = 1
	walFrameIndex     = 2
	walFrameCommit    = 3
	walMetaBucket     = "wal-meta"
	walMetaKey        = "m"
	walStableBucket   = "stable"
)

var walCRCTable = crc32.MakeTable(crc32.Castagnoli)

// checkWAL checks raft-wal's files in dir (the wal directory) the way
// checkDB checks raft.db: its meta file, structure first, then through
// bbolt with panics recovered; then every segment the meta file lists,
// frame by frame, every append's checksum, and every entry decoded as
// raft-wal decodes it and checked as checkEntries checks raft-boltdb's.
//
// raft-wal itself checks only the last append of the last segment (to
// drop a torn one): an append damaged before it, in the last segment,
// would end its log there without a word, losing acknowledged entries,
// and one in a sealed segment would be read as it is. The check tells a
// torn last append (dropped, as raft-wal drops it: it was never
// acknowledged) from damage by what follows it: an intact append after the
// damage means acknowledged entries were lost.
func (c storeCheck) checkWAL(dir string, res *storeCheckResult) error {
	metaPath := filepath.Join(dir, walMetaFile)
	st, err := readWALMeta(metaPath)
	if err != nil {
		return err
	}
	for i, si := range st.Segments {
		path := filepath.Join(dir, segment.FileName(si))
		tail := si.SealTime.IsZero()
		if tail && i != len(st.Segments)-1 {
			return damaged(metaPath, fmt.Errorf("segment %d is not sealed but is not the last one", si.ID))
		}
		if si.Codec != (&wal.BinaryCodec{}).ID() {
			return damaged(path, fmt.Errorf("unknown codec %d", si.Codec))
		}
		first := max(si.BaseIndex, si.MinIndex)
		if !tail && si.IndexStart == 0 && si.MaxIndex >= first {
			// raft-wal v0.4.0 seals the last segment when raft cuts the end
			// of the log (a follower's entries that conflict with a new
			// leader's) without writing the segment's index, and cannot
			// read it once reopened: raft would panic reading an entry.
			return damaged(path, fmt.Errorf("a sealed segment without an index (raft-wal cut the end of the log here, hashicorp/raft-wal#31): its entries %d to %d cannot be read", first, si.MaxIndex))
		}
		check := func(idx uint64, payload []byte) error {
			if idx < first || !tail && idx > si.MaxIndex {
				return nil // cut from the log, still in the file
			}
			var l raft.Log
			if err := (&wal.BinaryCodec{}).Decode(payload, &l); err != nil {
				return fmt.Errorf("log entry %d cannot be decoded: %v", idx, err)
			}
			if l.Index != idx {
				return fmt.Errorf("log entry %d says it is entry %d", idx, l.Index)
			}
			if err := c.checkEntry(&l); err != nil {
				return fmt.Errorf("log entry %d: %v", idx, err)
			}
			res.count(idx)
			return nil
		}
		n, err := c.walkSegment(path, si, tail, check)
		if err != nil {
			return damaged(path, err)
		}
		if !tail && si.MaxIndex >= first && si.BaseIndex+n <= si.MaxIndex {
			return damaged(path, fmt.Errorf("the sealed segment should hold entries up to %d but holds %d from entry %d", si.MaxIndex, n, si.BaseIndex))
		}
	}
	return nil
}

// readWALMeta reads raft-wal's meta file: the list of segments and the
// stable store's values.
func readWALMeta(path string) (st types.PersistentState, err error) {
	if err := checkBoltFile(path); err != nil {
		return st, damaged(path, err)
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = damaged(path, fmt.Errorf("bbolt could not read it: %v", r))
		}
	}()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, PreLoadFreelist: true, Timeout: time.Second})
	if err != nil {
		return st, damaged(path, err)
	}
	defer db.Close()
	err = db.View(func(tx *bbolt.Tx) error {
		n := 0
		var first error
		for err := range tx.Check() {
			if n++; first == nil {
				first = err
			}
		}
		if first != nil {
			return fmt.Errorf("bbolt consistency check: %v", first)
		}
		meta, err := bucket(tx, []byte(walMetaBucket))
		if err != nil {
			return err
		}
		if meta == nil {
			return errors.New("no segment list")
		}
		if raw := meta.Get([]byte(walMetaKey)); raw != nil {
			if err := json.Unmarshal(raw, &st); err != nil {
				return fmt.Errorf("segment list: %v", err)
			}
		}
		stable, err := bucket(tx, []byte(walStableBucket))
		if err != nil {
			return err
		}
		return checkStable(stable)
	})
	if err != nil {
		return st, damaged(path, err)
	}
	return st, nil
}

// walkSegment reads a segment file's frames from the start, calls fn with
// every entry of every intact append, in order, and returns how many there
// were. Only one append's entries are held at a time.
func (c storeCheck) walkSegment(path string, si types.SegmentInfo, tail bool, fn func(index uint64, payload []byte) error) (entries uint64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := fi.Size()
	var hdr [walFileHeaderLen]byte
	if _, err := f.ReadAt(hdr[:], 0); err != nil && !(tail && errors.Is(err, io.EOF)) {
		return 0, fmt.Errorf("file header: %v", err)
	}
	var (
		batch      [][]byte // entries since the last commit
		crcStart   int64    // where the bytes the next commit covers start
		off        = int64(walFileHeaderLen)
		stop       string // why the walk stopped
		fh         [walFrameHeaderLen]byte
		sawCommit  bool
		sawIndex   bool
		indexStart int64
	)
walk:
	for {
		if off+walFrameHeaderLen > size {
			stop = "end of file"
			break
		}
		if _, err := f.ReadAt(fh[:], off); err != nil {
			return 0, err
		}
		typ, n := fh[0], binary.LittleEndian.Uint32(fh[4:8])
		if fh[1]|fh[2]|fh[3] != 0 {
			stop = fmt.Sprintf("a frame header that is not one at offset %d", off)
			break
		}
		switch typ {
		case 0:
			if n != 0 {
				stop = fmt.Sprintf("a frame header that is not one at offset %d", off)
			} else {
				stop = fmt.Sprintf("zeros at offset %d", off)
			}
			break walk
		case walFrameEntry, walFrameIndex:
			end := off + walFrameHeaderLen + int64(n) + int64(walPad(n))
			if n > segment.MaxEntrySize || end > size {
				stop = fmt.Sprintf("a frame of %d bytes at offset %d beyond the end of the file", n, off)
				break walk
			}
			if typ == walFrameEntry {
				b := make([]byte, n)
				if _, err := f.ReadAt(b, off+walFrameHeaderLen); err != nil {
					return 0, err
				}
				batch = append(batch, b)
			} else {
				sawIndex, indexStart = true, off+walFrameHeaderLen
			}
			off = end
		case walFrameCommit:
			ok, err := walCRCMatches(f, crcStart, off, n)
			if err != nil {
				return 0, err
			}
			if !ok {
				stop = fmt.Sprintf("an append whose checksum does not match, committed at offset %d", off)
				break walk
			}
			if !sawCommit {
				if err := checkWALHeader(hdr[:], si); err != nil {
					return 0, err
				}
			}
			sawCommit = true
			for _, b := range batch {
				if err := fn(si.BaseIndex+entries, b); err != nil {
					return entries, err
				}
				entries++
			}
			batch = batch[:0]
			off += walFrameHeaderLen
			crcStart = off
		default:
			stop = fmt.Sprintf("a frame of unknown type %d at offset %d", typ, off)
			break walk
		}
	}
	if tail && sawIndex {
		// raft-wal seals a segment with its last append, then records that
		// in its meta file and starts the next segment. When the second
		// step did not happen (a crash, a full disk), v0.4.0 reopens the
		// sealed segment as its last and refuses every append to it.
		return 0, errors.New("the last segment is sealed but the meta file does not say so (a segment rotation that did not finish): raft-wal cannot append to it")
	}
	if !sawCommit && !tail {
		return 0, fmt.Errorf("a sealed segment with no intact append (%s)", stop)
	}
	if !tail && si.IndexStart != 0 && (!sawIndex || indexStart != int64(si.IndexStart)) {
		return 0, fmt.Errorf("the index of the sealed segment is not where it should be (%s)", stop)
	}
	if at, found, err := walIntactAppendAfter(f, crcStart, size); err != nil {
		return 0, err
	} else if found {
		return 0, fmt.Errorf("the log stops at %s but an intact append follows at offset %d: acknowledged entries are lost", stop, at)
	}
	return entries, nil
}

func walPad(n uint32) uint32 { return (walFrameHeaderLen - n%walFrameHeaderLen) % walFrameHeaderLen }

func checkWALHeader(hdr []byte, si types.SegmentInfo) error {
	if binary.LittleEndian.Uint32(hdr[0:4]) != walMagic || hdr[7] != 0 {
		return errors.New("not a raft-wal segment file (file header)")
	}
	base, id, codec := binary.LittleEndian.Uint64(hdr[8:16]), binary.LittleEndian.Uint64(hdr[16:24]), binary.LittleEndian.Uint64(hdr[24:32])
	if base != si.BaseIndex || id != si.ID || codec != si.Codec {
		return fmt.Errorf("file header says segment %d from entry %d, the meta file segment %d from entry %d", id, base, si.ID, si.BaseIndex)
	}
	return nil
}

// walCRCMatches says whether the bytes from start to the commit frame at
// commit have the CRC-32C sum.
func walCRCMatches(f *os.File, start, commit int64, sum uint32) (bool, error) {
	h := crc32.New(walCRCTable)
	if _, err := io.Copy(h, io.NewSectionReader(f, start, commit-start)); err != nil {
		return false, err
	}
	return h.Sum32() == sum, nil
}

// walIntactAppendAfter looks, from offset from on, for an intact append:
// entry frames followed by a commit frame whose checksum matches the bytes
// from the first of them. A torn last append leaves nothing of the kind
// behind it (raft-wal starts an append only once the one before is on
// disk); damage in the middle of the log does.
func walIntactAppendAfter(f *os.File, from, size int64) (int64, bool, error) {
	from = (from + walFrameHeaderLen - 1) / walFrameHeaderLen * walFrameHeaderLen
	buf := make([]byte, 1<<20)
	for base := from; base < size; base += int64(len(buf)) {
		n, err := f.ReadAt(buf, base)
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, false, err
		}
		chunk := buf[:n]
		for i := 0; i+walFrameHeaderLen <= len(chunk); i += walFrameHeaderLen {
			if chunk[i] != walFrameEntry || chunk[i+1]|chunk[i+2]|chunk[i+3] != 0 {
				continue
			}
			at := base + int64(i)
			if ok, err := walAppendAt(f, at, size); err != nil {
				return 0, false, err
			} else if ok {
				return at, true, nil
			}
		}
		if n < len(buf) {
			break
		}
	}
	return 0, false, nil
}

// walAppendAt says whether an intact append starts at offset start.
func walAppendAt(f *os.File, start, size int64) (bool, error) {
	var fh [walFrameHeaderLen]byte
	entries := 0
	for off := start; off+walFrameHeaderLen <= size; {
		if _, err := f.ReadAt(fh[:], off); err != nil {
			return false, err
		}
		if fh[1]|fh[2]|fh[3] != 0 {
			return false, nil
		}
		n := binary.LittleEndian.Uint32(fh[4:8])
		switch fh[0] {
		case walFrameEntry, walFrameIndex:
			if n > segment.MaxEntrySize {
				return false, nil
			}
			off += walFrameHeaderLen + int64(n) + int64(walPad(n))
			entries++
		case walFrameCommit:
			if entries == 0 {
				return false, nil
			}
			return walCRCMatches(f, start, off, n)
		default:
			return false, nil
		}
	}
	return false, nil
}
