package state

import (
	"fmt"
	"iter"
	"maps"
	"slices"
	"strings"
	"unique"

	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

// Settings is an immutable string map as charms see it: a bag, a unit's
// charm state, the leader settings. The zero value is empty.
//
// A change makes a new Settings that shares all unchanged keys with the
// old one, so writing k keys to a bag of n keys costs O(k log n) and not a
// copy of the bag: the state machine applies every write on every member,
// and a bag may hold thousands of keys.
//
// Most bags are small: a unit's bag in a relation it has written nothing
// to holds the three address keys its agent puts there. Up to smallSettings
// keys are kept in a sorted slice, copied on change (at that size the copy
// is cheaper than a tree's path); a larger map is a B+ tree (snode).
type Settings struct {
	t     *snode    // more than smallSettings keys
	small []setting // at most smallSettings keys, sorted; never changed once made
	size  int       // bytes of all keys and values
}

// setting is one key and value of a small Settings.
type setting struct{ k, v string }

// internMax is the longest key or value a bag keeps as one shared copy.
const internMax = 64

// intern returns the one shared copy of a short s. Bags repeat their keys
// (every unit's agent sets ingress-address, egress-subnets and
// private-address in each of its bags) and many of their values (a unit's
// address, in every relation it is in): each command decodes its own
// copies, which the state would otherwise keep, a copy per bag.
func intern(s string) string {
	if len(s) > internMax {
		return s
	}
	return unique.Make(s).Value()
}

// smallSettings is the most keys a Settings keeps in a slice.
const smallSettings = 8

// SettingsOf returns Settings holding a copy of m.
func SettingsOf(m map[string]string) Settings {
	if len(m) == 0 {
		return Settings{}
	}
	entries := make([]setting, 0, len(m))
	size := 0
	for k, v := range m {
		entries = append(entries, setting{intern(k), intern(v)})
		size += len(k) + len(v)
	}
	sortSettings(entries)
	if len(entries) <= smallSettings {
		return Settings{small: entries, size: size}
	}
	return Settings{t: buildSettingsTree(entries), size: size}
}

// sortSettings sorts entries by key.
func sortSettings(entries []setting) {
	slices.SortFunc(entries, func(a, b setting) int { return strings.Compare(a.k, b.k) })
}

// findSetting returns where k is, or would be, in entries (sorted by key).
func findSetting(entries []setting, k string) (int, bool) {
	return slices.BinarySearchFunc(entries, k, func(e setting, k string) int { return strings.Compare(e.k, k) })
}

// Len returns the number of keys.
func (s Settings) Len() int {
	if s.t == nil {
		return len(s.small)
	}
	return s.t.count
}

// Size returns the bytes of all keys and values together.
func (s Settings) Size() int { return s.size }

// Get returns the value of key k.
func (s Settings) Get(k string) (string, bool) {
	if s.t == nil {
		i, ok := s.find(k)
		if !ok {
			return "", false
		}
		return s.small[i].v, true
	}
	return s.t.get(k)
}

// find returns where k is, or would be, in s.small.
func (s Settings) find(k string) (int, bool) {
	return findSetting(s.small, k)
}

// Value returns the value of key k, "" if it is not set.
func (s Settings) Value(k string) string {
	v, _ := s.Get(k)
	return v
}

// All yields every key and value in key order.
func (s Settings) All() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		if s.t == nil {
			for _, e := range s.small {
				if !yield(e.k, e.v) {
					return
				}
			}
			return
		}
		s.t.each(yield)
	}
}

// Map returns a new map with every key and value; nil if there are none.
func (s Settings) Map() map[string]string {
	if s.Len() == 0 {
		return nil
	}
	out := make(map[string]string, s.Len())
	maps.Insert(out, s.All())
	return out
}

// String formats s as fmt formats a map: map[k1:v1 k2:v2], keys sorted.
func (s Settings) String() string { return fmt.Sprint(s.Map()) }

// merge returns s with set applied and then del removed, and whether that
// differs from s. s is not modified.
func (s Settings) merge(set map[string]string, del []string) (Settings, bool, *CommandError) {
	for _, k := range del {
		if _, ok := set[k]; ok {
			return Settings{}, false, opErr(storepb.ErrorCode_INVALID, "key %q is both set and deleted", k)
		}
		if k == "" {
			return Settings{}, false, opErr(storepb.ErrorCode_INVALID, "empty key")
		}
	}
	for k := range set {
		if k == "" {
			return Settings{}, false, opErr(storepb.ErrorCode_INVALID, "empty key")
		}
	}
	if s.t == nil && len(s.small)+len(set) <= smallSettings {
		return s.mergeSmall(set, del)
	}
	t := s.t
	if t == nil {
		t = s.tree()
	}
	size, changed := s.size, false
	for k, v := range set {
		old, ok := t.get(k)
		if ok && old == v {
			continue
		}
		if ok {
			size -= len(k) + len(old)
		}
		t, _, _ = t.with(intern(k), intern(v))
		size += len(k) + len(v)
		changed = true
	}
	for _, k := range del {
		var old string
		var ok bool
		if t, old, ok = t.without(k); ok {
			size -= len(k) + len(old)
			changed = true
		}
	}
	if !changed {
		return s, false, nil
	}
	next := Settings{t: t, size: size}
	if next.Len() <= smallSettings {
		next = next.asSmall()
	}
	return next, true, nil
}

// mergeSmall is merge for a small s that stays small: a new sorted slice.
func (s Settings) mergeSmall(set map[string]string, del []string) (Settings, bool, *CommandError) {
	changed := false
	for k, v := range set {
		if old, ok := s.Get(k); !ok || old != v {
			changed = true
			break
		}
	}
	if !changed {
		for _, k := range del {
			if _, ok := s.find(k); ok {
				changed = true
				break
			}
		}
	}
	if !changed {
		return s, false, nil
	}
	next := Settings{small: make([]setting, 0, len(s.small)+len(set))}
	for _, e := range s.small {
		if _, ok := set[e.k]; ok || slices.Contains(del, e.k) {
			continue
		}
		next.small = append(next.small, e)
		next.size += len(e.k) + len(e.v)
	}
	for k, v := range set {
		next.small = append(next.small, setting{intern(k), intern(v)})
		next.size += len(k) + len(v)
	}
	if len(next.small) == 0 {
		return Settings{}, true, nil
	}
	sortSettings(next.small)
	next.small = slices.Clip(next.small)
	return next, true, nil
}

// tree returns s's keys in a tree.
func (s Settings) tree() *snode {
	return buildSettingsTree(s.small)
}

// asSmall returns s, of at most smallSettings keys, kept in a slice.
func (s Settings) asSmall() Settings {
	if s.Len() == 0 {
		return Settings{}
	}
	out := Settings{small: make([]setting, 0, s.Len()), size: s.size}
	for k, v := range s.All() {
		out.small = append(out.small, setting{k, v})
	}
	return out
}
