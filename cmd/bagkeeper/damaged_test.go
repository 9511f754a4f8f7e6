package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/bagkeeper/bagkeeper/raftstore"
)

// TestRunOnDamagedStoreExitsWithStatus1 starts `bagkeeper run` on a data
// dir whose raft.db was cut short (on which bbolt panics, or faults on an
// address past the end of the file: a crash with a stack trace and exit
// status 2): it must exit with status 1 and say which file is damaged and
// what to do.
func TestRunOnDamagedStoreExitsWithStatus1(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "web-0")
	d, err := raftstore.OpenDataDir(dataDir, "web", "web-0")
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	db := filepath.Join(d.RaftPath(), "raft.db")
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: db})
	if err != nil {
		t.Fatal(err)
	}
	var logs []*raft.Log
	for i := uint64(1); i <= 2000; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogNoop, Data: make([]byte, 200)})
	}
	err = bolt.StoreLogs(logs)
	bolt.Close()
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(db, fi.Size()/2); err != nil {
		t.Fatal(err)
	}

	// GOMEMLIMIT set: the test process's memory limit is left alone.
	e, out, errb := testEnv(map[string]string{"GOMEMLIMIT": "off"})
	code := runMain(e, []string{"run", "--app", "web", "--pod-name", "web-0", "--data-dir", dataDir,
		"--bind", "127.0.0.1:0", "--advertise", "127.0.0.1:7400", "--http-bind", "", "--insecure", "--log-format", "text"})
	stderr := errb.String()
	want := "bagkeeper run: error: raft store " + db + " cannot be opened: "
	if code != 1 || !strings.Contains(stderr, want) || !strings.Contains(stderr, "; move the data dir away to rejoin as a new member\n") {
		t.Fatalf("exit status %d, stderr:\n%s\nwant status 1 and an error starting %q", code, stderr, want)
	}
	for _, bad := range []string{"panic", "goroutine "} {
		if strings.Contains(stderr+out.String(), bad) {
			t.Fatalf("the output mentions %q:\n%s", bad, stderr)
		}
	}
}
