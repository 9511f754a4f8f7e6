package raftstore

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
	"go.etcd.io/bbolt"

	"github.com/bagkeeper/bagkeeper/raftstore/seglog"
)

// DamagedStoreError is a raft store that cannot be used: a damaged raft.db,
// raft-wal or seglog file, or snapshot. The member cannot start on it; with its data dir moved away
// it rejoins as a new incarnation and gets its data from its peers.
type DamagedStoreError struct {
	// Path is the file (raft.db, a file in wal/ or segments/, a snapshot's meta.json or
	// state.bin) that is damaged.
	Path  string
	Cause error
}

func (e *DamagedStoreError) Error() string {
	return fmt.Sprintf("raft store %s cannot be opened: %v; move the data dir away to rejoin as a new member", e.Path, e.Cause)
}

func (e *DamagedStoreError) Unwrap() error { return e.Cause }

func damaged(path string, cause error) error {
	return &DamagedStoreError{Path: path, Cause: cause}
}

// The names raft and raft-boltdb use in a raft directory.
const (
	raftDBFile        = "raft.db"
	snapshotsDir      = "snapshots"
	snapshotMetaFile  = "meta.json"
	snapshotStateFile = "state.bin"
)

var (
	boltLogsBucket = []byte("logs")
	boltConfBucket = []byte("conf")
	// The stable-store keys raft reads; the terms are 8-byte big-endian
	// numbers, and raft-boltdb panics on a shorter value.
	keyCurrentTerm  = []byte("CurrentTerm")
	keyLastVoteTerm = []byte("LastVoteTerm")
	keyLastVoteCand = []byte("LastVoteCand")
)

// storeCheck checks a member's raft directory before raft opens it, so that
// damage is an error naming the damaged file, not a panic of bbolt or raft
// (and a crash loop with a stack trace). It reads everything raft reads
// when it starts, and more:
//
//  1. raft.db, without bbolt: the structure of the bbolt file
//     (checkBoltFile), so that what follows cannot make bbolt fault or
//     panic where no one can recover it.
//  2. raft.db, opened read-only by bbolt (loading its free list, as a
//     writable open does), with panics and memory faults recovered: bbolt's
//     consistency check (Tx.Check); the stable-store values raft reads at
//     start (CurrentTerm, LastVoteTerm, LastVoteCand); and every log entry,
//     in one pass in index order: decoded as raft-boltdb decodes it, of a
//     type raft knows, stored under its own index, a configuration entry
//     decodable as raft decodes it, and passed to verifyEntry.
//  3. Every snapshot in the snapshots directory: its meta.json, then
//     state.bin opened through raft's FileSnapshotStore (which verifies its
//     CRC-64) and read to the end.
//  4. That the log holds every entry after the newest snapshot: raft reads
//     each of them at start and panics on a missing one. (Entries before
//     the snapshot may have gaps: raft-boltdb is not a monotonic log store,
//     and a member that installed a snapshot keeps its older entries.)
//
// With seglog (kind segments), steps 1 and 2 are checkSegments: every
// record of every segment file, as seglog.Open reads them, and its stable
// file.
//
// With raft-wal (kind wal), steps 1 and 2 are checkWAL: its meta file as
// raft.db is checked, then every segment file, read to its end (a segment
// is preallocated, 64 MiB), holding one append's entries at a time. Reading
// the segment to its end costs 0.1 to 0.2 s per 64 MiB segment, with 0 to
// 16000 entries in it, on two busy cores.
//
// Its cost grows with the size of raft.db and of the snapshots: about 20 ms
// for 4000 entries in a 4 MiB raft.db, 70 ms for 16000 in 16 MiB, on two
// cores of a small VM (BenchmarkStoreCheck); it runs once per start. Its
// memory does not grow with the number of entries: one entry is held at a
// time. The structure check holds a bit per page of raft.db, and bbolt's
// Tx.Check a map entry per page (a few MiB for a raft.db of a GiB).
//
// What it cannot see: a value that still decodes but is wrong (an entry's
// term or data, a snapshot's index in meta.json), which only a checksum of
// the entry can catch (verifyEntry is there for that); entries missing at
// the end of the log; and anything that happens to the files after the
// check. bbolt reads pages from a memory map for as long as the member
// runs, and a page damaged later (a failing disk, another process writing
// the file) still makes bbolt panic in raft's goroutines, where it crashes
// the process. The check covers the files as they are at start.
type storeCheck struct {
	// dir is the raft directory: raft.db or wal/, and snapshots/.
	dir string
	// kind is the log store to check; empty: the one the directory has
	// (boltdb if it has none).
	kind LogStore
	// verifyEntry, when not nil, is called with every log entry, after it
	// has been decoded and checked; an error makes the store damaged.
	verifyEntry func(*raft.Log) error
	// log, when not nil, gets one line with what was checked.
	log *slog.Logger
}

// storeCheckResult is what a storeCheck found.
type storeCheckResult struct {
	hasDB         bool
	entries       uint64
	firstIndex    uint64
	lastIndex     uint64
	tailStart     uint64 // first index of the run of consecutive entries that ends at lastIndex
	snapshots     int
	snapshotIndex uint64 // the newest snapshot's last index
	snapshotBytes int64
}

// run checks the raft directory. A damaged store is a *DamagedStoreError.
func (c storeCheck) run() (storeCheckResult, error) {
	start := time.Now()
	var res storeCheckResult
	kind := c.kind
	if kind == "" {
		k, _, err := chooseLogStore(c.dir, LogStoreBoltDB)
		if err != nil {
			return res, err
		}
		kind = k
	}
	// storePath is the file whose absence would lose the term and vote.
	var storePath string
	switch kind {
	case LogStoreWAL:
		dir := filepath.Join(c.dir, walDir)
		storePath = filepath.Join(dir, walMetaFile)
		switch fi, err := os.Stat(storePath); {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return res, damaged(storePath, err)
		case !fi.Mode().IsRegular():
			return res, damaged(storePath, errors.New("not a regular file"))
		default:
			res.hasDB = true
			if err := c.checkWAL(dir, &res); err != nil {
				return res, err
			}
		}
	case LogStoreSegments:
		dir := filepath.Join(c.dir, segmentsDir)
		storePath = filepath.Join(dir, seglog.StableFile)
		switch fi, err := os.Stat(dir); {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return res, damaged(dir, err)
		case !fi.IsDir():
			return res, damaged(dir, errors.New("not a directory"))
		default:
			// The term and vote are in the stable file, which raft writes
			// before it stores any entry: what counts, as raft.db does,
			// is whether it is there.
			if _, err := os.Stat(storePath); err == nil {
				res.hasDB = true
			}
			if err := c.checkSegments(dir, &res); err != nil {
				return res, err
			}
		}
	default:
		storePath = filepath.Join(c.dir, raftDBFile)
		switch fi, err := os.Stat(storePath); {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return res, damaged(storePath, err)
		case !fi.Mode().IsRegular():
			return res, damaged(storePath, errors.New("not a regular file"))
		default:
			res.hasDB = true
			if err := c.checkDB(storePath, &res); err != nil {
				return res, err
			}
		}
	}
	if err := c.checkSnapshots(&res); err != nil {
		return res, err
	}
	if !res.hasDB && res.snapshots > 0 {
		// The store would be created empty: the member would forget its
		// term and its vote, and vote again in a term it voted in.
		return res, damaged(storePath, errors.New("the file is missing but snapshots are there"))
	}
	if res.lastIndex > res.snapshotIndex && res.tailStart > res.snapshotIndex+1 {
		newest := fmt.Sprintf("the newest snapshot ends at entry %d", res.snapshotIndex)
		if res.snapshots == 0 {
			newest = "there is no snapshot"
		}
		return res, damaged(storePath, fmt.Errorf("log entries are missing between entry %d and entry %d, and raft needs every entry after its newest snapshot (%s)", res.snapshotIndex, res.tailStart, newest))
	}
	if c.log != nil {
		c.log.Info("raft store checked", "log_store", string(kind), "entries", res.entries, "first_index", res.firstIndex, "last_index", res.lastIndex,
			"snapshots", res.snapshots, "snapshot_index", res.snapshotIndex, "snapshot_bytes", res.snapshotBytes, "took", time.Since(start).Round(time.Microsecond))
	}
	return res, nil
}

// checkEntry checks a decoded entry's type and, with verifyEntry, its
// checksum.
func (c storeCheck) checkEntry(l *raft.Log) error {
	if err := checkEntryType(l); err != nil {
		return err
	}
	if c.verifyEntry != nil {
		return c.verifyEntry(l)
	}
	return nil
}

// count records an intact entry, found after those counted before it:
// where the log starts, ends, and where its last run of consecutive
// entries starts.
func (r *storeCheckResult) count(index uint64) {
	if r.entries == 0 {
		r.firstIndex = index
	}
	if r.entries == 0 || index != r.lastIndex+1 {
		r.tailStart = index
	}
	r.entries++
	r.lastIndex = index
}

// checkSegments checks seglog's files in dir (the segments directory):
// every record of every segment, read as seglog.Open reads it (its
// checksum, its index, the segments following each other), each entry
// decoded and checked as checkEntries checks raft-boltdb's; and the
// stable file. A torn last append is not damage: Open cuts it away.
func (c storeCheck) checkSegments(dir string, res *storeCheckResult) error {
	_, _, err := seglog.Check(dir, func(l *raft.Log) error {
		if err := c.checkEntry(l); err != nil {
			return err
		}
		res.count(l.Index)
		return nil
	})
	if err != nil {
		return segmentsDamage(dir, err)
	}
	return nil
}

// segmentsDamage is a seglog error as a *DamagedStoreError, naming the
// damaged file (or dir, for an error that does not name one).
func segmentsDamage(dir string, err error) error {
	var de *seglog.DamageError
	if !errors.As(err, &de) {
		return damaged(dir, err)
	}
	if de.Offset >= 0 {
		return damaged(de.Path, fmt.Errorf("at offset %d: %w", de.Offset, de.Cause))
	}
	return damaged(de.Path, de.Cause)
}

// checkDB checks raft.db: steps 1 and 2 above.
func (c storeCheck) checkDB(path string, res *storeCheckResult) (err error) {
	if err := checkBoltFile(path); err != nil {
		return damaged(path, err)
	}
	// The structure check leaves bbolt nothing to trip over; should it miss
	// something, a panic or a fault on this goroutine is still an error.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = damaged(path, fmt.Errorf("bbolt could not read it: %v", r))
		}
	}()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, PreLoadFreelist: true, Timeout: time.Second})
	if err != nil {
		return damaged(path, err)
	}
	defer db.Close()
	return db.View(func(tx *bbolt.Tx) error {
		var first error
		n := 0
		for err := range tx.Check() { // drained to the end: the check's goroutine must finish
			if n++; first == nil {
				first = err
			}
		}
		if n > 0 {
			more := ""
			if n > 1 {
				more = fmt.Sprintf(" (and %d more inconsistencies)", n-1)
			}
			return damaged(path, fmt.Errorf("bbolt consistency check: %v%s", first, more))
		}
		conf, err := bucket(tx, boltConfBucket)
		if err != nil {
			return damaged(path, err)
		}
		if err := checkStable(conf); err != nil {
			return damaged(path, err)
		}
		logs, err := bucket(tx, boltLogsBucket)
		if err != nil {
			return damaged(path, err)
		}
		if err := c.checkEntries(logs, res); err != nil {
			return damaged(path, err)
		}
		return nil
	})
}

// bucket returns the top-level bucket name, nil if there is none (a store
// raft-boltdb created but never wrote to).
func bucket(tx *bbolt.Tx, name []byte) (*bbolt.Bucket, error) {
	if b := tx.Bucket(name); b != nil {
		return b, nil
	}
	if k, _ := tx.Cursor().Seek(name); bytes.Equal(k, name) {
		return nil, fmt.Errorf("%q is not a bucket", name)
	}
	return nil, nil
}

func checkStable(conf *bbolt.Bucket) error {
	if conf == nil {
		return nil
	}
	for _, k := range [][]byte{keyCurrentTerm, keyLastVoteTerm} {
		if v := conf.Get(k); v != nil && len(v) != 8 {
			return fmt.Errorf("stable store value %s is %d bytes, want 8", k, len(v))
		}
	}
	_ = conf.Get(keyLastVoteCand) // any bytes will do; reading it is the check
	return nil
}

// checkEntries reads every log entry once, in index order.
func (c storeCheck) checkEntries(logs *bbolt.Bucket, res *storeCheckResult) error {
	if logs == nil {
		return nil
	}
	// raft-boltdb decodes each entry with a new decoder of a zero
	// MsgpackHandle; one decoder reset for each entry decodes the same.
	dec := codec.NewDecoderBytes(nil, &codec.MsgpackHandle{})
	cur := logs.Cursor()
	for k, v := cur.First(); k != nil; k, v = cur.Next() {
		if len(k) != 8 {
			return fmt.Errorf("log key %x is not an index", k)
		}
		index := binary.BigEndian.Uint64(k)
		if v == nil {
			return fmt.Errorf("log entry %d is a bucket", index)
		}
		var l raft.Log
		dec.ResetBytes(v)
		if err := dec.Decode(&l); err != nil {
			return fmt.Errorf("log entry %d cannot be decoded: %v", index, err)
		}
		if l.Index != index {
			return fmt.Errorf("log entry %d says it is entry %d", index, l.Index)
		}
		if err := c.checkEntry(&l); err != nil {
			return fmt.Errorf("log entry %d: %v", index, err)
		}
		res.count(index)
	}
	return nil
}

// checkEntryType checks that raft knows the entry's type and, for the
// membership entries it decodes at start, that it can decode them.
func checkEntryType(l *raft.Log) (err error) {
	switch l.Type {
	case raft.LogCommand, raft.LogNoop, raft.LogBarrier:
		return nil
	case raft.LogConfiguration:
		defer func() {
			if r := recover(); r != nil { // raft.DecodeConfiguration panics on bad data
				err = fmt.Errorf("configuration: %v", r)
			}
		}()
		raft.DecodeConfiguration(l.Data)
		return nil
	case raft.LogAddPeerDeprecated, raft.LogRemovePeerDeprecated:
		var peers [][]byte
		if err := codec.NewDecoderBytes(l.Data, &codec.MsgpackHandle{}).Decode(&peers); err != nil {
			return fmt.Errorf("peers: %v", err)
		}
		return nil
	}
	return fmt.Errorf("unknown entry type %d", l.Type)
}

// snapshotMeta is what raft's FileSnapshotStore writes to meta.json.
type snapshotMeta struct {
	raft.SnapshotMeta
	CRC []byte
}

// checkSnapshots checks every snapshot directory: step 3 above.
func (c storeCheck) checkSnapshots(res *storeCheckResult) error {
	dir := filepath.Join(c.dir, snapshotsDir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return damaged(dir, err)
	}
	var store *raft.FileSnapshotStore
	var newest *raft.SnapshotMeta
	for _, e := range entries {
		// raft ignores files and unfinished snapshots (it never opens
		// them, and removes nothing either).
		if !e.IsDir() || strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		metaPath := filepath.Join(dir, e.Name(), snapshotMetaFile)
		meta, err := readSnapshotMeta(metaPath)
		if err != nil {
			return damaged(metaPath, err)
		}
		if meta.ID != e.Name() {
			return damaged(metaPath, fmt.Errorf("it names snapshot %q", meta.ID))
		}
		if meta.Version < raft.SnapshotVersionMin || meta.Version > raft.SnapshotVersionMax {
			return damaged(metaPath, fmt.Errorf("snapshot version %d is not one raft reads", meta.Version))
		}
		if store == nil {
			if store, err = raft.NewFileSnapshotStoreWithLogger(c.dir, 2, hclog.NewNullLogger()); err != nil {
				return damaged(dir, err)
			}
		}
		statePath := filepath.Join(dir, e.Name(), snapshotStateFile)
		_, rc, err := store.Open(meta.ID)
		if err != nil {
			return damaged(statePath, err)
		}
		n, err := io.Copy(io.Discard, rc)
		rc.Close()
		if err != nil {
			return damaged(statePath, err)
		}
		if n != meta.Size {
			return damaged(statePath, fmt.Errorf("%d bytes, its meta.json says %d", n, meta.Size))
		}
		res.snapshots++
		res.snapshotBytes += n
		if newest == nil || newerSnapshot(&meta.SnapshotMeta, newest) {
			newest = &meta.SnapshotMeta
		}
	}
	if newest != nil {
		res.snapshotIndex = newest.Index
	}
	return nil
}

func readSnapshotMeta(path string) (*snapshotMeta, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var m snapshotMeta
	if err := json.NewDecoder(f).Decode(&m); err != nil {
		return nil, err
	}
	return &m, nil
}

// newerSnapshot orders snapshots as raft's FileSnapshotStore lists them.
func newerSnapshot(a, b *raft.SnapshotMeta) bool {
	if a.Term != b.Term {
		return a.Term > b.Term
	}
	if a.Index != b.Index {
		return a.Index > b.Index
	}
	return a.ID > b.ID
}
