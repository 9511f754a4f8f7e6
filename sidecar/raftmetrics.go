package sidecar

import (
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	gometrics "github.com/armon/go-metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// raftMetrics is a go-metrics sink for what hashicorp/raft and its log
// store report (commit and apply times, RPC latencies, snapshot work ...),
// kept under Prometheus' conventions: snake_case names under bagkeeper_,
// durations in seconds with a _seconds suffix, counters ending in _total,
// peers as a peer_id label (raft's legacy per-peer metric names are
// turned off), and a series not updated for seriesTTL dropped, so that
// members long gone add nothing.
type raftMetrics struct {
	mu     sync.Mutex
	series map[string]*raftSeries // by name and label values
	// byRaw finds a series by raft's own key, suffix and labels, as they
	// come: raft reports on every heartbeat and append, and turning its
	// key into a Prometheus name each time costs more than the rest.
	byRaw map[string]*raftSeries
	now   func() time.Time
}

// seriesTTL is how long a raft series lives without an update.
const seriesTTL = 10 * time.Minute

type seriesKind int

const (
	kindGauge seriesKind = iota
	kindCounter
	kindHistogram
)

type raftSeries struct {
	kind    seriesKind
	desc    *prometheus.Desc
	labels  []string // values, in the order of the desc's label names
	value   float64
	hist    prometheus.Histogram
	updated time.Time
	raw     []string // its keys in byRaw
}

// sampleUnits names what raft's samples measure when it is not a duration
// in milliseconds (what MeasureSince reports): the suffix, the factor to
// the base unit, and the buckets.
var sampleUnits = map[string]struct {
	suffix  string
	buckets []float64
}{
	"applyBatchNum": {"_logs", prometheus.ExponentialBuckets(1, 2, 12)},
	"logsPerBatch":  {"", prometheus.ExponentialBuckets(1, 2, 12)},
	"logSize":       {"_bytes", prometheus.ExponentialBuckets(64, 4, 10)},
	"logBatchSize":  {"_bytes", prometheus.ExponentialBuckets(64, 4, 10)},
	"writeCapacity": {"_logs_per_second", prometheus.ExponentialBuckets(10, 4, 10)},
	"saturation":    {"_ratio", prometheus.LinearBuckets(0.1, 0.1, 10)},
}

// msGauges are raft's gauges in milliseconds.
var msGauges = map[string]bool{"lastRestoreDuration": true, "oldestLogAge": true}

var secondsBuckets = prometheus.ExponentialBuckets(0.0001, 2, 18) // 100µs to 13s

func newRaftMetrics() *raftMetrics {
	return &raftMetrics{series: map[string]*raftSeries{}, byRaw: map[string]*raftSeries{}, now: time.Now}
}

// promName turns raft's key into a metric name; the service prefix that
// go-metrics adds is dropped.
func promName(key []string, suffix string) string {
	var b strings.Builder
	b.WriteString("bagkeeper")
	for i, part := range key {
		if i == 0 && part == "bagkeeper" {
			continue
		}
		b.WriteByte('_')
		b.WriteString(snake(part))
	}
	b.WriteString(suffix)
	return b.String()
}

// snake turns camelCase into snake_case.
func snake(s string) string {
	var b strings.Builder
	rs := []rune(s)
	for i, r := range rs {
		switch {
		case unicode.IsUpper(r):
			if i > 0 && (unicode.IsLower(rs[i-1]) || i+1 < len(rs) && unicode.IsLower(rs[i+1])) && rs[i-1] != '_' {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToLower(r))
		case r == '-' || r == '.' || r == ' ':
			b.WriteByte('_')
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func (m *raftMetrics) get(kind seriesKind, name, help string, labels []gometrics.Label, buckets []float64) *raftSeries {
	names := make([]string, 0, len(labels))
	byName := make(map[string]string, len(labels))
	for _, l := range labels {
		n := snake(l.Name)
		if _, dup := byName[n]; !dup {
			names = append(names, n)
		}
		byName[n] = l.Value
	}
	slices.Sort(names)
	values := make([]string, len(names))
	for i, n := range names {
		values[i] = byName[n]
	}
	key := name + "\x00" + strings.Join(names, "\x01") + "\x00" + strings.Join(values, "\x01")
	s := m.series[key]
	if s == nil {
		s = &raftSeries{kind: kind, desc: prometheus.NewDesc(name, help, names, nil), labels: values}
		if kind == kindHistogram {
			constLabels := prometheus.Labels{}
			for i, n := range names {
				constLabels[n] = values[i]
			}
			s.hist = prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets, ConstLabels: constLabels})
		}
		m.series[key] = s
	}
	s.updated = m.now()
	return s
}

// lookup returns the series of raft's key with suffix and labels, making
// it on first use. m.mu must be held.
func (m *raftMetrics) lookup(kind seriesKind, key []string, suffix, what string, labels []gometrics.Label, buckets []float64) *raftSeries {
	// The raw key is built on the stack: a known series (every sample
	// but a series' first) is found without allocating.
	var arr [256]byte
	b := append(arr[:0], byte('0'+kind))
	for _, part := range key {
		b = append(b, 0)
		b = append(b, part...)
	}
	b = append(b, 1)
	b = append(b, suffix...)
	for _, l := range labels {
		b = append(b, 2)
		b = append(b, l.Name...)
		b = append(b, 3)
		b = append(b, l.Value...)
	}
	if s := m.byRaw[string(b)]; s != nil {
		s.updated = m.now()
		return s
	}
	raw := string(b)
	s := m.get(kind, promName(key, suffix), helpOf(key, what), labels, buckets)
	m.byRaw[raw] = s
	s.raw = append(s.raw, raw)
	return s
}

func helpOf(key []string, what string) string {
	k := key
	if len(k) > 0 && k[0] == "bagkeeper" {
		k = k[1:]
	}
	return "hashicorp/raft's " + strings.Join(k, ".") + " (" + what + ")"
}

// SetGauge and the other MetricSink methods are what go-metrics calls.
func (m *raftMetrics) SetGauge(key []string, val float32) { m.SetGaugeWithLabels(key, val, nil) }

func (m *raftMetrics) SetGaugeWithLabels(key []string, val float32, labels []gometrics.Label) {
	suffix, v, what := "", float64(val), "a gauge"
	if msGauges[key[len(key)-1]] {
		suffix, v, what = "_seconds", v/1000, "a gauge, in seconds"
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lookup(kindGauge, key, suffix, what, labels, nil).value = v
}

func (m *raftMetrics) SetPrecisionGauge(key []string, val float64) {
	m.SetPrecisionGaugeWithLabels(key, val, nil)
}

func (m *raftMetrics) SetPrecisionGaugeWithLabels(key []string, val float64, labels []gometrics.Label) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lookup(kindGauge, key, "", "a gauge", labels, nil).value = val
}

// EmitKey is go-metrics' key/value event, which Prometheus has no use for.
func (m *raftMetrics) EmitKey(key []string, val float32) {}

func (m *raftMetrics) IncrCounter(key []string, val float32) { m.IncrCounterWithLabels(key, val, nil) }

func (m *raftMetrics) IncrCounterWithLabels(key []string, val float32, labels []gometrics.Label) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lookup(kindCounter, key, "_total", "a count", labels, nil).value += float64(val)
}

func (m *raftMetrics) AddSample(key []string, val float32) { m.AddSampleWithLabels(key, val, nil) }

func (m *raftMetrics) AddSampleWithLabels(key []string, val float32, labels []gometrics.Label) {
	last := key[len(key)-1]
	suffix, buckets, v, what := "_seconds", secondsBuckets, float64(val)/1000, "a duration, in seconds"
	if u, ok := sampleUnits[last]; ok {
		suffix, buckets, v, what = u.suffix, u.buckets, float64(val), "a distribution"
	}
	m.mu.Lock()
	s := m.lookup(kindHistogram, key, suffix, what, labels, buckets)
	m.mu.Unlock()
	s.hist.Observe(v)
}

// Describe sends nothing: the series are only known as raft reports them
// (an unchecked collector).
func (m *raftMetrics) Describe(chan<- *prometheus.Desc) {}

func (m *raftMetrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	for key, s := range m.series {
		if now.Sub(s.updated) > seriesTTL {
			delete(m.series, key)
			for _, r := range s.raw {
				delete(m.byRaw, r)
			}
			continue
		}
		switch s.kind {
		case kindGauge:
			ch <- prometheus.MustNewConstMetric(s.desc, prometheus.GaugeValue, s.value, s.labels...)
		case kindCounter:
			ch <- prometheus.MustNewConstMetric(s.desc, prometheus.CounterValue, s.value, s.labels...)
		case kindHistogram:
			s.hist.Collect(ch)
		}
	}
}
