package sidecar

import (
	"sync"
	"syscall"

	gometrics "github.com/armon/go-metrics"
	"github.com/bagkeeper/bagkeeper/agent"
	"github.com/bagkeeper/bagkeeper/raftstore"
	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// raft reports its own metrics (commit and apply times, RPC latencies,
// snapshot sizes ...) through the process-wide go-metrics registry; this
// sink turns them into Prometheus metrics (raftmetrics.go). One per
// process.
var (
	raftSinkOnce sync.Once
	raftSink     *raftMetrics
)

func raftMetricsSink() *raftMetrics {
	raftSinkOnce.Do(func() {
		sink := newRaftMetrics()
		conf := gometrics.DefaultConfig("bagkeeper")
		conf.EnableHostname = false
		conf.EnableHostnameLabel = false
		conf.EnableRuntimeMetrics = false
		conf.EnableServiceLabel = false
		if _, err := gometrics.NewGlobal(conf, sink); err == nil {
			raftSink = sink
		}
	})
	return raftSink
}

type metrics struct {
	registry *prometheus.Registry
	agent    *agent.Metrics
}

func newMetrics(s *Sidecar) *metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if sink := raftMetricsSink(); sink != nil {
		reg.MustRegister(sink)
	}
	reg.MustRegister(&stateCollector{n: s.node, ready: s.Ready})
	reg.MustRegister(&podCollector{app: s.cfg.App, pod: s.cfg.Pod, member: string(s.node.ID()), version: s.cfg.Version, dataDir: s.cfg.DataDir})
	m := &metrics{registry: reg}
	if s.cfg.Agent != nil {
		m.agent = agent.NewMetrics()
		reg.MustRegister(m.agent.Collectors()...)
		reg.MustRegister(&agentCollector{s: s})
	}
	return m
}

var (
	descHooksDue   = prometheus.NewDesc("bagkeeper_hooks_due", "Hooks due for this pod's unit and not run yet: the agent's queue (counted up to 1000).", nil, nil)
	descUnitLeader = prometheus.NewDesc("bagkeeper_unit_leader", "1 if this pod's unit holds the application's leadership lease.", nil, nil)
	descHookFailed = prometheus.NewDesc("bagkeeper_unit_hook_failed", "1 while this pod's unit's last hook failed (it is retried with a growing pause; bagkeeper status shows it).", nil, nil)
	// failed hooks
	descHookAttempt = prometheus.NewDesc("bagkeeper_unit_hook_attempt", "How many times in a row this pod's unit's failing hook has failed (0 while none fails; bagkeeper show-unit shows why).", nil, nil)
)

// agentCollector reads the unit agent's gauges at scrape time.
type agentCollector struct{ s *Sidecar }

func (c *agentCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descHooksDue
	ch <- descUnitLeader
	ch <- descHookFailed
	ch <- descHookAttempt
}

func (c *agentCollector) Collect(ch chan<- prometheus.Metric) {
	var due int
	var leader, failing bool
	var attempt int
	// s.agent is set while the sidecar starts; started says it is done.
	if !c.s.started.Load() {
		return
	}
	if ua := c.s.agent; ua != nil && ua.a != nil {
		due, leader, failing = ua.a.Gauges()
		attempt = ua.a.HookAttempt()
	}
	ch <- prometheus.MustNewConstMetric(descHooksDue, prometheus.GaugeValue, float64(due))
	ch <- prometheus.MustNewConstMetric(descUnitLeader, prometheus.GaugeValue, b2f(leader))
	ch <- prometheus.MustNewConstMetric(descHookFailed, prometheus.GaugeValue, b2f(failing))
	ch <- prometheus.MustNewConstMetric(descHookAttempt, prometheus.GaugeValue, float64(attempt))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

var (
	descRaftState    = prometheus.NewDesc("bagkeeper_raft_state", "1 for this member's current raft state.", []string{"state"}, nil)
	descApplied      = prometheus.NewDesc("bagkeeper_raft_applied_index", "Last raft index applied to the state machine.", nil, nil)
	descCommit       = prometheus.NewDesc("bagkeeper_raft_commit_index", "Last raft index known committed.", nil, nil)
	descTerm         = prometheus.NewDesc("bagkeeper_raft_term", "Current raft term.", nil, nil)
	descMembers      = prometheus.NewDesc("bagkeeper_members", "Members in the raft configuration.", []string{"suffrage"}, nil)
	descUnits        = prometheus.NewDesc("bagkeeper_units", "Units of the application.", []string{"state"}, nil)
	descRelations    = prometheus.NewDesc("bagkeeper_relations", "Relations of the application.", nil, nil)
	descReady        = prometheus.NewDesc("bagkeeper_ready", "1 if this pod holds its unit and has caught up.", nil, nil)
	descUnhealthyMem = prometheus.NewDesc("bagkeeper_members_unhealthy", "Members the leader has not heard from recently (reported by the leader only).", nil, nil)
	descDamaged      = prometheus.NewDesc("bagkeeper_store_damaged", "1 if this member found a raft log entry or its state damaged (checksum mismatch) and serves nothing.", nil, nil)
	descDamagedIndex = prometheus.NewDesc("bagkeeper_store_damaged_index", "Raft index of the damaged entry, 0 if none.", nil, nil)
	descWritable     = prometheus.NewDesc("bagkeeper_store_writable", "0 while appending to this member's raft log fails (a full disk, an I/O error), 1 otherwise.", nil, nil)
	descDiverged     = prometheus.NewDesc("bagkeeper_state_diverged", "1 if this member's state was found unlike the other members' at the same raft index; it serves nothing.", nil, nil)
	// Members recorded as diverged, as every member knows them.
	descDivergedMembers = prometheus.NewDesc("bagkeeper_members_diverged", "Members whose state was found unlike the others' (recorded in the replicated state).", nil, nil)
)

// metricsSource is what the metrics need of the raft member.
type metricsSource interface {
	Status() raftstore.Status
	State() *state.State
	MemberHealth() []raftstore.MemberHealth
}

// stateCollector reads the member's and the pod's state at scrape time.
type stateCollector struct {
	n     metricsSource
	ready func() (bool, string)
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRaftState, descApplied, descCommit, descTerm, descMembers, descUnits, descRelations, descReady, descUnhealthyMem, descDamaged, descDamagedIndex, descDiverged, descDivergedMembers, descWritable} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	ms := n.Status()
	for _, role := range []raft.RaftState{raft.Follower, raft.Candidate, raft.Leader, raft.Shutdown} {
		v := 0.0
		if role.String() == ms.Role {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descRaftState, prometheus.GaugeValue, v, role.String())
	}
	ch <- prometheus.MustNewConstMetric(descApplied, prometheus.GaugeValue, float64(ms.StateIndex))
	ch <- prometheus.MustNewConstMetric(descCommit, prometheus.GaugeValue, float64(ms.CommitIndex))
	ch <- prometheus.MustNewConstMetric(descTerm, prometheus.GaugeValue, float64(ms.Term))
	ch <- prometheus.MustNewConstMetric(descMembers, prometheus.GaugeValue, float64(ms.Voters), "voter")
	ch <- prometheus.MustNewConstMetric(descMembers, prometheus.GaugeValue, float64(ms.Nonvoters), "nonvoter")
	damaged, damagedIndex := 0.0, 0.0
	if ms.Damage != nil {
		damaged, damagedIndex = 1, float64(ms.Damage.Index)
	}
	ch <- prometheus.MustNewConstMetric(descDamaged, prometheus.GaugeValue, damaged)
	ch <- prometheus.MustNewConstMetric(descDamagedIndex, prometheus.GaugeValue, damagedIndex)
	diverged := 0.0
	if ms.Diverged != "" {
		diverged = 1
	}
	ch <- prometheus.MustNewConstMetric(descDiverged, prometheus.GaugeValue, diverged)
	writable := 1.0
	if ms.WriteFailure != nil {
		writable = 0
	}
	ch <- prometheus.MustNewConstMetric(descWritable, prometheus.GaugeValue, writable)
	ch <- prometheus.MustNewConstMetric(descDivergedMembers, prometheus.GaugeValue, float64(len(n.State().Divergences())))
	st := n.State()
	units := map[state.UnitState]int{}
	for _, u := range st.Units() {
		units[u.State]++
	}
	for _, us := range []state.UnitState{state.UnitActive, state.UnitReleased, state.UnitRemoved} {
		ch <- prometheus.MustNewConstMetric(descUnits, prometheus.GaugeValue, float64(units[us]), us.String())
	}
	ch <- prometheus.MustNewConstMetric(descRelations, prometheus.GaugeValue, float64(len(st.Relations())))
	ready := 0.0
	if ok, _ := c.ready(); ok {
		ready = 1
	}
	ch <- prometheus.MustNewConstMetric(descReady, prometheus.GaugeValue, ready)
	if h := n.MemberHealth(); h != nil {
		bad := 0
		for _, m := range h {
			if !m.Healthy {
				bad++
			}
		}
		ch <- prometheus.MustNewConstMetric(descUnhealthyMem, prometheus.GaugeValue, float64(bad))
	}
}

var (
	descInfo      = prometheus.NewDesc("bagkeeper_info", "Always 1: the application, pod and raft member of this sidecar, and its version (join on instance for an app label).", []string{"app", "pod", "member", "version"}, nil)
	descDiskAvail = prometheus.NewDesc("bagkeeper_data_dir_avail_bytes", "Bytes available to this sidecar on the file system of its data dir.", nil, nil)
	descDiskSize  = prometheus.NewDesc("bagkeeper_data_dir_size_bytes", "Size in bytes of the file system of the data dir.", nil, nil)
)

// podCollector reports who this sidecar is, and its data dir's room.
type podCollector struct {
	app, pod, member, version, dataDir string
}

func (c *podCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descInfo
	ch <- descDiskAvail
	ch <- descDiskSize
}

func (c *podCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descInfo, prometheus.GaugeValue, 1, c.app, c.pod, c.member, c.version)
	var fs syscall.Statfs_t
	if err := syscall.Statfs(c.dataDir, &fs); err == nil {
		ch <- prometheus.MustNewConstMetric(descDiskAvail, prometheus.GaugeValue, float64(fs.Bavail)*float64(fs.Bsize))
		ch <- prometheus.MustNewConstMetric(descDiskSize, prometheus.GaugeValue, float64(fs.Blocks)*float64(fs.Bsize))
	}
}
