package agent

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the unit agent's Prometheus metrics: what its hooks did. The
// sidecar registers them with the gauges of Gauges.
type Metrics struct {
	hooks    *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewMetrics makes the agent's metrics.
func NewMetrics() *Metrics {
	return &Metrics{
		hooks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bagkeeper_hooks_total",
			Help: "Hooks this pod's unit agent ran, by hook name (relation hooks without their endpoint) and result (ok, failed: a failed hook is retried).",
		}, []string{"hook", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "bagkeeper_hook_duration_seconds",
			Help:    "How long a hook took, from its start to its commit (or failure), by hook name.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14), // 5ms to 41s
		}, []string{"hook"}),
	}
}

// Collectors returns the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.hooks, m.duration}
}

func (m *Metrics) observe(hook string, ok bool, d time.Duration) {
	if m == nil {
		return
	}
	result := "ok"
	if !ok {
		result = "failed"
	}
	m.hooks.WithLabelValues(hook, result).Inc()
	m.duration.WithLabelValues(hook).Observe(d.Seconds())
}

// maxDueCount bounds the count of due hooks Gauges makes.
const maxDueCount = 1000

// Gauges reports, for the unit this pod holds: how many hooks are due (the
// agent's queue, up to maxDueCount), whether it holds the leadership lease,
// and whether its last hook failed (it is retried with a growing pause).
// All are zero without a unit.
func (a *Agent) Gauges() (due int, leader, failing bool) {
	unit := a.unit()
	if unit == "" {
		return 0, false, false
	}
	st := a.node.State()
	cur, err := DecodeCursor(st.Cursor(unit))
	if err != nil {
		return 0, false, false
	}
	v := View{State: st, Unit: unit, Pod: a.cfg.Pod, ConfigHash: a.configHash(), Now: a.now(), UpdateStatusEvery: a.cfg.UpdateStatusEvery}
	dueHooks(v, cur, func(Hook) bool {
		due++
		return due < maxDueCount
	})
	return due, st.Lease().HeldBy(unit, a.now()), st.UnitExtra(unit).HookError != ""
}

// HookAttempt is how many times in a row the failing hook of the unit this
// pod holds has failed (0 while none fails, or without a unit).
func (a *Agent) HookAttempt() int {
	unit := a.unit()
	if unit == "" {
		return 0
	}
	if e := a.node.State().UnitExtra(unit); e.HookError != "" {
		return max(e.HookErrorAttempt, 1)
	}
	return 0
}
