package raftstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/transport"
)

// testStore is a raft directory written by raft-boltdb and raft's
// FileSnapshotStore the way a member's is, and what it holds.
type testStore struct {
	dir          string // the raft directory
	entries      map[uint64][32]byte
	first, last  uint64
	snapIndex    uint64
	snapID       string
	snapContent  []byte
	currentTerm  uint64
	lastVoteCand []byte
}

func (s *testStore) db() string { return filepath.Join(s.dir, raftDBFile) }
func (s *testStore) snapFile(name string) string {
	return filepath.Join(s.dir, snapshotsDir, s.snapID, name)
}

// entryDigest stands in for a checksum of an entry: everything raft
// decodes from it.
func entryDigest(l *raft.Log) [32]byte {
	h := sha256.New()
	var b [8]byte
	for _, v := range []uint64{l.Index, l.Term, uint64(l.Type), uint64(l.AppendedAt.UnixNano()), uint64(len(l.Data))} {
		binary.BigEndian.PutUint64(b[:], v)
		h.Write(b[:])
	}
	h.Write(l.Data)
	h.Write(l.Extensions)
	var d [32]byte
	copy(d[:], h.Sum(nil))
	return d
}

// verifyDigests is a verifyEntry hook that knows every entry of s: what a
// per-entry checksum will tell.
func (s *testStore) verifyDigests(l *raft.Log) error {
	want, ok := s.entries[l.Index]
	if !ok {
		return errors.New("no such entry was written")
	}
	if entryDigest(l) != want {
		return errors.New("checksum mismatch")
	}
	return nil
}

var testConfiguration = raft.Configuration{Servers: []raft.Server{
	{Suffrage: raft.Voter, ID: "app-0/aaaaaaaaaa", Address: "127.0.0.1:7400"},
	{Suffrage: raft.Voter, ID: "app-1/bbbbbbbbbb", Address: "127.0.0.2:7400"},
	{Suffrage: raft.Nonvoter, ID: "app-2/cccccccccc", Address: "127.0.0.3:7400"},
}}

// writeTestStore writes a raft directory in dir with entries 1 … n (the
// first and every 500th a configuration, a no-op now and then, commands of
// 50 to 450 bytes otherwise), a snapshot at n/2, and the log compacted up
// to n/4, as raft leaves it with trailing logs.
func writeTestStore(t testing.TB, dir string, n int) *testStore {
	t.Helper()
	s := &testStore{dir: dir, entries: map[uint64][32]byte{}, currentTerm: 7, lastVoteCand: []byte("app-1/bbbbbbbbbb")}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: s.db()})
	if err != nil {
		t.Fatal(err)
	}
	defer bolt.Close()
	r := rand.New(rand.NewPCG(uint64(n), 1))
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	term := func(i uint64) uint64 { return 1 + i*6/uint64(n+1) }
	var batch []*raft.Log
	for i := uint64(1); i <= uint64(n); i++ {
		l := &raft.Log{Index: i, Term: term(i), Type: raft.LogCommand, AppendedAt: at.Add(time.Duration(i) * time.Millisecond)}
		switch {
		case i == 1 || i%500 == 0:
			l.Type, l.Data = raft.LogConfiguration, raft.EncodeConfiguration(testConfiguration)
		case i%97 == 0:
			l.Type = raft.LogNoop
		default:
			l.Data = make([]byte, 50+r.IntN(400))
			for j := range l.Data {
				l.Data[j] = byte(r.Uint32())
			}
		}
		s.entries[i] = entryDigest(l)
		if batch = append(batch, l); len(batch) == 64 || i == uint64(n) {
			if err := bolt.StoreLogs(batch); err != nil {
				t.Fatal(err)
			}
			batch = nil
		}
	}
	s.first, s.last = 1, uint64(n)
	for _, kv := range []struct {
		k []byte
		v uint64
	}{{keyCurrentTerm, s.currentTerm}, {keyLastVoteTerm, s.currentTerm}} {
		if err := bolt.SetUint64(kv.k, kv.v); err != nil {
			t.Fatal(err)
		}
	}
	if err := bolt.Set(keyLastVoteCand, s.lastVoteCand); err != nil {
		t.Fatal(err)
	}

	s.snapIndex = uint64(n / 2)
	s.snapContent = make([]byte, 64<<10)
	for j := range s.snapContent {
		s.snapContent[j] = byte(r.Uint32())
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	_, trans := raft.NewInmemTransport("")
	sink, err := snaps.Create(raft.SnapshotVersionMax, s.snapIndex, term(s.snapIndex), testConfiguration, 1, trans)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write(s.snapContent); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	s.snapID = sink.ID()
	if n >= 4 {
		if err := bolt.DeleteRange(1, uint64(n/4)); err != nil {
			t.Fatal(err)
		}
		for i := uint64(1); i <= uint64(n/4); i++ {
			delete(s.entries, i)
		}
		s.first = uint64(n/4) + 1
	}
	return s
}

// copyDir copies the regular files and directories of src to dst.
func copyDir(t testing.TB, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o750)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// clone copies the store into a new directory.
func (s *testStore) clone(t testing.TB) *testStore {
	t.Helper()
	c := *s
	c.dir = filepath.Join(t.TempDir(), "raft")
	copyDir(t, s.dir, c.dir)
	return &c
}

// damageMessage is the shape of the error for a damaged store at path.
func damageMessage(path string) *regexp.Regexp {
	return regexp.MustCompile(`^raft store ` + regexp.QuoteMeta(path) + ` cannot be opened: .+; move the data dir away to rejoin as a new member$`)
}

// wantDamaged checks that err is a damaged store at path whose cause
// mentions cause.
func wantDamaged(t *testing.T, err error, path, cause string) {
	t.Helper()
	var de *DamagedStoreError
	if !errors.As(err, &de) {
		t.Fatalf("got %v, want a damaged store at %s", err, path)
	}
	if de.Path != path || !damageMessage(path).MatchString(err.Error()) {
		t.Fatalf("got %q, want the message for %s", err, path)
	}
	if !strings.Contains(de.Cause.Error(), cause) {
		t.Fatalf("got cause %q, want it to mention %q", de.Cause, cause)
	}
	for _, bad := range []string{"panic", "goroutine "} {
		if strings.Contains(err.Error(), bad) {
			t.Fatalf("the error mentions %q: %v", bad, err)
		}
	}
}

// boltMetaOf returns the meta page bbolt uses for the file at path.
func boltMetaOf(t *testing.T, path string) boltMeta {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	bf := &boltFile{f: f, size: uint64(fi.Size())}
	if err := bf.readMeta(); err != nil {
		t.Fatal(err)
	}
	return bf.meta
}

func overwriteAt(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// entryOffset returns where the stored value of the entry index of s lies
// in raft.db, found by encoding the entry as raft-boltdb does, and where
// the entry's data starts in it.
func entryOffset(t *testing.T, s *testStore, index uint64) (value, data int64) {
	t.Helper()
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: s.db(), BoltOptions: &bbolt.Options{ReadOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	err = bolt.GetLog(index, &l)
	bolt.Close()
	if err != nil {
		t.Fatal(err)
	}
	enc := encodeEntry(t, &l)
	file, err := os.ReadFile(s.db())
	if err != nil {
		t.Fatal(err)
	}
	off := bytes.Index(file, enc)
	if off < 0 || bytes.Contains(file[off+1:], enc) {
		t.Fatalf("entry %d is not stored exactly once in %s", index, s.db())
	}
	return int64(off), int64(bytes.Index(enc, l.Data))
}

// rewriteDB changes raft.db of s through bbolt.
func rewriteDB(t *testing.T, s *testStore, fn func(tx *bbolt.Tx) error) {
	t.Helper()
	db, err := bbolt.Open(s.db(), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
}

func encodeEntry(t *testing.T, l *raft.Log) []byte {
	t.Helper()
	// As raft-boltdb encodes: times in the old format.
	h := &codec.MsgpackHandle{}
	h.TimeNotBuiltin = true
	var enc []byte
	if err := codec.NewEncoderBytes(&enc, h).Encode(l); err != nil {
		t.Fatal(err)
	}
	return enc
}

func indexKey(i uint64) []byte {
	return binary.BigEndian.AppendUint64(nil, i)
}

func TestStoreCheckAcceptsHealthyStores(t *testing.T) {
	t.Run("empty directory", func(t *testing.T) {
		res, err := storeCheck{dir: t.TempDir()}.run()
		if err != nil || res.hasDB || res.entries != 0 || res.snapshots != 0 {
			t.Fatalf("got %+v, %v", res, err)
		}
	})
	t.Run("a raft.db raft-boltdb created and never wrote", func(t *testing.T) {
		dir := t.TempDir()
		bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, raftDBFile)})
		if err != nil {
			t.Fatal(err)
		}
		bolt.Close()
		if res, err := (storeCheck{dir: dir}).run(); err != nil || !res.hasDB || res.entries != 0 {
			t.Fatalf("got %+v, %v", res, err)
		}
	})
	s := writeTestStore(t, filepath.Join(t.TempDir(), "raft"), 2000)
	t.Run("entries, a snapshot, a compacted log", func(t *testing.T) {
		var seen uint64
		res, err := storeCheck{dir: s.dir, verifyEntry: func(l *raft.Log) error {
			seen++
			return s.verifyDigests(l)
		}}.run()
		if err != nil {
			t.Fatal(err)
		}
		want := storeCheckResult{hasDB: true, entries: 1500, firstIndex: 501, lastIndex: 2000, tailStart: 501,
			snapshots: 1, snapshotIndex: 1000, snapshotBytes: 64 << 10}
		if res != want || seen != 1500 {
			t.Fatalf("got %+v and %d entries verified, want %+v and 1500", res, seen, want)
		}
	})
	t.Run("a gap before the snapshot", func(t *testing.T) {
		// A member that installed a snapshot keeps its older entries, and
		// the leader's entries after the snapshot follow a gap.
		g := s.clone(t)
		rewriteDB(t, g, func(tx *bbolt.Tx) error {
			c := tx.Bucket(boltLogsBucket).Cursor()
			for k, _ := c.Seek(indexKey(600)); k != nil && binary.BigEndian.Uint64(k) <= 1000; k, _ = c.Next() {
				if err := c.Delete(); err != nil {
					return err
				}
			}
			return nil
		})
		res, err := storeCheck{dir: g.dir}.run()
		if err != nil || res.tailStart != 1001 {
			t.Fatalf("got %+v, %v", res, err)
		}
	})
	t.Run("an unfinished snapshot", func(t *testing.T) {
		u := s.clone(t)
		tmp := filepath.Join(u.dir, snapshotsDir, "9-9999-1.tmp")
		if err := os.MkdirAll(tmp, 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tmp, snapshotMetaFile), []byte("{"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := (storeCheck{dir: u.dir}).run(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestStoreCheckRefusesDamagedRaftDB(t *testing.T) {
	base := writeTestStore(t, filepath.Join(t.TempDir(), "raft"), 2000)
	size := func(s *testStore) int64 {
		fi, err := os.Stat(s.db())
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, s *testStore)
		cause  string
	}{
		{"truncated to half", func(t *testing.T, s *testStore) {
			if err := os.Truncate(s.db(), size(s)/2); err != nil {
				t.Fatal(err)
			}
		}, "it was truncated"},
		{"truncated within the meta pages", func(t *testing.T, s *testStore) {
			if err := os.Truncate(s.db(), 5000); err != nil {
				t.Fatal(err)
			}
		}, "shorter than its two meta pages"},
		{"empty", func(t *testing.T, s *testStore) {
			if err := os.Truncate(s.db(), 0); err != nil {
				t.Fatal(err)
			}
		}, "the file is empty"},
		{"zeroed", func(t *testing.T, s *testStore) {
			if err := os.WriteFile(s.db(), make([]byte, size(s)), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "neither meta page is valid"},
		{"free list page zeroed", func(t *testing.T, s *testStore) {
			m := boltMetaOf(t, s.db())
			overwriteAt(t, s.db(), int64(m.freelist*m.pageSize), make([]byte, m.pageSize))
		}, "free list: page"},
		{"root page zeroed", func(t *testing.T, s *testStore) {
			m := boltMetaOf(t, s.db())
			overwriteAt(t, s.db(), int64(m.root*m.pageSize), make([]byte, m.pageSize))
		}, fmt.Sprintf("page %d holds page 0", boltMetaOf(t, base.db()).root)},
		{"an entry that does not decode", func(t *testing.T, s *testStore) {
			off, _ := entryOffset(t, s, 1234)
			overwriteAt(t, s.db(), off, []byte{0xc1}) // a byte msgpack never uses
		}, "log entry 1234 cannot be decoded"},
		{"an entry under another index", func(t *testing.T, s *testStore) {
			rewriteDB(t, s, func(tx *bbolt.Tx) error {
				return tx.Bucket(boltLogsBucket).Put(indexKey(1500), encodeEntry(t, &raft.Log{Index: 1501, Term: 5, Type: raft.LogNoop}))
			})
		}, "log entry 1500 says it is entry 1501"},
		{"an entry of an unknown type", func(t *testing.T, s *testStore) {
			rewriteDB(t, s, func(tx *bbolt.Tx) error {
				return tx.Bucket(boltLogsBucket).Put(indexKey(1500), encodeEntry(t, &raft.Log{Index: 1500, Term: 5, Type: 42}))
			})
		}, "log entry 1500: unknown entry type 42"},
		{"a configuration that does not decode", func(t *testing.T, s *testStore) {
			rewriteDB(t, s, func(tx *bbolt.Tx) error {
				return tx.Bucket(boltLogsBucket).Put(indexKey(1500), encodeEntry(t, &raft.Log{Index: 1500, Term: 5, Type: raft.LogConfiguration, Data: []byte{0xc1, 1, 2}}))
			})
		}, "log entry 1500: configuration: failed to decode configuration"},
		{"a short current term", func(t *testing.T, s *testStore) {
			rewriteDB(t, s, func(tx *bbolt.Tx) error { return tx.Bucket(boltConfBucket).Put(keyCurrentTerm, []byte{1, 2, 3}) })
		}, "stable store value CurrentTerm is 3 bytes, want 8"},
		{"a short last vote term", func(t *testing.T, s *testStore) {
			rewriteDB(t, s, func(tx *bbolt.Tx) error { return tx.Bucket(boltConfBucket).Put(keyLastVoteTerm, []byte{}) })
		}, "stable store value LastVoteTerm is 0 bytes, want 8"},
		{"a bucket where an entry belongs", func(t *testing.T, s *testStore) {
			rewriteDB(t, s, func(tx *bbolt.Tx) error {
				_, err := tx.Bucket(boltLogsBucket).CreateBucket(indexKey(7))
				return err
			})
		}, "log entry 7 is a bucket"},
		{"entries missing after the snapshot", func(t *testing.T, s *testStore) {
			rewriteDB(t, s, func(tx *bbolt.Tx) error {
				b := tx.Bucket(boltLogsBucket)
				for i := uint64(1001); i <= 1100; i++ {
					if err := b.Delete(indexKey(i)); err != nil {
						return err
					}
				}
				return nil
			})
		}, "log entries are missing between entry 1000 and entry 1101"},
		{"missing, the snapshots there", func(t *testing.T, s *testStore) {
			if err := os.Remove(s.db()); err != nil {
				t.Fatal(err)
			}
		}, "the file is missing but snapshots are there"},
		{"an entry whose checksum does not match", func(t *testing.T, s *testStore) {
			off, data := entryOffset(t, s, 1234)
			overwriteAt(t, s.db(), off+data+10, []byte("garbled"))
		}, "log entry 1234: checksum mismatch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := base.clone(t)
			tc.damage(t, s)
			_, err := storeCheck{dir: s.dir, verifyEntry: s.verifyDigests}.run()
			wantDamaged(t, err, s.db(), tc.cause)
		})
	}
}

func TestStoreCheckRefusesDamagedSnapshots(t *testing.T) {
	base := writeTestStore(t, filepath.Join(t.TempDir(), "raft"), 200)
	for _, tc := range []struct {
		name   string
		file   string
		damage func(t *testing.T, path string)
		cause  string
	}{
		{"state truncated", snapshotStateFile, func(t *testing.T, p string) {
			if err := os.Truncate(p, 1000); err != nil {
				t.Fatal(err)
			}
		}, "CRC mismatch"},
		{"state zeroed", snapshotStateFile, func(t *testing.T, p string) {
			if err := os.WriteFile(p, make([]byte, 64<<10), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "CRC mismatch"},
		{"state with a byte changed", snapshotStateFile, func(t *testing.T, p string) {
			b, _ := os.ReadFile(p)
			b[len(b)/3] ^= 0x10
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "CRC mismatch"},
		{"state missing", snapshotStateFile, func(t *testing.T, p string) {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
		}, "no such file"},
		{"meta truncated", snapshotMetaFile, func(t *testing.T, p string) {
			if err := os.Truncate(p, 40); err != nil {
				t.Fatal(err)
			}
		}, "unexpected EOF"},
		{"meta zeroed", snapshotMetaFile, func(t *testing.T, p string) {
			fi, _ := os.Stat(p)
			if err := os.WriteFile(p, make([]byte, fi.Size()), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "invalid character"},
		{"meta of another snapshot", snapshotMetaFile, func(t *testing.T, p string) {
			b, _ := os.ReadFile(p)
			id := filepath.Base(filepath.Dir(p))
			if err := os.WriteFile(p, bytes.Replace(b, []byte(id), []byte("1-2-3"), 1), 0o600); err != nil {
				t.Fatal(err)
			}
		}, `it names snapshot "1-2-3"`},
		{"meta with another checksum", snapshotMetaFile, func(t *testing.T, p string) {
			b, _ := os.ReadFile(p)
			re := regexp.MustCompile(`"CRC":"[^"]*"`)
			if !re.Match(b) {
				t.Fatalf("no CRC in %s", b)
			}
			if err := os.WriteFile(p, re.ReplaceAll(b, []byte(`"CRC":"AAAAAAAAAAA="`)), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "CRC mismatch"},
		{"meta of an unknown version", snapshotMetaFile, func(t *testing.T, p string) {
			b, _ := os.ReadFile(p)
			if err := os.WriteFile(p, bytes.Replace(b, []byte(`"Version":1`), []byte(`"Version":9`), 1), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "snapshot version 9"},
		{"meta missing", snapshotMetaFile, func(t *testing.T, p string) {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
		}, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := base.clone(t)
			path := s.snapFile(tc.file)
			tc.damage(t, path)
			// The CRC mismatch of a changed meta.json is found in state.bin,
			// the file raft's FileSnapshotStore verifies.
			if tc.file == snapshotMetaFile && tc.cause == "CRC mismatch" {
				path = s.snapFile(snapshotStateFile)
			}
			_, err := storeCheck{dir: s.dir}.run()
			wantDamaged(t, err, path, tc.cause)
		})
	}
}

// TestStoreCheckSurvivesRandomOverwrites overwrites raft.db with random
// bytes at several places, seed after seed. Each store must either be
// refused with the error, or pass and then open through raft as Open
// opens it, with every entry, the snapshot and the stable store as they
// were written (the bytes fell in free space or unused parts of pages).
// Nothing may panic.
//
// The check gets a hook that knows every entry, standing in for a per-entry
// checksum: without one, bytes that land inside an entry's data or term
// still decode and cannot be told from the real thing. The test counts how
// often that happens.
func TestStoreCheckSurvivesRandomOverwrites(t *testing.T) {
	base := writeTestStore(t, filepath.Join(t.TempDir(), "raft"), 2000)
	pristine, err := os.ReadFile(base.db())
	if err != nil {
		t.Fatal(err)
	}
	var refused, passed, refusedOnlyByHook int
	for seed := uint64(1); seed <= 40; seed++ {
		r := rand.New(rand.NewPCG(seed, 0xb01d))
		b := bytes.Clone(pristine)
		var where []string
		for range 8 {
			off, n := r.IntN(len(b)), 1+r.IntN(32)
			for j := off; j < min(off+n, len(b)); j++ {
				b[j] = byte(r.Uint32())
			}
			where = append(where, fmt.Sprintf("%d+%d", off, n))
		}
		s := base.clone(t)
		if err := os.WriteFile(s.db(), b, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := storeCheck{dir: s.dir, verifyEntry: s.verifyDigests}.run()
		if err != nil {
			refused++
			var de *DamagedStoreError
			if !errors.As(err, &de) || de.Path != s.db() || !damageMessage(s.db()).MatchString(err.Error()) {
				t.Fatalf("seed %d (bytes overwritten at %s): got %v, want the damaged store error for %s", seed, strings.Join(where, ", "), err, s.db())
			}
			if _, errNoHook := (storeCheck{dir: s.dir}).run(); errNoHook == nil {
				refusedOnlyByHook++
			}
			t.Logf("seed %d: refused: %v", seed, de.Cause)
			continue
		}
		passed++
		if d := openAndCompare(t, s); d != "" {
			t.Fatalf("seed %d (bytes overwritten at %s): the check passed, but %s", seed, strings.Join(where, ", "), d)
		}
		t.Logf("seed %d: passed, and raft opens it with every entry intact", seed)
	}
	t.Logf("%d refused, %d passed with data intact; of the refused, %d only by the per-entry hook", refused, passed, refusedOnlyByHook)
	if refused == 0 || passed == 0 {
		t.Fatalf("%d refused and %d passed: the seeds no longer cover both outcomes", refused, passed)
	}
}

type discardFSM struct{}

func (discardFSM) Apply(*raft.Log) any                 { return nil }
func (discardFSM) Snapshot() (raft.FSMSnapshot, error) { return nil, errors.New("not in this test") }
func (discardFSM) Restore(r io.ReadCloser) error {
	_, err := io.Copy(io.Discard, r)
	r.Close()
	return err
}

// openAndCompare opens the store as Open does (raft-boltdb writable, raft
// started on it) and compares what it holds with what was written. It
// returns the first difference.
func openAndCompare(t *testing.T, s *testStore) string {
	t.Helper()
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: s.db(), BoltOptions: &bbolt.Options{Timeout: time.Second}})
	if err != nil {
		return "raft-boltdb cannot open it: " + err.Error()
	}
	defer bolt.Close()
	snaps, err := raft.NewFileSnapshotStoreWithLogger(s.dir, 2, hclog.NewNullLogger())
	if err != nil {
		return err.Error()
	}
	rc := raft.DefaultConfig()
	rc.LocalID = "app-9/zzzzzzzzzz" // not a voter: it never stands for election
	rc.Logger = hclog.NewNullLogger()
	_, trans := raft.NewInmemTransport("")
	r, err := raft.NewRaft(rc, discardFSM{}, bolt, bolt, snaps, trans)
	if err != nil {
		return "raft does not start on it: " + err.Error()
	}
	defer func() { _ = r.Shutdown().Error() }()
	if got := r.Stats()["last_snapshot_index"]; got != fmt.Sprint(s.snapIndex) {
		return fmt.Sprintf("raft restored snapshot %s, want %d", got, s.snapIndex)
	}
	if term, err := bolt.GetUint64(keyCurrentTerm); err != nil || term != s.currentTerm {
		return fmt.Sprintf("current term %d (%v), want %d", term, err, s.currentTerm)
	}
	if cand, err := bolt.Get(keyLastVoteCand); err != nil || !bytes.Equal(cand, s.lastVoteCand) {
		return fmt.Sprintf("last vote for %q (%v), want %q", cand, err, s.lastVoteCand)
	}
	if first, _ := bolt.FirstIndex(); first != s.first {
		return fmt.Sprintf("first index %d, want %d", first, s.first)
	}
	if last, _ := bolt.LastIndex(); last != s.last {
		return fmt.Sprintf("last index %d, want %d", last, s.last)
	}
	for i := s.first; i <= s.last; i++ {
		var l raft.Log
		if err := bolt.GetLog(i, &l); err != nil {
			return fmt.Sprintf("entry %d: %v", i, err)
		}
		if entryDigest(&l) != s.entries[i] {
			return fmt.Sprintf("entry %d differs from what was written", i)
		}
	}
	return ""
}

// TestOpenRefusesDamagedStoreWithoutPanicking damages the data dir of a
// real member, with either log store, in the ways that made bbolt, raft-wal
// and raft panic in Open (or, for raft-wal, silently drop acknowledged
// entries), and opens it again: an error naming the file, never a panic.
// The same data dir undamaged opens, with its data.
func TestOpenRefusesDamagedStoreWithoutPanicking(t *testing.T) {
	for _, kind := range []LogStore{LogStoreBoltDB, LogStoreWAL, LogStoreSegments} {
		t.Run(string(kind), func(t *testing.T) { testOpenRefusesDamagedStore(t, kind) })
	}
}

// testSegmentSize is raft-wal's segment size in tests that want sealed
// segments after a few dozen entries.
const testSegmentSize = 4096

func withLogStore(kind LogStore) nodeOpt {
	return func(c *Config) { c.LogStore, c.walSegmentSize = kind, testSegmentSize }
}

func testOpenRefusesDamagedStore(t *testing.T, kind LogStore) {
	c := newTestCluster(t, "app")
	n := c.start("app-0", withExpect(1), withLogStore(kind))
	l := c.leader(10 * time.Second)
	rel := mustApply(t, l.node, state.EnsureRelationOp("peers", "p", true, "", "")).GetOps()[0].GetRelationId()
	for i := range 40 {
		mustApply(t, l.node, state.UpdateBagOp(rel, "app", map[string]string{"k": fmt.Sprint(i)}))
	}
	if err := l.node.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		mustApply(t, l.node, state.UpdateBagOp(rel, "app", map[string]string{"after": fmt.Sprint(i)}))
	}
	if kind == LogStoreWAL || kind == LogStoreSegments {
		// Sealed segments, and a last one of many appends.
		dir, segments := filepath.Join(n.dir, raftDir, walDir), walSegments
		if kind == LogStoreSegments {
			dir, segments = filepath.Join(n.dir, raftDir, segmentsDir), segFiles
		}
		for i := 0; ; i++ {
			if segs := segments(t, dir); len(segs) >= 3 && walUsed(t, filepath.Join(dir, segs[len(segs)-1])) >= testSegmentSize/2 {
				break
			}
			if i == 1000 {
				t.Fatal("no sealed segments after 1000 appends")
			}
			mustApply(t, l.node, state.UpdateBagOp(rel, "app", map[string]string{"fill": fmt.Sprint(i)}))
		}
	}
	c.stop(n.pod)
	snapDirs, err := os.ReadDir(filepath.Join(n.dir, raftDir, snapshotsDir))
	if err != nil || len(snapDirs) != 1 {
		t.Fatalf("want one snapshot, got %v (%v)", snapDirs, err)
	}
	snap := filepath.Join(raftDir, snapshotsDir, snapDirs[0].Name())

	open := func(t *testing.T, dataDir string) (*Node, error) {
		ln, err := transport.Listen(c.ip()+":0", "", transport.Config{App: "app"})
		if err != nil {
			t.Fatal(err)
		}
		cfg := Config{App: "app", Pod: "app-0", DataDir: dataDir, Advertise: ln.Advertise(),
			RaftLayer: ln.RaftLayer(), GRPCListener: ln.GRPCListener(), Dial: ln.Dialer(),
			Discover: c.discover, Logger: slog.New(slog.DiscardHandler), LogStore: kind, walSegmentSize: testSegmentSize}
		node, err := Open(cfg)
		if err != nil {
			ln.Close()
			return nil, err
		}
		t.Cleanup(func() {
			_ = node.Shutdown(context.Background(), false)
			ln.Close()
		})
		return node, nil
	}
	type damageCase struct {
		name, file string
		damage     func(t *testing.T, path string)
	}
	var cases []damageCase
	switch kind {
	case LogStoreBoltDB:
		cases = []damageCase{
			{"raft.db truncated", filepath.Join(raftDir, raftDBFile), func(t *testing.T, p string) {
				fi, _ := os.Stat(p)
				if err := os.Truncate(p, fi.Size()/2); err != nil {
					t.Fatal(err)
				}
			}},
			{"raft.db free list zeroed", filepath.Join(raftDir, raftDBFile), func(t *testing.T, p string) {
				m := boltMetaOf(t, p)
				overwriteAt(t, p, int64(m.freelist*m.pageSize), make([]byte, m.pageSize))
			}},
			{"raft.db zeroed", filepath.Join(raftDir, raftDBFile), func(t *testing.T, p string) {
				fi, _ := os.Stat(p)
				if err := os.WriteFile(p, make([]byte, fi.Size()), 0o600); err != nil {
					t.Fatal(err)
				}
			}},
		}
	case LogStoreWAL:
		segs := walSegments(t, filepath.Join(n.dir, raftDir, walDir))
		if len(segs) < 3 {
			t.Fatalf("want sealed segments and a tail, got %v", segs)
		}
		sealed, tail := filepath.Join(raftDir, walDir, segs[len(segs)/2]), filepath.Join(raftDir, walDir, segs[len(segs)-1])
		meta := filepath.Join(raftDir, walDir, walMetaFile)
		random := func(t *testing.T, p string) {
			b := make([]byte, 256)
			_, _ = rand.NewChaCha8([32]byte{1}).Read(b)
			overwriteAt(t, p, walUsed(t, p)/2&^7, b)
		}
		zero := func(t *testing.T, p string) { overwriteAt(t, p, walUsed(t, p)/2&^7, make([]byte, 256)) }
		cases = []damageCase{
			{"wal meta truncated", meta, func(t *testing.T, p string) {
				if err := os.Truncate(p, 4096); err != nil { // the first of its two meta pages
					t.Fatal(err)
				}
			}},
			{"wal meta zeroed", meta, func(t *testing.T, p string) {
				fi, _ := os.Stat(p)
				if err := os.WriteFile(p, make([]byte, fi.Size()), 0o600); err != nil {
					t.Fatal(err)
				}
			}},
			{"wal sealed segment zeroed in the middle", sealed, zero},
			{"wal sealed segment overwritten in the middle", sealed, random},
			{"wal sealed segment missing", sealed, func(t *testing.T, p string) {
				if err := os.Remove(p); err != nil {
					t.Fatal(err)
				}
			}},
			{"wal last segment zeroed in the middle", tail, zero},
			{"wal last segment overwritten in the middle", tail, random},
			{"wal last segment header overwritten", tail, func(t *testing.T, p string) { overwriteAt(t, p, 0, []byte("not a segment")) }},
			{"wal last segment missing", tail, func(t *testing.T, p string) {
				if err := os.Remove(p); err != nil {
					t.Fatal(err)
				}
			}},
		}
	case LogStoreSegments:
		segs := segFiles(t, filepath.Join(n.dir, raftDir, segmentsDir))
		if len(segs) < 3 {
			t.Fatalf("want several segments, got %v", segs)
		}
		middle, tail := filepath.Join(raftDir, segmentsDir, segs[len(segs)/2]), filepath.Join(raftDir, segmentsDir, segs[len(segs)-1])
		random := func(t *testing.T, p string) {
			b := make([]byte, 64)
			_, _ = rand.NewChaCha8([32]byte{1}).Read(b)
			overwriteAt(t, p, walUsed(t, p)/3, b)
		}
		zero := func(t *testing.T, p string) { overwriteAt(t, p, walUsed(t, p)/3, make([]byte, 64)) }
		cases = []damageCase{
			{"segments middle segment zeroed in the middle", middle, zero},
			{"segments middle segment overwritten in the middle", middle, random},
			{"segments middle segment cut short", middle, func(t *testing.T, p string) {
				if err := os.Truncate(p, walUsed(t, p)-1); err != nil {
					t.Fatal(err)
				}
			}},
			{"segments middle segment missing", filepath.Join(raftDir, segmentsDir, segs[len(segs)/2+1]), func(t *testing.T, p string) {
				if err := os.Remove(filepath.Join(filepath.Dir(p), segs[len(segs)/2])); err != nil {
					t.Fatal(err)
				}
			}},
			{"segments last segment zeroed in the middle", tail, zero},
			{"segments last segment overwritten in the middle", tail, random},
			{"segments stable file damaged", filepath.Join(raftDir, segmentsDir, "stable"), func(t *testing.T, p string) {
				b, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				b[len(b)-1] ^= 0x20
				if err := os.WriteFile(p, b, 0o600); err != nil {
					t.Fatal(err)
				}
			}},
			{"segments stable file missing", filepath.Join(raftDir, segmentsDir, "stable"), func(t *testing.T, p string) {
				if err := os.Remove(p); err != nil {
					t.Fatal(err)
				}
			}},
		}
	}
	for _, tc := range append(cases, []damageCase{
		{"snapshot state corrupted", filepath.Join(snap, snapshotStateFile), func(t *testing.T, p string) {
			b, _ := os.ReadFile(p)
			b[len(b)/2] ^= 0xff
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"snapshot meta unreadable", filepath.Join(snap, snapshotMetaFile), func(t *testing.T, p string) {
			if err := os.WriteFile(p, []byte(`{"Version":1,"ID":`), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	}...) {
		t.Run(tc.name, func(t *testing.T) {
			dataDir := filepath.Join(t.TempDir(), "app-0")
			copyDir(t, n.dir, dataDir)
			path := filepath.Join(dataDir, tc.file)
			tc.damage(t, path)
			_, err := open(t, dataDir)
			var de *DamagedStoreError
			if !errors.As(err, &de) || de.Path != path || !damageMessage(path).MatchString(err.Error()) {
				t.Fatalf("got %v, want the damaged store error for %s", err, path)
			}
			// The data dir is not left locked: moved away, it is a new member.
			if err := os.Rename(dataDir, dataDir+".damaged"); err != nil {
				t.Fatal(err)
			}
			d, err := OpenDataDir(dataDir+".damaged", "app", "app-0")
			if err != nil {
				t.Fatalf("the damaged data dir is still locked: %v", err)
			}
			d.Close()
		})
	}
	t.Run("undamaged", func(t *testing.T) {
		dataDir := filepath.Join(t.TempDir(), "app-0")
		copyDir(t, n.dir, dataDir)
		node, err := open(t, dataDir)
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, "the last write back in the state", func() error {
			if b, _ := node.State().Bag(rel, "app"); b == nil || b.Data.Value("after") != "9" {
				return errors.New("not yet")
			}
			return nil
		})
	})
}

// walSegments lists the segment files of the wal directory dir, oldest
// first.
func walSegments(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.wal"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range m {
		out = append(out, filepath.Base(p))
	}
	slices.Sort(out)
	return out
}

// segFiles lists seglog's segment files in dir, oldest first.
func segFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range m {
		out = append(out, filepath.Base(p))
	}
	slices.Sort(out)
	return out
}

// walUsed is the length of a segment file up to its last byte that is not
// zero (the file is preallocated with zeros).
func walUsed(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return int64(len(bytes.TrimRight(b, "\x00")))
}

// BenchmarkStoreCheck measures the check on stores of a few thousand
// entries (of 50 to 450 bytes, half of them in a snapshot of 64 KiB too).
func BenchmarkStoreCheck(b *testing.B) {
	for _, n := range []int{1000, 4000, 16000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			s := writeTestStore(b, filepath.Join(b.TempDir(), "raft"), n)
			fi, err := os.Stat(s.db())
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			var res storeCheckResult
			for b.Loop() {
				if res, err = (storeCheck{dir: s.dir}).run(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(res.entries), "ns/entry")
			b.ReportMetric(float64(fi.Size())/(1<<20), "MiB-raft.db")
		})
	}
}
