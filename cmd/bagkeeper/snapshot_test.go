package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bagkeeper/bagkeeper/raftstore"
	"github.com/bagkeeper/bagkeeper/raftstore/backup"
	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/state/statetest"
	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

func snapshotFile(t *testing.T) string {
	t.Helper()
	s := statetest.New(t, "web")
	s.Must(state.EnsureRelationOp("replicas", "web-peers", true, "", ""))
	s.Must(state.ClaimUnitOp("web-0/aaaa", "web-0", 0, 3))
	s.Must(state.UpdateBagOp(0, "web/0", map[string]string{"a": "1", "b": "2"}))
	s.Must(state.UpdateCharmStateOp("web/0", map[string]string{"token": "t"}))
	snap, err := backup.New(backup.Header{Term: 3}, s.State())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "web.snap")
	if _, err := backup.WriteFile(path, snap, false); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSnapshotStatusSaysWhatAFileHoldsAndRefusesADamagedOne: status (and
// verify) print the counts of a good file, and exit 1 with a clear message
// for a flipped byte or a truncated file.
func TestSnapshotStatusSaysWhatAFileHoldsAndRefusesADamagedOne(t *testing.T) {
	path := snapshotFile(t)
	e, out, errb := testEnv(nil)
	if code := runMain(e, []string{"snapshot", "status", path}); code != 0 {
		t.Fatalf("exit %d: %s", code, errb)
	}
	for _, want := range []string{"checksum OK", "application   web", "cluster id    cluster-web", "units         1 (1 active)", "relations     1", "bags          1", "keys          2", "charm states  1 (1 keys)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status does not say %q:\n%s", want, out)
		}
	}
	e, out, _ = testEnv(nil)
	if code := runMain(e, []string{"snapshot", "verify", "--format", "json", path}); code != 0 {
		t.Fatalf("verify --format json: exit %d", code)
	}
	var js struct {
		App    string         `json:"app"`
		Counts map[string]int `json:"counts"`
		SHA    string         `json:"sha256"`
	}
	if err := json.Unmarshal(out.Bytes(), &js); err != nil || js.App != "web" || js.Counts["bags"] != 1 || len(js.SHA) != 64 {
		t.Fatalf("json %s: %+v %v", out, js, err)
	}

	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	flipped := filepath.Join(t.TempDir(), "flipped.snap")
	c := append([]byte(nil), b...)
	c[len(c)/2] ^= 1
	if err := os.WriteFile(flipped, c, 0o600); err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(t.TempDir(), "truncated.snap")
	if err := os.WriteFile(truncated, b[:len(b)-40], 0o600); err != nil {
		t.Fatal(err)
	}
	for file, says := range map[string]string{flipped: "snapshot file is damaged: its SHA-256 is", truncated: "truncated"} {
		e, _, errb := testEnv(nil)
		if code := runMain(e, []string{"snapshot", "status", file}); code != 1 || !strings.Contains(errb.String(), says) {
			t.Errorf("%s: exit %d, stderr %q; want 1 and %q", filepath.Base(file), code, errb, says)
		}
	}
}

// TestSnapshotRestoreRefusesAUsedDirAnotherAppAndADamagedFile, and stages
// a good file into an empty dir.
func TestSnapshotRestoreRefusesAUsedDirAnotherAppAndADamagedFile(t *testing.T) {
	path := snapshotFile(t)
	used := t.TempDir()
	if err := os.WriteFile(filepath.Join(used, "identity.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	damaged := filepath.Join(t.TempDir(), "damaged.snap")
	_ = os.WriteFile(damaged, b[:len(b)-1], 0o600)
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{path}, 2, "--data-dir is required"},
		{[]string{"--data-dir", used, path}, 1, "is not empty"},
		{[]string{"--data-dir", filepath.Join(t.TempDir(), "new"), "--app", "db", path}, 1, `the snapshot is of application "web", not "db"`},
		{[]string{"--data-dir", filepath.Join(t.TempDir(), "new"), damaged}, 1, "truncated"},
	} {
		e, _, errb := testEnv(nil)
		if code := runMain(e, append([]string{"snapshot", "restore"}, c.args...)); code != c.code || !strings.Contains(errb.String(), c.says) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, errb, c.code, c.says)
		}
	}
	dir := filepath.Join(t.TempDir(), "new")
	e, out, errb := testEnv(nil)
	if code := runMain(e, []string{"snapshot", "restore", "--data-dir", dir, "--app", "web", path}); code != 0 {
		t.Fatalf("exit %d: %s", code, errb)
	}
	hdr, st, _, err := backup.ReadFile(filepath.Join(dir, raftstore.RestoreFile))
	if err != nil {
		t.Fatal(err)
	}
	if st.ClusterID() == "cluster-web" || hdr.RestoredFrom != "cluster-web" || !strings.Contains(out.String(), "new cluster id "+st.ClusterID()) {
		t.Fatalf("staged cluster %s from %s; output %s", st.ClusterID(), hdr.RestoredFrom, out)
	}
	if st.CharmState("web/0").Value("token") != "t" {
		t.Fatal("the staged state lost the charm state")
	}
}

// TestSnapshotSaveReassemblesAStreamOfManyPieces: a large file arrives in
// pieces of 1 MiB; what save writes is the file, byte for byte, and it
// reports the bytes written on stderr.
func TestSnapshotSaveReassemblesAStreamOfManyPieces(t *testing.T) {
	s := statetest.New(t, "web")
	s.Must(state.EnsureRelationOp("replicas", "web-peers", true, "", ""))
	for i := range 12 {
		s.Must(state.ClaimUnitOp(fmt.Sprintf("web-%d/x", i), fmt.Sprintf("web-%d", i), int64(i), 12))
		s.Must(state.UpdateBagOp(0, fmt.Sprintf("web/%d", i), map[string]string{"blob": strings.Repeat(fmt.Sprint(i%10), 500<<10)}))
	}
	snap, err := backup.New(backup.Header{}, s.State())
	if err != nil {
		t.Fatal(err)
	}
	var file bytes.Buffer
	if _, _, err := snap.Write(&file); err != nil {
		t.Fatal(err)
	}
	whole := file.Bytes()
	if len(whole) < snapshotProgressFrom {
		t.Fatalf("the file has only %d bytes", len(whole))
	}
	var pieces []*adminpb.SnapshotChunk
	for rest := whole; len(rest) > 0; {
		n := min(len(rest), 1<<20)
		pieces = append(pieces, &adminpb.SnapshotChunk{Data: rest[:n]})
		rest = rest[n:]
	}
	var stderr bytes.Buffer
	r := &chunkReader{buf: pieces[0].GetData(), total: int64(len(whole)), stderr: &stderr, last: time.Now()}
	i := 1
	r.next = func() (*adminpb.SnapshotChunk, error) {
		if i == len(pieces) {
			return nil, io.EOF
		}
		i++
		return pieces[i-1], nil
	}
	path := filepath.Join(t.TempDir(), "big.snap")
	if _, _, err := backup.WriteStream(path, r, false); err != nil {
		t.Fatal(err)
	}
	r.report(true)
	got, _ := os.ReadFile(path)
	if !bytes.Equal(got, whole) {
		t.Fatalf("wrote %d bytes, not the %d of the stream", len(got), len(whole))
	}
	if want := fmt.Sprintf("%d of %d bytes written (100%%)", len(whole), len(whole)); !strings.Contains(stderr.String(), want) {
		t.Fatalf("stderr %q does not say %q", stderr.String(), want)
	}
}
