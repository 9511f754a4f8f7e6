package backup_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bagkeeper/bagkeeper/raftstore/backup"
	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/state/statetest"
)

// sample is a state with a relation, bags, two units (one holding the
// lease), charm state and a cursor.
func sample(t *testing.T) *state.State {
	t.Helper()
	s := statetest.New(t, "web")
	s.Must(state.EnsureRelationOp("replicas", "web-peers", true, "", ""))
	s.Must(state.EnsureRelationOp("db", "pgsql", false, "pg", "database"))
	s.Must(state.ClaimUnitOp("web-0/aaaa", "web-0", 0, 3))
	s.Must(state.ClaimUnitOp("web-1/bbbb", "web-1", 1, 3))
	s.Must(state.UpdateBagOp(0, "web/0", map[string]string{"colour": "blue", "address": "10.0.0.1"}))
	s.Must(state.UpdateBagOp(1, "web", map[string]string{"password": strings.Repeat("x", 3000)}))
	s.Must(state.UpdateBagOp(1, "pg/0", map[string]string{"host": "pg-0"}))
	s.Must(state.UpdateCharmStateOp("web/0", map[string]string{"token": "t0", "k": "v"}))
	s.Must(state.SetCursorOp("web/1", []byte("cursor-1")))
	s.Must(state.ClaimLeaseOp("web/0", "web-0/aaaa", int64(time.Hour)))
	return s.State()
}

func encode(t *testing.T, st *state.State) []byte {
	t.Helper()
	snap, err := backup.New(backup.Header{Term: 7, Member: "web-0/aaaa", Time: statetest.T0}, st)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	n, _, err := snap.Write(&b)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(b.Len()) || n != snap.Size() {
		t.Fatalf("wrote %d bytes, buffer holds %d, Size says %d", n, b.Len(), snap.Size())
	}
	return b.Bytes()
}

func writeTemp(t *testing.T, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "snap.db")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRoundTripKeepsTheStateAndTheHeader(t *testing.T) {
	st := sample(t)
	b := encode(t, st)
	if !bytes.HasPrefix(b, []byte(backup.Magic)) {
		t.Fatalf("the file starts with %q", b[:8])
	}
	hdr, got, sum, err := backup.ReadFile(writeTemp(t, b))
	if err != nil {
		t.Fatal(err)
	}
	if hdr.App != "web" || hdr.ClusterID != "cluster-web" || hdr.Index != st.Index() || hdr.Term != 7 || !hdr.Time.Equal(statetest.T0) || hdr.Member != "web-0/aaaa" {
		t.Fatalf("header %+v", hdr)
	}
	if hdr.StateVersion != state.SnapshotVersion || hdr.BodyLength <= 0 {
		t.Fatalf("header %+v", hdr)
	}
	if !bytes.Equal(sum[:], b[len(b)-32:]) {
		t.Fatal("the checksum returned is not the file's")
	}
	h1, err1 := state.HashState(got)
	h2, err2 := state.HashState(st)
	if err1 != nil || err2 != nil || !bytes.Equal(h1, h2) {
		t.Fatal("the state read back differs from the one written")
	}
	if c := got.Count(); c.Relations != 2 || c.Bags != 3 || c.Keys != 4 || c.Units != 2 || c.ActiveUnits != 2 || c.CharmStates != 1 || c.CharmKeys != 2 {
		t.Fatalf("counts %+v", c)
	}
	// Writing is deterministic: the same state and header, the same bytes.
	if !bytes.Equal(b, encode(t, st)) {
		t.Fatal("the same state encoded twice gives different files")
	}
}

func TestEveryFlippedByteIsRefused(t *testing.T) {
	b := encode(t, sample(t))
	for i := range b {
		c := bytes.Clone(b)
		c[i] ^= 0x10
		_, _, err := backup.Verify(bytes.NewReader(c))
		if err == nil {
			t.Fatalf("byte %d of %d flipped: accepted", i, len(b))
		}
		if !errors.Is(err, backup.ErrCorrupt) && !errors.Is(err, backup.ErrNotSnapshot) {
			t.Fatalf("byte %d flipped: %v, neither ErrCorrupt nor ErrNotSnapshot", i, err)
		}
	}
}

func TestATruncatedOrGrownFileIsRefused(t *testing.T) {
	b := encode(t, sample(t))
	for _, n := range []int{0, 3, 8, 15, 16, 40, len(b) / 2, len(b) - 33, len(b) - 32, len(b) - 1} {
		_, _, err := backup.Verify(bytes.NewReader(b[:n]))
		if err == nil {
			t.Fatalf("cut to %d of %d bytes: accepted", n, len(b))
		}
		if n >= 16 && !strings.Contains(err.Error(), "truncated") && !errors.Is(err, backup.ErrCorrupt) {
			t.Errorf("cut to %d: %v", n, err)
		}
	}
	if _, _, err := backup.Verify(bytes.NewReader(append(bytes.Clone(b), 0))); !errors.Is(err, backup.ErrCorrupt) || !strings.Contains(err.Error(), "after its checksum") {
		t.Fatalf("a byte appended: %v", err)
	}
	if _, _, _, err := backup.ReadFile(writeTemp(t, b[:len(b)-1])); !errors.Is(err, backup.ErrCorrupt) {
		t.Fatalf("ReadFile of a truncated file: %v", err)
	}
}

func TestWrongMagicOrVersionIsRefused(t *testing.T) {
	b := encode(t, sample(t))
	other := bytes.Clone(b)
	copy(other, "SQLite f")
	if _, _, err := backup.Verify(bytes.NewReader(other)); !errors.Is(err, backup.ErrNotSnapshot) || !strings.Contains(err.Error(), "magic") {
		t.Fatalf("wrong magic: %v", err)
	}
	newer := bytes.Clone(b)
	binary.BigEndian.PutUint32(newer[len(backup.Magic):], backup.FormatVersion+1)
	if _, _, err := backup.Verify(bytes.NewReader(newer)); !errors.Is(err, backup.ErrNotSnapshot) || !strings.Contains(err.Error(), "format version 2") {
		t.Fatalf("a newer version: %v", err)
	}
	if _, _, err := backup.Verify(strings.NewReader("")); !errors.Is(err, backup.ErrNotSnapshot) {
		t.Fatalf("an empty file: %v", err)
	}
}

func TestWriteFileNeverReplacesWithoutOverwriteNorLeavesATempFile(t *testing.T) {
	st := sample(t)
	snap, err := backup.New(backup.Header{}, st)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "backup.snap")
	sum, err := backup.WriteFile(path, snap, false)
	if err != nil {
		t.Fatal(err)
	}
	_, _, got, err := backup.ReadFile(path)
	if err != nil || got != sum {
		t.Fatalf("read back: %v, sum %x want %x", err, got, sum)
	}
	var exists *backup.Exists
	if _, err := backup.WriteFile(path, snap, false); !errors.As(err, &exists) {
		t.Fatalf("a second write without overwrite: %v", err)
	}
	if _, err := backup.WriteFile(path, snap, true); err != nil {
		t.Fatalf("with overwrite: %v", err)
	}
	// A stream that is not a whole file never gets the name.
	b := encode(t, st)
	bad := filepath.Join(dir, "bad.snap")
	if _, _, err := backup.WriteStream(bad, bytes.NewReader(b[:len(b)-10]), false); !errors.Is(err, backup.ErrCorrupt) {
		t.Fatalf("a truncated stream: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "backup.snap" {
		t.Fatalf("the directory holds %v", entries)
	}
	hdr, _, err := backup.WriteStream(filepath.Join(dir, "good.snap"), bytes.NewReader(b), false)
	if err != nil || hdr.App != "web" {
		t.Fatalf("a whole stream: %+v %v", hdr, err)
	}
}

func TestForNewGroupKeepsTheDataUnderANewClusterID(t *testing.T) {
	st := sample(t)
	now := statetest.T0.Add(time.Minute)
	r := st.ForNewGroup("new-id", now)
	if r.ClusterID() != "new-id" || st.ClusterID() != "cluster-web" {
		t.Fatalf("cluster ids: restored %q, original %q", r.ClusterID(), st.ClusterID())
	}
	if r.Index() != st.Index() || r.Count() != st.Count() {
		t.Fatalf("index %d→%d, counts %+v→%+v", st.Index(), r.Index(), st.Count(), r.Count())
	}
	if l := r.Lease(); l.Member != "" || l.Expires.After(now) || l.Unit != "web/0" || l.Epoch != st.Lease().Epoch {
		t.Fatalf("lease %+v", l)
	}
	if u, ok := r.Unit("web/1"); !ok || u.State != state.UnitActive || u.Member != "web-1/bbbb" {
		t.Fatalf("unit %+v", u)
	}
	if got := r.CharmState("web/0").Value("token"); got != "t0" {
		t.Fatalf("charm state token %q", got)
	}
	if string(r.Cursor("web/1")) != "cursor-1" {
		t.Fatal("cursor lost")
	}
	// It encodes and decodes like any state.
	if _, _, _, err := backup.ReadFile(writeTemp(t, encode(t, r))); err != nil {
		t.Fatal(err)
	}
}
