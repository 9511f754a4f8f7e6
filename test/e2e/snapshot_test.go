//go:build linux

package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bagkeeper/bagkeeper/raftstore/backup"
)

// TestSnapshotSaveAndRestoreIntoANewGroup: three pods running the e2e
// charm (relation data, charm state, hook cursors), and a key an operator
// wrote into every peer bag. A write through a follower, then at once
// `bagkeeper snapshot save` through the same follower: the file holds the
// write (the copy is read linearizably, not from the follower's maybe
// lagging state). The file checks; it is not overwritten without --force.
// Then every pod is killed and its volume wiped; `snapshot restore`
// writes the first pod's new volume; that pod starts alone and leads a
// group with a new cluster id; the two others start with empty volumes and
// join it. Every bag key written before the save is back, every unit is
// active and held by its pod again, and each unit's start hook reads back
// the token its install stored in charm state before the save.
func TestSnapshotSaveAndRestoreIntoANewGroup(t *testing.T) {
	cc := newCharmCluster(t)
	cc.startPods(3)
	cc.settle("the install sequence")
	before := cc.waitOneCluster(startTimeout, "three voters", wantVoters(3), wantMembers(3), allUnitsActive)
	pods := cc.runningPods()
	leader := cc.leaderPod(before)
	follower := cc.followers(before)[0]

	kept := map[string]string{}
	for _, owner := range append(before.unitNames(), cc.app) {
		kept[owner] = randHex(8)
		if err := leader.setBag(10*time.Second, cc.rel, owner, map[string]string{"backup-check": kept[owner]}); err != nil {
			t.Fatalf("writing %s's bag: %v", owner, err)
		}
	}
	tokens := map[string]string{}
	for _, p := range pods {
		tokens[cc.unitOf(p)] = cc.read(p, "token-at-start")
		if !strings.HasPrefix(tokens[cc.unitOf(p)], cc.unitOf(p)+":") {
			t.Fatalf("%s read no token in its start hook: %q", cc.unitOf(p), tokens[cc.unitOf(p)])
		}
	}

	last := randHex(8)
	if err := follower.setBag(10*time.Second, cc.rel, cc.app, map[string]string{"last-write": last}); err != nil {
		t.Fatalf("writing through the follower %s: %v", follower.name, err)
	}
	file := filepath.Join(cc.dir, "web.snap")
	save := runCLI(t, 60*time.Second, "snapshot", "save", "--admin-socket", follower.sock, "--format", "json", file)
	if save.code != 0 {
		t.Fatalf("snapshot save through the follower: %s", save)
	}
	var summary struct {
		Index     uint64 `json:"index"`
		Size      int64  `json:"size"`
		SHA256    string `json:"sha256"`
		ClusterID string `json:"cluster_id"`
	}
	if err := json.Unmarshal([]byte(save.stdout), &summary); err != nil {
		t.Fatalf("snapshot save --format json printed %q: %v", save.stdout, err)
	}
	content, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	digest := sha256.Sum256(content[:len(content)-32])
	if summary.Size != int64(len(content)) || summary.SHA256 != hex.EncodeToString(digest[:]) || summary.ClusterID != before.clusterID {
		t.Fatalf("summary %+v; the file has %d bytes, SHA-256 %x; cluster %s", summary, len(content), digest, before.clusterID)
	}
	if _, err := os.Stat(file + ".tmp"); err == nil {
		t.Fatal("snapshot save left its temporary file")
	}
	hdr, st, _, err := backup.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if b, ok := st.Bag(cc.rel, cc.app); !ok || b.Data.Value("last-write") != last {
		t.Fatalf("the snapshot saved through the follower right after a write through it lacks the write (bag %v)", b)
	}
	if hdr.Index != summary.Index || hdr.App != cc.app {
		t.Fatalf("header %+v, summary %+v", hdr, summary)
	}
	if res := runCLI(t, 30*time.Second, "snapshot", "save", "--admin-socket", leader.sock, file); res.code != 2 || !strings.Contains(res.stderr, "exists: give --force") {
		t.Fatalf("saving over an existing file without --force: %s", res)
	}
	if res := runCLI(t, 30*time.Second, "snapshot", "status", file); res.code != 0 || !strings.Contains(res.stdout, "checksum OK") || !strings.Contains(res.stdout, "units         3 (3 active)") {
		t.Fatalf("snapshot status: %s", res)
	}

	// The group is lost: every pod and its volume (killed, not stopped:
	// the last ones to stop would wait for a majority that is gone).
	for _, p := range pods {
		p.kill()
		p.wipe()
	}
	first := pods[0]
	res := runCLI(t, 30*time.Second, "snapshot", "restore", "--data-dir", first.dataDir, "--app", cc.app, file)
	if res.code != 0 {
		t.Fatalf("snapshot restore: %s", res)
	}
	if again := runCLI(t, 30*time.Second, "snapshot", "restore", "--data-dir", first.dataDir, file); again.code != 1 || !strings.Contains(again.stderr, "is not empty") {
		t.Fatalf("restoring into the same data dir again: %s", again)
	}
	cc.freshPod(first)
	first.start()
	waitFor(t, startTimeout, first.name+" to lead the restored group alone", func() (bool, string) {
		st, err := first.statusNoProbe()
		if err != nil {
			return false, err.Error() + exitNote(first)
		}
		return st.GetLeader() != "" && st.GetLeader() == st.GetSelf(), fmt.Sprintf("leader %q, self %q", st.GetLeader(), st.GetSelf())
	})
	for _, p := range pods[1:] {
		cc.freshPod(p)
		p.start()
	}
	cc.waitReady(pods...)
	after := cc.waitOneCluster(startTimeout, "the restored group of three", wantVoters(3), wantMembers(3), allUnitsActive, cc.unitsHeldByRunningPods)
	if after.clusterID == before.clusterID {
		t.Fatalf("the restored group has the old group's cluster id %s", before.clusterID)
	}
	if got, want := after.unitNames(), before.unitNames(); !slices.Equal(got, want) {
		t.Fatalf("units %v after the restore, want %v", got, want)
	}
	for _, p := range pods {
		if got := after.statuses[p.name].GetUnit(); got != cc.unitOf(p) {
			t.Errorf("%s holds unit %q after the restore, want %s", p.name, got, cc.unitOf(p))
		}
	}
	cc.waitPeerBags("every key written before the save", func(bags map[string]map[string]string) string {
		var bad []string
		for _, owner := range slices.Sorted(maps.Keys(kept)) {
			if got := bags[owner]["backup-check"]; got != kept[owner] {
				bad = append(bad, fmt.Sprintf("%s's backup-check is %q, want %q", owner, got, kept[owner]))
			}
		}
		if got := bags[cc.app]["last-write"]; got != last {
			bad = append(bad, fmt.Sprintf("the application's last-write is %q, want %q", got, last))
		}
		return strings.Join(bad, "; ")
	})
	waitFor(t, startTimeout, "every unit's start hook to read back its token from the restored charm state", func() (bool, string) {
		var bad []string
		for _, p := range pods {
			if got := cc.read(p, "token-at-start"); got != tokens[cc.unitOf(p)] {
				bad = append(bad, fmt.Sprintf("%s read %q, want %q", cc.unitOf(p), got, tokens[cc.unitOf(p)]))
			}
		}
		return len(bad) == 0, strings.Join(bad, "; ")
	})
}
