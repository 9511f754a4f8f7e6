package state

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

// A unit's event cursor is committed with every hook. With many relations
// it is tens of kilobytes (94 KB with 1000), of which a hook changes a few
// bytes: one relation's entry and the hook recorded as running. Sent whole,
// with the previous cursor for the compare-and-set, every hook would
// replicate twice that to every member. AdvanceCursorOp sends the edits
// instead, when they are smaller (PatchCursor).

// Cursor edits are found by trimming the common prefix and suffix, then,
// where what is left is long, by splitting it at a run of bytes of the new
// cursor found once in the old one and diffing both sides the same way:
// exact for any two cursors, small when they differ in a few places.
const (
	editAnchor   = 32 // bytes of the new cursor looked for in the old one
	editMinSplit = 96 // a difference shorter than this is one edit
	editDepth    = 12 // splits at most, along any path
)

// cursorEdits returns edits that turn a into b, ordered by offset.
func cursorEdits(a, b []byte) []*storepb.CursorEdit {
	var out []*storepb.CursorEdit
	diffInto(a, b, 0, editDepth, &out)
	return out
}

func diffInto(a, b []byte, off, depth int, out *[]*storepb.CursorEdit) {
	p := 0
	for p < len(a) && p < len(b) && a[p] == b[p] {
		p++
	}
	s := 0
	for s < len(a)-p && s < len(b)-p && a[len(a)-1-s] == b[len(b)-1-s] {
		s++
	}
	am, bm := a[p:len(a)-s], b[p:len(b)-s]
	if len(am) == 0 && len(bm) == 0 {
		return
	}
	if depth > 0 && len(am) >= editMinSplit && len(bm) >= editMinSplit {
		if i, j, ok := anchor(am, bm); ok {
			diffInto(am[:i], bm[:j], off+p, depth-1, out)
			diffInto(am[i+editAnchor:], bm[j+editAnchor:], off+p+i+editAnchor, depth-1, out)
			return
		}
	}
	*out = append(*out, cursorEditOf(off+p, len(am), append([]byte(nil), bm...)))
}

// anchor finds a run of editAnchor bytes at b[j:] that occurs once in a,
// at a[i:], trying the middle of b, then its quarters.
func anchor(a, b []byte) (i, j int, ok bool) {
	for _, j := range []int{len(b) / 2, len(b) / 4, 3 * len(b) / 4} {
		if j+editAnchor > len(b) {
			continue
		}
		run := b[j : j+editAnchor]
		i := bytes.Index(a, run)
		if i >= 0 && !bytes.Contains(a[i+1:], run) {
			return i, j, true
		}
	}
	return 0, 0, false
}

// applyCursorEdits returns cur changed by edits, or why they do not fit it.
func applyCursorEdits(cur []byte, edits []*storepb.CursorEdit) ([]byte, error) {
	size := len(cur)
	for _, e := range edits {
		size += len(e.GetInsert()) - int(e.GetDelete())
	}
	out := make([]byte, 0, max(size, 0))
	pos := 0
	for k, e := range edits {
		off, del := int(e.GetOffset()), int(e.GetDelete())
		if off < pos || off > len(cur) || del > len(cur)-off {
			return nil, fmt.Errorf("edit %d (offset %d, %d bytes) is out of order or past the end of the %d-byte cursor", k, off, del, len(cur))
		}
		out = append(out, cur[pos:off]...)
		out = append(out, e.GetInsert()...)
		pos = off + del
	}
	return append(out, cur[pos:]...), nil
}

// PatchedCursor returns the cursor a PatchCursor op makes of cur, checking
// both digests, as the state machine does.
func PatchedCursor(cur []byte, o *storepb.PatchCursor) ([]byte, error) {
	if d := sha256.Sum256(cur); !bytes.Equal(d[:], o.GetBaseSha256()) {
		return nil, errCursorMoved
	}
	next, err := applyCursorEdits(cur, o.GetEdits())
	if err != nil {
		return nil, err
	}
	if d := sha256.Sum256(next); !bytes.Equal(d[:], o.GetResultSha256()) {
		return nil, fmt.Errorf("the edits make a cursor whose digest is not the one the patch names")
	}
	return next, nil
}

var errCursorMoved = errors.New("the event cursor moved on since the hook was decided")

// AdvanceCursorOp stores a unit's cursor if it is still previous: the
// edits from previous (PatchCursor) when they are under half the size of
// the cursor, else the whole cursor with previous to compare (SetCursor).
func AdvanceCursorOp(unit string, previous, cursor []byte) *storepb.Op {
	if len(previous) > 0 {
		edits := cursorEdits(previous, cursor)
		size := 0
		for _, e := range edits {
			size += len(e.GetInsert()) + 8
		}
		if 2*(size+2*sha256.Size) < len(cursor) {
			base, result := sha256.Sum256(previous), sha256.Sum256(cursor)
			return &storepb.Op{Op: &storepb.Op_PatchCursor{PatchCursor: &storepb.PatchCursor{
				Unit: unit, BaseSha256: base[:], Edits: edits, ResultSha256: result[:]}}}
		}
	}
	return &storepb.Op{Op: &storepb.Op_SetCursor{SetCursor: &storepb.SetCursor{Unit: unit, Cursor: cursor, CheckPrevious: true, Previous: previous}}}
}

func cursorEditOf(offset, del int, insert []byte) *storepb.CursorEdit {
	return &storepb.CursorEdit{Offset: uint32(offset), Delete: uint32(del), Insert: insert}
}
