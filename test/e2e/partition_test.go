//go:build linux

package e2e

import (
	"fmt"
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
	needFirewall(t)
	c, v, leader, rel := threeVotersAndAPeerRelation(t)
	fs := c.followers(v)
	cut, other := fs[0], fs[1]
	partition(t, cut.host, leader.host)

	err := cut.setBag(15*time.Second, rel, "web", map[string]string{"via": "cut-off follower"})
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

// threeVotersAndAPeerRelation starts a group of three and makes the
// application's peer relation through its leader.
func threeVotersAndAPeerRelation(t *testing.T) (c *cluster, v clusterView, leader *pod, rel int64) {
	t.Helper()
	c = newCluster(t)
	c.startCluster(3)
	v = c.waitOneCluster(startTimeout, "the cluster", wantVoters(3))
	leader = c.leaderPod(v)
	rel, err := leader.ensureRelation(&adminpb.EnsureRelationRequest{Endpoint: "replicas", Interface: "web-peers", Peer: true})
	if err != nil {
		t.Fatal(err)
	}
	return c, v, leader, rel
}

// partition drops every packet between the two hosts (loopback addresses)
// until the test ends.
func partition(t *testing.T, a, b string) {
	t.Helper()
	firewall(t, [][]string{
		{"INPUT", "-s", a, "-d", b, "-j", "DROP"},
		{"INPUT", "-s", b, "-d", a, "-j", "DROP"},
	})
}

// needFirewall skips the test unless iptables rules can be set here.
func needFirewall(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("firewall rules need root")
	}
	if err := exec.Command("iptables", "-L", "-n").Run(); err != nil {
		t.Skipf("iptables does not work here: %v", err)
	}
}

// firewall inserts the iptables rules until the test ends.
func firewall(t *testing.T, rules [][]string) {
	t.Helper()
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

// TestAVoterBackAtANewAddressHearsTheLeaderWithoutWaitingOutItsOldOne
// replaces a follower's pod the way Kubernetes does: the process dies, its
// address goes dead (every packet to and from it dropped, so the leader's
// open connections there stay open and unanswered), and the pod comes back
// with its data at a new address. Raft's transport waits up to 10 s for an
// answer on a connection and 5 s for a dial; the member must not hear
// the leader only once those have run out (meanwhile it stands for
// election again and again, and is not served its entries): the leader
// drops what it has open or dialing towards the old address as soon as it
// learns the new one.
func TestAVoterBackAtANewAddressHearsTheLeaderWithoutWaitingOutItsOldOne(t *testing.T) {
	needFirewall(t)
	c, v, leader, rel := threeVotersAndAPeerRelation(t)
	f := c.followers(v)[0]
	leaderID := v.selfOf(leader)

	gone := time.Now()
	blackhole(t, f.host)
	f.kill()
	f.move()
	f.start()
	// Written while the member is away or coming back: it must get it.
	if err := leader.setBag(15*time.Second, rel, "web", map[string]string{"written": "while away"}); err != nil {
		t.Fatal(err)
	}
	// The bound is what tells the fix: below raft's 10 s wait on an
	// unanswered request, well above what a start and a join take.
	const within = 7 * time.Second
	heard := func() (bool, string) {
		st, err := f.statusNoProbe()
		if err != nil {
			return false, err.Error()
		}
		if st.GetLeader() != leaderID {
			return false, fmt.Sprintf("%s names leader %q, want %s", f.name, st.GetLeader(), leaderID)
		}
		for _, m := range st.GetMembers() {
			if m.GetId() == st.GetSelf() && m.GetRaftState() != "Follower" {
				return false, f.name + " is " + m.GetRaftState()
			}
		}
		got, err := f.bags()
		if err != nil {
			return false, err.Error()
		}
		for id, b := range got {
			if id.owner == "web" && b.data["written"] == "while away" {
				return true, ""
			}
		}
		return false, f.name + " has not got the write made while it was away"
	}
	waitFor(t, time.Until(gone.Add(within)), f.name+", back at a new address, to follow the leader", heard)
}

// blackhole drops every packet to and from host (a loopback address) until
// the test ends, the way a Kubernetes pod's address goes dead with it.
func blackhole(t *testing.T, host string) {
	t.Helper()
	firewall(t, [][]string{
		{"INPUT", "-s", host, "-j", "DROP"},
		{"INPUT", "-d", host, "-j", "DROP"},
	})
}
