package state_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/state/statetest"
)

// BenchmarkBagMemory reports the live heap a unit's bag takes in the
// state: units × relations bags, each with the three address keys the
// unit agent writes into every bag of its unit (the shape of a large
// application whose units have written nothing else).
func BenchmarkBagMemory(b *testing.B) {
	const units, relations = 10, 1000
	for range b.N {
		s := statetest.New(b, "app")
		for r := range relations {
			s.Must(state.EnsureRelationOp(fmt.Sprintf("db%d", r), "db", false, fmt.Sprintf("remote%d", r), "db"))
		}
		var ids []int64
		for _, r := range s.State().Relations() {
			ids = append(ids, r.ID)
		}
		var names []string
		for u := range units {
			names = append(names, s.Claim(fmt.Sprintf("app-%d/m", u), fmt.Sprintf("app-%d", u), int64(u)))
		}
		before := liveHeap() // the bags alone
		for u, unit := range names {
			for _, id := range ids {
				s.Must(state.UpdateBagOp(id, unit, map[string]string{
					"ingress-address": fmt.Sprintf("10.1.%d.%d", u/250, u%250+1),
					"egress-subnets":  fmt.Sprintf("10.1.%d.%d/32", u/250, u%250+1),
					"private-address": fmt.Sprintf("10.1.%d.%d", u/250, u%250+1),
				}))
			}
		}
		st := s.State()
		after := liveHeap()
		b.ReportMetric(float64(after-before)/float64(units*len(ids)), "B/bag")
		runtime.KeepAlive(st)
		runtime.KeepAlive(s)
	}
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
