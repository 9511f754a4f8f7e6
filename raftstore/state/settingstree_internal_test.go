package state

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// checkTree checks n's shape: keys sorted across leaves, firsts and counts
// right, no node empty or over sfanout; and that it holds exactly want.
func checkTree(n *snode, want map[string]string) error {
	if n == nil {
		if len(want) != 0 {
			return fmt.Errorf("empty tree, want %d keys", len(want))
		}
		return nil
	}
	var check func(n *snode, depth int) (int, error)
	leafDepth := -1
	check = func(n *snode, depth int) (int, error) {
		if n.size() == 0 || n.size() > sfanout {
			return 0, fmt.Errorf("a node of %d", n.size())
		}
		if n.leaf() {
			if leafDepth == -1 {
				leafDepth = depth
			} else if depth != leafDepth {
				return 0, fmt.Errorf("leaves at depths %d and %d", leafDepth, depth)
			}
			if n.count != len(n.entries) {
				return 0, fmt.Errorf("leaf count %d of %d entries", n.count, len(n.entries))
			}
			return n.count, nil
		}
		if len(n.firsts) != len(n.kids) {
			return 0, fmt.Errorf("%d firsts for %d kids", len(n.firsts), len(n.kids))
		}
		total := 0
		for i, k := range n.kids {
			if n.firsts[i] != k.first() {
				return 0, fmt.Errorf("firsts[%d] %q, kid starts at %q", i, n.firsts[i], k.first())
			}
			c, err := check(k, depth+1)
			if err != nil {
				return 0, err
			}
			total += c
		}
		if total != n.count {
			return 0, fmt.Errorf("inner count %d, kids hold %d", n.count, total)
		}
		return total, nil
	}
	if _, err := check(n, 0); err != nil {
		return err
	}
	var keys []string
	got := map[string]string{}
	n.each(func(k, v string) bool {
		keys = append(keys, k)
		got[k] = v
		return true
	})
	if !slices.IsSorted(keys) || len(got) != len(keys) {
		return fmt.Errorf("keys out of order or repeated: %q", keys)
	}
	if !maps.Equal(got, want) {
		return fmt.Errorf("holds %d keys, want %d (or values differ)", len(got), len(want))
	}
	if n.count != len(want) {
		return fmt.Errorf("count %d, want %d", n.count, len(want))
	}
	for k, v := range want {
		if g, ok := n.get(k); !ok || g != v {
			return fmt.Errorf("get(%q) = %q, %v; want %q", k, g, ok, v)
		}
	}
	return nil
}

// TestSettingsTreeAgainstAMap sets and deletes random keys in a settings
// tree, checking after each change that the tree is well formed and holds
// what a map holds, and that every earlier version still holds what it
// held (versions share their nodes).
func TestSettingsTreeAgainstAMap(t *testing.T) {
	for seed := uint64(1); seed <= 12; seed++ {
		rng := rand.New(rand.NewPCG(seed, 3))
		keyspace := []int{20, 200, 3000}[seed%3]
		type version struct {
			n    *snode
			want map[string]string
		}
		var versions []version
		cur, want := (*snode)(nil), map[string]string{}
		for step := range 3000 {
			k := fmt.Sprintf("k%05d", rng.IntN(keyspace))
			if rng.IntN(5) < 3 { // grow more than shrink, then the reverse
				v := fmt.Sprintf("v%d", step)
				if step > 2000 {
					cur, _, _ = cur.without(k)
					delete(want, k)
				} else {
					var old string
					var had bool
					cur, old, had = cur.with(k, v)
					if w, ok := want[k]; ok != had || w != old {
						t.Fatalf("seed %d step %d: with(%q) old %q %v, want %q %v", seed, step, k, old, had, w, ok)
					}
					want[k] = v
				}
			} else {
				var old string
				var had bool
				cur, old, had = cur.without(k)
				if w, ok := want[k]; ok != had || w != old {
					t.Fatalf("seed %d step %d: without(%q) old %q %v, want %q %v", seed, step, k, old, had, w, ok)
				}
				delete(want, k)
			}
			if err := checkTree(cur, want); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			if step%50 == 0 {
				versions = append(versions, version{cur, maps.Clone(want)})
			}
		}
		for i, v := range versions {
			if err := checkTree(v.n, v.want); err != nil {
				t.Fatalf("seed %d: version %d changed: %v", seed, i, err)
			}
		}
	}
}

func TestBuildSettingsTree(t *testing.T) {
	for _, n := range []int{0, 1, sfanout, sfanout + 1, 1000, 40000} {
		var entries []setting
		want := map[string]string{}
		for i := range n {
			k := fmt.Sprintf("%08d", i)
			entries = append(entries, setting{k, strings.Repeat("v", i%5)})
			want[k] = strings.Repeat("v", i%5)
		}
		if err := checkTree(buildSettingsTree(entries), want); err != nil {
			t.Errorf("%d entries: %v", n, err)
		}
	}
}
