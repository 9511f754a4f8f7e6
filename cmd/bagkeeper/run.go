package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bagkeeper/bagkeeper/agent"
	"github.com/bagkeeper/bagkeeper/raftstore"
	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/transport"
	"github.com/bagkeeper/bagkeeper/sidecar"
	"github.com/bagkeeper/bagkeeper/sidecar/memlimit"
)

const defaultDataDir = "/var/lib/bagkeeper"

const runUsage = `Usage: bagkeeper run --app APP [flags]

Runs the sidecar: the pod's member of the application's raft group. It finds
its peers, bootstraps or joins the group, claims the pod's unit, and serves
/healthz, /readyz and /metrics on --http-bind and the admin API on
--admin-socket. SIGTERM stops it gracefully: the unit is released, leadership
is handed over, and (for pods without an ordinal) the member leaves.

Unless GOMEMLIMIT is set, it sets the Go runtime's soft memory limit to 90%
of the container's memory limit (cgroup v2 memory.max or cgroup v1
memory.limit_in_bytes); GOMEMLIMIT=off leaves it without one.`

type runFlags struct {
	fs *cmdFlags

	config, app, pod, dataDir, bind, advertise, httpBind, adminSocket string
	peers                                                             listFlag
	peersFile, dnsName, dnsSRV, dnsResolver                           string
	bootstrapExpect, voters                                           int
	joinToken, joinTokenFile, tlsCert, tlsKey, tlsCA                  string
	insecure, pprof                                                   bool
	unitMode, leaveOnStop                                             string
	unitReleaseAfter, unitRemoveAfter, unitTakeoverAfter              time.Duration
	units                                                             int
	heartbeat, election, leaderLease, commit, nonvoterAppend          time.Duration
	nonvoterHeartbeat                                                 time.Duration
	snapshotThreshold, trailingLogs                                   uint64
	snapshotInterval                                                  time.Duration
	logStore                                                          string
	autopilotInterval, promoteAfter, unhealthyAfter                   time.Duration
	stateCheck                                                        time.Duration
	deadVoterAfter, deadMemberAfter                                   time.Duration
	joinInterval                                                      time.Duration
	logLevel, logFormat                                               string

	charmDir, charmConfig, agentSocket, toolsDir, hookTool, hookRunner string
	relationsFile, relationsBind                                       string
	hookUIDs                                                           listFlag
	podUID, podIP, modelName, modelUUID, zone, jujuVersion             string
	updateStatus, hookRetry                                            time.Duration
	hookNice                                                           int
	secretsKeyFile                                                     string
}

func newRunFlags(e *env) *runFlags {
	f := &runFlags{fs: newFlagSet("run", runUsage)}
	fs := f.fs
	host, _ := os.Hostname()
	fs.StringVar(&f.config, "config", "", "YAML `file` of settings (keys are these flag names)")
	fs.StringVar(&f.app, "app", "", "Juju application `name` this pod runs (required)")
	fs.StringVar(&f.pod, "pod-name", host, "this pod's `name` (in Kubernetes, from the downward API)")
	fs.StringVar(&f.dataDir, "data-dir", defaultDataDir, "`dir`ectory for the identity, raft log and snapshots (a persistent volume where there is one)")
	fs.StringVar(&f.bind, "bind", "0.0.0.0:7400", "listen `address` of the peer port (raft and the peer API)")
	fs.StringVar(&f.advertise, "advertise", "", "`host:port` peers dial to reach this pod; a DNS name is resolved on every dial\n(default: --bind, when its host is not 0.0.0.0)")
	fs.StringVar(&f.httpBind, "http-bind", "0.0.0.0:7401", "listen `address` of /healthz, /readyz and /metrics; empty disables")
	fs.BoolVar(&f.pprof, "pprof", false, "also serve Go's runtime profiles (CPU, heap, goroutines) under /debug/pprof/ on --http-bind;\nthey show where time and memory go, never bag contents")
	fs.StringVar(&f.adminSocket, "admin-socket", "", "Unix socket `path` of the admin API (default <data-dir>/admin.sock)")
	fs.Var(&f.peers, "peers", "comma-separated peer `addresses` (host:port) to look for the cluster at")
	fs.StringVar(&f.peersFile, "peers-file", "", "`file` listing peer addresses, one per line; watched for changes")
	fs.StringVar(&f.dnsName, "discovery-dns", "", "DNS `name` whose A/AAAA records are peers (a headless service); port from --advertise")
	fs.StringVar(&f.dnsSRV, "discovery-srv", "", "DNS SRV `name` whose targets are peers, e.g. _raft._tcp.app-endpoints.ns.svc.cluster.local")
	fs.StringVar(&f.dnsResolver, "dns-resolver", "", "`host:port` of the DNS server for discovery (default: the system's)")
	fs.IntVar(&f.bootstrapExpect, "bootstrap-expect", 0, "`number` of empty members that bootstrap a new cluster together; 0 = only join")
	fs.IntVar(&f.voters, "voters", 3, "`number` of voters the leader keeps: odd, 1 to 7")
	fs.StringVar(&f.joinToken, "join-token", "", "shared `secret` every member must know (prefer --join-token-file)")
	fs.StringVar(&f.joinTokenFile, "join-token-file", "", "`file` holding the join token")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "PEM certificate `file` for mutual TLS on the peer port (reloaded on change)")
	fs.StringVar(&f.tlsKey, "tls-key", "", "PEM private key `file` for --tls-cert")
	fs.StringVar(&f.tlsCA, "tls-ca", "", "PEM CA `file` that signed every member's certificate")
	fs.BoolVar(&f.insecure, "insecure", false, "allow a peer port without TLS and without a join token")
	fs.StringVar(&f.unitMode, "unit-mode", "auto", "how the pod gets its unit (`mode`): auto, ordinal (pod <app>-N is unit <app>/N) or claim")
	fs.IntVar(&f.units, "units", 0, "the application's declared `number` of units (the chart's replicas): a pod without an ordinal\nnever creates a unit beyond it and waits for one instead; 0 = no limit")
	fs.DurationVar(&f.unitTakeoverAfter, "unit-takeover-after", 30*time.Second, "while a pod waits for a unit, the leader frees for it the unit of a member unreachable this long\n(0: the default); the old holder can commit nothing more for it")
	fs.DurationVar(&f.unitReleaseAfter, "unit-release-after", 5*time.Minute, "the leader releases the unit of a member unreachable this long (units claimed without an ordinal only)")
	fs.DurationVar(&f.unitRemoveAfter, "unit-remove-after", 10*time.Minute, "a released unit unclaimed this long is removed")
	fs.StringVar(&f.leaveOnStop, "leave-on-stop", "auto", "whether to leave the raft group on graceful stop (`mode`): auto (when the pod has no ordinal), true or false")
	fs.DurationVar(&f.heartbeat, "raft-heartbeat-timeout", 500*time.Millisecond, "how long a voter goes without a word from the leader before it stands for election (plus up to half of it, at random), and the least silence after which it votes for another;\nwhile the leader's words have been arriving late (a busy machine), twice the longest recent gap\nbetween two of them, up to 4 times this (a non-voter, which never stands, hears from the leader\nevery 2.5 times this but at least twice per --unhealthy-after, and forgets the leader after 2.5 times that;\nsee --raft-nonvoter-heartbeat-interval)")
	fs.DurationVar(&f.election, "raft-election-timeout", 500*time.Millisecond, "how long a candidate waits for votes before it tries again")
	fs.DurationVar(&f.leaderLease, "raft-leader-lease-timeout", 400*time.Millisecond, "how long a leader keeps leading without hearing from a quorum (at most --raft-heartbeat-timeout, at least a quarter of it)")
	fs.DurationVar(&f.commit, "raft-commit-timeout", time.Second, "longest pause between the leader's appends to a follower while nothing is written (heartbeats\ncome more often; a write reaches the followers at once whatever this is)")
	fs.DurationVar(&f.nonvoterHeartbeat, "raft-nonvoter-heartbeat-interval", 0, "least time between two heartbeats the leader sends one non-voter (a member beyond --voters);\nthe non-voter forgets its leader, and the leader counts it unhealthy, after 2.5 of these without\na word (or --unhealthy-after, if longer). Longer: an idle leader of many non-voters works less,\nand one that dies or is cut off is noticed later (default 2.5 × --raft-heartbeat-timeout, at most\nhalf of --unhealthy-after: 1.25s, and beyond 50 non-voters 25ms × their number, up to 5s;\nset, it stays fixed)")
	fs.DurationVar(&f.nonvoterAppend, "raft-nonvoter-append-interval", raftstore.DefaultNonvoterAppendInterval, "least time between two appends the leader sends one non-voter: under a stream of writes\na non-voter gets them in batches, one append per interval, and costs the group less; the leader\nlengthens the interval to 8ms per non-voter when that is longer (up to 1s); a write after a quiet\nspell goes out at once (negative: no batching; shorter than --raft-heartbeat-timeout;\nwhen not given and a fifth of --raft-heartbeat-timeout is shorter, that)")
	fs.Uint64Var(&f.snapshotThreshold, "raft-snapshot-threshold", 2048, "log `entries` between snapshots (a member also takes one when the log written since the last\noutgrows half the state, or 4 MiB)")
	fs.Uint64Var(&f.trailingLogs, "raft-trailing-logs", 2048, "log `entries` kept after a snapshot (a member further behind gets the snapshot)")
	fs.DurationVar(&f.snapshotInterval, "raft-snapshot-interval", 2*time.Second, "how often to check whether a snapshot is due (raft waits between this and twice this);\nthe log, hence the raft store on disk and in memory, grows by what is written in between")
	fs.StringVar(&f.logStore, "log-store", string(raftstore.DefaultLogStore), "where a new data dir keeps the raft log (`store`): boltdb (raft-boltdb, <data-dir>/raft/raft.db), wal\n(raft-wal segment files in <data-dir>/raft/wal, 64 MiB each, preallocated) or segments (segment files in\n<data-dir>/raft/segments, up to 4 MiB each, one fdatasync per append); a data dir keeps the store it was created with")
	fs.DurationVar(&f.autopilotInterval, "autopilot-interval", time.Second, "how often the leader checks members' health (a settled member of an idle group every ten intervals)")
	fs.DurationVar(&f.promoteAfter, "promote-after", 5*time.Second, "a caught-up non-voter must be healthy this long before promotion")
	fs.DurationVar(&f.stateCheck, "state-check-interval", 10*time.Minute, "how often every member hashes its state at the same raft index, so that a member\nwhose state diverged is found (it then serves nothing); 0 = never")
	fs.DurationVar(&f.unhealthyAfter, "unhealthy-after", 0, "a member silent this long, to health checks and to the leader's raft heartbeats, counts as unhealthy (default 3 × --autopilot-interval, at least 2s)")
	fs.DurationVar(&f.deadVoterAfter, "dead-voter-after", 5*time.Minute, "a voter unhealthy this long is replaced by a healthy non-voter")
	fs.DurationVar(&f.deadMemberAfter, "dead-member-after", 15*time.Minute, "a non-voter unhealthy this long is removed from the group")
	fs.DurationVar(&f.joinInterval, "join-interval", time.Second, "pause between bootstrap and join attempts")
	fs.StringVar(&f.charmDir, "charm-dir", "", "the charm's `dir`ectory (metadata.yaml, config.yaml, hooks); runs the unit agent")
	fs.StringVar(&f.charmConfig, "charm-config", "", "YAML `file` of charm config settings, watched: a change fires config-changed")
	fs.StringVar(&f.relationsFile, "relations-file", "", "YAML `file` declaring this application's offers and the offers it consumes (relations\nbetween applications; see docs/relations.md), watched; needs --charm-dir")
	fs.StringVar(&f.relationsBind, "relations-bind", "0.0.0.0:7402", "listen `address` of the relations port, where other applications reach this one's offers\n(with --relations-file; empty serves no offers)")
	fs.StringVar(&f.agentSocket, "agent-socket", "", "Unix socket `path` of the hook tools (default <data-dir>/agent.sock)")
	fs.StringVar(&f.toolsDir, "tools-dir", "", "`dir`ectory for the hook tool symlinks, put first on hooks' PATH (default <data-dir>/tools)")
	fs.StringVar(&f.hookTool, "hook-tool", "", "`path` of the hook tool binary the symlinks point at (default: jujuc next to bagkeeper)")
	fs.StringVar(&f.hookRunner, "hook-runner", "local", "where hooks run (`mode`): local (in this process) or remote (bagkeeper hook-runner in another container)")
	fs.Var(&f.hookUIDs, "hook-uids", "comma-separated user `ids` allowed on the hook tool socket besides this process's user and root")
	fs.StringVar(&f.podUID, "pod-uid", "", "this pod's `uid` (downward API metadata.uid): a new one means the pod was replaced")
	fs.StringVar(&f.podIP, "pod-ip", "", "this pod's `address` as charms see it (default: the host of --advertise when it is an IP)")
	fs.StringVar(&f.modelName, "model-name", "", "Juju model `name` (JUJU_MODEL_NAME)")
	fs.StringVar(&f.modelUUID, "model-uuid", "", "Juju model `uuid` (JUJU_MODEL_UUID)")
	fs.StringVar(&f.zone, "availability-zone", "", "the `zone` hooks see in JUJU_AVAILABILITY_ZONE")
	fs.StringVar(&f.jujuVersion, "juju-version", "3.6.0", "the `version` hooks see in JUJU_VERSION (ops needs 3.1 or later for application data and dispatch)")
	fs.DurationVar(&f.updateStatus, "update-status-interval", 5*time.Minute, "how often update-status runs")
	fs.IntVar(&f.hookNice, "hook-nice", agent.DefaultHookNice, "how much lower than this process's the CPU priority of hooks, actions and exec'd commands is\n(`n`, 0 to 19, added to the nice value): they get what the raft member leaves when the CPU is short;\n0 runs them at this process's priority (with --hook-runner=remote: bagkeeper hook-runner --hook-nice)")
	fs.DurationVar(&f.hookRetry, "hook-retry-delay", 5*time.Second, "first pause before a failed hook is retried (it doubles, up to 5m)")
	fs.StringVar(&f.secretsKeyFile, "secrets-key-file", "", "`file` holding the application's secrets key (32 raw bytes, 64 hex digits or base64), the same in every pod:\nJuju secrets are encrypted with it before they are replicated; a pod without the key its\napplication's secrets were sealed with runs no hook and is not ready")
	fs.StringVar(&f.logLevel, "log-level", "info", "log `level`: debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "json", "log `format`: json or text")
	return f
}

// fitNonvoterAppend shortens the default non-voter append interval to a
// fifth of a heartbeat timeout too short for it, so that a shorter
// --raft-heartbeat-timeout alone is accepted; an interval given (on the
// command line, in the environment or the config file) is left as it is,
// and checked.
func (f *runFlags) fitNonvoterAppend() {
	given := false
	f.fs.Visit(func(fl *flag.Flag) { given = given || fl.Name == "raft-nonvoter-append-interval" })
	if !given && f.heartbeat > 0 {
		f.nonvoterAppend = raftstore.DefaultNonvoterAppendIntervalFor(f.heartbeat)
	}
}

// absPaths makes every path flag absolute: hooks run in the charm's
// directory and must find the charm, the socket and the tools wherever the
// sidecar was started from.
func (f *runFlags) absPaths() error {
	for _, p := range []*string{&f.dataDir, &f.adminSocket, &f.peersFile, &f.joinTokenFile, &f.tlsCert, &f.tlsKey, &f.tlsCA,
		&f.charmDir, &f.charmConfig, &f.relationsFile, &f.agentSocket, &f.toolsDir, &f.hookTool, &f.secretsKeyFile} {
		if *p == "" {
			continue
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		*p = abs
	}
	return nil
}

// sidecarConfig turns the flags into a sidecar.Config, checking each.
func (f *runFlags) sidecarConfig(logger *slog.Logger) (sidecar.Config, error) {
	if err := f.absPaths(); err != nil {
		return sidecar.Config{}, err
	}
	c := sidecar.Config{
		App: f.app, Pod: f.pod, DataDir: f.dataDir,
		Bind: f.bind, Advertise: f.advertise, HTTPBind: f.httpBind, Pprof: f.pprof, AdminSocket: f.adminSocket,
		Peers: f.peers, PeersFile: f.peersFile, DNSName: f.dnsName, DNSSRV: f.dnsSRV, DNSResolver: f.dnsResolver,
		BootstrapExpect: f.bootstrapExpect, Voters: f.voters, Insecure: f.insecure,
		UnitMode: sidecar.UnitMode(f.unitMode), UnitReleaseAfter: f.unitReleaseAfter, UnitRemoveAfter: f.unitRemoveAfter,
		Units: f.units, UnitTakeoverAfter: f.unitTakeoverAfter,
		Logger: logger, Version: version,
	}
	if f.app == "" {
		return c, usageErrorf("--app is required")
	}
	if !state.ValidAppName(f.app) {
		return c, usageErrorf("--app %q is not a valid application name (lower-case letters, digits and hyphens, starting with a letter)", f.app)
	}
	if _, _, err := net.SplitHostPort(f.bind); err != nil {
		return c, usageErrorf("--bind %q: %v", f.bind, err)
	}
	if c.Advertise == "" {
		host, _, _ := net.SplitHostPort(f.bind)
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			return c, usageErrorf("--advertise is required when --bind listens on all interfaces (%s)", f.bind)
		}
		c.Advertise = f.bind
	}
	if _, _, err := net.SplitHostPort(c.Advertise); err != nil {
		return c, usageErrorf("--advertise %q: %v", c.Advertise, err)
	}
	switch f.leaveOnStop {
	case "auto":
	case "true", "false":
		v := f.leaveOnStop == "true"
		c.LeaveOnStop = &v
	default:
		return c, usageErrorf("--leave-on-stop must be auto, true or false, got %q", f.leaveOnStop)
	}
	switch {
	case f.joinToken != "" && f.joinTokenFile != "":
		return c, usageErrorf("give --join-token or --join-token-file, not both")
	case f.joinToken != "":
		c.JoinToken = []byte(f.joinToken)
	case f.joinTokenFile != "":
		b, err := os.ReadFile(f.joinTokenFile)
		if err != nil {
			return c, fmt.Errorf("--join-token-file: %w", err)
		}
		c.JoinToken = []byte(strings.TrimSpace(string(b)))
		if len(c.JoinToken) == 0 {
			return c, fmt.Errorf("--join-token-file %s is empty", f.joinTokenFile)
		}
	}
	switch n := countSet(f.tlsCert, f.tlsKey, f.tlsCA); n {
	case 0:
	case 3:
		c.TLS = &transport.TLSFiles{CertFile: f.tlsCert, KeyFile: f.tlsKey, CAFile: f.tlsCA}
	default:
		return c, usageErrorf("mutual TLS needs all of --tls-cert, --tls-key and --tls-ca")
	}
	c.Raft = raftstore.Config{
		BootstrapExpect: f.bootstrapExpect, Voters: f.voters, JoinInterval: f.joinInterval,
		HeartbeatTimeout: f.heartbeat, ElectionTimeout: f.election, LeaderLeaseTimeout: f.leaderLease, CommitTimeout: f.commit, NonvoterAppendInterval: f.nonvoterAppend, NonvoterHeartbeatInterval: f.nonvoterHeartbeat,
		SnapshotThreshold: f.snapshotThreshold, TrailingLogs: f.trailingLogs, SnapshotInterval: f.snapshotInterval,
		Autopilot: raftstore.AutopilotConfig{
			Interval: f.autopilotInterval, Stabilization: f.promoteAfter, UnhealthyAfter: f.unhealthyAfter, // 0: derived from the interval
			DeadVoterAfter: f.deadVoterAfter, DeadNonvoterAfter: f.deadMemberAfter,
		},
		StateCheckInterval: f.stateCheck,
	}
	if f.stateCheck == 0 {
		c.Raft.StateCheckInterval = -1 // never
	}
	ls, err := raftstore.ParseLogStore(f.logStore)
	if err != nil {
		return c, usageErrorf("--log-store: %v", err)
	}
	c.Raft.LogStore = ls
	if f.charmDir != "" {
		as := &sidecar.AgentSettings{
			CharmDir: f.charmDir, ConfigFile: f.charmConfig, Socket: f.agentSocket, ToolsDir: f.toolsDir, ToolBinary: f.hookTool,
			PodUID: f.podUID, Address: f.podIP, ModelName: f.modelName, ModelUUID: f.modelUUID, AvailabilityZone: f.zone, JujuVersion: f.jujuVersion,
			UpdateStatusEvery: f.updateStatus, RetryDelay: f.hookRetry, HookNice: f.hookNice,
		}
		if err := checkHookNice(f.hookNice, "the sidecar"); err != nil {
			return c, err
		}
		switch f.hookRunner {
		case "local":
		case "remote":
			as.RemoteRunner = true
		default:
			return c, usageErrorf("--hook-runner must be local or remote, got %q", f.hookRunner)
		}
		for _, u := range f.hookUIDs {
			uid, err := strconv.Atoi(u)
			if err != nil || uid < 0 {
				return c, usageErrorf("--hook-uids: %q is not a user id", u)
			}
			as.AllowedUIDs = append(as.AllowedUIDs, uid)
		}
		if f.secretsKeyFile != "" {
			key, err := agent.LoadSecretsKey(f.secretsKeyFile)
			if err != nil {
				return c, err
			}
			as.SecretsKey = key
		}
		c.Agent = as
	} else if f.secretsKeyFile != "" {
		return c, usageErrorf("--secrets-key-file needs --charm-dir: secrets are served to the charm's hooks")
	} else if f.charmConfig != "" {
		return c, usageErrorf("--charm-config needs --charm-dir")
	} else if f.relationsFile != "" {
		return c, usageErrorf("--relations-file needs --charm-dir: relations are checked against the charm's metadata.yaml")
	}
	if f.relationsFile != "" {
		c.RelationsFile, c.RelationsBind = f.relationsFile, f.relationsBind
	}
	if f.voters < 1 || f.voters > 7 || f.voters%2 == 0 {
		return c, usageErrorf("--voters must be odd and between 1 and 7, got %d", f.voters)
	}
	if f.bootstrapExpect < 0 || f.bootstrapExpect > 7 {
		return c, usageErrorf("--bootstrap-expect must be between 0 and 7, got %d", f.bootstrapExpect)
	}
	return c, nil
}

func countSet(vals ...string) int {
	n := 0
	for _, v := range vals {
		if v != "" {
			n++
		}
	}
	return n
}

func newLogger(e *env, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, usageErrorf("--log-level must be debug, info, warn or error, got %q", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "json":
		return slog.New(newUniqueKeys(slog.NewJSONHandler(e.stderr, opts))), nil
	case "text":
		return slog.New(newUniqueKeys(slog.NewTextHandler(e.stderr, opts))), nil
	}
	return nil, usageErrorf("--log-format must be json or text, got %q", format)
}

func cmdRun(e *env, args []string) error {
	f := newRunFlags(e)
	rest, err := parse(e, f.fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageErrorf("unexpected arguments %q", rest)
	}
	if err := checkEnvNames(e, f.fs.FlagSet); err != nil {
		return err
	}
	f.fitNonvoterAppend()
	logger, err := newLogger(e, f.logLevel, f.logFormat)
	if err != nil {
		return err
	}
	cfg, err := f.sidecarConfig(logger)
	if err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return &usageError{msg: err.Error()}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // a second signal kills the process at once
	}()
	logger.Info("starting", "version", version, "app", cfg.App, "pod", cfg.Pod, "advertise", cfg.Advertise, "data_dir", cfg.DataDir)
	// The Go runtime's soft memory limit: from GOMEMLIMIT when it is set,
	// else from the container's memory limit.
	memlimit.Apply(memlimit.Config{LookupEnv: e.lookupEnv}).Log(logger)
	err = sidecar.Run(ctx, cfg)
	if err != nil && errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
