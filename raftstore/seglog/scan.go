package seglog

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/hashicorp/raft"
)

// DamageError is a segment file or the stable file that cannot be read as
// written: a record whose checksum does not match with intact appends
// after it, a record in a segment before the last, a gap or an overlap
// between segments. The store cannot be opened on it.
type DamageError struct {
	Path   string
	Offset int64 // -1 when not about a place in the file
	Cause  error
}

func (e *DamageError) Error() string {
	if e.Offset < 0 {
		return fmt.Sprintf("%s: %v", e.Path, e.Cause)
	}
	return fmt.Sprintf("%s at offset %d: %v", e.Path, e.Offset, e.Cause)
}

func (e *DamageError) Unwrap() error { return e.Cause }

func damage(path string, off int64, format string, args ...any) error {
	return &DamageError{Path: path, Offset: off, Cause: fmt.Errorf(format, args...)}
}

// scanned is what scanSegment found in a segment file.
type scanned struct {
	offsets []int64 // where each entry's record starts
	end     int64   // the end of the last intact record
	torn    string  // why the records stop before the end of the file; "" if they do not
}

// scanSegment reads the records of the segment file f (size bytes, at
// path, its first entry first) in order, checking each one's checksum,
// decoding it and checking its index, and calls fn (if not nil) with each
// entry. The records stop at the first one that is short or whose checksum
// does not match: in the last segment (last true) that is the torn remains
// of an append that never finished, unless an intact append follows it;
// anywhere else it is damage. A record whose checksum matches but that
// does not decode, or holds the wrong index, is damage wherever it is.
func scanSegment(f io.ReaderAt, size int64, path string, first uint64, last bool, fn func(*raft.Log) error) (scanned, error) {
	var s scanned
	r := bufio.NewReaderSize(io.NewSectionReader(f, 0, size), 1<<20)
	var hdr [recordHeaderLen]byte
	var payload []byte
	off := int64(0)
	for {
		if off == size {
			break
		}
		if size-off < recordHeaderLen {
			s.torn = fmt.Sprintf("a record header cut short at offset %d", off)
			break
		}
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return s, fmt.Errorf("%s: %w", path, err)
		}
		n := int64(binary.LittleEndian.Uint32(hdr[0:4]) &^ lastInAppend)
		sum := binary.LittleEndian.Uint32(hdr[4:8])
		if n < minPayload || n > size-off-recordHeaderLen {
			s.torn = fmt.Sprintf("a record of %d bytes at offset %d, with %d bytes left in the file", n, off, size-off-recordHeaderLen)
			break
		}
		if int64(cap(payload)) < n {
			payload = make([]byte, n)
		}
		payload = payload[:n]
		if _, err := io.ReadFull(r, payload); err != nil {
			return s, fmt.Errorf("%s: %w", path, err)
		}
		if crc32.Checksum(payload, crcTable) != sum {
			s.torn = fmt.Sprintf("a record whose checksum does not match at offset %d", off)
			break
		}
		var l raft.Log
		if err := decodeLog(payload, &l); err != nil {
			return s, damage(path, off, "entry %d cannot be decoded: %v", first+uint64(len(s.offsets)), err)
		}
		if want := first + uint64(len(s.offsets)); l.Index != want {
			return s, damage(path, off, "the record holds entry %d, entry %d was expected here", l.Index, want)
		}
		if fn != nil {
			if err := fn(&l); err != nil {
				return s, damage(path, off, "entry %d: %v", l.Index, err)
			}
		}
		s.offsets = append(s.offsets, off)
		off += recordHeaderLen + n
	}
	s.end = off
	if s.torn == "" {
		return s, nil
	}
	if !last {
		return s, damage(path, off, "%s, in a segment that is not the last one", s.torn)
	}
	at, found, err := intactAppendAfter(f, off, size, first+uint64(len(s.offsets)))
	if err != nil {
		return s, fmt.Errorf("%s: %w", path, err)
	}
	if found {
		return s, damage(path, off, "the log stops at %s but an intact append follows at offset %d: acknowledged entries are lost", s.torn, at)
	}
	return s, nil
}

// intactAppendAfter looks, in the file from offset from to size, for an
// intact append that began after the one torn at from: a record that ends
// an append, followed right after it by intact records ending with one
// that ends an append. A crash tears only the last append, and may leave
// any part of it on disk, including its last records; an append that
// started after it can only be there if the records at from were damaged
// after they were written. next is the index of the entry the record at
// from should have held: any entry after it has a higher index.
func intactAppendAfter(f io.ReaderAt, from, size int64, next uint64) (int64, bool, error) {
	if size-from > 1<<31 {
		return 0, false, fmt.Errorf("%d bytes after a torn record: too many to be one append", size-from)
	}
	buf := make([]byte, size-from)
	if _, err := f.ReadAt(buf, from); err != nil && !errors.Is(err, io.EOF) {
		return 0, false, err
	}
	maxIndex := next + uint64(len(buf))/(recordHeaderLen+minPayload)
	// record says whether an intact record starts at p, where it ends,
	// and whether it ends an append.
	record := func(p int) (end int, endsAppend, ok bool) {
		if p+recordHeaderLen+minPayload > len(buf) {
			return 0, false, false
		}
		raw := binary.LittleEndian.Uint32(buf[p:])
		n := int(raw &^ lastInAppend)
		if n < minPayload || n > len(buf)-p-recordHeaderLen {
			return 0, false, false
		}
		payload := buf[p+recordHeaderLen : p+recordHeaderLen+n]
		if idx, ok := payloadIndex(payload); !ok || idx < next || idx > maxIndex {
			return 0, false, false
		}
		if crc32.Checksum(payload, crcTable) != binary.LittleEndian.Uint32(buf[p+4:]) {
			return 0, false, false
		}
		return p + recordHeaderLen + n, raw&lastInAppend != 0, true
	}
	for p := 0; p < len(buf); p++ {
		end, endsAppend, ok := record(p)
		if !ok || !endsAppend {
			continue
		}
		for q := end; ; {
			e, ends, ok := record(q)
			if !ok {
				break
			}
			if ends {
				return from + int64(end), true, nil
			}
			q = e
		}
	}
	return 0, false, nil
}
