//go:build linux

package e2e

import (
	"crypto/rand"
	"encoding/binary"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// TestDamagedRaftStoreStopsThePodWithAnError damages the raft store of a
// stopped follower in the ways that made bbolt and raft panic (a stack
// trace and exit status 2, a crash loop in Kubernetes that says nothing
// useful), or that raft-wal would take for the end of its log, losing
// acknowledged entries, and starts it on each: it must exit with status 1
// and the documented message naming the damaged file, without a panic,
// while the other two members go on serving. Its store put back
// undamaged, the pod comes back as the same member with every bag.
//
// It runs on the default store (segments) and on raft-boltdb (what data
// dirs of older builds hold); raft-wal's damage is checked in-process
// (raftstore's TestOpenRefusesDamagedStoreWithoutPanicking, on every
// store), and the snapshot's damage, which does not depend on the log
// store, on the default store only.
func TestDamagedRaftStoreStopsThePodWithAnError(t *testing.T) {
	for _, store := range []string{"segments", "boltdb"} {
		t.Run(store, func(t *testing.T) { testDamagedRaftStore(t, store, store == "segments") })
	}
}

func testDamagedRaftStore(t *testing.T, store string, snapshots bool) {
	c := newCluster(t,
		"--log-store", store,
		"--raft-snapshot-threshold", "16",
		"--raft-trailing-logs", "4",
		"--raft-snapshot-interval", "300ms")
	c.startCluster(3)
	before := c.waitOneCluster(startTimeout, "before the damage", wantVoters(3))
	lp := c.leaderPod(before)
	want := seed(t, lp, before.unitNames(), 1024)
	want = churn(t, lp, want, 40)
	before = c.waitOneCluster(startTimeout, "after seeding", wantVoters(3))
	c.waitBags(want)
	c.waitSnapshots()

	victim := c.followers(before)[0]
	oldID := before.selfOf(victim)
	victim.stop()
	// A graceful stop released the victim's unit.
	away := c.waitOneCluster(startTimeout, victim.name+" stopped", sameIDs(before), sameClusterID(before))
	raftDir := filepath.Join(victim.dataDir, "raft")
	saved := filepath.Join(c.dir, "raft-undamaged")
	if err := copyDir(raftDir, saved); err != nil {
		t.Fatal(err)
	}
	snaps, err := os.ReadDir(filepath.Join(raftDir, "snapshots"))
	if err != nil || len(snaps) == 0 {
		t.Fatalf("%s has no snapshot (%v)", victim.name, err)
	}
	snap := filepath.Join(raftDir, "snapshots", snaps[len(snaps)-1].Name())

	var cases []storeDamage
	switch store {
	case "boltdb":
		cases = boltDamage(filepath.Join(raftDir, "raft.db"))
	case "segments":
		cases = segmentsDamage(t, filepath.Join(raftDir, "segments"))
	}
	snapCases := []storeDamage{
		{"snapshot state corrupted", filepath.Join(snap, "state.bin"), func(t *testing.T, p string) {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 0x5a
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"snapshot meta truncated", filepath.Join(snap, "meta.json"), func(t *testing.T, p string) {
			if err := os.Truncate(p, 10); err != nil {
				t.Fatal(err)
			}
		}},
	}
	if snapshots {
		cases = append(cases, snapCases...)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			defer c.use(t)()
			defer func() {
				if victim.running() { // it started on the damaged store: the next case needs it stopped
					victim.kill()
				}
			}()
			restoreDir(t, saved, raftDir)
			tc.damage(t, tc.file)
			victim.start()
			pr := victim.process()
			if !pr.wait(20 * time.Second) {
				t.Fatalf("%s still runs 20s after starting on a damaged store", victim.name)
			}
			c.writePeers()
			log := victim.lastLog()
			wantMsg := "bagkeeper run: error: raft store " + tc.file + " cannot be opened: "
			if code := pr.exitCode(); code != 1 || !strings.Contains(log, wantMsg) ||
				!strings.Contains(log, "; move the data dir away to rejoin as a new member\n") {
				t.Errorf("%s %s; want exit status 1 and an error starting %q\n%s", victim.name, pr.exitStatus(), wantMsg, log)
			}
			for _, bad := range []string{"panic", "goroutine "} {
				if strings.Contains(log, bad) {
					t.Errorf("the log of %s mentions %q:\n%s", victim.name, bad, log)
				}
			}

			// The other two go on serving, the damaged member still configured.
			mid := c.waitOneCluster(startTimeout, "the other members unaffected",
				sameIDs(before), sameClusterID(before), wantUnits(away.units, nil))
			if mid.leader == oldID {
				t.Fatalf("the damaged member %s leads", oldID)
			}
			c.mustCommit(want, c.runningPods()[0])
		})
	}

	// Undamaged again, the store is accepted: the pod is the same member,
	// with every bag, the ones written while it was away included.
	restoreDir(t, saved, raftDir)
	victim.start()
	c.waitReady(victim)
	after := c.waitOneCluster(startTimeout, victim.name+" back on its store",
		sameIDs(before), sameClusterID(before), wantVoters(3), wantUnits(before.units, nil), allUnitsActive)
	if got := after.selfOf(victim); got != oldID {
		t.Fatalf("%s came back as %s, want %s", victim.name, got, oldID)
	}
	c.waitBags(want)
}

// storeDamage is one way to damage a file of a stopped member's raft store.
type storeDamage struct {
	name   string
	file   string
	damage func(t *testing.T, path string)
}

// boltDamage damages raft-boltdb's raft.db at db.
func boltDamage(db string) []storeDamage {
	return []storeDamage{
		{"raft.db truncated", db, func(t *testing.T, p string) {
			// bbolt grows its file ahead of use: cut into the pages in use.
			m := readBoltMeta(t, p)
			if err := os.Truncate(p, int64(m.pgid/2*m.pageSize)); err != nil {
				t.Fatal(err)
			}
		}},
		{"raft.db zeroed", db, zeroFile},
		{"raft.db free list page zeroed", db, zeroBoltFreelist},
	}
}

// segmentsDamage damages seglog's files in dir: its stable file, and its
// last segment in the middle, with intact appends after the damage, which
// a torn last append cannot have.
func segmentsDamage(t *testing.T, dir string) []storeDamage {
	segs, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("no segment in %s (%v)", dir, err)
	}
	sort.Strings(segs)
	seg := segs[len(segs)-1]
	middle := func(t *testing.T, p string) int64 {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size() / 2
	}
	return []storeDamage{
		{"segments stable zeroed", filepath.Join(dir, "stable"), zeroFile},
		{"segments segment zeroed in the middle", seg, func(t *testing.T, p string) {
			writeAt(t, p, middle(t, p), make([]byte, 64))
		}},
		{"segments segment overwritten in the middle", seg, func(t *testing.T, p string) {
			garbage := make([]byte, 64)
			_, _ = rand.Read(garbage)
			writeAt(t, p, middle(t, p), garbage)
		}},
	}
}

func zeroFile(t *testing.T, p string) {
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, make([]byte, fi.Size()), 0o600); err != nil {
		t.Fatal(err)
	}
}

func writeAt(t *testing.T, p string, off int64, b []byte) {
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// restoreDir replaces dst with a copy of src.
func restoreDir(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.RemoveAll(dst); err != nil {
		t.Fatal(err)
	}
	if err := copyDir(src, dst); err != nil {
		t.Fatal(err)
	}
}

// boltMeta is what the meta page of a bbolt file says.
type boltMeta struct {
	pageSize, freelist, pgid uint64
}

// readBoltMeta reads the newer of the two meta pages of the bbolt file at
// path. A meta page follows a 16-byte page header: magic, version, page
// size and flags, 4 bytes each; the root bucket, 16; then the free list
// page, the number of pages in use and the transaction id, 8 bytes each.
func readBoltMeta(t *testing.T, path string) boltMeta {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ne := binary.NativeEndian
	pageSize := uint64(ne.Uint32(b[16+8:]))
	var newest boltMeta
	var newestTx uint64
	for page := range uint64(2) {
		m := b[page*pageSize+16:]
		if tx := ne.Uint64(m[48:]); page == 0 || tx > newestTx {
			newest, newestTx = boltMeta{pageSize: pageSize, freelist: ne.Uint64(m[32:]), pgid: ne.Uint64(m[40:])}, tx
		}
	}
	return newest
}

// zeroBoltFreelist zeroes the free list page of the bbolt file at path.
func zeroBoltFreelist(t *testing.T, path string) {
	t.Helper()
	m := readBoltMeta(t, path)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, m.pageSize), int64(m.freelist*m.pageSize)); err != nil {
		t.Fatal(err)
	}
}
