package agent

import (
	"fmt"
	"testing"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/state/statetest"
	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

// BenchmarkNextAtScale: the decision every unit makes after every entry its
// member applies, at the size of the scale experiment (make bench-scale):
// 100 units, a peer relation and 999 relations to other applications whose
// application bags hold 100 keys each. The unit has seen everything, so
// nothing is due.
func BenchmarkNextAtScale(b *testing.B) { benchmarkNextAtScale(b, false, false) }

// BenchmarkNextAtScaleWithLocalBags: the same world, with every local
// unit's bag set in every relation (what charms do), so that a relation
// to another application holds the local units' 100 bags besides the
// remote unit's.
func BenchmarkNextAtScaleWithLocalBags(b *testing.B) { benchmarkNextAtScale(b, true, false) }

// BenchmarkNextAtScaleRemembered: the world with the local bags, between
// two states that differ in one bag of one relation (a stream of writes
// to another unit's bag), the agent's memo of quiet relations in use, as
// in the hook loop.
func BenchmarkNextAtScaleRemembered(b *testing.B) { benchmarkNextAtScale(b, true, true) }

func benchmarkNextAtScale(b *testing.B, localBags, memo bool) {
	s := statetest.New(b, "app")
	s.SetNow(t0)
	for i := range 100 {
		s.Must(state.ClaimUnitOp(fmt.Sprintf("app-%d/x", i), fmt.Sprintf("app-%d", i), int64(i), 0))
	}
	s.Must(state.EnsureRelationOp("peers", "app-peers", true, "", ""))
	for i := range 999 {
		remote := fmt.Sprintf("r%d", i)
		id := s.Must(state.OfferedRelationOp(fmt.Sprintf("ep%d", i%10), "iface", remote, "ep")).GetOps()[0].GetRelationId()
		app := map[string]string{}
		for k := range 100 {
			app[fmt.Sprintf("key-%d", k)] = "value"
		}
		s.Must(state.SetRemoteViewOp(id, remote, remote+"-model", 1, app, map[string]map[string]string{remote + "/0": {"k": "v"}}))
		if localBags {
			ops := make([]*storepb.Op, 0, 100)
			for u := range 100 {
				ops = append(ops, state.UpdateBagOp(id, fmt.Sprintf("app/%d", u), map[string]string{"ingress": "10.0.0.1"}))
			}
			s.Must(ops...)
		}
	}
	v := View{State: s.State(), Unit: "app/5", Pod: "p", ConfigHash: "c", Now: s.Now()}
	var cur Cursor
	for i := 0; ; i++ {
		h, ok := Next(v, cur)
		if !ok {
			break
		}
		if i > 10000 {
			b.Fatal("hooks never settle")
		}
		cur = h.Next
	}
	states := []*state.State{v.State}
	if memo {
		v.quiet = newQuietMemo()
		s.Must(state.UpdateBagOp(2, "app/7", map[string]string{"ingress": "10.0.0.2"}))
		states = append(states, s.State())
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		v.State = states[i%len(states)]
		i++
		if h, ok := Next(v, cur); ok {
			b.Fatalf("%s due", h.FullName())
		}
	}
}

// BenchmarkDecodeCursorAtScale: reading the stored cursor of a unit that
// knows the relations of BenchmarkNextAtScale.
func BenchmarkDecodeCursorAtScale(b *testing.B) {
	c := Cursor{Installed: true, Started: true, Relations: map[int64]*RelationCursor{}}
	units := map[string]uint64{}
	for i := range 99 {
		units[fmt.Sprintf("app/%d", i)] = uint64(1000 + i)
	}
	c.Relations[1] = &RelationCursor{Endpoint: "peers", Peer: true, Created: true, Units: units}
	for i := range 999 {
		c.Relations[int64(i+2)] = &RelationCursor{Endpoint: fmt.Sprintf("ep%d", i%10), Created: true, AppRev: uint64(5000 + i), Units: map[string]uint64{fmt.Sprintf("r%d/0", i): uint64(6000 + i)}}
	}
	enc := c.Encode()
	b.ReportMetric(float64(len(enc)), "bytes")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeCursor(enc); err != nil {
			b.Fatal(err)
		}
	}
}
