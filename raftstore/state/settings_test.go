package state

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSettingsMergeMatchesAMap applies random sets and deletes both to
// Settings and to a plain map, and checks after every step that they hold
// the same keys, values, length and size, that a merge reports a change
// exactly when the map changed, and that every earlier version still holds
// what it held (a merge never modifies the Settings it starts from).
//
// With 12 keys to draw from, the Settings go back and forth across the
// size kept in a slice (smallSettings) and the tree above it; with 40 they
// stay mostly in the tree.
func TestSettingsMergeMatchesAMap(t *testing.T) {
	for _, keys := range []int{12, 40} {
		t.Run(fmt.Sprintf("%d keys", keys), func(t *testing.T) { settingsMergeMatchesAMap(t, keys) })
	}
}

func settingsMergeMatchesAMap(t *testing.T, keys int) {
	rng := rand.New(rand.NewPCG(1, uint64(keys)))
	crossings, wasSmall := 0, true
	type version struct {
		s    Settings
		want map[string]string
	}
	var versions []version
	cur, model := Settings{}, map[string]string{}
	key := func() string { return fmt.Sprintf("k%02d", rng.IntN(keys)) }
	for step := range 2000 {
		set := map[string]string{}
		for range rng.IntN(4) {
			set[key()] = fmt.Sprintf("v%d", rng.IntN(3)) // often the value it already has
		}
		var del []string
		for range rng.IntN(3) {
			if k := key(); set[k] == "" {
				del = append(del, k)
			}
		}
		before := maps.Clone(model)
		maps.Copy(model, set)
		for _, k := range del {
			delete(model, k)
		}
		next, changed, err := cur.merge(set, del)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if changed != !maps.Equal(before, model) {
			t.Fatalf("step %d: changed=%v, but the map went from %v to %v", step, changed, before, model)
		}
		checkSettings(t, fmt.Sprintf("step %d", step), next, model)
		versions = append(versions, version{next, maps.Clone(model)})
		if small := next.t == nil; small != wasSmall {
			crossings++
			wasSmall = small
		}
		if (next.t == nil) != (len(model) <= smallSettings) {
			t.Fatalf("step %d: %d keys kept in a tree: %v", step, len(model), next.t != nil)
		}
		cur = next
	}
	if keys <= 2*smallSettings && crossings < 20 {
		t.Fatalf("the Settings crossed between slice and tree %d times only", crossings)
	}
	for i, v := range versions {
		checkSettings(t, fmt.Sprintf("version %d, later", i), v.s, v.want)
	}
}

func checkSettings(t *testing.T, what string, s Settings, want map[string]string) {
	t.Helper()
	if got := s.Map(); !maps.Equal(got, want) {
		t.Fatalf("%s: holds %v, want %v", what, got, want)
	}
	size := 0
	for k, v := range want {
		size += len(k) + len(v)
		if got, ok := s.Get(k); !ok || got != v {
			t.Fatalf("%s: Get(%q) = %q, %v; want %q", what, k, got, ok, v)
		}
	}
	if s.Len() != len(want) || s.Size() != size {
		t.Fatalf("%s: Len %d Size %d, want %d and %d", what, s.Len(), s.Size(), len(want), size)
	}
	var keys []string
	for k := range s.All() {
		keys = append(keys, k)
	}
	if !slices.IsSorted(keys) || len(keys) != len(want) {
		t.Fatalf("%s: All yields %v, want the %d keys in order", what, keys, len(want))
	}
	if _, ok := s.Get("absent"); ok || s.Value("absent") != "" {
		t.Fatalf("%s: an absent key is found", what)
	}
}

func TestSettingsMergeRefusesBadKeysAndChangesNothing(t *testing.T) {
	s := SettingsOf(map[string]string{"a": "1"})
	for _, tc := range []struct {
		set map[string]string
		del []string
	}{
		{map[string]string{"": "x"}, nil},
		{nil, []string{""}},
		{map[string]string{"b": "2"}, []string{"b"}},
	} {
		next, changed, err := s.merge(tc.set, tc.del)
		if err == nil || !errors.Is(err, ErrInvalid) || changed || next.Len() != 0 {
			t.Errorf("merge(%v, %v) = %v, %v, %v; want an invalid-argument error", tc.set, tc.del, next.Map(), changed, err)
		}
	}
	checkSettings(t, "after refused merges", s, map[string]string{"a": "1"})
	empty, changed, err := s.merge(nil, []string{"a"})
	if err != nil || !changed {
		t.Fatalf("deleting the last key: %v %v", changed, err)
	}
	checkSettings(t, "emptied", empty, map[string]string{})
	if empty.Map() != nil || (Settings{}).Map() != nil {
		t.Fatal("empty Settings should give a nil map")
	}
}
