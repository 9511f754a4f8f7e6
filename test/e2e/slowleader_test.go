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
// the leader longer (twice the longest recent gap), so the voters do not
// elect another leader while the leader still leads. Raft's own check on
// the leader may make it step down when it runs again (it has not heard a
// quorum for its lease); an election then follows, which any voter may
// win. So: every pod that takes leadership during the freezes must do so
// after the leader stepped down, since the last freeze began. Before, the voters stood once their leader
// had been silent for 500 to 750 ms, while it was still frozen, and
// elected one of them (the 820 ms freeze, a gap of at least 820 ms, always
// did).
func TestVotersDoNotDeposeASlowLeader(t *testing.T) {
	c := newCluster(t)
	pods := c.startCluster(3)
	v := c.waitOneCluster(startTimeout, "before the freezes", wantVoters(3))
	var frozenAt []time.Time
	// A voter sees a gap of the freeze plus up to one interval between the
	// leader's heartbeats (100–200 ms) before it. The first level ends
	// before the heartbeat timeout could; each level is frozen three times
	// and is less than twice the one before it minus that interval, so
	// every gap stays within what the earlier ones taught the voters.
	for _, d := range []time.Duration{290, 290, 290, 370, 370, 370, 530, 530, 530, 820} {
		d *= time.Millisecond
		lp := c.leaderPod(v)
		frozenAt = append(frozenAt, time.Now())
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
			if !strings.Contains(l, "entering leader state") {
				continue
			}
			// The freeze it came in, and a step-down between the two.
			at := logTime(t, l)
			var freeze time.Time
			for _, f := range frozenAt {
				if !f.After(at) {
					freeze = f
				}
			}
			if freeze.IsZero() {
				continue // the first leader
			}
			deposed := true
			for _, s := range stepDowns {
				if !s.Before(freeze) && !s.After(at) {
					deposed = false
				}
			}
			if deposed {
				t.Errorf("%s took leadership from a leader that was only slow (no leader had stepped down since the freeze at %s):\n%s\n%s\nstep-downs at %v", p.name, freeze.Format(time.RFC3339Nano), l, grepLines(p.allLogs(), "election"), stepDowns)
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
