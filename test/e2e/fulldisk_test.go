//go:build linux

package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

// TestFullDiskMakesAMemberUnreadyUntilItCanWrite puts a follower's, then
// the leader's, data dir on a small tmpfs and fills it. A member that
// cannot append to its raft log must say so (not ready, naming ENOSPC, on
// /readyz and /metrics), refuse writes and reads through it with the cause,
// a leader must step down; once space returns, the member writes again,
// catches up and is ready on its own, with every acknowledged write there.
// It needs to mount a tmpfs (root); raftstore's
// TestMemberThatCannotWriteIsNotReadyAndRecovers covers the same with an
// injected write error everywhere.
func TestFullDiskMakesAMemberUnreadyUntilItCanWrite(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root; the injected-error test in raftstore covers this")
	}
	c := newCluster(t)
	pods := make([]*pod, 3)
	for i := range pods {
		pods[i] = c.newPod(fmt.Sprintf("%s-%d", c.app, i), "--bootstrap-expect", "3")
		mountTmpfs(t, pods[i].dataDir, "24m")
	}
	c.startAll(pods)
	c.waitReady(pods...)
	v := c.waitOneCluster(startTimeout, "the cluster", wantVoters(3), wantMembers(3))
	leader := c.leaderPod(v)
	rel, err := leader.ensureRelation(&adminpb.EnsureRelationRequest{Endpoint: "replicas", Interface: "web-peers", Peer: true})
	if err != nil {
		t.Fatal(err)
	}
	blob := strings.Repeat("x", 256<<10)
	write := func(via *pod, i int) error {
		return via.setBag(10*time.Second, rel, "web", map[string]string{fmt.Sprint("k", i%8): fmt.Sprint(i, blob)})
	}

	for _, role := range []string{"follower", "leader"} {
		t.Run(role, func(t *testing.T) {
			defer c.use(t)()
			v := c.waitOneCluster(startTimeout, "the cluster", wantVoters(3), wantMembers(3))
			victim := c.followers(v)[0]
			if role == "leader" {
				victim = c.leaderPod(v)
			}
			filler := fillDisk(t, victim.dataDir)
			var others []*pod
			for _, p := range pods {
				if p != victim {
					others = append(others, p)
				}
			}
			// Writes go on through the others; the victim cannot store them.
			i := 0
			waitFor(t, startTimeout, victim.name+" to say it cannot write", func() (bool, string) {
				i++
				if err := write(others[i%2], i); err != nil {
					return false, "write: " + err.Error()
				}
				code, body := victim.readyz()
				return code == 503 && strings.Contains(body, "no space left on device"), fmt.Sprintf("%d %s", code, body)
			})
			if m := scrape(t, victim); !strings.Contains(m, "\nbagkeeper_store_writable 0\n") {
				t.Fatalf("/metrics does not say the store cannot be written:\n%s", grepLines(m, "writable"))
			}
			if err := victim.setBag(10*time.Second, rel, "web", map[string]string{"via": "victim"}); err == nil || !strings.Contains(err.Error(), "no space left on device") {
				t.Fatalf("a write through the full member: %v", err)
			}
			if _, err := victim.getBags(); err == nil {
				t.Fatal("a linearizable read through the full member succeeded")
			}
			if role == "leader" {
				waitFor(t, startTimeout, "another member to lead", func() (bool, string) {
					st, err := others[0].statusNoProbe()
					if err != nil {
						return false, err.Error()
					}
					return st.GetLeader() != "" && st.GetLeader() != v.statuses[victim.name].GetSelf(), "leader " + st.GetLeader()
				})
			}
			acked := i
			if err := os.Remove(filler); err != nil {
				t.Fatal(err)
			}
			c.waitReady(victim)
			want, err := others[0].bags()
			if err != nil {
				t.Fatal(err)
			}
			c.waitBags(want, victim)
			t.Logf("%s recovered with all %d writes made while its disk was full", victim.name, acked)
		})
	}
}

// mountTmpfs mounts a tmpfs of size on dir for the rest of the test.
func mountTmpfs(t *testing.T, dir, size string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs on %s: %v: %s", dir, err, out)
	}
	t.Cleanup(func() {
		// The pods are killed by the cluster's cleanup, registered earlier
		// and so run later: unmount lazily.
		_ = exec.Command("umount", "-l", dir).Run()
	})
}

// fillDisk writes a file in dir until the file system is full and returns
// its path.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, size := range []int{64 << 10, 4 << 10, 512, 1} {
		chunk := make([]byte, size)
		for {
			_, err := f.Write(chunk)
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	return path
}
