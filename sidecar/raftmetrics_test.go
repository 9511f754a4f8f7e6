package sidecar

import (
	"strings"
	"testing"
	"time"

	gometrics "github.com/armon/go-metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestRaftMetricsFollowPrometheusConventions(t *testing.T) {
	m := newRaftMetrics()
	now := time.Unix(1000, 0)
	m.now = func() time.Time { return now }
	peer := []gometrics.Label{{Name: "peer_id", Value: "web-1/x7"}}
	m.IncrCounterWithLabels([]string{"bagkeeper", "raft", "replication", "appendEntries", "logs"}, 3, peer)
	m.IncrCounterWithLabels([]string{"bagkeeper", "raft", "replication", "appendEntries", "logs"}, 2, peer)
	m.AddSampleWithLabels([]string{"bagkeeper", "raft", "replication", "appendEntries", "rpc"}, 1.5, peer) // milliseconds
	m.AddSample([]string{"bagkeeper", "raft", "net", "getRPCType"}, 0.25)
	m.AddSample([]string{"bagkeeper", "raft", "fsm", "applyBatchNum"}, 7)
	m.SetGauge([]string{"bagkeeper", "raft", "fsm", "lastRestoreDuration"}, 2500)
	m.SetGauge([]string{"bagkeeper", "raft", "peers"}, 3)
	m.EmitKey([]string{"bagkeeper", "raft", "anything"}, 1)

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	want := `
# HELP bagkeeper_raft_replication_append_entries_logs_total hashicorp/raft's raft.replication.appendEntries.logs (a count)
# TYPE bagkeeper_raft_replication_append_entries_logs_total counter
bagkeeper_raft_replication_append_entries_logs_total{peer_id="web-1/x7"} 5
# HELP bagkeeper_raft_fsm_last_restore_duration_seconds hashicorp/raft's raft.fsm.lastRestoreDuration (a gauge, in seconds)
# TYPE bagkeeper_raft_fsm_last_restore_duration_seconds gauge
bagkeeper_raft_fsm_last_restore_duration_seconds 2.5
# HELP bagkeeper_raft_peers hashicorp/raft's raft.peers (a gauge)
# TYPE bagkeeper_raft_peers gauge
bagkeeper_raft_peers 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"bagkeeper_raft_replication_append_entries_logs_total", "bagkeeper_raft_fsm_last_restore_duration_seconds", "bagkeeper_raft_peers"); err != nil {
		t.Error(err)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]float64{}
	for _, mf := range mfs {
		if h := mf.GetMetric()[0].GetHistogram(); h != nil {
			names[mf.GetName()] = h.GetSampleSum()
		} else {
			names[mf.GetName()] = -1
		}
	}
	for name, sum := range map[string]float64{
		"bagkeeper_raft_replication_append_entries_rpc_seconds": 0.0015,
		"bagkeeper_raft_net_get_rpc_type_seconds":               0.00025,
		"bagkeeper_raft_fsm_apply_batch_num_logs":               7,
	} {
		if got, ok := names[name]; !ok || got < sum*0.999 || got > sum*1.001 {
			t.Errorf("%s: sum %v (present %v), want %v", name, got, ok, sum)
		}
	}

	// A peer gone for good: its series go after seriesTTL.
	now = now.Add(seriesTTL + time.Second)
	m.SetGauge([]string{"bagkeeper", "raft", "peers"}, 2)
	if n := testutil.CollectAndCount(m); n != 1 {
		t.Errorf("%d series after their TTL, want only the one updated", n)
	}
	// The peer back: its series again, starting from nothing (not the
	// series dropped above, which raft's key would still find if the
	// lookup kept it).
	m.IncrCounterWithLabels([]string{"bagkeeper", "raft", "transition", "heartbeat_timeout"}, 1, nil)
	m.AddSampleWithLabels([]string{"bagkeeper", "raft", "replication", "appendEntries", "rpc"}, 2, []gometrics.Label{{Name: "peer_id", Value: "b"}})
	if n := testutil.CollectAndCount(m); n != 3 {
		t.Errorf("%d series after the peer came back, want 3", n)
	}
	if n := testutil.CollectAndCount(m, "bagkeeper_raft_replication_append_entries_rpc_seconds"); n != 1 {
		t.Errorf("%d append series, want 1", n)
	}
}

// TestAKnownSeriesTakesASampleWithoutAllocating: raft reports several
// samples for every write, so a series already made is found without
// building its key on the heap.
func TestAKnownSeriesTakesASampleWithoutAllocating(t *testing.T) {
	m := newRaftMetrics()
	key := []string{"bagkeeper", "raft", "replication", "appendEntries", "logs"}
	peer := []gometrics.Label{{Name: "peer_id", Value: "web-1/x7"}}
	m.IncrCounterWithLabels(key, 1, peer)
	if n := testing.AllocsPerRun(100, func() { m.IncrCounterWithLabels(key, 1, peer) }); n != 0 {
		t.Errorf("a sample of a known series allocated %.1f times", n)
	}
}
