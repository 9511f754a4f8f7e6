//go:build linux

package e2e

import (
	"regexp"
	"strings"
	"testing"
)

// TestPodReplacementCanBeFollowedInTheLogs: an operator follows a pod's
// replacement from the logs alone, at INFO: the stopping StatefulSet pod
// says it released its unit (it stays a member: a pod of that name comes
// back); the leader says it removed the superseded incarnation, who
// joined and was promoted; the new pod says it resumed the unit its
// predecessor held (never that it made a new one); every member says who
// leads. Then the same for a pod killed and replaced on an empty disk,
// whose predecessor said nothing.
func TestPodReplacementCanBeFollowedInTheLogs(t *testing.T) {
	c := newCluster(t)
	pods := c.startCluster(3)
	before := c.waitOneCluster(startTimeout, "every unit claimed", wantVoters(3), allUnitsActive)
	leader := c.leaderPod(before)
	has := func(what, log string, patterns ...string) {
		t.Helper()
		for _, p := range patterns {
			if !regexp.MustCompile(p).MatchString(log) {
				t.Errorf("%s: no line matches %s in:\n%s", what, p, log)
			}
		}
	}
	for _, p := range pods {
		has(p.name, p.lastLog(), `level=INFO msg="raft leader changed(: this member leads)?" .*leader=`+regexp.QuoteMeta(leader.name)+`/`,
			`level=INFO msg="unit claimed: a new unit, installed from scratch" .*unit=`+regexp.QuoteMeta(before.statuses[p.name].GetUnit()))
	}

	// A graceful replacement: SIGTERM, then a new incarnation on an empty
	// disk at a new address.
	victim := c.followers(before)[0]
	unit := before.statuses[victim.name].GetUnit()
	victim.stop()
	has(victim.name+" stopping", victim.lastLog(),
		`level=INFO msg="unit released" .*unit=`+regexp.QuoteMeta(unit),
		`level=INFO msg="sidecar stopped"`)
	old := before.selfOf(victim)
	victim.wipe()
	victim.move()
	victim.start()
	c.waitReady(victim)
	after := c.waitOneCluster(startTimeout, victim.name+" replaced", wantVoters(3), wantMembers(3), allUnitsActive)
	self := after.statuses[victim.name].GetSelf()
	has(victim.name+" replaced", victim.lastLog(),
		`level=INFO msg="unit claimed: resumed with its relation data and state" .*unit=`+regexp.QuoteMeta(unit)+` previous_member=`+regexp.QuoteMeta(old)+` previous_pod=`+regexp.QuoteMeta(victim.name)+` released="pod stopped"`)
	has(leader.name+" (leader)", leader.lastLog(),
		`level=INFO msg="member removed" .*removed=`+regexp.QuoteMeta(old)+` .*reason="superseded by a newer incarnation of the same pod, `+regexp.QuoteMeta(self),
		`level=INFO msg="member joined as non-voter" .*peer=`+regexp.QuoteMeta(self),
		`level=INFO msg="membership changed" .*action=promote peer=`+regexp.QuoteMeta(self))

	// A crash: kill -9, then a new incarnation on an empty disk.
	victim.kill()
	victim.wipe()
	victim.move()
	victim.start()
	c.waitReady(victim)
	final := c.waitOneCluster(startTimeout, victim.name+" replaced after a crash", wantVoters(3), wantMembers(3), allUnitsActive)
	has(victim.name+" replaced after a crash", victim.lastLog(),
		`level=INFO msg="unit claimed: resumed with its relation data and state" .*unit=`+regexp.QuoteMeta(unit)+` .*released="no: superseded by this incarnation of the pod"`)
	has(leader.name+" (leader)", leader.lastLog(),
		`level=INFO msg="member removed" .*removed=`+regexp.QuoteMeta(self)+` .*reason="superseded by a newer incarnation of the same pod, `+regexp.QuoteMeta(final.statuses[victim.name].GetSelf()))
	for i, log := range []string{victim.lastLog(), victim.allLogs()} {
		if i > 0 {
			log = log[strings.Index(log, "unit released"):] // the incarnations after the first
		}
		if strings.Contains(log, "unit claimed: a new unit") {
			t.Errorf("a new incarnation of %s made a new unit:\n%s", victim.name, log)
		}
	}
}
