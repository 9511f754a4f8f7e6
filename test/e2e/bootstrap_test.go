//go:build linux

package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// bootstrapRounds is how many times three empty pods are started at once.
const bootstrapRounds = 20

var bootstrapLine = regexp.MustCompile(`msg="bootstrapped a new cluster".* voters="(\[[^"]*\])"`)

// TestSimultaneousStartFormsExactlyOneCluster starts three empty pods at the
// same moment, again and again with fresh volumes, and requires exactly one
// cluster every time: one cluster id, one configuration of exactly the
// three voters, one leader, and every member that bootstrapped did so with
// that same configuration (invariant 4: bootstrap only from empty state
// with an identical configuration on every bootstrapping member). A split
// here is permanent — two raft groups never merge — so one bad round in
// twenty is a bug.
//
// Half of the rounds start with discovery already listing all three pods;
// in the other half discovery is empty at the start and lists all three at
// once a moment later (a headless service's records appearing together).
func TestSimultaneousStartFormsExactlyOneCluster(t *testing.T) {
	start := time.Now()
	for round := range bootstrapRounds {
		lateDiscovery := round%2 == 1
		ok := t.Run(fmt.Sprintf("round %d", round), func(t *testing.T) {
			c := newCluster(t)
			pods := make([]*pod, 3)
			for i := range pods {
				pods[i] = c.newPod(fmt.Sprintf("web-%d", i), "--bootstrap-expect", "3")
			}
			if lateDiscovery {
				c.setDiscovery([]string{})
			}
			c.startAll(pods)
			if lateDiscovery {
				// Every pod has looked and found nobody; now all appear at once.
				waitFor(t, startTimeout, "every pod to find no bootstrap peers", func() (bool, string) {
					for _, p := range pods {
						if !strings.Contains(p.lastLog(), `msg="waiting for bootstrap peers"`) {
							return false, p.name + " has not looked yet" + exitNote(p)
						}
					}
					return true, ""
				})
				c.setDiscovery(nil)
			}
			v := c.waitOneCluster(startTimeout, "three empty pods started together", wantVoters(3), wantMembers(3))
			c.waitReady(pods...)
			v = c.waitOneCluster(startTimeout, "every pod ready", wantVoters(3), wantMembers(3), sameClusterID(v), allUnitsActive)
			if n := len(v.units); n != 3 {
				t.Fatalf("%d units, want 3: %v", n, v.units)
			}
			var configs []string
			for _, p := range pods {
				for _, m := range bootstrapLine.FindAllStringSubmatch(p.allLogs(), -1) {
					configs = append(configs, p.name+" "+m[1])
				}
			}
			if len(configs) == 0 {
				t.Fatal("no pod logged a bootstrap, yet a cluster exists")
			}
			for _, cfg := range configs {
				if cfg[len("web-0 "):] != configs[0][len("web-0 "):] {
					t.Fatalf("pods bootstrapped different configurations: %v", configs)
				}
			}
			var wg sync.WaitGroup
			for _, p := range pods {
				wg.Go(p.process().kill)
			}
			wg.Wait()
		})
		if !ok {
			break
		}
	}
	t.Logf("%d rounds in %v", bootstrapRounds, time.Since(start).Round(time.Millisecond))
}
