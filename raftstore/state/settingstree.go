package state

import (
	"slices"
)

// A settings tree holds the keys of a Settings too large for a slice: an
// immutable B+ tree, keys in byte order (the order snapshots and state
// hashes write them in), whose changes copy the path from the root to
// one leaf and share everything else with the tree before. At fanout 16 a
// change to a bag of 1,000 keys copies three nodes, about 1 KB in a few
// allocations, and a key costs some 45 bytes besides its strings; the
// radix tree this replaced copied five to ten nodes, each with a channel
// of its own, and kept some 400 bytes a key (BenchmarkLargeBag).
type snode struct {
	// A leaf holds entries, sorted by key; an inner node holds kids, and
	// firsts[i] is the smallest key under kids[i].
	entries []setting
	kids    []*snode
	firsts  []string
	count   int // entries under this node
}

const (
	// sfanout is the most entries of a leaf, or kids of an inner node.
	sfanout = 16
	// smerge: a node left with fewer than this after a deletion is merged
	// with a neighbour when the two fit in one.
	smerge = sfanout / 4
)

func (n *snode) leaf() bool { return n.kids == nil }

// size is the number of entries of a leaf or kids of an inner node.
func (n *snode) size() int {
	if n.leaf() {
		return len(n.entries)
	}
	return len(n.kids)
}

func (n *snode) first() string {
	if n.leaf() {
		return n.entries[0].k
	}
	return n.firsts[0]
}

// buildSettingsTree returns a tree of entries, sorted by key without
// duplicates; nil for none.
func buildSettingsTree(entries []setting) *snode {
	if len(entries) == 0 {
		return nil
	}
	per := sfanout * 3 / 4 // room in every node for the next insertions
	var level []*snode
	for i := 0; i < len(entries); i += per {
		e := slices.Clone(entries[i:min(i+per, len(entries))])
		level = append(level, &snode{entries: e, count: len(e)})
	}
	for len(level) > 1 {
		var up []*snode
		for i := 0; i < len(level); i += per {
			up = append(up, newInner(slices.Clone(level[i:min(i+per, len(level))])))
		}
		level = up
	}
	return level[0]
}

func newInner(kids []*snode) *snode {
	n := &snode{kids: kids, firsts: make([]string, len(kids))}
	for i, k := range kids {
		n.firsts[i] = k.first()
		n.count += k.count
	}
	return n
}

// kidFor returns the index of the kid of inner node n whose range holds k.
func (n *snode) kidFor(k string) int {
	i, found := slices.BinarySearch(n.firsts, k)
	if found || i == 0 {
		return i
	}
	return i - 1
}

func (n *snode) find(k string) (int, bool) {
	return findSetting(n.entries, k)
}

// get returns the value of k in the tree n (nil for empty).
func (n *snode) get(k string) (string, bool) {
	for n != nil && !n.leaf() {
		n = n.kids[n.kidFor(k)]
	}
	if n == nil {
		return "", false
	}
	if i, ok := n.find(k); ok {
		return n.entries[i].v, true
	}
	return "", false
}

// each yields the tree's entries in key order, until yield returns false;
// it reports whether every entry was yielded.
func (n *snode) each(yield func(k, v string) bool) bool {
	if n == nil {
		return true
	}
	if n.leaf() {
		for _, e := range n.entries {
			if !yield(e.k, e.v) {
				return false
			}
		}
		return true
	}
	for _, kid := range n.kids {
		if !kid.each(yield) {
			return false
		}
	}
	return true
}

// with returns the tree n with k set to v, and k's old value if it had
// one. n is not modified.
func (n *snode) with(k, v string) (*snode, string, bool) {
	if n == nil {
		return &snode{entries: []setting{{k, v}}, count: 1}, "", false
	}
	a, b, old, had := n.insert(k, v)
	if b == nil {
		return a, old, had
	}
	return newInner([]*snode{a, b}), old, had
}

// insert returns n with k set to v, split in two (a, b) when it outgrew
// sfanout, else b is nil.
func (n *snode) insert(k, v string) (a, b *snode, old string, had bool) {
	if n.leaf() {
		i, ok := n.find(k)
		var e []setting
		if ok {
			old, had = n.entries[i].v, true
			e = slices.Clone(n.entries)
			e[i].v = v
		} else {
			e = make([]setting, 0, len(n.entries)+1)
			e = append(e, n.entries[:i]...)
			e = append(e, setting{k, v})
			e = append(e, n.entries[i:]...)
		}
		if len(e) <= sfanout {
			return &snode{entries: e, count: len(e)}, nil, old, had
		}
		h := len(e) / 2
		return &snode{entries: e[:h:h], count: h}, &snode{entries: slices.Clone(e[h:]), count: len(e) - h}, old, had
	}
	i := n.kidFor(k)
	ka, kb, old, had := n.kids[i].insert(k, v)
	kids := make([]*snode, 0, len(n.kids)+1)
	kids = append(kids, n.kids[:i]...)
	kids = append(kids, ka)
	if kb != nil {
		kids = append(kids, kb)
	}
	kids = append(kids, n.kids[i+1:]...)
	if len(kids) <= sfanout {
		return newInner(kids), nil, old, had
	}
	h := len(kids) / 2
	return newInner(kids[:h:h]), newInner(slices.Clone(kids[h:])), old, had
}

// without returns the tree n without k (nil when it is left empty), and
// k's value if it had one. n is not modified.
func (n *snode) without(k string) (*snode, string, bool) {
	if n == nil {
		return nil, "", false
	}
	next, old, had := n.remove(k)
	if !had {
		return n, "", false
	}
	for next != nil && !next.leaf() && len(next.kids) == 1 {
		next = next.kids[0]
	}
	return next, old, true
}

// remove returns n without k; nil when n is left empty.
func (n *snode) remove(k string) (*snode, string, bool) {
	if n.leaf() {
		i, ok := n.find(k)
		if !ok {
			return n, "", false
		}
		old := n.entries[i].v
		if len(n.entries) == 1 {
			return nil, old, true
		}
		e := make([]setting, 0, len(n.entries)-1)
		e = append(e, n.entries[:i]...)
		e = append(e, n.entries[i+1:]...)
		return &snode{entries: e, count: len(e)}, old, true
	}
	i := n.kidFor(k)
	kid, old, had := n.kids[i].remove(k)
	if !had {
		return n, "", false
	}
	kids := slices.Clone(n.kids)
	switch {
	case kid == nil:
		kids = slices.Delete(kids, i, i+1)
		if len(kids) == 0 {
			return nil, old, true
		}
	case kid.size() < smerge && len(kids) > 1:
		j := i + 1 // merge with the next kid, or the one before the last
		if j == len(kids) {
			i, j = i-1, i
			kids[j] = kid
		} else {
			kids[i] = kid
		}
		if m := mergeNodes(kids[i], kids[j]); m != nil {
			kids[i] = m
			kids = slices.Delete(kids, j, j+1)
		}
	default:
		kids[i] = kid
	}
	return newInner(kids), old, true
}

// mergeNodes returns one node holding a and b (neighbours of one level, a
// first), or nil when they do not fit in one.
func mergeNodes(a, b *snode) *snode {
	if a.size()+b.size() > sfanout {
		return nil
	}
	if a.leaf() {
		e := make([]setting, 0, len(a.entries)+len(b.entries))
		e = append(append(e, a.entries...), b.entries...)
		return &snode{entries: e, count: len(e)}
	}
	kids := make([]*snode, 0, len(a.kids)+len(b.kids))
	return newInner(append(append(kids, a.kids...), b.kids...))
}
