package raftstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/types"
	"go.etcd.io/bbolt"

	"github.com/bagkeeper/bagkeeper/raftstore/seglog"
)

// LogStore names the store a member keeps its raft log in.
type LogStore string

const (
	// LogStoreWAL is raft-wal: append-only segment files in the raft
	// directory's wal/, with one fsync per append.
	LogStoreWAL LogStore = "wal"
	// LogStoreBoltDB is raft-boltdb: the B+tree file raft.db, with a bbolt
	// transaction (two fsyncs) per append.
	LogStoreBoltDB LogStore = "boltdb"
	// LogStoreSegments is seglog: segment files in the raft directory's
	// segments/, one write and one fdatasync per append, nothing
	// preallocated.
	LogStoreSegments LogStore = "segments"
)

// DefaultLogStore is the store a new data dir gets when nothing says
// otherwise: seglog, one write and one fdatasync per append (raft-boltdb
// does a bbolt transaction with two), which commits as fast as etcd does
// (BENCHMARKS.md) and passes the same crash tests as raft-boltdb: kill -9
// during appends, torn final records, damaged files, a full disk that gets
// space back. raft-wal v0.4.0 does not: it preallocates 64 MiB segment
// files, so a member on a smaller volume cannot start; a segment rotation
// that fails on a full disk leaves it refusing every append ("segment is
// sealed") until a restart, or for good when recording the seal in its
// meta file is what failed (or a crash came between sealing and recording
// it: the store check then refuses to start on it, see checkWAL); and when
// raft cuts the end of a follower's log, v0.4.0 seals the segment without
// its index and cannot read it after a restart (hashicorp/raft-wal#31,
// fixed upstream after v0.4.0): the member cannot start again. A data dir
// made with raft-boltdb keeps it (chooseLogStore).
const DefaultLogStore = LogStoreSegments

// ParseLogStore parses a --log-store value.
func ParseLogStore(s string) (LogStore, error) {
	switch LogStore(s) {
	case LogStoreWAL, LogStoreBoltDB, LogStoreSegments:
		return LogStore(s), nil
	}
	return "", fmt.Errorf("log store %q: want %q, %q or %q", s, LogStoreBoltDB, LogStoreWAL, LogStoreSegments)
}

// The names of the stores in a raft directory.
const (
	walDir      = "wal"
	walMetaFile = "wal-meta.db" // raft-wal's metadb.FileName
	segmentsDir = "segments"
)

// chooseLogStore says which store the raft directory dir uses: the one it
// was created with, whatever is asked for now (a member never converts its
// log), or, in a directory with none, the one asked for. why says how
// it was chosen, for the log.
//
// A raft.db that is there counts even if raft never wrote to it: a member
// that ignored it would leave it there, and the next start would find it
// and choose boltdb again, on a directory whose state is in wal/. So does
// an empty segments/ directory: seglog makes it when it first opens.
func chooseLogStore(dir string, want LogStore) (kind LogStore, why string, err error) {
	if want == "" {
		want = DefaultLogStore
	}
	hasBolt, err := exists(filepath.Join(dir, raftDBFile))
	if err != nil {
		return "", "", err
	}
	hasWAL, err := exists(filepath.Join(dir, walDir, walMetaFile))
	if err != nil {
		return "", "", err
	}
	// seglog makes its directory when it opens, before anything else.
	hasSegments, err := exists(filepath.Join(dir, segmentsDir))
	if err != nil {
		return "", "", err
	}
	var found []string
	var has LogStore
	if hasBolt {
		found, has = append(found, raftDBFile), LogStoreBoltDB
	}
	if hasWAL {
		found, has = append(found, filepath.Join(walDir, walMetaFile)), LogStoreWAL
	}
	if hasSegments {
		found, has = append(found, segmentsDir+"/"), LogStoreSegments
	}
	switch {
	case len(found) > 1:
		return "", "", damaged(dir, fmt.Errorf("%s are there; which holds this member's log is not known", strings.Join(found, " and ")))
	case len(found) == 1:
		if want == has {
			return has, "the data dir was created with it", nil
		}
		return has, fmt.Sprintf("the data dir was created with it (%s asked for; a data dir keeps its log store)", want), nil
	}
	return want, "new data dir: the one asked for", nil
}

func exists(path string) (bool, error) {
	_, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// raftStores are the stores raft keeps its log and its term and vote in.
type raftStores struct {
	kind   LogStore
	path   string // raft.db, or the wal directory
	logs   raft.LogStore
	stable raft.StableStore
	close  func() error
}

func (s *raftStores) Close() error {
	if s == nil || s.close == nil {
		return nil
	}
	return s.close()
}

// openStores opens the store of kind in the raft directory dir, creating it
// if it is not there. segmentSize, if not 0, is raft-wal's or seglog's
// segment size.
//
// With raft-wal, the WAL is the stable store too: it keeps raft's term and
// vote in its meta file (a bbolt file it fsyncs on every change, as
// raft-boltdb does), beside the list of its segments. One store is one
// thing to open, check, close and move away; a separate raft.db for a few
// keys would bring back the second store and make the choice of store by
// what is in the directory ambiguous.
func openStores(dir string, kind LogStore, segmentSize int, logger hclog.Logger) (st *raftStores, err error) {
	switch kind {
	case LogStoreBoltDB:
		path := filepath.Join(dir, raftDBFile)
		bolt, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: &bbolt.Options{Timeout: time.Second}})
		if err != nil {
			// The store check read it: this is more likely a lock or an
			// I/O error than damage.
			return nil, fmt.Errorf("raft store %s cannot be opened (%v): if it is damaged, move the data dir away and restart; this member then rejoins with an empty disk and gets its data from its peers", path, err)
		}
		return &raftStores{kind: kind, path: path, logs: bolt, stable: bolt, close: bolt.Close}, nil
	case LogStoreWAL:
		path := filepath.Join(dir, walDir)
		if err := os.MkdirAll(path, 0o700); err != nil {
			return nil, err
		}
		// The store check has read every file raft-wal reads at open; a
		// panic is still an error, not a crash loop.
		// raft-wal's Close leaves its meta file open (v0.4.0): the store
		// holds on to it and closes it after the WAL.
		meta := &metadb.BoltMetaDB{}
		defer func() {
			if r := recover(); r != nil {
				_ = meta.Close()
				err = damaged(path, fmt.Errorf("raft-wal could not open it: %v", r))
			}
		}()
		// A segment size of 0 is raft-wal's default (64 MiB).
		w, err := wal.Open(path, wal.WithLogger(logger.Named("wal")), wal.WithMetaStore(meta), wal.WithSegmentSize(segmentSize))
		if err != nil {
			_ = meta.Close()
			if errors.Is(err, types.ErrCorrupt) {
				return nil, damaged(path, err)
			}
			// A full disk (a new segment is preallocated), a lock: not damage.
			return nil, fmt.Errorf("raft store %s cannot be opened: %w", path, err)
		}
		closeBoth := func() error {
			return errors.Join(w.Close(), meta.Close())
		}
		return &raftStores{kind: kind, path: path, logs: w, stable: w, close: closeBoth}, nil
	case LogStoreSegments:
		// As with raft-wal, the one store keeps the log and the term and
		// vote (in segments/stable). The store check has read every file
		// Open reads; what Open finds damaged is damage all the same.
		path := filepath.Join(dir, segmentsDir)
		st, err := seglog.Open(path, seglog.Options{SegmentSize: int64(segmentSize)})
		if err != nil {
			if de := (*seglog.DamageError)(nil); errors.As(err, &de) {
				return nil, segmentsDamage(path, err)
			}
			// A full disk (cutting a torn append), a permission: not damage.
			return nil, fmt.Errorf("raft store %s cannot be opened: %w", path, err)
		}
		return &raftStores{kind: kind, path: path, logs: st, stable: st, close: st.Close}, nil
	}
	return nil, fmt.Errorf("unknown log store %q", kind)
}
