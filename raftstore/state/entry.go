package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"google.golang.org/protobuf/proto"

	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

// A command travels in the raft log inside an envelope that lets every
// reader check it is what the leader wrote:
//
//	byte 0     entryFormat
//	bytes 1-4  CRC-32C (Castagnoli) of the body, big-endian
//	bytes 5-   the body: the protobuf encoding of a storepb.Command
//
// The leader seals the envelope when it proposes the command. A follower
// checks it before it stores an entry it received, the log store checks it
// whenever an entry is read back (to replicate it, or to apply it after a
// restart), and the state machine checks it before applying. A protobuf
// encoding never starts with byte 1 (field number 0 does not exist), so an
// entry written before envelopes existed is told apart from a damaged one.
const entryFormat = 1

const envelopeSize = 5

// castagnoli is the CRC-32C table (hardware-accelerated on amd64 and arm64).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt is wrapped by the error for an entry or snapshot whose
// checksum does not match its contents: its bytes changed after they were
// written (a damaged disk, a flipped bit).
var ErrCorrupt = errors.New("checksum mismatch")

// EncodeEntry seals cmd into a log entry.
func EncodeEntry(cmd *storepb.Command) ([]byte, error) {
	size := proto.Size(cmd)
	buf := make([]byte, envelopeSize, envelopeSize+size)
	buf, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(buf, cmd)
	if err != nil {
		return nil, err
	}
	buf[0] = entryFormat
	binary.BigEndian.PutUint32(buf[1:5], crc32.Checksum(buf[envelopeSize:], castagnoli))
	return buf, nil
}

// VerifyEntry checks a log entry's envelope and checksum without decoding
// the command.
func VerifyEntry(data []byte) error {
	_, err := entryBody(data)
	return err
}

// DecodeEntry checks a log entry and decodes its command. An entry whose
// checksum does not match is ErrCorrupt; one in a format this build does
// not read is ErrUnsupported; a body that is not a command is ErrInvalid.
func DecodeEntry(data []byte) (*storepb.Command, error) {
	body, err := entryBody(data)
	if err != nil {
		return nil, err
	}
	var cmd storepb.Command
	if err := proto.Unmarshal(body, &cmd); err != nil {
		return nil, fmt.Errorf("%w: undecodable command: %v", ErrInvalid, err)
	}
	return &cmd, nil
}

func entryBody(data []byte) ([]byte, error) {
	if len(data) > 0 && data[0] != entryFormat {
		return nil, fmt.Errorf("%w: the entry was written by a bagkeeper older than log format %d (no checksum), which this one does not read; a group created by such a build must be created anew (see the upgrade note in docs/operations.md)", ErrUnsupported, entryFormat)
	}
	if len(data) < envelopeSize {
		return nil, fmt.Errorf("%w: entry of %d bytes is shorter than its envelope", ErrCorrupt, len(data))
	}
	body := data[envelopeSize:]
	want := binary.BigEndian.Uint32(data[1:5])
	if got := crc32.Checksum(body, castagnoli); got != want {
		return nil, fmt.Errorf("%w: CRC-32C of the command is %08x, the entry says %08x", ErrCorrupt, got, want)
	}
	return body, nil
}
