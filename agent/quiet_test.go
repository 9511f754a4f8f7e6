package agent

import (
	"fmt"
	"math/rand"
	"reflect"
	"testing"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
)

// TestRelationQuietAgreesWithRelationEvents: dueHooks skips a relation
// that relationQuiet calls quiet, so relationEvents must then have nothing
// to yield and no cursor change to make. Random worlds (units claimed,
// released and removed, peer and remote bags written, remote units coming
// and going, relations removed, leadership moving) and cursors drained to
// random points check it for every relation at every step. Each agent's
// quietMemo, asked at every step too, must agree with relationQuiet, also
// when a cursor goes back to an earlier one.
func TestRelationQuietAgreesWithRelationEvents(t *testing.T) {
	quiet, busy, remembered := 0, 0, 0
	for seed := range int64(60) {
		rng := rand.New(rand.NewSource(seed))
		w := newWorld(t)
		w.units(1 + rng.Intn(3))
		peers := w.peers()
		rels := []int64{peers}
		for i := range 1 + rng.Intn(2) {
			rels = append(rels, w.do(state.OfferedRelationOp(fmt.Sprintf("db%d", i), "pgsql", fmt.Sprintf("pg%d", i), "database")).GetOps()[0].GetRelationId())
		}
		w.lead("app/0")
		agents := []*unitAgent{{w: w, unit: "app/0", pod: "p", config: "c"}, {w: w, unit: "app/1", pod: "p", config: "c"}}
		memos := []*quietMemo{newQuietMemo(), newQuietMemo()}
		earlier := make([][]Cursor, len(agents))
		nextUnit := int64(3)
		for step := range 40 {
			switch rng.Intn(6) {
			case 0:
				var live []string
				for _, u := range w.State().Units() {
					if u.State != state.UnitRemoved {
						live = append(live, u.Name)
					}
				}
				w.do(state.UpdateBagOp(peers, live[rng.Intn(len(live))], map[string]string{"k": fmt.Sprint(step)}))
			case 1:
				w.do(state.UpdateBagOp(peers, "app", map[string]string{"k": fmt.Sprint(step)}))
			case 2:
				if len(rels) == 1 {
					continue
				}
				i := 1 + rng.Intn(len(rels)-1)
				units := map[string]map[string]string{}
				for u := range rng.Intn(3) {
					units[fmt.Sprintf("pg%d/%d", i-1, u)] = map[string]string{"k": fmt.Sprint(rng.Intn(2))}
				}
				w.do(state.SetRemoteViewOp(rels[i], fmt.Sprintf("pg%d", i-1), "m", uint64(step+1), map[string]string{"a": fmt.Sprint(rng.Intn(2))}, units))
			case 3:
				w.do(state.ClaimUnitOp(fmt.Sprintf("app-%d/x", nextUnit), fmt.Sprintf("app-%d", nextUnit), nextUnit, 0))
				nextUnit++
			case 4:
				u := fmt.Sprintf("app/%d", 2+rng.Intn(int(nextUnit)-1))
				if unit, ok := w.State().Unit(u); ok && unit.State != state.UnitRemoved {
					w.Must(state.ReleaseUnitOp(u, "", "scaled down"), state.RemoveUnitOp(u, 0, "removed"))
				}
			case 5:
				if len(rels) > 1 && rng.Intn(3) == 0 {
					w.do(state.RemoveRelationOp(rels[len(rels)-1]))
					rels = rels[:len(rels)-1]
				}
			}
			for i, a := range agents {
				if rng.Intn(8) == 0 && len(earlier[i]) > 0 {
					// The cursor goes back to an earlier one (a hook's
					// commit lost, say): what the memo holds of the later
					// one must not count.
					a.cur = earlier[i][rng.Intn(len(earlier[i]))]
				}
				earlier[i] = append(earlier[i], a.cur)
				// Told of some, or (half the time) all, of what is due.
				n := rng.Intn(4)
				if rng.Intn(2) == 0 {
					n = 1000
				}
				for range n {
					h, ok := Next(a.view(), a.cur)
					if !ok {
						break
					}
					a.cur = h.Next
				}
				v := a.view()
				leader := v.State.Lease().HeldBy(a.unit, v.Now)
				rs := v.State.Relations()
				for _, r := range rs {
					before := a.cur.clone()
					q := relationQuiet(a.cur.Relations[r.ID], v, r, leader)
					if m := memos[i].relationQuiet(a.cur.Relations[r.ID], v, r, leader, len(rs)); m != q {
						t.Fatalf("seed %d step %d, %s relation %d: relationQuiet says %v, the memo %v", seed, step, a.unit, r.ID, q, m)
					}
					if !q {
						busy++
						continue
					}
					quiet++
					var yielded []string
					after, _ := relationEvents(a.cur, v, r, leader, func(h Hook) bool {
						yielded = append(yielded, h.FullName()+" "+h.RemoteUnit)
						return true
					})
					if len(yielded) > 0 || !reflect.DeepEqual(after, before) {
						t.Fatalf("seed %d step %d, %s relation %d: quiet, but relationEvents yields %v and moves the cursor from %s to %s",
							seed, step, a.unit, r.ID, yielded, before.Encode(), after.Encode())
					}
				}
			}
		}
		remembered += memos[0].hits + memos[1].hits
	}
	if quiet == 0 || busy == 0 {
		t.Fatalf("%d quiet and %d busy relations seen: the worlds do not exercise both", quiet, busy)
	}
	if remembered < quiet/4 {
		t.Fatalf("the memo gave %d of %d quiet verdicts", remembered, quiet)
	}
	t.Logf("%d quiet (%d of them remembered), %d not", quiet, remembered, busy)
}
