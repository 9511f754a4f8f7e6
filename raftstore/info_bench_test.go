package raftstore

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/bagkeeper/bagkeeper/raftstore/peerpb"
)

// BenchmarkInfoAnswer: what one probe answer costs its two ends (encoding
// on the member that answers, decoding on the prober) at 100 members, in
// full and brief (what the cluster loop's probes ask for). Every member
// answers several such probes in each 5–6 s round.
//
//	go test -run '^$' -bench InfoAnswer ./raftstore
func BenchmarkInfoAnswer(b *testing.B) {
	brief := &peerpb.InfoResponse{
		ServerId: "scl-42-1b7c2e9d", App: "scl", Address: "127.0.1.42:7400", Pod: "scl-42", Incarnation: "1b7c2e9d",
		HasState: true, RaftState: "Follower", LeaderId: "scl-2-8a0f33c1", LeaderAddress: "127.0.1.2:7400",
		AppliedIndex: 120345, CommitIndex: 120345, LastIndex: 120345, Term: 9, Version: "v1", LogStore: "segments",
		BootstrapEligible: false, LastLogTerm: 9, ClusterId: "c0ffee00-1234", Generation: 1, LastContactNanos: 41e6,
	}
	full := proto.Clone(brief).(*peerpb.InfoResponse)
	for i := range 100 {
		suffrage := "Nonvoter"
		if i < 5 {
			suffrage = "Voter"
		}
		full.Configuration = append(full.Configuration, &peerpb.Server{Id: fmt.Sprintf("scl-%d-%08x", i, i*7919), Address: fmt.Sprintf("127.0.1.%d:7400", i), Suffrage: suffrage})
	}
	for i := range keptHashes {
		full.StateHashes = append(full.StateHashes, &peerpb.StateHash{Index: uint64(100000 + i*4096), Hash: make([]byte, 32)})
	}
	for _, c := range []struct {
		name string
		m    *peerpb.InfoResponse
	}{{"full", full}, {"brief", brief}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				data, err := proto.Marshal(c.m)
				if err != nil {
					b.Fatal(err)
				}
				var got peerpb.InfoResponse
				if err := proto.Unmarshal(data, &got); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(proto.Size(c.m)), "bytes/answer")
		})
	}
}
