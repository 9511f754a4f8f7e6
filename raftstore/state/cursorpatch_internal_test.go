package state

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand"
	"testing"
)

// cursorLike is a cursor-shaped JSON document: rels relations, the first
// with units peers, the others with one remote unit each.
func cursorLike(rels, units int, running string, bump map[int]uint64) []byte {
	type rel struct {
		Endpoint string            `json:"endpoint"`
		Created  bool              `json:"created"`
		Units    map[string]uint64 `json:"units,omitempty"`
		AppRev   uint64            `json:"app_rev,omitempty"`
	}
	doc := struct {
		Installed bool           `json:"installed"`
		Pod       string         `json:"pod"`
		Relations map[string]rel `json:"relations"`
		Running   string         `json:"running,omitempty"`
	}{true, "8d2f0c6e-6b3b-4d7e-9a0e-2b1f3c4d5e6f", map[string]rel{}, running}
	for r := range rels {
		us := map[string]uint64{}
		if r == 0 {
			for u := range units {
				us[fmt.Sprintf("app/%d", u)] = uint64(1000+u) + bump[-1-u]
			}
		} else {
			us[fmt.Sprintf("r%d/0", r)] = uint64(6000 + r)
		}
		doc.Relations[fmt.Sprint(r+1)] = rel{Endpoint: fmt.Sprintf("ep%d", r%10), Created: true, Units: us, AppRev: uint64(5000+r) + bump[r]}
	}
	b, _ := json.Marshal(doc)
	return b
}

func editedSize(a, b []byte) (int, int) {
	edits := cursorEdits(a, b)
	n := 0
	for _, e := range edits {
		n += len(e.GetInsert())
	}
	return len(edits), n
}

// The edits turn any cursor into any other; between two cursors a hook
// apart (one relation's entry and the running hook changed) they are a few
// bytes.
func TestCursorEditsTurnOneCursorIntoTheOther(t *testing.T) {
	check := func(name string, a, b []byte) {
		t.Helper()
		got, err := applyCursorEdits(a, cursorEdits(a, b))
		if err != nil || !bytes.Equal(got, b) {
			t.Fatalf("%s: the edits of %d → %d bytes make %d bytes (%v), not the new cursor", name, len(a), len(b), len(got), err)
		}
	}
	big := cursorLike(1000, 100, "relation-changed app/7", nil)
	for _, tc := range []struct {
		name     string
		next     []byte
		maxBytes int // inserted bytes at most (0: any)
	}{
		{"the same", big, 0},
		{"one relation and the running hook", cursorLike(1000, 100, "relation-changed app/70", map[int]uint64{500: 7}), 16},
		{"one peer and the running hook", cursorLike(1000, 100, "relation-joined app/9", map[int]uint64{-10: 3}), 24},
		{"three relations apart", cursorLike(1000, 100, "relation-changed app/7", map[int]uint64{3: 1, 400: 1, 998: 1}), 16},
		{"a relation fewer", cursorLike(999, 100, "relation-changed app/7", nil), 0},
		{"empty", nil, 0},
		{"from empty", cursorLike(2, 3, "", nil), 0},
	} {
		check(tc.name, big, tc.next)
		if n, size := editedSize(big, tc.next); tc.maxBytes > 0 && size > tc.maxBytes {
			t.Errorf("%s: %d edits inserting %d bytes, want at most %d bytes", tc.name, n, size, tc.maxBytes)
		}
	}
	check("from nothing", nil, big)

	// Random bytes, random edits of them, and documents of one repeated
	// byte (where no run of bytes is found once).
	rng := rand.New(rand.NewSource(1))
	for i := range 300 {
		a := make([]byte, rng.Intn(4000))
		alphabet := 1 + rng.Intn(255)
		for k := range a {
			a[k] = byte(rng.Intn(alphabet))
		}
		b := append([]byte(nil), a...)
		for range rng.Intn(8) {
			at := rng.Intn(len(b) + 1)
			cut := min(rng.Intn(200), len(b)-at)
			ins := make([]byte, rng.Intn(200))
			for k := range ins {
				ins[k] = byte(rng.Intn(alphabet))
			}
			b = append(b[:at:at], append(ins, b[at+cut:]...)...)
		}
		check(fmt.Sprintf("random %d", i), a, b)
	}
}

func TestCursorEditsThatDoNotFitAreRefused(t *testing.T) {
	cur := []byte("0123456789")
	for _, tc := range []struct {
		name  string
		edits [][3]int // offset, delete, insert length
	}{
		{"past the end", [][3]int{{11, 0, 1}}},
		{"deleting past the end", [][3]int{{8, 3, 0}}},
		{"out of order", [][3]int{{5, 1, 1}, {2, 1, 1}}},
		{"overlapping", [][3]int{{2, 4, 1}, {4, 1, 1}}},
	} {
		var edits = cursorEdits(nil, nil)
		for _, e := range tc.edits {
			edits = append(edits, cursorEditOf(e[0], e[1], bytes.Repeat([]byte("x"), e[2])))
		}
		if got, err := applyCursorEdits(cur, edits); err == nil {
			t.Errorf("%s: applied, made %q", tc.name, got)
		}
	}
}

func FuzzCursorEdits(f *testing.F) {
	f.Add([]byte(`{"a":1,"b":{"c":2}}`), []byte(`{"a":1,"b":{"c":3},"d":4}`))
	f.Add(cursorLike(50, 10, "x", nil), cursorLike(50, 10, "y", map[int]uint64{20: 1}))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		got, err := applyCursorEdits(a, cursorEdits(a, b))
		if err != nil || !bytes.Equal(got, b) {
			t.Fatalf("the edits make %q (%v), want %q", got, err, b)
		}
	})
}
