package state

import (
	"fmt"
	"iter"
	"maps"

	iradix "github.com/hashicorp/go-immutable-radix/v2"

	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

// Settings is an immutable string map as charms see it: a bag, a unit's
// charm state, the leader settings. The zero value is empty.
//
// A change makes a new Settings that shares all unchanged keys with the
// old one, so writing k keys to a bag of n keys costs O(k log n) and not a
// copy of the bag: the state machine applies every write on every member,
// and a bag may hold thousands of keys.
type Settings struct {
	t    *iradix.Tree[string]
	size int // bytes of all keys and values
}

// SettingsOf returns Settings holding a copy of m.
func SettingsOf(m map[string]string) Settings {
	if len(m) == 0 {
		return Settings{}
	}
	txn := iradix.New[string]().Txn()
	size := 0
	for k, v := range m {
		txn.Insert([]byte(k), v)
		size += len(k) + len(v)
	}
	return Settings{t: txn.Commit(), size: size}
}

// Len returns the number of keys.
func (s Settings) Len() int {
	if s.t == nil {
		return 0
	}
	return s.t.Len()
}

// Size returns the bytes of all keys and values together.
func (s Settings) Size() int { return s.size }

// Get returns the value of key k.
func (s Settings) Get(k string) (string, bool) {
	if s.t == nil {
		return "", false
	}
	return s.t.Get([]byte(k))
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
			return
		}
		it := s.t.Root().Iterator()
		for k, v, ok := it.Next(); ok; k, v, ok = it.Next() {
			if !yield(string(k), v) {
				return
			}
		}
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
	t := s.t
	if t == nil {
		t = iradix.New[string]()
	}
	txn := t.Txn()
	size, changed := s.size, false
	for k, v := range set {
		old, ok := txn.Get([]byte(k))
		if ok && old == v {
			continue
		}
		if ok {
			size -= len(k) + len(old)
		}
		txn.Insert([]byte(k), v)
		size += len(k) + len(v)
		changed = true
	}
	for _, k := range del {
		if old, ok := txn.Delete([]byte(k)); ok {
			size -= len(k) + len(old)
			changed = true
		}
	}
	if !changed {
		return s, false, nil
	}
	next := Settings{t: txn.Commit(), size: size}
	if next.t.Len() == 0 {
		next = Settings{}
	}
	return next, true, nil
}
