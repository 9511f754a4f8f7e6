// Command bench measures commit latency, throughput, failover time and
// graceful hand-off time of 3-member clusters, running every registered
// target one after the other on the same machine, and prints the results as
// one Markdown table so that the targets can be compared side by side.
//
//	go run ./test/bench                    # every target
//	go run ./test/bench -targets=etcd      # only etcd
//	go run ./test/bench -experiments=latency -duration=10s
//	go run ./test/bench -targets=bagkeeper -bagkeeper-wipe-mib=1   # bagkeeper only, smaller wipe test
//	go run ./test/bench -targets=bagkeeper -experiments=soak -soak-duration=5m   # memory soak
//	go run ./test/bench -targets=bagkeeper -experiments=actions   # actions run round trip
//	go run ./test/bench -targets=bagkeeper -experiments=latency,scale -writers=1 -sizes=256   # one application at scale
//
// The table goes to stdout; progress messages go to stderr. All processes
// the harness starts are killed when it exits, also on errors and Ctrl-C.
//
// Each target runs on a fresh cluster of its own: the latency experiment
// first, then the failover trials (SIGKILL to the leader), then the hand-off
// trials (SIGTERM to the leader), then the pause trials (SIGSTOP to the
// leader while writing through a follower), then the read latencies
// (bagkeeper), then the target's own extra measurements, if it implements
// ExtraMeasurer. The memory soak (bagkeeper) runs only when -experiments
// names it. So do relations, leadership, actions and scale (bagkeeper
// only), each on an application of its own.
//
// The scale experiment starts one application of -scale-units sidecars
// (pods scl-0 … scl-N-1 on 127.2.x.y addresses, ordinal units, a charm
// whose hooks do nothing, --voters -scale-voters, every member given the
// first three members' addresses plus its own), makes -scale-relations
// relations (one peer relation, the others to remote applications) and
// loads -scale-keys keys into their application bags. It reports the time
// to form and be ready, each member's RSS empty and loaded against the
// size of the state, the put latency of one writer (compared with the
// latency experiment's 1-writer 256 B figure when that ran too), the idle
// CPU of the leader, of voting followers and of non-voters, the time from
// a write to the peer relation's application bag until every other unit's
// relation-changed hook started (from the sidecars' logs), a wiped pod
// ready with every key, and a rolling replacement of -scale-replace pods
// after which the application must have the same units. Every unit runs
// relation-created for every relation and relation-joined/changed for
// every other unit, and each hook commits twice through raft, so the
// hooks, not the keys, set how long a large run takes. To add a target, implement Target in a file of its own and list
// its constructor in targets below.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// targets lists every target the harness knows, in the order in which they
// run and appear within each group of the table. To add a target,
// implement Target (and optionally ExtraMeasurer) in a file of its own and
// add its constructor here.
var targets = []targetEntry{
	{key: "bagkeeper", new: newBagkeeperTarget},
	{key: "etcd", new: newEtcdTarget},
}

// experiment is one kind of measurement; it runs on a started, healthy
// cluster and must leave it with 3 healthy members.
type experiment struct {
	key string
	run func(ctx context.Context, env *Env) ([]Row, error)
	// optIn experiments run only when -experiments names them.
	optIn bool
}

// experiments lists the measurements in the order they run for a target.
var experiments = []experiment{
	{key: "latency", run: latencyExperiment},
	{key: "failover", run: failoverExperiment},
	{key: "handoff", run: handoffExperiment},
	{key: "pause", run: pauseExperiment},
	{key: "reads", run: readsExperiment},
	{key: "extra", run: extraExperiment},
	// The memory soak replaces the cluster and runs for -soak-duration.
	{key: "soak", run: soakExperiment, optIn: true},
	// Two related applications of their own (bagkeeper only).
	{key: "relations", run: relationsExperiment, optIn: true},
	// An application of its own whose leader's pod is replaced, then
	// killed for good (bagkeeper only).
	{key: "leadership", run: leadershipExperiment, optIn: true},
	// One application with a charm action (bagkeeper only).
	{key: "actions", run: actionsExperiment, optIn: true},
	// One application of -scale-units sidecars with -scale-relations
	// relations and -scale-keys keys (bagkeeper only).
	{key: "scale", run: scaleExperiment, optIn: true},
}

// extraExperiment runs the target's own measurements, if it has any.
func extraExperiment(ctx context.Context, env *Env) ([]Row, error) {
	m, ok := env.Target.(ExtraMeasurer)
	if !ok {
		return nil, nil
	}
	return m.MeasureExtra(ctx, env)
}

// Config holds the settings of a run, from the command-line flags.
type Config struct {
	Targets     []string // keys of targets to run
	Experiments []string // keys of experiments to run

	Writers  []int         // concurrent writers for the latency experiment
	Sizes    []int         // value sizes in bytes for the latency experiment
	Warmup   time.Duration // unmeasured load before each measurement
	Duration time.Duration // measured load per combination
	Ops      int           // if > 0, total Puts per combination instead of Duration

	OpTimeout      time.Duration // bound on one Put including retries, in the latency experiment
	AttemptTimeout time.Duration // bound on one attempt inside Writer.Put

	Trials        int           // failover and hand-off trials
	ProbeInterval time.Duration // interval between Puts during a trial
	TrialTimeout  time.Duration // bound on one trial

	StartTimeout time.Duration // bound on Target.Start
	Dir          string        // parent of the clusters' directories; "" for a new temporary one
	Keep         bool          // keep the data directories and logs
}

// registerFlags defines the harness's flags on fs and returns the Config
// they fill in when fs is parsed.
func registerFlags(fs *flag.FlagSet) *Config {
	keys := make([]string, len(targets))
	for i, t := range targets {
		keys[i] = t.key
	}
	expKeys := make([]string, len(experiments))
	var defaultExps, optInKeys []string
	for i, e := range experiments {
		expKeys[i] = e.key
		if !e.optIn {
			defaultExps = append(defaultExps, e.key)
		} else {
			optInKeys = append(optInKeys, e.key)
		}
	}
	cfg := &Config{
		Targets:     keys,
		Experiments: defaultExps,
		Writers:     []int{1, 64},
		Sizes:       []int{256, 4096},
	}
	fs.Var((*stringList)(&cfg.Targets), "targets", "comma-separated targets to run, of: "+strings.Join(keys, ", "))
	fs.Var((*stringList)(&cfg.Experiments), "experiments", "comma-separated experiments to run, of: "+strings.Join(expKeys, ", ")+" ("+strings.Join(optInKeys, ", ")+" only when named)")
	fs.Var((*intList)(&cfg.Writers), "writers", "comma-separated numbers of concurrent writers for the latency experiment")
	fs.Var((*intList)(&cfg.Sizes), "sizes", "comma-separated value sizes in bytes for the latency experiment")
	fs.DurationVar(&cfg.Warmup, "warmup", time.Second, "unmeasured load before each latency measurement")
	fs.DurationVar(&cfg.Duration, "duration", 3*time.Second, "measured load per writers × size combination")
	fs.IntVar(&cfg.Ops, "ops", 0, "if > 0, measure this many puts per combination instead of -duration")
	fs.DurationVar(&cfg.OpTimeout, "op-timeout", 10*time.Second, "bound on one put, retries included, in the latency experiment")
	fs.DurationVar(&cfg.AttemptTimeout, "attempt-timeout", 500*time.Millisecond, "bound on one attempt of a put on one member before the writer tries again")
	fs.IntVar(&cfg.Trials, "trials", 5, "failover and hand-off trials per target")
	fs.DurationVar(&cfg.ProbeInterval, "probe-interval", 5*time.Millisecond, "interval between the puts issued during a failover or hand-off trial")
	fs.DurationVar(&cfg.TrialTimeout, "trial-timeout", 30*time.Second, "bound on one failover or hand-off trial")
	fs.DurationVar(&cfg.StartTimeout, "start-timeout", 60*time.Second, "bound on starting a cluster")
	fs.StringVar(&cfg.Dir, "dir", "", "directory for the clusters' data and logs (default: a new temporary directory, removed at exit unless -keep)")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the data directories and logs")
	return cfg
}

// validate checks the flag values.
func (c *Config) validate() error {
	for _, k := range c.Targets {
		if !slices.ContainsFunc(targets, func(t targetEntry) bool { return t.key == k }) {
			return fmt.Errorf("unknown target %q", k)
		}
	}
	for _, k := range c.Experiments {
		if !slices.ContainsFunc(experiments, func(e experiment) bool { return e.key == k }) {
			return fmt.Errorf("unknown experiment %q", k)
		}
	}
	for _, n := range c.Writers {
		if n < 1 {
			return fmt.Errorf("-writers: %d is not a positive number", n)
		}
	}
	for _, n := range c.Sizes {
		if n < 1 {
			return fmt.Errorf("-sizes: %d is not a positive size", n)
		}
	}
	switch {
	case c.Duration <= 0 && c.Ops <= 0:
		return errors.New("one of -duration and -ops must be positive")
	case c.Trials < 1 && (slices.Contains(c.Experiments, "failover") || slices.Contains(c.Experiments, "handoff")):
		return errors.New("-trials must be at least 1")
	case c.ProbeInterval <= 0:
		return errors.New("-probe-interval must be positive")
	case c.AttemptTimeout <= 0 || c.OpTimeout <= 0 || c.TrialTimeout <= 0 || c.StartTimeout <= 0:
		return errors.New("timeouts must be positive")
	}
	return nil
}

// stringList is a flag.Value for comma-separated strings.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(s string) error {
	*l = nil
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			*l = append(*l, f)
		}
	}
	return nil
}

// intList is a flag.Value for comma-separated integers.
type intList []int

func (l *intList) String() string {
	parts := make([]string, len(*l))
	for i, n := range *l {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}

func (l *intList) Set(s string) error {
	*l = nil
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return fmt.Errorf("%q is not an integer", f)
		}
		*l = append(*l, n)
	}
	return nil
}

// startTime is when the harness started; progress messages show the time
// since.
var startTime = time.Now()

// progressf prints a progress message to stderr.
func progressf(prefix, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%7.1fs %s"+format+"\n", append([]any{time.Since(startTime).Seconds(), prefix}, args...)...)
}

func main() {
	os.Exit(run())
}

// run is main with an exit code, so that deferred clean-up runs.
func run() int {
	cfg := registerFlags(flag.CommandLine)
	flag.Parse()
	if err := cfg.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	if *soakReplot != "" {
		if err := replotSoak(os.Stdout, *soakReplot); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		return 0
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, func() {
		// Let a second Ctrl-C kill the harness at once; the kernel then
		// kills the children too (Pdeathsig).
		stop()
		progressf("", "interrupted: stopping clusters (Ctrl-C again to abort)")
	})
	defer killAllProcesses()

	root := cfg.Dir
	if root == "" {
		var err error
		if root, err = os.MkdirTemp("", "bench-"); err != nil {
			fmt.Fprintln(os.Stderr, "bench: create data directory:", err)
			return 1
		}
		if !cfg.Keep {
			defer os.RemoveAll(root)
		}
	} else if err := os.MkdirAll(root, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "bench: create data directory:", err)
		return 1
	}
	if cfg.Keep {
		defer progressf("", "data and logs kept in %s", root)
	}

	loadStart := loadAverage()
	table := &Table{}
	var notes []string
	failed := false
	for _, entry := range targets {
		if !slices.Contains(cfg.Targets, entry.key) {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		t, err := entry.new(cfg)
		if err != nil {
			progressf("", "%s: %v", entry.key, err)
			table.Add(Row{What: "setup", Target: entry.key, Note: "error: " + shortErr(err)})
			failed = true
			continue
		}
		t0 := time.Now()
		err = runTarget(ctx, cfg, t, entry.key, filepath.Join(root, entry.key), table)
		took := time.Since(t0)
		notes = append(notes, fmt.Sprintf("%s: %s; this part of the run took %.0f s.", t.Name(), t.Describe(), took.Seconds()))
		if err != nil {
			progressf("", "%s: %v", t.Name(), err)
			failed = true
		}
	}

	si := collectSysInfo(root)
	si.LoadStart = loadStart
	if *latencySVG != "" && len(latencyCurve) > 0 {
		if err := writeLatencyChart(*latencySVG, latencyCurve, headerLine(time.Now(), si, commandLine(os.Args))); err != nil {
			progressf("", "latency plot: %v", err)
		} else {
			notes = append(notes, "the latency plot is in "+filepath.ToSlash(*latencySVG)+".")
		}
	}
	fmt.Println(headerLine(time.Now(), si, commandLine(os.Args)))
	fmt.Println()
	if err := table.WriteMarkdown(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	fmt.Println()
	for _, n := range append(notes, methodNotes(cfg)...) {
		fmt.Println("- " + n)
	}
	switch {
	case ctx.Err() != nil:
		return 130
	case failed:
		return 1
	}
	return 0
}

// runTarget starts t's cluster under dir, runs the selected experiments on
// it, adds their rows to table and stops the cluster.
func runTarget(ctx context.Context, cfg *Config, t Target, key, dir string, table *Table) error {
	prefix := "[" + key + "] "
	env := &Env{
		Config:    cfg,
		Target:    t,
		Dir:       dir,
		Progressf: func(format string, args ...any) { progressf(prefix, format, args...) },
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	defer func() {
		if err := t.Stop(); err != nil {
			env.Progressf("stop: %v", err)
		}
	}()
	env.Progressf("starting a 3-member %s cluster", t.Name())
	startCtx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	t0 := time.Now()
	err := t.Start(startCtx, dir)
	cancel()
	if err != nil {
		table.Add(Row{What: "start", Target: t.Name(), Note: "error: " + shortErr(err)})
		return fmt.Errorf("start: %w", err)
	}
	env.Progressf("cluster up in %s", fmtDuration(time.Since(t0)))
	for _, e := range experiments {
		if !slices.Contains(cfg.Experiments, e.key) {
			continue
		}
		rows, err := e.run(ctx, env)
		table.Add(rows...)
		if err != nil {
			if ctx.Err() == nil {
				table.Add(Row{What: e.key, Target: t.Name(), Note: "error: " + shortErr(err)})
			}
			return fmt.Errorf("%s: %w", e.key, err)
		}
	}
	return nil
}

// headerLine is the line printed above the table: when and where the run
// happened and how it was started.
func headerLine(now time.Time, si sysInfo, cmd string) string {
	parts := []string{
		"Run " + now.UTC().Format("2006-01-02 15:04 UTC"),
		fmt.Sprintf("nproc %d", si.CPUs),
	}
	if si.MemTotal > 0 {
		parts = append(parts, "memory "+fmtBytes(si.MemTotal))
	}
	if si.CPUModel != "" {
		parts = append(parts, si.CPUModel)
	}
	if si.Kernel != "" {
		parts = append(parts, "Linux "+si.Kernel)
	}
	parts = append(parts, runtime.Version(), "data on "+si.FSType)
	if si.LoadStart != "" || si.LoadEnd != "" {
		parts = append(parts, fmt.Sprintf("load average (1, 5, 15 min) %s at the start, %s at the end", orUnknown(si.LoadStart), orUnknown(si.LoadEnd)))
	}
	parts = append(parts, "command: `"+cmd+"`")
	return strings.Join(parts, " · ")
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// commandLine renders the command that started the harness, without this
// machine's paths: "go run ./test/bench ARGS" when run by go run, else the
// program's base name and ARGS.
func commandLine(args []string) string {
	prog := filepath.Base(args[0])
	if strings.Contains(args[0], string(filepath.Separator)+"go-build") {
		prog = "go run ./test/bench"
	}
	return strings.Join(append([]string{prog}, args[1:]...), " ")
}

// methodNotes explains how the numbers were obtained, for the lines under
// the table.
func methodNotes(cfg *Config) []string {
	sizes := make([]string, len(cfg.Sizes))
	for i, s := range cfg.Sizes {
		sizes[i] = fmtBytes(int64(s))
	}
	load := fmt.Sprintf("for %s after a %s warm-up", cfg.Duration, cfg.Warmup)
	if cfg.Ops > 0 {
		load = fmt.Sprintf("%d puts after a %s warm-up", cfg.Ops, cfg.Warmup)
	}
	var notes []string
	if slices.Contains(cfg.Experiments, "latency") {
		notes = append(notes, fmt.Sprintf("put latency: each of N writers (own client and connections) puts random values (%s) to new keys one after the other, %s; p50/p99 are nearest-rank percentiles of the time from sending a put to its acknowledgement; throughput is acknowledged puts per second of wall time.",
			strings.Join(sizes, ", "), load))
	}
	if slices.Contains(cfg.Experiments, "failover") || slices.Contains(cfg.Experiments, "handoff") {
		notes = append(notes, fmt.Sprintf("failover / hand-off: %d trials each; the leader gets SIGKILL / SIGTERM while a client starts a put every %s (each retrying on other members, %s per attempt); the time runs from just before the signal to the first acknowledgement of a put started after the signal. The longest write stall is the longest gap between acknowledgements until the cluster works without the old leader. The stopped member is restarted between trials.",
			cfg.Trials, cfg.ProbeInterval, cfg.AttemptTimeout))
	}
	return notes
}

// shortErr renders err on one line of at most 160 characters, for table
// cells.
func shortErr(err error) string {
	if err == nil {
		return ""
	}
	s := strings.Join(strings.Fields(err.Error()), " ")
	if r := []rune(s); len(r) > 160 {
		s = string(r[:157]) + "..."
	}
	return s
}

// joinNonEmpty joins the non-empty parts with sep.
func joinNonEmpty(sep string, parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, sep)
}
