//go:build linux

package e2e

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

// TestFollowerCutOffFromTheLeaderWritesThroughTheOther cuts a follower off
// from the leader (both ways, with firewall rules on the loopback
// addresses) but not from the other follower. Its writes must not fail for
// want of a leader it cannot reach: they go through the other follower and
// commit. (The cut-off follower cannot apply them while cut off, so it may
// answer that the write was committed but not applied here yet.) Reads
// through the others see the write.
func TestFollowerCutOffFromTheLeaderWritesThroughTheOther(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("firewall rules need root")
	}
	if err := exec.Command("iptables", "-L", "-n").Run(); err != nil {
		t.Skipf("iptables does not work here: %v", err)
	}
	c := newCluster(t)
	c.startCluster(3)
	v := c.waitOneCluster(startTimeout, "the cluster", wantVoters(3))
	leader := c.leaderPod(v)
	fs := c.followers(v)
	cut, other := fs[0], fs[1]
	rel, err := leader.ensureRelation(&adminpb.EnsureRelationRequest{Endpoint: "replicas", Interface: "web-peers", Peer: true})
	if err != nil {
		t.Fatal(err)
	}
	partition(t, cut.host, leader.host)

	err = cut.setBag(15*time.Second, rel, "web", map[string]string{"via": "cut-off follower"})
	if err != nil && !strings.Contains(err.Error(), "committed at raft index") {
		t.Fatalf("a write through the follower cut off from the leader: %v", err)
	}
	waitFor(t, startTimeout, "the write to be read through the others", func() (bool, string) {
		for _, p := range []*pod{leader, other} {
			got, err := p.bags()
			if err != nil {
				return false, err.Error()
			}
			found := false
			for id, b := range got {
				if id.owner == "web" && b.data["via"] == "cut-off follower" {
					found = true
				}
			}
			if !found {
				return false, p.name + " has not got it"
			}
		}
		return true, ""
	})
}

// partition drops every packet between the two hosts (loopback addresses)
// until the test ends.
func partition(t *testing.T, a, b string) {
	t.Helper()
	rules := [][]string{
		{"INPUT", "-s", a, "-d", b, "-j", "DROP"},
		{"INPUT", "-s", b, "-d", a, "-j", "DROP"},
	}
	for _, r := range rules {
		if out, err := exec.Command("iptables", append([]string{"-I"}, r...)...).CombinedOutput(); err != nil {
			t.Fatalf("iptables -I %s: %v: %s", strings.Join(r, " "), err, out)
		}
	}
	t.Cleanup(func() {
		for _, r := range rules {
			if out, err := exec.Command("iptables", append([]string{"-D"}, r...)...).CombinedOutput(); err != nil {
				t.Errorf("iptables -D %s: %v: %s", strings.Join(r, " "), err, out)
			}
		}
	})
}
