package main

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

// The cost of the CRC-32C envelope of log entries (raftstore/state/entry.go)
// against the protobuf encoding it wraps, for commands of the size of a
// small and of a 4 KiB relation-set:
//
//	go test -run '^$' -bench Entry -benchmem ./test/bench/
//
// MB/s is of the whole entry. The Proto benchmarks are the same commands
// without the envelope, so the difference is what the checksum costs.

// entrySizes are the sizes of the entries measured, envelope included.
var entrySizes = []struct {
	name string
	size int
}{{"256B", 256}, {"4KiB", 4096}}

// benchCommand returns a SetBag command, with a client session as the leader
// proposes it, whose entry is size bytes long.
func benchCommand(tb testing.TB, size int) *storepb.Command {
	tb.Helper()
	mk := func(n int) *storepb.Command {
		cmd := state.NewCommand(state.UpdateBagOp(7, "bench", map[string]string{"soak000123": strings.Repeat("v", n)}))
		cmd.TimeUnixNano = 1_780_000_000_000_000_000
		cmd.Client = &storepb.ClientRequest{ClientId: "c3f1a0e6b2d94e17", Sequence: 123456, LowestPending: 123400}
		return cmd
	}
	for n := 0; n <= size; n++ {
		cmd := mk(n)
		entry, err := state.EncodeEntry(cmd)
		if err != nil {
			tb.Fatal(err)
		}
		if len(entry) == size {
			return cmd
		}
		if len(entry) > size {
			break
		}
	}
	tb.Fatalf("no command makes an entry of exactly %d bytes", size)
	return nil
}

func TestBenchCommandSizes(t *testing.T) {
	for _, s := range entrySizes {
		entry, err := state.EncodeEntry(benchCommand(t, s.size))
		if err != nil {
			t.Fatal(err)
		}
		if len(entry) != s.size {
			t.Errorf("%s: entry of %d bytes", s.name, len(entry))
		}
		cmd, err := state.DecodeEntry(entry)
		if err != nil {
			t.Fatal(err)
		}
		if got := cmd.GetOps()[0].GetUpdateBag().GetSet()["soak000123"]; len(got) == 0 {
			t.Errorf("%s: decoded command lost its value", s.name)
		}
		entry[len(entry)-1] ^= 1
		if err := state.VerifyEntry(entry); err == nil {
			t.Errorf("%s: a flipped bit passes VerifyEntry", s.name)
		}
	}
}

func BenchmarkEntryEncode(b *testing.B) {
	for _, s := range entrySizes {
		b.Run(s.name, func(b *testing.B) {
			cmd := benchCommand(b, s.size)
			b.SetBytes(int64(s.size))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := state.EncodeEntry(cmd); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkEntryVerify(b *testing.B) {
	for _, s := range entrySizes {
		b.Run(s.name, func(b *testing.B) {
			entry, err := state.EncodeEntry(benchCommand(b, s.size))
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(entry)))
			b.ReportAllocs()
			for b.Loop() {
				if err := state.VerifyEntry(entry); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkEntryDecode(b *testing.B) {
	for _, s := range entrySizes {
		b.Run(s.name, func(b *testing.B) {
			entry, err := state.EncodeEntry(benchCommand(b, s.size))
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(entry)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := state.DecodeEntry(entry); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEntryProtoMarshal and BenchmarkEntryProtoUnmarshal are the
// baselines: the same commands without the envelope.
func BenchmarkEntryProtoMarshal(b *testing.B) {
	for _, s := range entrySizes {
		b.Run(s.name, func(b *testing.B) {
			cmd := benchCommand(b, s.size)
			b.SetBytes(int64(s.size))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := proto.Marshal(cmd); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkEntryProtoUnmarshal(b *testing.B) {
	for _, s := range entrySizes {
		b.Run(s.name, func(b *testing.B) {
			body, err := proto.Marshal(benchCommand(b, s.size))
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(s.size))
			b.ReportAllocs()
			for b.Loop() {
				var cmd storepb.Command
				if err := proto.Unmarshal(body, &cmd); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
