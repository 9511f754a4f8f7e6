//go:build linux

package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestAPodWhoseUnitWasTakenStartsItsNewUnitsLife: in claim mode without a
// declared scale, a pod frozen past --unit-release-after has its unit
// released and claimed by a new pod. When it thaws it claims a new unit,
// and that unit's life starts as Juju starts a unit's life (install,
// relation-created, leader-settings-changed, config-changed, start, then
// joins), never as the continuation of the unit it lost; its hooks and
// its log name the new unit.
func TestAPodWhoseUnitWasTakenStartsItsNewUnitsLife(t *testing.T) {
	cc := newCharmCluster(t)
	claim := []string{"--unit-mode", "claim", "--unit-release-after", "3s"}
	_, before := cc.startDeployment(3, claim...)

	frozen := cc.followers(before)[0]
	lost := before.statuses[frozen.name].GetUnit()
	frozen.pause()
	leader := cc.leaderPod(before)
	waitFor(t, startTimeout, "the leader to release "+lost+" of the frozen pod", func() (bool, string) {
		st, err := leader.statusNoProbe()
		if err != nil {
			return false, err.Error()
		}
		for _, u := range st.GetUnits() {
			if u.GetName() == lost {
				return u.GetState() == "released", u.GetState()
			}
		}
		return false, "no unit " + lost
	})
	repl := cc.deploymentPod("5b8e21", claim...)
	repl.start()
	waitFor(t, startTimeout, repl.name+" to claim "+lost+" once the leader released it", func() (bool, string) {
		st, err := repl.statusNoProbe()
		if err != nil {
			return false, err.Error()
		}
		return st.GetUnit() == lost, "holds " + st.GetUnit()
	})
	n := len(cc.hooks(frozen))
	frozen.resume()
	var next string
	waitFor(t, startTimeout, frozen.name+" to claim a new unit", func() (bool, string) {
		st, err := frozen.statusNoProbe()
		if err != nil {
			return false, err.Error()
		}
		next = st.GetUnit()
		return next != "" && next != lost, "holds " + next + "; " + st.GetNotReadyReason()
	})
	waitFor(t, startTimeout, next+"'s start", func() (bool, string) {
		return slices.Contains(cc.hooks(frozen)[n:], hookRun{next, "start", ""}), runsString(cc.hooks(frozen)[n:])
	})
	runs := cc.hooks(frozen)[n:]
	for _, r := range runs {
		if r.unit != next {
			t.Fatalf("after the thaw a hook ran for %s, not for the pod's new unit %s: %v", r.unit, next, runsString(runs))
		}
	}
	var names []string
	for _, r := range runs {
		names = append(names, r.hook)
	}
	want := []string{"install", "replicas-relation-created", "leader-settings-changed", "config-changed", "start"}
	if len(names) < len(want) || !slices.Equal(names[:len(want)], want) {
		t.Fatalf("%s began with %v, want Juju's first-start sequence %v", next, names, want)
	}
	if log := frozen.lastLog(); !strings.Contains(log, fmt.Sprintf(`msg="running hook" app=web pod=%s member=`, frozen.name)) || !strings.Contains(log, "unit="+next) {
		t.Fatalf("the agent's log does not name the new unit %s:\n%s", next, lastLines(grepLines(log, "running hook"), 5))
	}
	cc.settle("the new unit's first hooks")
}
