//go:build linux

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestVotersDoNotDeposeASlowLeader freezes the raft leader (SIGSTOP, then
// SIGCONT) again and again, each level of freeze a little longer, up to
// well past the heartbeat timeout (500 ms here), as a leader whose CPU is
// taken is late with its words: a pod at its CPU limit, a node with more
// busy pods than cores. Each voter learns from the gaps it sees to allow
// the leader longer (twice the longest recent gap), so no voter stands
// while the leader still leads. Raft's own check on the leader may make it
// step down when it runs again (it has not heard a quorum for its lease);
// an election then follows, which any voter may win. So: every "standing
// for election" of a voter must come after the leader it stood against
// stepped down. Before, a voter stood once its leader had been silent for
// 500 to 750 ms, while the leader was still frozen, and the 820 ms freeze
// (a gap of at least 820 ms) always made one stand.
func TestVotersDoNotDeposeASlowLeader(t *testing.T) {
	c := newCluster(t)
	pods := c.startCluster(3)
	v := c.waitOneCluster(startTimeout, "before the freezes", wantVoters(3))
	// A voter sees a gap of the freeze plus up to one interval between the
	// leader's heartbeats (100–200 ms) before it. The first level ends
	// before the heartbeat timeout could; each level is frozen three times
	// and is less than twice the one before it minus that interval, so
	// every gap stays within what the earlier ones taught the voters.
	for _, d := range []time.Duration{290, 290, 290, 370, 370, 370, 530, 530, 530, 820} {
		d *= time.Millisecond
		lp := c.leaderPod(v)
		lp.pause()
		time.Sleep(d)
		lp.resume()
		v = c.waitOneCluster(startTimeout, fmt.Sprintf("after the leader %s was frozen for %s", lp.name, d), wantVoters(3))
	}
	var stepDowns []time.Time
	for _, p := range pods {
		for _, l := range strings.Split(p.allLogs(), "\n") {
			if strings.Contains(l, "failed to contact quorum of nodes, stepping down") {
				stepDowns = append(stepDowns, logTime(t, l))
			}
		}
	}
	for _, p := range pods {
		for _, l := range strings.Split(p.allLogs(), "\n") {
			if !strings.Contains(l, "standing for election") {
				continue
			}
			at := logTime(t, l)
			deposed := true
			for _, s := range stepDowns {
				if !s.After(at) && at.Sub(s) < 5*time.Second {
					deposed = false
				}
			}
			if deposed {
				t.Errorf("%s stood for election against a leader that was only slow (it had not stepped down):\n%s\nstep-downs at %v", p.name, l, stepDowns)
			}
		}
	}
}

// logTime is the time of a text log line (time=…).
func logTime(t *testing.T, line string) time.Time {
	t.Helper()
	f, _, _ := strings.Cut(strings.TrimSpace(line), " ")
	at, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(f, "time="))
	if err != nil {
		t.Fatalf("no time in log line %q: %v", line, err)
	}
	return at
}
