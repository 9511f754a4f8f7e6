package state_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/state/statetest"
	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

// bigCursor is a cursor-sized document whose n-th entry says v.
func bigCursor(n int, v string) []byte {
	var b strings.Builder
	b.WriteString(`{"relations":{`)
	for i := range 2000 {
		if i > 0 {
			b.WriteByte(',')
		}
		val := "seen"
		if i == n {
			val = v
		}
		fmt.Fprintf(&b, `"%d":{"units":{"r%d/0":%q}}`, i, i, val)
	}
	b.WriteString(`}}`)
	return []byte(b.String())
}

// A large cursor advances by its edits; the state machine stores exactly
// the new cursor, and refuses a patch of a cursor that moved on, one whose
// edits do not fit, and one that does not make the cursor it names,
// changing nothing.
func TestLargeCursorsAdvanceByTheirEdits(t *testing.T) {
	s := statetest.New(t, "app")
	unit := s.Claim("m", "app-0", 0)
	first := bigCursor(-1, "")
	s.Must(state.SetCursorOp(unit, first))

	second := bigCursor(700, "changed")
	op := state.AdvanceCursorOp(unit, first, second)
	pc := op.GetPatchCursor()
	if pc == nil || len(op.String()) > 1000 {
		t.Fatalf("advancing a %d-byte cursor by one entry: %d bytes of %T, want a small patch", len(second), len(op.String()), op.GetOp())
	}
	s.Must(op)
	if got := s.State().Cursor(unit); !bytes.Equal(got, second) {
		t.Fatalf("the patched cursor is not the new one (%d bytes, want %d)", len(got), len(second))
	}

	// The same patch again: its base is gone.
	if err := s.Do(op); !errors.Is(err, state.ErrConflict) {
		t.Fatalf("a patch of a cursor that moved on: %v, want a conflict", err)
	}
	third := bigCursor(5, "again")
	for _, tc := range []struct {
		name string
		bend func(*storepb.PatchCursor)
		want error
	}{
		{"an edit past the end", func(p *storepb.PatchCursor) { p.Edits[0].Offset = uint32(len(second) + 1) }, state.ErrInvalid},
		{"edits out of order", func(p *storepb.PatchCursor) {
			p.Edits = append(p.Edits, &storepb.CursorEdit{Offset: 0, Insert: []byte("x")})
		}, state.ErrInvalid},
		{"a wrong result digest", func(p *storepb.PatchCursor) { p.ResultSha256 = make([]byte, sha256.Size) }, state.ErrInvalid},
		{"a changed insert", func(p *storepb.PatchCursor) { p.Edits[0].Insert = append(p.Edits[0].Insert, 'x') }, state.ErrInvalid},
		{"over the size limit", func(p *storepb.PatchCursor) {
			p.Edits = []*storepb.CursorEdit{{Offset: uint32(len(second)), Insert: bytes.Repeat([]byte(" "), state.MaxCursorSize)}}
			big := append(append([]byte(nil), second...), p.Edits[0].Insert...)
			d := sha256.Sum256(big)
			p.ResultSha256 = d[:]
		}, state.ErrTooLarge},
		{"another unit", func(p *storepb.PatchCursor) { p.Unit = "app/9" }, nil},
	} {
		bad := state.AdvanceCursorOp(unit, second, third)
		tc.bend(bad.GetPatchCursor())
		err := s.Do(bad)
		if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		if got := s.State().Cursor(unit); !bytes.Equal(got, second) {
			t.Fatalf("%s: a refused patch changed the cursor", tc.name)
		}
	}
	s.Must(state.AdvanceCursorOp(unit, second, third))
	if got := s.State().Cursor(unit); !bytes.Equal(got, third) {
		t.Fatal("the cursor did not advance after the refused patches")
	}

	// A small cursor, or one rewritten whole, goes whole.
	if op := state.AdvanceCursorOp(unit, []byte(`{"a":1}`), []byte(`{"a":2}`)); op.GetSetCursor() == nil {
		t.Errorf("a small cursor goes as %T, want a whole SetCursor", op.GetOp())
	}
	if op := state.AdvanceCursorOp(unit, third, bytes.Repeat([]byte("z"), len(third))); op.GetSetCursor() == nil {
		t.Errorf("a rewritten cursor goes as %T, want a whole SetCursor", op.GetOp())
	}
}
