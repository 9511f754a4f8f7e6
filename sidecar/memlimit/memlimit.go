// Package memlimit sets the Go runtime's soft memory limit from the memory
// limit of the container the sidecar runs in, unless GOMEMLIMIT says
// otherwise, and the collector's target (GOGC) to GCPercent unless GOGC
// says otherwise.
//
// Without a soft limit the Go heap grows to twice its live data before a
// collection (GOGC=100): a sidecar that holds 150 MiB of bags can reach
// 300 MiB and be OOM-killed in a container of 256 MiB although its live
// data fits. With the limit set below the container's, the runtime
// collects harder as it approaches it instead.
package memlimit

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Percent is the share of the container's memory limit given to the Go
// runtime, leaving 10 % (25.6 MiB of a 256 MiB container) for what the
// container's limit counts and the Go runtime does not:
//
//   - the pages of the memory-mapped raft log (raft.db, with --log-store
//     boltdb) the process has read, which after a load can be as much as
//     the heap (BENCHMARKS.md), and of the binary. bbolt maps the file
//     read-only and writes with write and fdatasync, so these are clean
//     page cache that the kernel reclaims before it kills the container:
//     they need little headroom. raft-wal (--log-store wal) reads its
//     segments with pread, and maps only its small meta file;
//   - kernel memory charged to the container (socket buffers, page tables);
//   - the runtime's overshoot: the soft limit is a target the collector
//     works towards, not a cap on allocation.
//
// More headroom would only make the collector run more often for nothing:
// live data beyond the limit gets the container killed whatever the share.
const Percent = 90

// GCPercent is the collector's target the sidecar runs with when GOGC is
// not set: a collection starts when the heap has grown by half its live
// data since the last one, not by all of it (Go's default, 100). A sidecar
// sits in every pod, so its footprint is multiplied by the number of pods.
// Under sustained writes at the highest rate a group sustains (the memory
// soak in BENCHMARKS.md) it lowers a member's anonymous memory from 55–62
// to 41–45 MiB for 10 MiB of bags; idle, it costs nothing. A small heap
// under a stream of writes is given more room (MinHeadroom).
const GCPercent = 50

// MinHeadroom is the least the heap may grow by between two collections
// while the collector is busy (BusyInterval) and the live heap small: the
// target is then GCPercent of the live heap, or MinHeadroom if that is
// more, but never more than the live heap (Go's default). A small heap at
// GCPercent is collected very often under writes: a member with 5 MiB
// live collected 20 times a second at 64 writers, which cost a tenth to a
// fifth of the peak write rate (BENCHMARKS.md, 2026-12-07 afternoon). From
// 16 MiB live on (the memory soak's members hold more) GCPercent alone
// decides; and a member that is not busy (an idle one) keeps GCPercent,
// so that its resident memory stays where GCPercent puts it.
const MinHeadroom = 8 << 20

// BusyInterval: a collection that follows the one before by less is busy;
// once the target is raised, it stays raised while collections follow one
// another by less than four times that (so that it does not swing back
// and forth under a steady stream).
const BusyInterval = 250 * time.Millisecond

// PercentFor returns the collector's target for a live heap of live bytes
// while it is busy: GCPercent, raised so that the heap may grow by
// MinHeadroom, at most 100.
func PercentFor(live uint64) int {
	if live == 0 {
		return 100
	}
	return min(100, max(GCPercent, int((MinHeadroom*100+live-1)/live)))
}

// targetAfter returns the collector's target after a collection that
// marked live bytes and came since after the one before, the target
// having been raised above GCPercent or not.
func targetAfter(live uint64, since time.Duration, raised bool) int {
	busy := BusyInterval
	if raised {
		busy *= 4
	}
	if since >= busy {
		return GCPercent
	}
	return PercentFor(live)
}

// The cgroup files that hold the container's memory limit.
const (
	// CgroupV2File holds "max" or the limit in bytes (cgroup v2, with the
	// container's cgroup mounted at /sys/fs/cgroup, as container runtimes
	// do with a cgroup namespace).
	CgroupV2File = "/sys/fs/cgroup/memory.max"
	// CgroupV1File holds the limit in bytes, a huge number when there is
	// none (cgroup v1).
	CgroupV1File = "/sys/fs/cgroup/memory/memory.limit_in_bytes"
)

// v1Unlimited: cgroup v1 reports "no limit" as the largest page-aligned
// int64 (9223372036854771712 with 4 KiB pages); anything from 1 EiB on is
// taken for that.
const v1Unlimited = 1 << 60

// Config says where to look. The zero value looks at the real files and
// the process's environment, and sets the runtime's limit.
type Config struct {
	CgroupV2, CgroupV1 string                        // default CgroupV2File, CgroupV1File
	LookupEnv          func(string) (string, bool)   // default os.LookupEnv
	SetMemoryLimit     func(limit int64) (old int64) // default debug.SetMemoryLimit
	SetGCPercent       func(percent int) (old int)   // default debug.SetGCPercent
	// TuneGC starts what keeps the collector's target at PercentFor the
	// live heap while the collector is busy, calling set after
	// collections (default TuneAfterCollections).
	TuneGC func(set func(percent int) (old int)) (stop func())
}

// Result is what Apply decided.
type Result struct {
	// Limit is the Go runtime's soft memory limit after Apply, math.MaxInt64
	// when there is none.
	Limit int64
	// Source says where Limit came from: "GOMEMLIMIT", the cgroup file
	// it was computed from, or "none" (no container limit found).
	Source string
	// Container is the container's memory limit in bytes when Source is a
	// cgroup file.
	Container int64
	// Note says why no container limit was found, when none was.
	Note string
	// GOGC is the GOGC environment variable, "" when it is not set (the
	// collector's target is then GCPercent).
	GOGC string
}

// Apply sets the Go runtime's soft memory limit to Percent of the
// container's memory limit, unless GOMEMLIMIT is set (the runtime has
// applied it already, "off" included) or no limit is found; and the
// collector's target to GCPercent (raised for a small heap, see
// MinHeadroom) unless GOGC is set (the runtime has applied it).
func Apply(c Config) Result {
	if c.CgroupV2 == "" {
		c.CgroupV2 = CgroupV2File
	}
	if c.CgroupV1 == "" {
		c.CgroupV1 = CgroupV1File
	}
	if c.LookupEnv == nil {
		c.LookupEnv = os.LookupEnv
	}
	if c.SetMemoryLimit == nil {
		c.SetMemoryLimit = debug.SetMemoryLimit
	}
	if c.SetGCPercent == nil {
		c.SetGCPercent = debug.SetGCPercent
	}
	if c.TuneGC == nil {
		c.TuneGC = TuneAfterCollections
	}
	gogc, ok := c.LookupEnv("GOGC")
	if !ok {
		c.SetGCPercent(GCPercent)
		c.TuneGC(c.SetGCPercent)
	}
	r := memoryLimit(c)
	r.GOGC = gogc
	return r
}

func memoryLimit(c Config) Result {
	if _, ok := c.LookupEnv("GOMEMLIMIT"); ok {
		return Result{Limit: c.SetMemoryLimit(-1), Source: "GOMEMLIMIT"} // -1 reads the limit without changing it
	}
	limit, source, note := containerLimit(c.CgroupV2, c.CgroupV1)
	if limit <= 0 {
		return Result{Limit: c.SetMemoryLimit(-1), Source: "none", Note: note}
	}
	goLimit := limit / 100 * Percent
	c.SetMemoryLimit(goLimit)
	return Result{Limit: goLimit, Source: source, Container: limit}
}

// containerLimit returns the container's memory limit and the file it
// came from, or 0 and why there is none.
func containerLimit(v2, v1 string) (int64, string, string) {
	b, err := os.ReadFile(v2)
	switch {
	case err == nil:
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0, "", v2 + " says max"
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			return 0, "", fmt.Sprintf("%s holds %q, not a limit", v2, s)
		}
		return n, v2, ""
	case !errors.Is(err, fs.ErrNotExist):
		return 0, "", err.Error()
	}
	b, err = os.ReadFile(v1)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, "", fmt.Sprintf("neither %s nor %s exists", v2, v1)
	}
	if err != nil {
		return 0, "", err.Error()
	}
	s := strings.TrimSpace(string(b))
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 {
		return 0, "", fmt.Sprintf("%s holds %q, not a limit", v1, s)
	}
	if n >= v1Unlimited {
		return 0, "", v1 + " says unlimited"
	}
	return int64(n), v1, ""
}

// Log writes one INFO line with the limit and where it came from, and the
// collector's target.
func (r Result) Log(logger *slog.Logger) {
	limit := any(r.Limit)
	if r.Limit == math.MaxInt64 {
		limit = "none"
	}
	gogc := []any{"gogc", GCPercent, "gc_min_headroom_bytes", MinHeadroom}
	if r.GOGC != "" {
		gogc = []any{"gogc", r.GOGC, "gogc_source", "GOGC"}
	}
	switch {
	case r.Container > 0:
		logger.Info("Go memory limit set from the container's", append([]any{"limit", limit, "source", r.Source,
			"container_limit", r.Container, "percent", Percent}, gogc...)...)
	case r.Source == "GOMEMLIMIT":
		logger.Info("Go memory limit from GOMEMLIMIT", append([]any{"limit", limit, "source", r.Source}, gogc...)...)
	default:
		logger.Info("Go memory limit not set: no container memory limit found", append([]any{"limit", limit, "source", r.Source, "reason", r.Note}, gogc...)...)
	}
}

// TuneAfterCollections sets the collector's target after every
// collection, with set (debug.SetGCPercent), until stop is called: to
// PercentFor the live heap while collections come less than BusyInterval
// apart, else to GCPercent. It does nothing between collections: a
// finalizer on an object nothing holds runs after each one, reads the live
// heap the collection marked, and arms the next.
func TuneAfterCollections(set func(percent int) (old int)) (stop func()) {
	var stopped atomic.Bool
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	last := GCPercent
	var lastGC time.Time
	var arm func()
	arm = func() {
		runtime.SetFinalizer(&gcSentinel{}, func(*gcSentinel) {
			if stopped.Load() {
				return
			}
			now := time.Now()
			since := now.Sub(lastGC)
			lastGC = now
			metrics.Read(sample)
			if sample[0].Value.Kind() == metrics.KindUint64 {
				if p := targetAfter(sample[0].Value.Uint64(), since, last > GCPercent); p != last {
					set(p)
					last = p
				}
			}
			arm()
		})
	}
	arm()
	return func() { stopped.Store(true) }
}

// gcSentinel is the object whose finalizer marks a collection: large
// enough, and with a pointer, never to share a tiny allocation block
// (whose finalizers may wait for the block's other objects).
type gcSentinel struct {
	_ *byte
	_ [16]byte
}
