package seglog

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func openStore(t *testing.T, dir string, opts Options) *Store {
	t.Helper()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func reopen(t *testing.T, s *Store) *Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return openStore(t, s.dir, s.opts)
}

// entry is entry i of term, with data that says so.
func entry(i, term uint64) *raft.Log {
	return &raft.Log{Index: i, Term: term, Type: raft.LogCommand, Data: fmt.Appendf(nil, "entry %d of term %d", i, term)}
}

func store(t *testing.T, s *Store, from, to, term uint64) {
	t.Helper()
	var logs []*raft.Log
	for i := from; i <= to; i++ {
		logs = append(logs, entry(i, term))
	}
	if err := s.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
}

// wantLog checks that the store holds exactly the entries from first to
// last, of term (or termOf(i) if set).
func wantLog(t *testing.T, s *Store, first, last uint64, termOf func(uint64) uint64) {
	t.Helper()
	f, _ := s.FirstIndex()
	l, _ := s.LastIndex()
	if f != first || l != last {
		t.Fatalf("entries %d to %d, want %d to %d", f, l, first, last)
	}
	for _, i := range []uint64{first - 1, last + 1} {
		var e raft.Log
		if err := s.GetLog(i, &e); i != 0 && !errors.Is(err, raft.ErrLogNotFound) {
			t.Fatalf("entry %d outside the log: %v, %+v", i, err, e)
		}
	}
	if last == 0 {
		return
	}
	for i := first; i <= last; i++ {
		var e raft.Log
		if err := s.GetLog(i, &e); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		want := entry(i, termOf(i))
		if e.Index != i || e.Term != want.Term || !bytes.Equal(e.Data, want.Data) {
			t.Fatalf("entry %d: got %d/%d %q, want term %d %q", i, e.Index, e.Term, e.Data, want.Term, want.Data)
		}
	}
}

func term(n uint64) func(uint64) uint64 { return func(uint64) uint64 { return n } }

func segmentsIn(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*"+segmentSuffix))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestEveryFieldRoundTrips(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, Options{})
	now := time.Now()
	logs := []*raft.Log{
		{Index: 5, Term: 3, Type: raft.LogCommand, Data: []byte("data"), Extensions: []byte("ext"), AppendedAt: now},
		{Index: 6, Term: 3, Type: raft.LogNoop},
		{Index: 7, Term: 1<<64 - 1, Type: raft.LogConfiguration, Data: bytes.Repeat([]byte{0xff, 0}, 70000), AppendedAt: time.Unix(-5, 7)},
		{Index: 8, Term: 4, Type: raft.LogBarrier, Extensions: []byte{0}},
	}
	check := func(s *Store) {
		for _, want := range logs {
			var got raft.Log
			if err := s.GetLog(want.Index, &got); err != nil {
				t.Fatal(err)
			}
			if got.Index != want.Index || got.Term != want.Term || got.Type != want.Type ||
				!bytes.Equal(got.Data, want.Data) || !bytes.Equal(got.Extensions, want.Extensions) || !got.AppendedAt.Equal(want.AppendedAt) {
				t.Fatalf("got %+v, want %+v", got, want)
			}
		}
	}
	if err := s.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	check(s)
	check(reopen(t, s))
}

func TestEntriesMustBeConsecutive(t *testing.T) {
	s := openStore(t, t.TempDir(), Options{})
	store(t, s, 10, 12, 1)
	for _, logs := range [][]*raft.Log{
		{entry(14, 1)},               // a gap
		{entry(12, 1)},               // again
		{entry(9, 1)},                // before
		{entry(13, 1), entry(15, 1)}, // a gap inside the batch
		{entry(13, 1), entry(13, 1)},
	} {
		if err := s.StoreLogs(logs); err == nil || !strings.Contains(err.Error(), "consecutive") {
			t.Fatalf("storing %d after 12: %v", logs[0].Index, err)
		}
	}
	wantLog(t, s, 10, 12, term(1))
	store(t, s, 13, 13, 1)
	wantLog(t, reopen(t, s), 10, 13, term(1))
}

func TestDeleteFromTheFront(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, Options{SegmentSize: 200})
	for i := uint64(1); i <= 40; i += 4 {
		store(t, s, i, i+3, 1)
	}
	segs := len(segmentsIn(t, dir))
	if segs < 4 {
		t.Fatalf("%d segments, want several", segs)
	}
	if err := s.DeleteRange(1, 17); err != nil {
		t.Fatal(err)
	}
	wantLog(t, s, 18, 40, term(1))
	if n := len(segmentsIn(t, dir)); n >= segs || n < 2 {
		t.Fatalf("%d segments after deleting the first 17 entries, %d before", n, segs)
	}
	s = reopen(t, s)
	// After a restart the store may start lower (the rest of the first
	// segment), never higher, and holds the same entries.
	if f, _ := s.FirstIndex(); f > 18 {
		t.Fatalf("first index %d after reopening", f)
	}
	f, _ := s.FirstIndex()
	wantLog(t, s, f, 40, term(1))
	if err := s.DeleteRange(f, 39); err != nil {
		t.Fatal(err)
	}
	wantLog(t, s, 40, 40, term(1))
	store(t, s, 41, 41, 2)
	s = reopen(t, s)
	if f, _ = s.FirstIndex(); f > 40 {
		t.Fatalf("first index %d after reopening", f)
	}
	wantLog(t, s, f, 41, func(i uint64) uint64 {
		if i == 41 {
			return 2
		}
		return 1
	})
}

func TestDeleteFromTheEnd(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, Options{SegmentSize: 200})
	for i := uint64(1); i <= 40; i += 4 {
		store(t, s, i, i+3, 1)
	}
	segs := segmentsIn(t, dir)
	// Cut in the middle of a segment, then at a segment's first entry.
	for _, min := range []uint64{31, 0} {
		if min == 0 {
			s = reopen(t, s)
			b := filepath.Base(segs[len(segs)/2])
			fmt.Sscanf(b, "%d", &min)
			if min <= 1 || min >= 31 {
				t.Fatalf("segment %s: want one that starts before 31", b)
			}
		}
		if err := s.DeleteRange(min, 40); err != nil {
			t.Fatal(err)
		}
		wantLog(t, s, 1, min-1, term(1))
		store(t, s, min, 40, 2)
		ft := func(i uint64) uint64 {
			if i >= min {
				return 2
			}
			return 1
		}
		wantLog(t, s, 1, 40, ft)
		s = reopen(t, s)
		wantLog(t, s, 1, 40, ft)
	}
}

func TestDeleteMiddleIsAnError(t *testing.T) {
	s := openStore(t, t.TempDir(), Options{})
	store(t, s, 1, 10, 1)
	if err := s.DeleteRange(3, 5); err == nil {
		t.Fatal("deleted from the middle")
	}
	wantLog(t, s, 1, 10, term(1))
}

func TestDeleteEverythingThenAppendElsewhere(t *testing.T) {
	for _, next := range []uint64{500, 3, 11} {
		t.Run(fmt.Sprint(next), func(t *testing.T) {
			dir := t.TempDir()
			s := openStore(t, dir, Options{SegmentSize: 100})
			store(t, s, 1, 10, 1)
			if err := s.DeleteRange(1, 10); err != nil {
				t.Fatal(err)
			}
			wantLog(t, s, 0, 0, nil)
			if n := len(segmentsIn(t, dir)); n != 0 {
				t.Fatalf("%d segment files left", n)
			}
			wantLog(t, reopen(t, s), 0, 0, nil)
			s = openStore(t, dir, Options{SegmentSize: 100})
			store(t, s, next, next+5, 2)
			wantLog(t, s, next, next+5, term(2))
			wantLog(t, reopen(t, s), next, next+5, term(2))
		})
	}
}

// TestATornLastAppendIsCutAway cuts the last segment short by every number
// of bytes of its last append's records, with and without garbage after
// it: the store opens with every entry before that append.
func TestATornLastAppendIsCutAway(t *testing.T) {
	base := t.TempDir()
	s := openStore(t, base, Options{})
	store(t, s, 1, 5, 1)
	store(t, s, 6, 8, 1)
	lastAppend := int(s.segs[0].offsets[5])
	s.Close()
	seg := segmentsIn(t, base)[0]
	full, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	for cut := 1; cut < len(full)-lastAppend; cut++ {
		for _, garbage := range [][]byte{nil, []byte("\x13\x00\x00\x80garbage that is not a record")} {
			dir := t.TempDir()
			b := append(append([]byte{}, full[:len(full)-cut]...), garbage...)
			if err := os.WriteFile(filepath.Join(dir, filepath.Base(seg)), b, 0o600); err != nil {
				t.Fatal(err)
			}
			if _, _, err := Check(dir, nil); err != nil {
				t.Fatalf("cut %d: check: %v", cut, err)
			}
			s, err := Open(dir, Options{})
			if err != nil {
				t.Fatalf("cut %d bytes, %d of garbage: %v", cut, len(garbage), err)
			}
			// Whole records of the torn append may remain; nothing
			// before it is lost.
			if l, _ := s.LastIndex(); l < 5 || l > 8 {
				t.Fatalf("cut %d: last index %d", cut, l)
			}
			l, _ := s.LastIndex()
			wantLog(t, s, 1, l, term(1))
			store(t, s, l+1, 9, 2)
			s.Close()
			s = openStore(t, dir, Options{})
			wantLog(t, s, 1, 9, func(i uint64) uint64 {
				if i > l {
					return 2
				}
				return 1
			})
			s.Close()
		}
	}
}

func wantDamage(t *testing.T, err error, path string) {
	t.Helper()
	var de *DamageError
	if !errors.As(err, &de) || de.Path != path {
		t.Fatalf("got %v, want damage in %s", err, path)
	}
}

func TestDamageIsAnErrorNamingTheFile(t *testing.T) {
	build := func(t *testing.T) (string, []string) {
		dir := t.TempDir()
		s := openStore(t, dir, Options{SegmentSize: 300})
		for i := uint64(1); i <= 60; i += 2 {
			store(t, s, i, i+1, 1)
		}
		s.Close()
		segs := segmentsIn(t, dir)
		if len(segs) < 3 {
			t.Fatalf("%d segments", len(segs))
		}
		return dir, segs
	}
	flip := func(t *testing.T, path string, at func(size int) int) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		b[at(len(b))] ^= 0x40
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, segs []string) string
	}{
		{"a byte flipped in a middle segment", func(t *testing.T, segs []string) string {
			p := segs[len(segs)/2]
			flip(t, p, func(n int) int { return n / 2 })
			return p
		}},
		{"a byte flipped in the last record of a middle segment", func(t *testing.T, segs []string) string {
			p := segs[len(segs)/2]
			flip(t, p, func(n int) int { return n - 1 })
			return p
		}},
		{"a byte flipped in the middle of the last segment", func(t *testing.T, segs []string) string {
			p := segs[len(segs)-1]
			flip(t, p, func(n int) int { return n / 3 })
			return p
		}},
		{"the first record's length changed in the last segment", func(t *testing.T, segs []string) string {
			p := segs[len(segs)-1]
			flip(t, p, func(int) int { return 1 })
			return p
		}},
		{"a middle segment missing", func(t *testing.T, segs []string) string {
			if err := os.Remove(segs[len(segs)/2]); err != nil {
				t.Fatal(err)
			}
			return segs[len(segs)/2+1]
		}},
		{"a middle segment cut short", func(t *testing.T, segs []string) string {
			p := segs[1]
			fi, _ := os.Stat(p)
			if err := os.Truncate(p, fi.Size()-3); err != nil {
				t.Fatal(err)
			}
			return p
		}},
		{"a segment file that is not one", func(t *testing.T, segs []string) string {
			p := filepath.Join(filepath.Dir(segs[0]), "12"+segmentSuffix)
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}},
		{"the stable file damaged", func(t *testing.T, segs []string) string {
			p := filepath.Join(filepath.Dir(segs[0]), StableFile)
			if err := os.WriteFile(p, []byte("\x00\x00\x00\x00\x01\x01\x01k"), 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, segs := build(t)
			path := tc.damage(t, segs)
			_, _, err := Check(dir, nil)
			wantDamage(t, err, path)
			s, err := Open(dir, Options{})
			if err == nil {
				s.Close()
			}
			wantDamage(t, err, path)
		})
	}
}

// faultyFile fails writes (after writing half of what it was given) and
// syncs while its store's fault is set.
type faultyFile struct {
	file
	fault        *atomic.Pointer[error]
	failTruncate *atomic.Bool
}

func (f faultyFile) err() error {
	if e := f.fault.Load(); e != nil {
		return *e
	}
	return nil
}

func (f faultyFile) WriteAt(b []byte, off int64) (int, error) {
	if err := f.err(); err != nil {
		n, _ := f.file.WriteAt(b[:len(b)/2], off)
		return n, err
	}
	return f.file.WriteAt(b, off)
}

func (f faultyFile) Truncate(size int64) error {
	if f.failTruncate != nil && f.failTruncate.Load() {
		return syscall.EIO
	}
	return f.file.Truncate(size)
}

func (f faultyFile) Sync() error {
	if err := f.err(); err != nil {
		return err
	}
	return f.file.Sync()
}

func TestAFailedAppendLeavesNothingAndTheNextOneWorks(t *testing.T) {
	for _, fault := range []error{syscall.ENOSPC, syscall.EIO} {
		t.Run(fault.Error(), func(t *testing.T) {
			dir := t.TempDir()
			var cur atomic.Pointer[error]
			opts := Options{SegmentSize: 300, openFile: func(path string, flag int) (file, error) {
				f, err := openOSFile(path, flag)
				if err != nil {
					return nil, err
				}
				return faultyFile{f, &cur, nil}, nil
			}}
			s := openStore(t, dir, opts)
			next := uint64(1)
			for round := range 12 {
				store(t, s, next, next+1, 1)
				next += 2
				segs := segmentsIn(t, dir)
				sizes := map[string]int64{}
				for _, p := range segs {
					fi, _ := os.Stat(p)
					sizes[p] = fi.Size()
				}
				cur.Store(&fault)
				err := s.StoreLogs([]*raft.Log{entry(next, 1), entry(next+1, 1)})
				if !errors.Is(err, fault) || !strings.Contains(err.Error(), dir) {
					t.Fatalf("round %d: append during the fault: %v", round, err)
				}
				for p, size := range sizes {
					if fi, _ := os.Stat(p); fi.Size() != size {
						t.Fatalf("round %d: %s is %d bytes after the failed append, was %d", round, p, fi.Size(), size)
					}
				}
				wantLog(t, s, 1, next-1, term(1))
				cur.Store(nil)
			}
			store(t, s, next, next+1, 1)
			wantLog(t, reopen(t, s), 1, next+1, term(1))
		})
	}
}

func TestReadsWhileAppending(t *testing.T) {
	s := openStore(t, t.TempDir(), Options{SegmentSize: 4096})
	store(t, s, 1, 1, 1)
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				// First before last: the front only moves forward and
				// the end only grows here, so last >= first unless the
				// window was read empty.
				first, _ := s.FirstIndex()
				last, _ := s.LastIndex()
				if last == 0 || last < first {
					continue
				}
				i := first + rand.Uint64N(last-first+1)
				var l raft.Log
				err := s.GetLog(i, &l)
				if errors.Is(err, raft.ErrLogNotFound) {
					continue // deleted from the front meanwhile
				}
				if err != nil || l.Index != i || !bytes.Equal(l.Data, entry(i, 1).Data) {
					errs <- fmt.Errorf("entry %d: %v %+v", i, err, l)
					return
				}
			}
		}()
	}
	for i := uint64(2); i < 400; i += 3 {
		store(t, s, i, i+2, 1)
		if i%60 == 2 {
			if err := s.DeleteRange(1, i/2); err != nil {
				t.Fatal(err)
			}
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestStableStore(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, Options{})
	if v, err := s.Get([]byte("LastVoteCand")); err != nil || len(v) != 0 {
		t.Fatalf("unset key: %q, %v", v, err)
	}
	if v, err := s.GetUint64([]byte("CurrentTerm")); err != nil || v != 0 {
		t.Fatalf("unset key: %d, %v", v, err)
	}
	for term := uint64(1); term <= 3; term++ {
		if err := s.SetUint64([]byte("CurrentTerm"), term); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Set([]byte("LastVoteCand"), []byte("app-1")); err != nil {
		t.Fatal(err)
	}
	// Changes after the first are written in place, in the file's two
	// slots: no new file, no growth (a full disk does not stop them).
	if fi, err := os.Stat(filepath.Join(dir, StableFile)); err != nil || fi.Size() != 2*stableSlotSize {
		t.Fatalf("stable file: %v, %v", fi, err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(m) != 0 {
		t.Fatalf("files left: %v", m)
	}
	s = reopen(t, s)
	if v, err := s.GetUint64([]byte("CurrentTerm")); err != nil || v != 3 {
		t.Fatalf("CurrentTerm %d, %v", v, err)
	}
	if v, err := s.Get([]byte("LastVoteCand")); err != nil || string(v) != "app-1" {
		t.Fatalf("LastVoteCand %q, %v", v, err)
	}
	s.Close()
	p := filepath.Join(dir, StableFile)
	good, _ := os.ReadFile(p)
	// Damage in either slot, the older one included, is damage.
	for _, at := range []int{20, stableSlotSize + 20, len(good) - 1} {
		b := append([]byte{}, good...)
		b[at] ^= 1
		os.WriteFile(p, b, 0o600)
		_, err := Open(dir, Options{})
		wantDamage(t, err, p)
	}
}

// TestAgainstAModel runs random sequences of appends, deletions from the
// front and the end, and reopenings against a slice of what the log should
// hold.
func TestAgainstAModel(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 8
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runModel(t, uint64(seed)) })
	}
}

func runModel(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 1))
	dir := t.TempDir()
	opts := Options{SegmentSize: int64(64 + r.IntN(600))}
	s := openStore(t, dir, opts)
	var model []*raft.Log             // the entries the log holds, in order
	written := map[uint64]*raft.Log{} // the last entry written at each index
	termNow := uint64(1)
	check := func(step int) {
		t.Helper()
		first, _ := s.FirstIndex()
		last, _ := s.LastIndex()
		if len(model) == 0 {
			if last != 0 {
				t.Fatalf("step %d: entries %d to %d, want none", step, first, last)
			}
			return
		}
		mf, ml := model[0].Index, model[len(model)-1].Index
		if last != ml || first != mf {
			t.Fatalf("step %d: entries %d to %d, want %d to %d", step, first, last, mf, ml)
		}
		for _, want := range model {
			var got raft.Log
			if err := s.GetLog(want.Index, &got); err != nil || got.Term != want.Term || !bytes.Equal(got.Data, want.Data) {
				t.Fatalf("step %d: entry %d: %v %+v, want %+v", step, want.Index, err, got, want)
			}
		}
	}
	doReopen := func() {
		s = reopen(t, s)
		// Entries deleted from the front may come back: the rest of the
		// first segment, as they were written.
		if first, _ := s.FirstIndex(); len(model) > 0 && first < model[0].Index {
			var back []*raft.Log
			for i := first; i < model[0].Index; i++ {
				back = append(back, written[i])
			}
			model = append(back, model...)
		}
	}
	for step := range 150 {
		switch op := r.IntN(10); {
		case op < 5 || len(model) == 0: // append
			next := uint64(1 + r.IntN(1000))
			if len(model) > 0 {
				next = model[len(model)-1].Index + 1
			}
			var batch []*raft.Log
			for i := range 1 + r.IntN(8) {
				l := entry(next+uint64(i), termNow)
				l.Data = append(l.Data, bytes.Repeat([]byte{'x'}, r.IntN(100))...)
				batch = append(batch, l)
			}
			if err := s.StoreLogs(batch); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			model = append(model, batch...)
			for _, l := range batch {
				written[l.Index] = l
			}
		case op < 7: // from the front
			first, _ := s.FirstIndex()
			k := r.IntN(len(model) + 1)
			max := model[0].Index + uint64(k) - 1
			if k == 0 {
				continue
			}
			if err := s.DeleteRange(first, max); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			model = model[k:]
		case op < 9: // from the end
			k := r.IntN(len(model))
			if err := s.DeleteRange(model[k].Index, model[len(model)-1].Index); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			model = model[:k]
			termNow++
		default:
			doReopen()
		}
		check(step)
	}
	doReopen()
	check(-1)
}

// TestAFailedAppendThatCannotBeCutIsCutBeforeTheNext: when cutting a failed
// append's bytes away fails too, they are cut before the next append, and
// do not come back as entries (or as damage) at the next open.
func TestAFailedAppendThatCannotBeCutIsCutBeforeTheNext(t *testing.T) {
	dir := t.TempDir()
	var cur atomic.Pointer[error]
	var noTruncate atomic.Bool
	s := openStore(t, dir, Options{openFile: func(path string, flag int) (file, error) {
		f, err := openOSFile(path, flag)
		if err != nil {
			return nil, err
		}
		return faultyFile{f, &cur, &noTruncate}, nil
	}})
	store(t, s, 1, 3, 1)
	fault := error(syscall.EIO)
	cur.Store(&fault)
	noTruncate.Store(true)
	var big []*raft.Log
	for i := uint64(4); i < 40; i++ {
		big = append(big, entry(i, 1))
	}
	if err := s.StoreLogs(big); !errors.Is(err, syscall.EIO) {
		t.Fatalf("append during the fault: %v", err)
	}
	cur.Store(nil)
	noTruncate.Store(false)
	store(t, s, 4, 4, 2)
	s.Close()
	if _, last, err := Check(dir, nil); err != nil || last != 4 {
		t.Fatalf("check: last %d, %v", last, err)
	}
	s = openStore(t, dir, Options{})
	wantLog(t, s, 1, 4, func(i uint64) uint64 {
		if i == 4 {
			return 2
		}
		return 1
	})
}

// TestAppendsReuseTheirBuffer checks that an append of one entry does not
// allocate for the entry's bytes: the store keeps its record buffer for
// the next append (the state machine's garbage per write is what a busy
// member's collector pays for).
func TestAppendsReuseTheirBuffer(t *testing.T) {
	s := openStore(t, t.TempDir(), Options{})
	data := bytes.Repeat([]byte{'x'}, 4096)
	next := uint64(1)
	appendOne := func() {
		if err := s.StoreLogs([]*raft.Log{{Index: next, Term: 1, Type: raft.LogCommand, Data: data}}); err != nil {
			t.Fatal(err)
		}
		next++
	}
	appendOne()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const n = 50
	for range n {
		appendOne()
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per >= uint64(len(data)) {
		t.Errorf("an append of a %d-byte entry allocated %d bytes", len(data), per)
	}
}
