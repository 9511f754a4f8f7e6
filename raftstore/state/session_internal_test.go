package state

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

// modelRecord is what record must return, computed the plain way: every
// result kept copied, the new one added, all sorted by sequence.
func modelRecord(results []sessionResult, lowest uint64, req *storepb.ClientRequest, res *storepb.Result) []sessionResult {
	lowest = max(lowest, req.GetLowestPending())
	var next []sessionResult
	for _, r := range results {
		if r.seq >= lowest {
			next = append(next, r)
		}
	}
	if req.GetSequence() >= lowest {
		enc, _ := proto.Marshal(res)
		next = append(next, sessionResult{seq: req.GetSequence(), result: enc})
		slices.SortStableFunc(next, func(a, b sessionResult) int {
			switch {
			case a.seq < b.seq:
				return -1
			case a.seq > b.seq:
				return 1
			}
			return 0
		})
	}
	return next
}

func sameResults(a, b []sessionResult) error {
	if len(a) != len(b) {
		return fmt.Errorf("%d results, want %d", len(a), len(b))
	}
	for i := range a {
		if a[i].seq != b[i].seq || !bytes.Equal(a[i].result, b[i].result) {
			return fmt.Errorf("result %d: seq %d %x, want seq %d %x", i, a[i].seq, a[i].result, b[i].seq, b[i].result)
		}
	}
	return nil
}

// TestSessionVersionsKeepTheirResults records commands on a client's
// session the way the state machine does (mostly on the newest version, in
// order) and the ways it does not (on an older version again, out of
// order, a lowest pending number that jumps), and checks after every step
// that every version made so far still holds exactly the results it was
// made with: versions share their results array, and no version may see
// another's writes.
func TestSessionVersionsKeepTheirResults(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		type version struct {
			s    *session
			want []sessionResult
		}
		versions := []version{{s: &session{}}}
		var seq uint64
		for step := 0; step < 400; step++ {
			base := versions[len(versions)-1]
			if rng.IntN(10) == 0 {
				base = versions[rng.IntN(len(versions))] // a fork
			}
			s := seq + 1
			switch rng.IntN(10) {
			case 0:
				s = uint64(rng.IntN(int(seq) + 1)) // late, maybe below lowest
			case 1:
				s = seq + 1 + uint64(rng.IntN(3)) // a gap
			}
			seq = max(seq, s)
			lowest := base.s.lowestPending
			if rng.IntN(3) == 0 && s > lowest {
				lowest += uint64(rng.IntN(int(s-lowest) + 1))
			}
			req := &storepb.ClientRequest{ClientId: "c", Sequence: s, LowestPending: lowest}
			res := &storepb.Result{Index: uint64(step + 1)}
			want := modelRecord(base.s.results(), base.s.lowestPending, req, res)
			got := base.s.record(req, time.Unix(int64(step), 0), res)
			versions = append(versions, version{s: got, want: want})
			for i, v := range versions {
				if err := sameResults(v.s.results(), v.want); err != nil {
					t.Fatalf("seed %d, step %d: version %d: %v", seed, step, i, err)
				}
			}
		}
	}
}

// TestRecordingACommandCopiesNoResults checks that recording a command
// with many others in flight does not copy their results: the allocations
// per command stay the same whether 1 or 200 commands are in flight.
func TestRecordingACommandCopiesNoResults(t *testing.T) {
	allocs := func(inFlight int) float64 {
		s := &session{}
		var seq uint64
		res := &storepb.Result{Index: 1}
		next := func() {
			seq++
			lowest := uint64(0)
			if seq > uint64(inFlight) {
				lowest = seq - uint64(inFlight) + 1
			}
			s = s.record(&storepb.ClientRequest{ClientId: "c", Sequence: seq, LowestPending: lowest}, time.Time{}, res)
		}
		for range 4 * inFlight {
			next()
		}
		return testing.AllocsPerRun(1000, next)
	}
	one, many := allocs(1), allocs(200)
	if many > one+0.5 {
		t.Errorf("recording a command allocates %.2f times with 200 in flight, %.2f with 1", many, one)
	}
}

func BenchmarkSessionRecord64InFlight(b *testing.B) {
	s := &session{}
	res := &storepb.Result{Index: 1, Ops: []*storepb.OpResult{{}}}
	var seq uint64
	b.ReportAllocs()
	for b.Loop() {
		seq++
		lowest := uint64(0)
		if seq > 64 {
			lowest = seq - 63
		}
		s = s.record(&storepb.ClientRequest{ClientId: "c", Sequence: seq, LowestPending: lowest}, time.Time{}, res)
	}
}
