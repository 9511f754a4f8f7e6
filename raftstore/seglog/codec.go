package seglog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/hashicorp/raft"
)

// A record is one log entry in a segment file:
//
//	[uint32 length][uint32 CRC-32C of the payload][payload]
//
// both little-endian. The length's top bit marks the last record of an
// append (one StoreLogs call): Open uses it to tell the torn remains of the
// last append from damage with intact appends after it. The payload is
// encodeLog's: a version byte, then the entry's fields.
const (
	recordHeaderLen = 8
	lastInAppend    = 1 << 31
	// maxPayload bounds a record's payload: a length above it is not one
	// this package wrote.
	maxPayload = 1<<31 - 1
	// minPayload is the shortest payload encodeLog writes: the version,
	// one byte each for index, term, type, the lengths of data and
	// extensions, and the time flag.
	minPayload = 7

	codecVersion = 1

	// maxLogOverhead bounds what appendLog adds to an entry's data and
	// extensions: the version, three uvarints and two length uvarints
	// (10 bytes each at most), the type, the time flag and a varint.
	maxLogOverhead = 1 + 5*binary.MaxVarintLen64 + 1 + 1 + binary.MaxVarintLen64

	// maxKeptBuffer is the largest append buffer a store keeps for the
	// next append.
	maxKeptBuffer = 1 << 20
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// appendRecord appends l's record to b.
func appendRecord(b []byte, l *raft.Log, last bool) []byte {
	start := len(b)
	b = append(b, make([]byte, recordHeaderLen)...)
	b = appendLog(b, l)
	payload := b[start+recordHeaderLen:]
	n := uint32(len(payload))
	if last {
		n |= lastInAppend
	}
	binary.LittleEndian.PutUint32(b[start:], n)
	binary.LittleEndian.PutUint32(b[start+4:], crc32.Checksum(payload, crcTable))
	return b
}

// appendLog appends the payload encoding of l: version, uvarint index and
// term, type byte, uvarint length and bytes of data and extensions, and
// AppendedAt (a 0 byte for the zero time, else 1 and the varint Unix
// nanoseconds).
func appendLog(b []byte, l *raft.Log) []byte {
	b = append(b, codecVersion)
	b = binary.AppendUvarint(b, l.Index)
	b = binary.AppendUvarint(b, l.Term)
	b = append(b, byte(l.Type))
	b = binary.AppendUvarint(b, uint64(len(l.Data)))
	b = append(b, l.Data...)
	b = binary.AppendUvarint(b, uint64(len(l.Extensions)))
	b = append(b, l.Extensions...)
	if l.AppendedAt.IsZero() {
		return append(b, 0)
	}
	b = append(b, 1)
	return binary.AppendVarint(b, l.AppendedAt.UnixNano())
}

var errShort = errors.New("payload too short")

// decodeLog decodes a payload into l. Data and Extensions are copies (or
// nil when empty).
func decodeLog(p []byte, l *raft.Log) error {
	if len(p) == 0 {
		return errShort
	}
	if p[0] != codecVersion {
		return fmt.Errorf("unknown record version %d", p[0])
	}
	p = p[1:]
	uv := func() (uint64, error) {
		v, n := binary.Uvarint(p)
		if n <= 0 {
			return 0, errShort
		}
		p = p[n:]
		return v, nil
	}
	bytesField := func() ([]byte, error) {
		n, err := uv()
		if err != nil {
			return nil, err
		}
		if n > uint64(len(p)) {
			return nil, errShort
		}
		var out []byte
		if n > 0 {
			out = append([]byte(nil), p[:n]...)
		}
		p = p[n:]
		return out, nil
	}
	var err error
	if l.Index, err = uv(); err != nil {
		return err
	}
	if l.Term, err = uv(); err != nil {
		return err
	}
	if len(p) == 0 {
		return errShort
	}
	l.Type, p = raft.LogType(p[0]), p[1:]
	if l.Data, err = bytesField(); err != nil {
		return err
	}
	if l.Extensions, err = bytesField(); err != nil {
		return err
	}
	if len(p) == 0 {
		return errShort
	}
	flag := p[0]
	p = p[1:]
	switch flag {
	case 0:
		l.AppendedAt = time.Time{}
	case 1:
		ns, n := binary.Varint(p)
		if n <= 0 {
			return errShort
		}
		p = p[n:]
		l.AppendedAt = time.Unix(0, ns)
	default:
		return fmt.Errorf("bad time flag %d", flag)
	}
	if len(p) != 0 {
		return fmt.Errorf("%d bytes after the entry", len(p))
	}
	return nil
}

// payloadIndex is the index a payload says it holds, without decoding the
// rest (ok false if it cannot say).
func payloadIndex(p []byte) (uint64, bool) {
	if len(p) < 2 || p[0] != codecVersion {
		return 0, false
	}
	v, n := binary.Uvarint(p[1:])
	return v, n > 0
}
