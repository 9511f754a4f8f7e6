//go:build linux

package e2e

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

// TestBagAtTheLimitThroughAFollower writes a bag of exactly the documented
// limit (16 MiB of keys and values) through a follower, whose write is
// forwarded to the leader, and reads it back with every command that reads
// bags, on every member: no gRPC path may stop at a smaller default (gRPC's
// is 4 MiB). One byte more is refused with the limit named.
func TestBagAtTheLimitThroughAFollower(t *testing.T) {
	c := newCluster(t)
	c.startCluster(3)
	v := c.waitOneCluster(startTimeout, "the cluster", wantVoters(3))
	f := c.followers(v)[0]
	rel, err := f.ensureRelation(&adminpb.EnsureRelationRequest{Endpoint: "db", Interface: "pgsql", RemoteApp: "pg", RemoteEndpoint: "database"})
	if err != nil {
		t.Fatal(err)
	}
	value := strings.Repeat("v", state.MaxBagSize-1)
	if err := f.setBag(60*time.Second, rel, "pg", map[string]string{"k": value}); err != nil {
		t.Fatalf("writing a bag at the limit through follower %s: %v", f.name, err)
	}
	for _, p := range c.runningPods() {
		for _, args := range [][]string{
			{"bags", "--admin-socket", p.sock, "--format", "json", "--relation", "db:" + itoa(rel), "pg"},
			{"bags", "--admin-socket", p.sock, "--format", "json", "--stale", "--relation", "db:" + itoa(rel), "pg"},
		} {
			var res cliResult
			waitFor(t, startTimeout, p.name+" to read the bag back", func() (bool, string) {
				res = runCLI(t, 60*time.Second, args...)
				var out map[string]map[string]map[string]string
				if res.code != 0 || json.Unmarshal([]byte(res.stdout), &out) != nil {
					return false, res.stderr
				}
				return out["db:"+itoa(rel)]["pg"]["k"] == value, "a different value"
			})
		}
	}
	err = f.setBag(60*time.Second, rel, "pg", map[string]string{"k2": "x"})
	if err == nil || !strings.Contains(err.Error(), "over the 16777216 byte limit") {
		t.Fatalf("one key more than the limit: %v", err)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
