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

// BenchmarkLargeBag reports the live heap a key of a large bag takes in
// the state (20,000 keys of 16-byte values in one bag), and what a write
// to a bag of 1,000 keys costs: one key set and one deleted, as the
// latency experiment of the bench harness writes.
func BenchmarkLargeBag(b *testing.B) {
	b.Run("memory", func(b *testing.B) {
		const keys = 20000
		for range b.N {
			data := map[string]string{}
			for i := range keys {
				data[fmt.Sprintf("key-%06d", i)] = fmt.Sprintf("value-%09d", i)
			}
			before := liveHeap()
			s := state.SettingsOf(data)
			after := liveHeap()
			b.ReportMetric(float64(after-before)/keys, "B/key")
			runtime.KeepAlive(s)
			runtime.KeepAlive(data)
		}
	})
	b.Run("write", func(b *testing.B) {
		s := statetest.New(b, "app")
		s.Must(state.EnsureRelationOp("db0", "db", false, "remote0", "db"))
		id := s.State().Relations()[0].ID
		unit := s.Claim("app-0/m", "app-0", 0)
		const keep = 1000
		for i := range keep {
			s.Must(state.UpdateBagOp(id, unit, map[string]string{fmt.Sprintf("w%02d-%06d", i%64, i): "x"}))
		}
		i := keep
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			s.Must(state.UpdateBagOp(id, unit, map[string]string{fmt.Sprintf("w%02d-%06d", i%64, i): "x"}, fmt.Sprintf("w%02d-%06d", (i-keep)%64, i-keep)))
			i++
		}
	})
}
