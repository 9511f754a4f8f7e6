// Package sidecar is the pod: it works out who the pod is, finds its
// peers, runs the raft member (raftstore), claims the pod's unit, serves
// probes, metrics and the admin socket, and shuts all of it down in the
// right order when the pod stops.
package sidecar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/bagkeeper/bagkeeper/agent"
	"github.com/bagkeeper/bagkeeper/raftstore"
	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/transport"
	"github.com/bagkeeper/bagkeeper/sidecar/discovery"
	"github.com/bagkeeper/bagkeeper/sidecar/unixsock"
)

// UnitMode says how a pod gets its unit.
type UnitMode string

// Unit modes.
const (
	// UnitModeAuto uses the ordinal when the pod name is "<app>-<N>" (a
	// StatefulSet pod) and claims otherwise.
	UnitModeAuto UnitMode = "auto"
	// UnitModeOrdinal requires the pod name to end in "-<N>" and takes unit app/N.
	UnitModeOrdinal UnitMode = "ordinal"
	// UnitModeClaim claims a released unit, oldest first, or a new one.
	UnitModeClaim UnitMode = "claim"
)

// Config is everything `bagkeeper run` is told.
type Config struct {
	App     string
	Pod     string
	DataDir string

	// Bind is the listen address of the raft and peer port; Advertise is
	// the host:port peers dial (a DNS name where the platform gives one).
	Bind      string
	Advertise string
	// HTTPBind serves /healthz, /readyz and /metrics.
	HTTPBind string
	// Pprof also serves Go's runtime profiles under /debug/pprof/ on
	// HTTPBind.
	Pprof bool
	// AdminSocket is the Unix socket of the admin API (default
	// <data-dir>/admin.sock).
	AdminSocket string

	// Discovery sources; any combination.
	Peers       []string // static list
	PeersFile   string
	DNSName     string // A/AAAA records, paired with the advertise port
	DNSSRV      string // full SRV name
	DNSResolver string // host:port of a DNS server to ask instead of the system's

	BootstrapExpect int
	Voters          int

	// Security of the peer port.
	JoinToken []byte
	TLS       *transport.TLSFiles
	Insecure  bool

	UnitMode UnitMode
	// Units is the application's declared scale (the chart's replicas): a
	// pod without an ordinal never creates a unit beyond it, and waits for
	// one to be released instead. 0: no limit.
	Units int
	// UnitTakeoverAfter: while a pod waits for a unit, the leader releases
	// (for the waiting pod to take) a unit whose holder it has not heard
	// from for this long.
	UnitTakeoverAfter time.Duration
	// UnitReleaseAfter: the leader releases the unit of a member it has not
	// heard from for this long.
	UnitReleaseAfter time.Duration
	// UnitRemoveAfter: a released unit unclaimed for this long is removed.
	UnitRemoveAfter time.Duration
	// LeaveOnStop: on graceful stop, also leave the raft configuration.
	// Default (nil): leave when the pod has no ordinal (its disk will not
	// come back), stay otherwise.
	LeaveOnStop *bool

	// Raft and membership tuning, passed to raftstore.
	Raft raftstore.Config

	// RelationsFile declares this application's offers and the offers of
	// other applications it consumes (see package relconf); it is watched.
	// Empty: no relations between applications.
	RelationsFile string
	// RelationsBind is the listen address of the relations port, where
	// other applications reach this application's offers ("" serves none).
	RelationsBind string

	// Agent configures the unit agent; nil runs the sidecar without one
	// (a store for relation data, driven by its admin API).
	Agent *AgentSettings

	Logger  *slog.Logger
	Version string
	Now     func() time.Time
}

var ordinalRE = regexp.MustCompile(`^(.+)-(0|[1-9][0-9]*)$`)

// PodOrdinal returns the ordinal of a StatefulSet pod named "<app>-<N>" of
// application app, or -1.
func PodOrdinal(pod, app string) int64 {
	m := ordinalRE.FindStringSubmatch(pod)
	if m == nil || m[1] != app {
		return -1
	}
	n, err := strconv.ParseInt(m[2], 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// Validate checks the configuration and fills in defaults; Start calls it
// too. Its errors are mistakes in how the sidecar was configured.
func (c *Config) Validate() error { return c.validate() }

func (c *Config) validate() error {
	if !state.ValidAppName(c.App) {
		return fmt.Errorf("--app %q is not a valid application name (lower-case letters, digits and hyphens, starting with a letter)", c.App)
	}
	if c.Pod == "" {
		return errors.New("--pod-name is empty and the host name is unknown")
	}
	if c.DataDir == "" {
		return errors.New("--data-dir is required")
	}
	if len(c.JoinToken) == 0 && c.TLS == nil && !c.Insecure {
		return errors.New("the peer port needs protection: give --tls-cert/--tls-key/--tls-ca, or a --join-token, or accept plaintext with --insecure")
	}
	switch c.UnitMode {
	case "":
		c.UnitMode = UnitModeAuto
	case UnitModeAuto, UnitModeClaim:
	case UnitModeOrdinal:
		if ordinalRE.FindStringSubmatch(c.Pod) == nil {
			return fmt.Errorf("--unit-mode=ordinal needs a pod name ending in -<number>, got %q", c.Pod)
		}
	default:
		return fmt.Errorf("--unit-mode must be auto, ordinal or claim, got %q", c.UnitMode)
	}
	if c.AdminSocket == "" {
		c.AdminSocket = filepath.Join(c.DataDir, "admin.sock")
	}
	if c.Units < 0 {
		return fmt.Errorf("--units must not be negative, got %d", c.Units)
	}
	if err := validateRaftTiming(c.Raft); err != nil {
		return err
	}
	if c.UnitTakeoverAfter <= 0 {
		c.UnitTakeoverAfter = 30 * time.Second
	}
	if c.UnitReleaseAfter <= 0 {
		c.UnitReleaseAfter = 5 * time.Minute
	}
	if c.UnitRemoveAfter <= 0 {
		c.UnitRemoveAfter = 10 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

// validateRaftTiming refuses raft timeouts that cannot work together,
// naming the flags (raft refuses some of them too, in its own words, once
// the member starts). Zero values are raft's defaults, checked by raft.
func validateRaftTiming(r raftstore.Config) error {
	hb, election, lease := r.HeartbeatTimeout, r.ElectionTimeout, r.LeaderLeaseTimeout
	if r.NonvoterHeartbeatInterval < 0 {
		return fmt.Errorf("--raft-nonvoter-heartbeat-interval (%s) must not be negative", r.NonvoterHeartbeatInterval)
	}
	if hb <= 0 {
		return nil
	}
	if election > 0 && election < hb {
		return fmt.Errorf("--raft-election-timeout (%s) must be at least --raft-heartbeat-timeout (%s)", election, hb)
	}
	if lease > hb {
		return fmt.Errorf("--raft-leader-lease-timeout (%s) must not be longer than --raft-heartbeat-timeout (%s)", lease, hb)
	}
	// The leader hears from its followers once per tenth to fifth of the
	// heartbeat timeout, and steps down when a lease passes without
	// answers from a quorum: a lease barely longer than that gap makes
	// it step down between two heartbeats, again and again.
	if lease > 0 && lease < hb/4 {
		return fmt.Errorf("--raft-leader-lease-timeout (%s) must be at least a quarter of --raft-heartbeat-timeout (%s): the leader hears from its followers only every tenth to fifth of it, and steps down when a lease passes without a quorum's answer", lease, hb)
	}
	if r.NonvoterAppendInterval >= hb {
		return fmt.Errorf("--raft-nonvoter-append-interval (%s) must be shorter than --raft-heartbeat-timeout (%s)", r.NonvoterAppendInterval, hb)
	}
	return nil
}

// AgentSettings configure the unit agent that runs the charm's hooks.
type AgentSettings struct {
	// CharmDir holds metadata.yaml, config.yaml and the hooks.
	CharmDir string
	// ConfigFile holds the operator's charm config (a YAML map); it is
	// watched and a change fires config-changed.
	ConfigFile string
	// Socket is the hook tools' Unix socket (default <data-dir>/agent.sock).
	Socket string
	// ToolsDir receives the tool symlinks (default <data-dir>/tools),
	// pointing at ToolBinary.
	ToolsDir   string
	ToolBinary string
	// RemoteRunner: hooks run in another container, by `bagkeeper
	// hook-runner` connected to Socket, instead of in this process.
	RemoteRunner bool
	// HookNice is how much higher than this process's the nice value of
	// the hooks run in this process is (agent.DefaultHookNice); 0: the
	// same.
	HookNice int
	// AllowedUIDs may use the socket besides this process's user and root.
	AllowedUIDs []int
	// PodUID identifies this pod (the downward API's metadata.uid); a new
	// one means the pod was replaced. Default: the raft member id.
	PodUID string
	// Address is the pod's address as charms see it; default: the host
	// of --advertise when it is an IP.
	Address string

	ModelName, ModelUUID, AvailabilityZone string
	// JujuVersion is JUJU_VERSION in hooks (default 3.6.0).
	JujuVersion       string
	UpdateStatusEvery time.Duration
	RetryDelay        time.Duration
	// SecretsKey seals the application's secrets (nil: secrets disabled).
	SecretsKey *agent.SecretsKey
}

// ordinal returns the ordinal this pod claims its unit by, or -1.
func (c *Config) ordinal() int64 {
	switch c.UnitMode {
	case UnitModeClaim:
		return -1
	case UnitModeOrdinal:
		m := ordinalRE.FindStringSubmatch(c.Pod)
		n, _ := strconv.ParseInt(m[2], 10, 64)
		return n
	}
	return PodOrdinal(c.Pod, c.App)
}

// Sidecar is a running bagkeeper sidecar.
type Sidecar struct {
	cfg   Config
	log   *slog.Logger
	ln    *transport.Listener
	node  *raftstore.Node
	disco *discovery.Multi
	file  *discovery.File

	unit     atomic.Value // string: the unit this pod holds, "" until claimed
	unitLost atomic.Value // string: why the unit is gone, if it is
	waiting  atomic.Value // string: why the pod waits for a unit, if it does
	ready    *readiness

	httpSrv  *http.Server
	httpLn   net.Listener
	adminSrv *grpc.Server
	adminLn  *unixsock.Listener
	metrics  *metrics
	agent    *unitAgent
	// secretsKey is the unit agent's key for the application's secrets (nil: none).
	secretsKey *agent.SecretsKey
	// secretsKeyLogged: a key that cannot read the store's secrets was
	// logged (once; Ready says it on every probe).
	secretsKeyLogged atomic.Bool
	// started: Start has opened every socket (GET /startupz), and
	// adminAPI is set.
	started  atomic.Bool
	adminAPI *adminServer
	// relations is nil without a relations file.
	relations *relations

	wg sync.WaitGroup
}

// Start brings the sidecar up: it returns once the raft member and every
// server are running. The unit is claimed in the background as soon as
// the cluster can take writes; Ready reports when that has happened.
func Start(cfg Config) (*Sidecar, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Sidecar{cfg: cfg, log: cfg.Logger.With("app", cfg.App, "pod", cfg.Pod)}
	s.unit.Store("")
	s.unitLost.Store("")
	s.waiting.Store("")
	ok := false
	defer func() {
		if !ok {
			if s.node != nil {
				_ = s.node.Shutdown(context.Background(), false)
			}
			s.closeServers()
		}
	}()
	if cfg.Advertise == "" {
		return nil, errors.New("--advertise is required (the host:port peers dial to reach this pod)")
	}
	var err error
	s.ln, err = transport.Listen(cfg.Bind, cfg.Advertise, transport.Config{App: cfg.App, Token: cfg.JoinToken, TLS: cfg.TLS, Logger: s.log})
	if err != nil {
		return nil, fmt.Errorf("peer port: %w", err)
	}
	if err := s.startDiscovery(); err != nil {
		return nil, err
	}
	rc := cfg.Raft
	rc.App, rc.Pod, rc.DataDir, rc.Advertise = cfg.App, cfg.Pod, cfg.DataDir, cfg.Advertise
	rc.RaftLayer, rc.GRPCListener, rc.Dial = s.ln.RaftLayer(), s.ln.GRPCListener(), s.ln.Dialer()
	if ord := cfg.ordinal(); ord >= 0 && ord >= int64(rc.BootstrapExpect) {
		rc.NoBootstrap = true
	}
	rc.Discover = s.disco.Lookup
	rc.DiscoverChanged = s.discoChanged()
	rc.Logger, rc.Version, rc.Now = cfg.Logger.With("app", cfg.App), cfg.Version, cfg.Now
	s.node, err = raftstore.Open(rc)
	if err != nil {
		return nil, err
	}
	s.log = s.log.With("member", string(s.node.ID()))
	s.ready = &readiness{src: s.node}
	s.metrics = newMetrics(s)
	if cfg.RelationsFile != "" {
		// Before the admin API, which reports the relations' streams.
		if err := s.startRelations(); err != nil {
			return nil, err
		}
	}
	if err := s.startHTTP(); err != nil {
		return nil, err
	}
	if err := s.startAdmin(); err != nil {
		return nil, err
	}
	if cfg.Agent != nil {
		if err := s.startAgent(); err != nil {
			return nil, err
		}
	}
	ok = true
	s.started.Store(true)
	return s, nil
}

// Run starts the sidecar and runs it until ctx ends (the pod is being
// stopped), then shuts it down gracefully.
func Run(ctx context.Context, cfg Config) error {
	s, err := Start(cfg)
	if err != nil {
		return err
	}
	return s.Serve(ctx)
}

// Serve runs the sidecar's loops until ctx ends or the raft member fails,
// then shuts down gracefully.
func (s *Sidecar) Serve(ctx context.Context) error {
	loops, cancel := context.WithCancel(context.Background())
	s.wg.Add(2)
	go func() { defer s.wg.Done(); s.claimLoop(loops) }()
	go func() { defer s.wg.Done(); s.reapLoop(loops) }()
	if s.agent != nil {
		s.runAgent(&s.wg)
	}
	if s.relations != nil {
		s.runRelations(loops, &s.wg)
	}
	var fatal error
	select {
	case <-ctx.Done():
	case fatal = <-s.node.Fatal():
	}
	cancel()
	if s.agent != nil {
		// The stop hook: bounded, so that a pod without a majority still
		// stops within a common grace period (10 s here, then up to 5 s
		// for the unit's release and about a second to close).
		actx, acancel := context.WithTimeout(context.Background(), 10*time.Second)
		s.stopAgent(actx, fatal == nil)
		acancel()
	}
	s.wg.Wait()
	err := s.shutdown(fatal == nil)
	if fatal != nil {
		return fatal
	}
	return err
}

// State returns the newest replicated state this member has applied.
func (s *Sidecar) State() *state.State { return s.node.State() }

// Unit returns the unit this pod holds ("" until claimed).
func (s *Sidecar) Unit() string { return s.unit.Load().(string) }

func (s *Sidecar) startDiscovery() error {
	var sources []discovery.Source
	if len(s.cfg.Peers) > 0 {
		st, err := discovery.NewStatic(s.cfg.Peers)
		if err != nil {
			return fmt.Errorf("--peers: %w", err)
		}
		sources = append(sources, st)
	}
	var dnsOpts []discovery.DNSOption
	if s.cfg.DNSResolver != "" {
		dnsOpts = append(dnsOpts, discovery.WithResolverAddr(s.cfg.DNSResolver))
	}
	if s.cfg.DNSName != "" {
		_, portStr, _ := net.SplitHostPort(s.cfg.Advertise)
		port, err := strconv.Atoi(portStr)
		if err != nil {
			return fmt.Errorf("--advertise %q has no numeric port for --discovery-dns", s.cfg.Advertise)
		}
		sources = append(sources, discovery.NewDNSA(s.cfg.DNSName, port, dnsOpts...))
	}
	if s.cfg.DNSSRV != "" {
		sources = append(sources, discovery.NewDNSSRV(s.cfg.DNSSRV, dnsOpts...))
	}
	if s.cfg.PeersFile != "" {
		f, err := discovery.NewFile(s.cfg.PeersFile, s.log)
		if err != nil {
			return fmt.Errorf("--peers-file: %w", err)
		}
		s.file = f
		sources = append(sources, f)
	}
	s.disco = discovery.NewMulti(sources...)
	return nil
}

func (s *Sidecar) discoChanged() <-chan struct{} {
	if s.file == nil {
		return nil
	}
	return s.file.Changes()
}

// shutdown stops everything in order: release the unit (so another pod
// may claim it), hand over leadership, leave if asked, then close.
func (s *Sidecar) shutdown(graceful bool) error {
	start := s.cfg.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if graceful {
		if u := s.Unit(); u != "" {
			rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := s.node.Apply(rctx, state.NewCommand(state.ReleaseUnitOp(u, string(s.node.ID()), "pod stopped")))
			rcancel()
			if err != nil {
				s.log.Warn("could not release the unit; the leader releases it once this member stays unreachable", "unit", u, "err", err)
			} else {
				s.log.Info("unit released", "unit", u)
			}
		}
	}
	leave := s.cfg.ordinal() < 0
	if s.cfg.LeaveOnStop != nil {
		leave = *s.cfg.LeaveOnStop
	}
	err := s.node.Shutdown(ctx, graceful && leave)
	s.closeServers()
	s.log.Info("sidecar stopped", "took", s.cfg.Now().Sub(start).String())
	return err
}

func (s *Sidecar) closeServers() {
	if s.agent != nil && s.agent.cancel == nil {
		s.agent.close()
	}
	if s.relations != nil {
		s.relations.close()
	}
	if s.adminSrv != nil {
		s.adminSrv.Stop()
	}
	if s.adminLn != nil {
		s.adminLn.Close()
	}
	if s.httpSrv != nil {
		s.httpSrv.Close()
	}
	if s.file != nil {
		s.file.Close()
	}
	if s.ln != nil {
		s.ln.Close()
	}
}
