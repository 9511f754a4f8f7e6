package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
)

// TestRelationViewsFollowTheHooks checks relation-ids and relation-list
// hook by hook, as Juju's uniter keeps them: no relation during install; a
// relation from its relation-created on, with no members yet; a remote
// unit listed from its relation-joined on (inside that hook too), and no
// longer inside its relation-departed nor after it.
func TestRelationViewsFollowTheHooks(t *testing.T) {
	s := newMemStore(t)
	s.Must(state.ClaimUnitOp("app-0/x", "app-0", 0, 0), state.ClaimUnitOp("app-1/x", "app-1", 1, 0), state.ClaimUnitOp("app-2/x", "app-2", 2, 0))
	s.Must(state.EnsureRelationOp("cluster", "app-peers", true, "", ""))
	dir := charm(t, `
ids=$(relation-ids cluster | tr '\n' ' ')
list=""
for id in $ids; do list="$list$(relation-list -r "$id" | tr '\n' ' ')"; done
echo "$JUJU_HOOK_NAME ${JUJU_REMOTE_UNIT:-} ids=[${ids% }] list=[${list% }]" >> "$JUJU_CHARM_DIR/views.log"`)
	startAgent(t, s, dir)
	views := func() []string {
		b, _ := os.ReadFile(filepath.Join(dir, "views.log"))
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	waitFor(t, "both peers joined and changed", func() error {
		if v := views(); !slices.Contains(v, "cluster-relation-changed app/2 ids=[cluster:0] list=[app/1 app/2]") {
			return fmt.Errorf("views so far:\n%s", strings.Join(v, "\n"))
		}
		return nil
	})
	want := []string{
		"install  ids=[] list=[]",
		"cluster-relation-created  ids=[cluster:0] list=[]",
		"leader-elected  ids=[cluster:0] list=[]",
		"config-changed  ids=[cluster:0] list=[]",
		"start  ids=[cluster:0] list=[]",
		"cluster-relation-joined app/1 ids=[cluster:0] list=[app/1]",
		"cluster-relation-changed app/1 ids=[cluster:0] list=[app/1]",
		"cluster-relation-joined app/2 ids=[cluster:0] list=[app/1 app/2]",
		"cluster-relation-changed app/2 ids=[cluster:0] list=[app/1 app/2]",
	}
	if got := views(); !slices.Equal(got, want) {
		t.Fatalf("hook by hook:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	s.Must(state.ReleaseUnitOp("app/1", "", "scaled down"), state.RemoveUnitOp("app/1", 0, "removed"))
	waitFor(t, "app/1 to depart", func() error {
		if v := views(); len(v) <= len(want) {
			return fmt.Errorf("views so far:\n%s", strings.Join(v, "\n"))
		}
		return nil
	})
	s.Must(state.UpdateBagOp(0, "app/2", map[string]string{"k": "v"}))
	waitFor(t, "app/2's change", func() error {
		if v := views(); len(v) <= len(want)+1 {
			return fmt.Errorf("views so far:\n%s", strings.Join(v, "\n"))
		}
		return nil
	})
	after := views()[len(want):]
	wantAfter := []string{
		"cluster-relation-departed app/1 ids=[cluster:0] list=[app/2]",
		"cluster-relation-changed app/2 ids=[cluster:0] list=[app/2]",
	}
	if !slices.Equal(after, wantAfter) {
		t.Fatalf("after app/1 was removed:\n%s\nwant:\n%s", strings.Join(after, "\n"), strings.Join(wantAfter, "\n"))
	}
}
