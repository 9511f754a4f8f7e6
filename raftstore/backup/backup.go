// Package backup is the file format of `bagkeeper snapshot save`: a copy
// of an application's replicated state that can be checked and restored
// into a new group.
//
// A file is, in this order:
//
//	magic        8 bytes  "\x89BKSNAP\n"
//	version      4 bytes  big-endian format version (FormatVersion)
//	header size  4 bytes  big-endian, at most MaxHeader
//	header       JSON (Header): application, cluster id, raft index and
//	             term, time, body length, the state encoding's version
//	body         the state machine's own snapshot encoding
//	             (state.WriteSnapshot), exactly Header.BodyLength bytes
//	checksum     32 bytes, SHA-256 of everything before it
//
// Nothing may follow the checksum. A file with a flipped byte anywhere,
// cut short or grown is refused.
package backup

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
)

// Magic starts every file. The high first byte and the newline catch a
// file mangled as text.
const Magic = "\x89BKSNAP\n"

// FormatVersion is the version of the file format this build writes and
// reads.
const FormatVersion = 1

// MaxHeader bounds the JSON header.
const MaxHeader = 64 << 10

const (
	prefixSize = len(Magic) + 4 + 4
	sumSize    = sha256.Size
)

// ErrNotSnapshot is wrapped by the error for a file that is not a snapshot
// of this format (wrong magic or version).
var ErrNotSnapshot = errors.New("not a bagkeeper snapshot file of a format this build reads")

// ErrCorrupt is wrapped by the error for a file that does not match its
// checksum, is cut short or has bytes after its end.
var ErrCorrupt = errors.New("snapshot file is damaged")

// Header describes a snapshot file.
type Header struct {
	App       string `json:"app"`
	ClusterID string `json:"cluster_id"`
	// Index is the raft index the state reflects; Term the raft term in
	// which it was read.
	Index uint64    `json:"index"`
	Term  uint64    `json:"term"`
	Time  time.Time `json:"time"`
	// BodyLength is the length of the body in bytes.
	BodyLength int64 `json:"body_length"`
	// StateVersion is the version of the state encoding of the body
	// (state.SnapshotVersion).
	StateVersion uint32 `json:"state_version"`
	// Member is the raft member that served the copy, Version its
	// bagkeeper version (both informational).
	Member  string `json:"member,omitempty"`
	Version string `json:"bagkeeper_version,omitempty"`
	// RestoredFrom is, in the file `snapshot restore` stages in a data
	// dir, the cluster id of the group the state was saved from.
	RestoredFrom string `json:"restored_from,omitempty"`
}

// Snapshot is a state ready to be written as a file.
type Snapshot struct {
	Header Header
	state  *state.State
	header []byte
}

// New prepares st to be written with header h. It encodes the state once
// to learn the body's length (the encoding is deterministic, and a State
// never changes, so writing encodes the same bytes again). App, ClusterID
// and Index are taken from st; Time, if zero, is now.
func New(h Header, st *state.State) (*Snapshot, error) {
	var n countWriter
	if err := state.WriteSnapshot(&n, st); err != nil {
		return nil, fmt.Errorf("encoding the state: %w", err)
	}
	h.App, h.ClusterID, h.Index = st.App(), st.ClusterID(), st.Index()
	h.BodyLength = int64(n)
	h.StateVersion = state.SnapshotVersion
	if h.Time.IsZero() {
		h.Time = time.Now().UTC()
	}
	hb, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	return &Snapshot{Header: h, state: st, header: hb}, nil
}

// Size is the size of the whole file in bytes.
func (s *Snapshot) Size() int64 {
	return int64(prefixSize+len(s.header)) + s.Header.BodyLength + sumSize
}

// Write writes the file to w and returns the bytes written and the
// file's checksum.
func (s *Snapshot) Write(w io.Writer) (int64, [sumSize]byte, error) {
	var sum [sumSize]byte
	h := sha256.New()
	cw := new(countWriter)
	out := io.MultiWriter(w, h, cw)
	var prefix [prefixSize]byte
	copy(prefix[:], Magic)
	binary.BigEndian.PutUint32(prefix[len(Magic):], FormatVersion)
	binary.BigEndian.PutUint32(prefix[len(Magic)+4:], uint32(len(s.header)))
	if _, err := out.Write(prefix[:]); err != nil {
		return int64(*cw), sum, err
	}
	if _, err := out.Write(s.header); err != nil {
		return int64(*cw), sum, err
	}
	before := int64(*cw)
	if err := state.WriteSnapshot(out, s.state); err != nil {
		return int64(*cw), sum, err
	}
	if got := int64(*cw) - before; got != s.Header.BodyLength {
		return int64(*cw), sum, fmt.Errorf("the state encoded to %d bytes, then to %d", s.Header.BodyLength, got)
	}
	copy(sum[:], h.Sum(nil))
	n, err := w.Write(sum[:])
	return int64(*cw) + int64(n), sum, err
}

type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) {
	*c += countWriter(len(p))
	return len(p), nil
}

// Verify reads a whole file from r and checks it: magic, version, header,
// length and checksum. It returns the header and the checksum.
func Verify(r io.Reader) (*Header, [sumSize]byte, error) {
	return read(r, nil)
}

// read checks the file in r; the body, once the checksum matches, is what
// body (if not nil) is given. The body is read twice: the checksum is
// checked before anything decodes it.
func read(r io.Reader, body func(io.Reader) error) (*Header, [sumSize]byte, error) {
	var sum [sumSize]byte
	br := bufio.NewReaderSize(r, 64<<10)
	h := sha256.New()
	tr := io.TeeReader(br, h)
	var prefix [prefixSize]byte
	if n, err := io.ReadFull(tr, prefix[:]); err != nil {
		if n < len(Magic) || string(prefix[:len(Magic)]) != Magic {
			return nil, sum, fmt.Errorf("%w: it does not start with the snapshot magic", ErrNotSnapshot)
		}
		return nil, sum, fmt.Errorf("%w: it ends within its first %d bytes (truncated)", ErrCorrupt, prefixSize)
	}
	if string(prefix[:len(Magic)]) != Magic {
		return nil, sum, fmt.Errorf("%w: it does not start with the snapshot magic", ErrNotSnapshot)
	}
	if v := binary.BigEndian.Uint32(prefix[len(Magic):]); v != FormatVersion {
		return nil, sum, fmt.Errorf("%w: format version %d (this bagkeeper reads version %d)", ErrNotSnapshot, v, FormatVersion)
	}
	hl := binary.BigEndian.Uint32(prefix[len(Magic)+4:])
	if hl == 0 || hl > MaxHeader {
		return nil, sum, fmt.Errorf("%w: header size %d is out of range", ErrCorrupt, hl)
	}
	hb := make([]byte, hl)
	if _, err := io.ReadFull(tr, hb); err != nil {
		return nil, sum, fmt.Errorf("%w: it ends within its header (truncated)", ErrCorrupt)
	}
	var hdr Header
	// The header is checked for sense here, and against the checksum
	// below: a damaged header that still parses is caught there.
	if err := json.Unmarshal(hb, &hdr); err != nil || hdr.BodyLength < 0 {
		return nil, sum, fmt.Errorf("%w: its header does not parse", ErrCorrupt)
	}
	n, err := io.Copy(io.Discard, io.LimitReader(tr, hdr.BodyLength))
	if err != nil {
		return nil, sum, fmt.Errorf("reading the body: %w", err)
	}
	if n != hdr.BodyLength {
		return nil, sum, fmt.Errorf("%w: the body ends after %d of its %d bytes (truncated)", ErrCorrupt, n, hdr.BodyLength)
	}
	want := h.Sum(nil)
	if _, err := io.ReadFull(br, sum[:]); err != nil {
		return nil, sum, fmt.Errorf("%w: it ends before its checksum (truncated)", ErrCorrupt)
	}
	if !bytes.Equal(want, sum[:]) {
		return nil, sum, fmt.Errorf("%w: its SHA-256 is %s, its checksum says %s", ErrCorrupt, hex.EncodeToString(want), hex.EncodeToString(sum[:]))
	}
	if _, err := br.ReadByte(); err != io.EOF {
		return nil, sum, fmt.Errorf("%w: it has bytes after its checksum", ErrCorrupt)
	}
	return &hdr, sum, nil
}

// ReadFile checks the file at path (see Verify), then decodes its state.
// It refuses a state that does not match the header.
func ReadFile(path string) (*Header, *state.State, [sumSize]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, [sumSize]byte{}, err
	}
	defer f.Close()
	hdr, sum, err := Verify(f)
	if err != nil {
		return nil, nil, sum, fmt.Errorf("%s: %w", path, err)
	}
	if hdr.StateVersion != state.SnapshotVersion {
		return nil, nil, sum, fmt.Errorf("%s: %w: its state encoding is version %d (this bagkeeper reads version %d)", path, ErrNotSnapshot, hdr.StateVersion, state.SnapshotVersion)
	}
	// The body starts after the prefix and the header.
	var prefix [prefixSize]byte
	if _, err := f.ReadAt(prefix[:], 0); err != nil {
		return nil, nil, sum, err
	}
	start := int64(prefixSize) + int64(binary.BigEndian.Uint32(prefix[len(Magic)+4:]))
	st, err := state.ReadSnapshot(io.NewSectionReader(f, start, hdr.BodyLength))
	if err != nil {
		return nil, nil, sum, fmt.Errorf("%s: decoding the state: %w", path, err)
	}
	if st.App() != hdr.App || st.ClusterID() != hdr.ClusterID || st.Index() != hdr.Index {
		return nil, nil, sum, fmt.Errorf("%s: %w: its header says application %q, cluster %s, index %d; its state %q, %s, %d", path, ErrCorrupt, hdr.App, hdr.ClusterID, hdr.Index, st.App(), st.ClusterID(), st.Index())
	}
	return hdr, st, sum, nil
}

// WriteFile writes s to path through path.tmp: written, synced, checked
// and renamed, the directory synced, so path is never half written. An
// existing path is refused unless overwrite.
func WriteFile(path string, s *Snapshot, overwrite bool) ([sumSize]byte, error) {
	return writeFile(path, overwrite, func(w io.Writer) ([sumSize]byte, error) {
		_, sum, err := s.Write(w)
		return sum, err
	})
}

// WriteStream is WriteFile for a file that arrives as a stream (from a
// sidecar): r is copied to path.tmp, which is then checked as a whole
// before it is renamed to path.
func WriteStream(path string, r io.Reader, overwrite bool) (*Header, [sumSize]byte, error) {
	var hdr *Header
	sum, err := writeFile(path, overwrite, func(w io.Writer) ([sumSize]byte, error) {
		if _, err := io.Copy(w, r); err != nil {
			return [sumSize]byte{}, err
		}
		return [sumSize]byte{}, nil
	}, func(f *os.File) ([sumSize]byte, error) {
		h, sum, err := Verify(f)
		hdr = h
		return sum, err
	})
	return hdr, sum, err
}

// Exists is the error for a file that would be overwritten.
type Exists struct{ Path string }

func (e *Exists) Error() string {
	return e.Path + " exists: give --force to replace it"
}

func writeFile(path string, overwrite bool, write func(io.Writer) ([sumSize]byte, error), check ...func(*os.File) ([sumSize]byte, error)) (sum [sumSize]byte, err error) {
	if _, err := os.Lstat(path); err == nil && !overwrite {
		return sum, &Exists{Path: path}
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o600)
	if err != nil {
		return sum, err
	}
	defer func() {
		if f != nil {
			f.Close()
		}
		if err != nil {
			os.Remove(tmp)
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<20)
	if sum, err = write(bw); err != nil {
		return sum, err
	}
	if err = bw.Flush(); err != nil {
		return sum, err
	}
	if err = f.Sync(); err != nil {
		return sum, err
	}
	// Read back what is on disk: a file that does not check is never
	// given its name.
	if _, err = f.Seek(0, io.SeekStart); err != nil {
		return sum, err
	}
	var got [sumSize]byte
	for _, c := range check {
		if sum, err = c(f); err != nil {
			return sum, fmt.Errorf("the file written does not check: %w", err)
		}
	}
	if len(check) == 0 {
		if _, got, err = Verify(f); err != nil {
			return sum, fmt.Errorf("the file written does not check: %w", err)
		}
		if got != sum {
			return sum, fmt.Errorf("%w: the file written has another checksum than the one computed", ErrCorrupt)
		}
	}
	if err = f.Close(); err != nil {
		f = nil
		return sum, err
	}
	f = nil
	if overwrite {
		err = os.Rename(tmp, path)
	} else {
		// A link fails if path appeared meanwhile: never replace a file
		// without --force.
		switch err = os.Link(tmp, path); {
		case err == nil:
			err = os.Remove(tmp)
		case errors.Is(err, os.ErrExist):
			err = &Exists{Path: path}
		default:
			// A file system without hard links: check, then rename.
			if _, serr := os.Lstat(path); serr == nil {
				err = &Exists{Path: path}
			} else {
				err = os.Rename(tmp, path)
			}
		}
	}
	if err != nil {
		return sum, err
	}
	return sum, syncDir(path)
}

func syncDir(path string) error {
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
