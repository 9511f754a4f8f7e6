package sidecar

import (
	"strings"
	"testing"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/state/statetest"
)

// The claim's log line tells a replaced pod's story: a unit resumed from
// its released predecessor, a unit taken over, or a new unit.
func TestClaimLogSaysWhatTheUnitWas(t *testing.T) {
	s := statetest.New(t, "web")
	unit := s.Claim("web-0/old", "web-0", 0)
	s.Must(state.ReleaseUnitOp(unit, "web-0/old", "pod stopping"))
	line := func(unit, id, pod string) string {
		msg, args := claimedLog(s.State(), unit, id, pod)
		var b strings.Builder
		b.WriteString(msg)
		for i := 0; i+1 < len(args); i += 2 {
			b.WriteString(" " + args[i].(string) + "=" + args[i+1].(string))
		}
		return b.String()
	}
	if got, want := line(unit, "web-0/new", "web-0"), "unit claimed: resumed with its relation data and state unit=web/0 previous_member=web-0/old previous_pod=web-0 released=pod stopping"; got != want {
		t.Errorf("a released unit claimed by a new incarnation: %q, want %q", got, want)
	}
	if got, want := line("web/1", "web-1/a", "web-1"), "unit claimed: a new unit, installed from scratch unit=web/1"; got != want {
		t.Errorf("a new unit: %q, want %q", got, want)
	}
	other := s.Claim("web-2/x", "web-2", 2)
	if got, want := line(other, "web-9/y", "web-9"), "unit claimed: taken over from a holder unreachable too long unit=web/2 previous_member=web-2/x previous_pod=web-2"; got != want {
		t.Errorf("a unit taken over: %q, want %q", got, want)
	}
	if got, want := line(other, "web-2/y", "web-2"), "unit claimed: resumed with its relation data and state unit=web/2 previous_member=web-2/x previous_pod=web-2 released=no: superseded by this incarnation of the pod"; got != want {
		t.Errorf("a new incarnation of the holding pod: %q, want %q", got, want)
	}
	if got, want := line(other, "web-2/x", "web-2"), "unit claimed unit=web/2"; got != want {
		t.Errorf("a unit claimed again by its holder: %q, want %q", got, want)
	}
}
