package agent

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

// TestInterruptedHookRunsFirst: a hook whose agent stops under it (the
// sidecar restarted, or the pod replaced) runs again before any other
// event, as Juju's uniter runs the operation it recorded — here
// config-changed, although the relation-changed that became due meanwhile
// comes first in the usual order. In a replaced pod it runs first too, and
// the pod-churn sequence follows.
func TestInterruptedHookRunsFirst(t *testing.T) {
	for _, tc := range []struct {
		name, pod string
		want      []string
	}{
		{"sidecar restarted", "pod-1", []string{"config-changed", "cluster-relation-changed app/1"}},
		{"pod replaced", "pod-2", []string{"config-changed", "upgrade-charm", "config-changed", "start", "cluster-relation-changed app/1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newMemStore(t)
			rel := twoUnits(s)
			dir := charm(t, `
if [ "$JUJU_HOOK_NAME" = config-changed ] && [ -e "$JUJU_CHARM_DIR/block" ] && [ ! -e "$JUJU_CHARM_DIR/blocked" ]; then
	touch "$JUJU_CHARM_DIR/blocked"
	while :; do sleep 0.05; done
fi`)
			cfgFile := filepath.Join(t.TempDir(), "config.yaml")
			changed := make(chan struct{}, 1)
			opts := func(pod string) agentOpt {
				return func(c *Config) {
					c.ConfigFile, c.ConfigChanged, c.Pod = cfgFile, changed, pod
					c.Runner = LocalRunner{ToolsDir: c.ToolsDir, Logger: c.Logger, KillAfter: time.Millisecond}
				}
			}
			a := startAgent(t, s, dir, opts("pod-1"))
			waitFor(t, "app/1 joined", func() error {
				if !slices.Contains(a.hooks(), "cluster-relation-changed app/1") {
					return fmt.Errorf("hooks so far: %q", a.hooks())
				}
				return nil
			})
			waitFor(t, "the agent idle, nothing recorded as running", func() error {
				cur, _ := DecodeCursor(s.State().Cursor("app/0"))
				if cur.Running != nil {
					return fmt.Errorf("%s recorded as running", cur.Running)
				}
				return nil
			})
			if err := os.WriteFile(filepath.Join(dir, "block"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(cfgFile, []byte("colour: green\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			changed <- struct{}{}
			waitFor(t, "config-changed to block", func() error {
				_, err := os.Stat(filepath.Join(dir, "blocked"))
				return err
			})
			// relation-changed becomes due while config-changed runs; then
			// the agent stops, and the hook is killed.
			s.Must(state.UpdateBagOp(rel, "app/1", map[string]string{"k": "v"}))
			a.cancel()
			err := <-a.done
			a.done <- err
			mark := len(a.hooks())

			a2 := startAgent(t, s, dir, opts(tc.pod))
			waitFor(t, "the hooks after the restart", func() error {
				if got := a2.hooks()[mark:]; len(got) < len(tc.want) {
					return fmt.Errorf("hooks after the restart: %q", got)
				}
				return nil
			})
			waitFor(t, "the agent idle", func() error {
				cur, _ := DecodeCursor(s.State().Cursor("app/0"))
				if cur.Running != nil {
					return fmt.Errorf("%s recorded as running", cur.Running)
				}
				return nil
			})
			var got []string
			for _, h := range a2.hooks()[mark:] {
				got = append(got, strings.TrimSpace(h))
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("after the restart the unit ran\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
		})
	}
}

// countingStore counts the commands that only record the hook about to
// run (a lone SetCursor whose cursor differs from the stored one in
// Running alone) and the hooks' own commits.
type countingStore struct {
	Store
	mu              sync.Mutex
	records, hookCs int
}

func (c *countingStore) Apply(ctx context.Context, cmd *storepb.Command) (*storepb.Result, error) {
	if ops := cmd.GetOps(); len(ops) >= 1 {
		last := ops[len(ops)-1]
		prev, next := last.GetSetCursor().GetPrevious(), last.GetSetCursor().GetCursor()
		if pc := last.GetPatchCursor(); pc != nil {
			prev = c.Store.State().Cursor(pc.GetUnit())
			next, _ = state.PatchedCursor(prev, pc)
		}
		if last.GetSetCursor() != nil || last.GetPatchCursor() != nil {
			c.mu.Lock()
			if len(ops) == 1 && recordOnly(prev, next) {
				c.records++
			} else {
				c.hookCs++
			}
			c.mu.Unlock()
		}
	}
	return c.Store.Apply(ctx, cmd)
}

func (c *countingStore) counts() (records, hooks int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.records, c.hookCs
}

func recordOnly(prev, next []byte) bool {
	p, err1 := DecodeCursor(prev)
	n, err2 := DecodeCursor(next)
	if err1 != nil || err2 != nil {
		return false
	}
	p.Running, n.Running = nil, nil
	return bytes.Equal(p.Encode(), n.Encode())
}

// TestHookRecordRidesOnThePreviousCommit: the record of the hook about to
// run costs a commit of its own only when the unit starts from idle; in a
// run of hooks each hook's commit records the next.
func TestHookRecordRidesOnThePreviousCommit(t *testing.T) {
	s := newMemStore(t)
	for i := range 5 {
		s.Must(state.ClaimUnitOp(fmt.Sprintf("app-%d/x", i), fmt.Sprintf("app-%d", i), int64(i), 0))
	}
	s.Must(state.ClaimLeaseOp("app/0", "app-0/x", int64(time.Minute)))
	rel := s.Must(state.EnsureRelationOp("cluster", "app-peers", true, "", "")).GetOps()[0].GetRelationId()
	cs := &countingStore{Store: s}
	dir := charm(t, "")
	a := startAgent(t, s, dir, func(c *Config) { c.Store = cs })
	idle := func(what string, hooks int) {
		t.Helper()
		waitFor(t, what, func() error {
			cur, _ := DecodeCursor(s.State().Cursor("app/0"))
			if n := len(a.hooks()); n < hooks || cur.Running != nil {
				return fmt.Errorf("%d hooks, %v recorded as running", n, cur.Running)
			}
			return nil
		})
	}
	// install, relation-created, leader-elected, config-changed, start,
	// then joined and changed for each of four peers.
	idle("the install sequence", 13)
	if r, h := cs.counts(); r != 1 || h != 13 {
		t.Errorf("install sequence: %d record-only commits and %d hook commits, want 1 and 13", r, h)
	}
	set := map[string]string{"k": "v"}
	s.Must(state.UpdateBagOp(rel, "app/1", set), state.UpdateBagOp(rel, "app/2", set), state.UpdateBagOp(rel, "app/3", set), state.UpdateBagOp(rel, "app/4", set))
	idle("four relation-changed", 17)
	if r, h := cs.counts(); r != 2 || h != 17 {
		t.Errorf("after four changes at once: %d record-only commits and %d hook commits, want 2 and 17", r, h)
	}
}

// TestAUnitInManyRelationsCommitsItsCursorByItsEdits: once the cursor is
// large, each hook's commit carries the edits of the cursor, not the whole
// cursor twice (state.AdvanceCursorOp), and the cursor the store ends with
// is the one the unit decided on: nothing is left due.
func TestAUnitInManyRelationsCommitsItsCursorByItsEdits(t *testing.T) {
	s := newMemStore(t)
	s.Must(state.ClaimUnitOp("app-0/x", "app-0", 0, 0))
	s.Must(state.ClaimLeaseOp("app/0", "app-0/x", int64(time.Minute)))
	for i := range 40 {
		remote := fmt.Sprintf("r%d", i)
		id := s.Must(state.OfferedRelationOp(fmt.Sprintf("db%d", i), "pgsql", remote, "database")).GetOps()[0].GetRelationId()
		s.Must(state.SetRemoteViewOp(id, remote, "m", 1, map[string]string{"k": "v"}, map[string]map[string]string{remote + "/0": {"k": "v"}}))
	}
	cs := &cursorOpStore{Store: s}
	a := startAgent(t, s, charm(t, ""), func(c *Config) { c.Store = cs })
	var cur Cursor
	waitFor(t, "every relation's hooks", func() error {
		cur, _ = DecodeCursor(s.State().Cursor("app/0"))
		if n := len(cur.Relations); n < 40 || cur.Running != nil {
			return fmt.Errorf("%d relations known, %v running", n, cur.Running)
		}
		for id, rc := range cur.Relations {
			if !rc.Peer && (len(rc.Units) == 0 || rc.AppRev == 0) {
				return fmt.Errorf("relation %d: %+v", id, rc)
			}
		}
		return nil
	})
	v := View{State: s.State(), Unit: "app/0", Pod: a.cfg.Pod, ConfigHash: a.configHash(), Now: a.now()}
	if h, due := Next(v, cur); due {
		t.Fatalf("%s still due with the stored cursor", h.FullName())
	}
	patches, wholes, patchBytes, wholeBytes := cs.counts()
	t.Logf("%d patches of %d bytes, %d whole cursors of %d bytes; the cursor is %d bytes", patches, patchBytes, wholes, wholeBytes, len(s.State().Cursor("app/0")))
	if patches < 100 || patchBytes/patches > 400 {
		t.Fatalf("%d patches of %d bytes (%d whole cursors): want the hooks of 40 relations to commit small patches", patches, patchBytes, wholes)
	}
}

// cursorOpStore counts the cursor operations committed, and their sizes.
type cursorOpStore struct {
	Store
	mu                                      sync.Mutex
	patches, wholes, patchBytes, wholeBytes int
}

func (c *cursorOpStore) Apply(ctx context.Context, cmd *storepb.Command) (*storepb.Result, error) {
	for _, op := range cmd.GetOps() {
		c.mu.Lock()
		switch {
		case op.GetPatchCursor() != nil:
			c.patches++
			c.patchBytes += proto.Size(op)
		case op.GetSetCursor() != nil:
			c.wholes++
			c.wholeBytes += proto.Size(op)
		}
		c.mu.Unlock()
	}
	return c.Store.Apply(ctx, cmd)
}

func (c *cursorOpStore) counts() (patches, wholes, patchBytes, wholeBytes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.patches, c.wholes, c.patchBytes, c.wholeBytes
}
