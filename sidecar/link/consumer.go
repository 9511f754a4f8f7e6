package link

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/sidecar/link/linkpb"
	"github.com/bagkeeper/bagkeeper/sidecar/relconf"
)

// ManagerConfig configures the side of the link that runs on the raft
// leader: the consumer streams and the removal of relations the relations
// file no longer declares.
type ManagerConfig struct {
	Store Store
	// App is this application, and Model the uuid of its model.
	App, Model string
	// Config returns the relations file in force (hot-reloaded).
	Config func() *relconf.Config
	// IsLeader reports whether this member is the raft leader; only the
	// leader runs streams and removes relations.
	IsLeader func() bool
	// Dial opens a client connection to a member of application app
	// (with the relations port's TLS settings; with TLS, the connection
	// must fail unless the server's certificate names app).
	Dial func(addr, app string) (*grpc.ClientConn, error)
	// Interval is how often the manager looks at leadership and the
	// relations file (default 500 ms).
	Interval time.Duration
	// RetryMin and RetryMax bound the backoff between attempts of one
	// stream (defaults 200 ms and 5 s).
	RetryMin, RetryMax time.Duration
	// RefusedRetry is how long a relation the provider refused (Goodbye)
	// waits before asking again (default 30 s).
	RefusedRetry time.Duration
	// UnrelateFor is how long a consumer keeps trying to tell the
	// provider that it removed a relation before it removes its own side
	// anyway (default 1 min).
	UnrelateFor time.Duration
	Logger      *slog.Logger
}

// Manager runs the leader's side of the link.
type Manager struct {
	cfg    ManagerConfig
	kick   chan struct{}
	mu     sync.Mutex
	status map[string]RelationStatus
	// known is the last relations-file entry seen for each relation
	// (by relation key), so that a removed entry's provider can still be
	// told.
	known map[string]relconf.Relation
	// conns are the client connections the streams share, one per
	// provider address: a hundred relations to one provider are a hundred
	// streams on one connection, not a hundred connections.
	conns map[string]*sharedConn
}

type sharedConn struct {
	conn *grpc.ClientConn
	refs int
}

// conn returns the shared connection to addr (of application app) and the
// function that gives it back; the last one back closes it.
func (m *Manager) conn(addr, app string) (*grpc.ClientConn, func(), error) {
	key := app + "\x00" + addr
	m.mu.Lock()
	defer m.mu.Unlock()
	sc, ok := m.conns[key]
	if !ok {
		c, err := m.cfg.Dial(addr, app)
		if err != nil {
			return nil, nil, err
		}
		sc = &sharedConn{conn: c}
		m.conns[key] = sc
	}
	sc.refs++
	return sc.conn, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if sc.refs--; sc.refs == 0 {
			delete(m.conns, key)
			sc.conn.Close()
		}
	}, nil
}

// RelationStatus is how one declared relation stands, as the leader sees it.
type RelationStatus struct {
	// Key is the relations-file entry's key (relconf.Relation.Key);
	// Endpoint, App and Offer are its parts.
	Key                  string
	Endpoint, App, Offer string
	Connected            bool
	Address              string
	LastError            string
	Since                time.Time
}

// NewManager returns a manager; call Run.
func NewManager(cfg ManagerConfig) *Manager {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 500 * time.Millisecond
	}
	if cfg.RetryMin <= 0 {
		cfg.RetryMin = 200 * time.Millisecond
	}
	if cfg.RetryMax <= 0 {
		cfg.RetryMax = 5 * time.Second
	}
	if cfg.RefusedRetry <= 0 {
		cfg.RefusedRetry = 30 * time.Second
	}
	if cfg.UnrelateFor <= 0 {
		cfg.UnrelateFor = time.Minute
	}
	return &Manager{cfg: cfg, kick: make(chan struct{}, 1), status: map[string]RelationStatus{}, known: map[string]relconf.Relation{}, conns: map[string]*sharedConn{}}
}

// Reload makes the manager look at the relations file now.
func (m *Manager) Reload() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// Status returns the state of every relation stream this member runs.
func (m *Manager) Status() []RelationStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]RelationStatus, 0, len(m.status))
	for _, s := range m.status {
		out = append(out, s)
	}
	return out
}

func (m *Manager) setStatus(s RelationStatus) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.status[s.Key]; ok && old.Connected == s.Connected && old.LastError == s.LastError {
		s.Since = old.Since
	}
	m.status[s.Key] = s
}

// entryID identifies a relation entry with everything a stream depends on,
// so that a changed address list or token restarts the stream.
func entryID(r relconf.Relation) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00%s\x00", r.Endpoint, r.Interface, r.App, r.Offer, strings.Join(r.Addresses, ","))
	h.Write(r.Token)
	return r.Key() + "#" + hex.EncodeToString(h.Sum(nil)[:8])
}

// Run runs until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	running := map[string]context.CancelFunc{}
	var wg sync.WaitGroup
	stopAll := func() {
		for id, cancel := range running {
			cancel()
			delete(running, id)
		}
	}
	defer func() {
		stopAll()
		wg.Wait()
	}()
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	removing := map[int64]bool{}
	var removeMu sync.Mutex
	for {
		if !m.cfg.IsLeader() {
			stopAll()
			m.mu.Lock()
			clear(m.status)
			m.mu.Unlock()
		} else {
			cfg := m.cfg.Config()
			want := map[string]relconf.Relation{}
			for _, r := range cfg.Relations {
				want[entryID(r)] = r
				m.known[r.Key()] = r
			}
			for id, cancel := range running {
				if _, ok := want[id]; !ok {
					cancel()
					delete(running, id)
				}
			}
			for id, r := range want {
				if _, ok := running[id]; ok {
					continue
				}
				sctx, cancel := context.WithCancel(ctx)
				running[id] = cancel
				wg.Add(1)
				go func() {
					defer wg.Done()
					m.consume(sctx, r)
				}()
			}
			for _, op := range m.undeclared(cfg) {
				removeMu.Lock()
				busy := removing[op.rel.ID]
				removing[op.rel.ID] = true
				removeMu.Unlock()
				if busy {
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					m.remove(ctx, op)
					removeMu.Lock()
					delete(removing, op.rel.ID)
					removeMu.Unlock()
				}()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-m.kick:
		}
	}
}

// removal is a relation the relations file no longer declares.
type removal struct {
	rel *state.Relation
	// consumed: this application consumes the relation and tells the
	// provider; otherwise it is an offered relation whose consumer is no
	// longer allowed.
	consumed bool
	// addresses and token reach the provider: the entry's as last seen,
	// or another entry's for the same provider application (none: the
	// provider cannot be told).
	addresses []string
	token     []byte
}

// undeclared lists the relations between applications in the state that
// the relations file does not declare (any more).
func (m *Manager) undeclared(cfg *relconf.Config) []removal {
	var out []removal
	for _, r := range m.cfg.Store.State().Relations() {
		if r.Peer {
			continue
		}
		if r.Offered {
			if !cfg.Allows(r.Endpoint, r.RemoteApp) {
				out = append(out, removal{rel: r})
			}
			continue
		}
		key := EntryKey(r)
		declared := false
		rm := removal{rel: r, consumed: true}
		for _, e := range cfg.Relations {
			if e.Key() == key {
				declared = true
			}
			if e.App == r.RemoteApp {
				rm.addresses, rm.token = e.Addresses, e.Token
			}
		}
		if e, ok := m.known[key]; ok {
			rm.addresses, rm.token = e.Addresses, e.Token
		}
		if !declared {
			out = append(out, rm)
		}
	}
	return out
}

// remove removes an undeclared relation: a consumed one after telling its
// provider (tried for ManagerConfig.UnrelateFor, then given up: the
// consumer's own relations file decides), an offered one at once (its
// stream says Goodbye).
func (m *Manager) remove(ctx context.Context, rm removal) {
	r := rm.rel
	if rm.consumed {
		if len(rm.addresses) > 0 {
			m.unrelate(ctx, r, rm.addresses, rm.token)
		} else {
			m.cfg.Logger.Warn("the relations file says nothing more of this provider (this member became leader after the relation was removed from it): the provider keeps its side until its own relations file drops it", "relation", r.Key(), "remote", r.RemoteApp+":"+r.RemoteEndpoint)
		}
	}
	actx, cancel := context.WithTimeout(ctx, applyTimeout)
	defer cancel()
	if _, err := m.cfg.Store.Apply(actx, state.NewCommand(state.RemoveRelationOp(r.ID))); err != nil && !errors.Is(err, state.ErrNotFound) {
		m.cfg.Logger.Warn("could not remove a relation the relations file no longer declares", "relation", r.Key(), "remote", r.RemoteApp+":"+r.RemoteEndpoint, "err", err)
		return
	}
	m.cfg.Logger.Info("relation removed: no longer in the relations file", "relation", r.Key(), "remote", r.RemoteApp+":"+r.RemoteEndpoint)
}

func (m *Manager) unrelate(ctx context.Context, r *state.Relation, addresses []string, token []byte) {
	req := &linkpb.UnrelateRequest{ConsumerApp: m.cfg.App, ConsumerEndpoint: r.Endpoint, Offer: r.RemoteEndpoint}
	var last error
	deadline := time.Now().Add(m.cfg.UnrelateFor)
	backoff := m.cfg.RetryMin
	for attempt := 0; ; attempt++ {
		addr := addresses[attempt%len(addresses)]
		conn, release, err := m.conn(addr, r.RemoteApp)
		if err == nil {
			cctx, cancel := context.WithTimeout(withToken(ctx, token), 5*time.Second)
			_, err = linkpb.NewRelationsClient(conn).Unrelate(cctx, req)
			cancel()
			release()
			if err == nil {
				return
			}
		}
		last = err
		if time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		backoff = min(2*backoff, m.cfg.RetryMax)
	}
	m.cfg.Logger.Warn("could not tell the provider that the relation is removed; removing it here", "relation", r.Key(), "remote", r.RemoteApp+":"+r.RemoteEndpoint, "err", last)
}

func withToken(ctx context.Context, token []byte) context.Context {
	if len(token) == 0 {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, TokenHeader, string(token))
}

// consume keeps one declared relation's stream open while ctx lives,
// trying the entry's addresses in turn with a growing backoff.
func (m *Manager) consume(ctx context.Context, e relconf.Relation) {
	key := e.Key()
	backoff := m.cfg.RetryMin
	for attempt := 0; ; attempt++ {
		addr := e.Addresses[attempt%len(e.Addresses)]
		start := time.Now()
		err := m.session(ctx, e, addr)
		if ctx.Err() != nil {
			return
		}
		wait := backoff
		var gb *RemoteGoodbye
		if errors.As(err, &gb) {
			wait = m.cfg.RefusedRetry
			m.cfg.Logger.Warn("the provider refused the relation", "relation", key, "reason", gb.Reason)
		} else {
			m.cfg.Logger.Warn("relation stream ended", "relation", key, "address", addr, "err", err)
		}
		m.setStatus(RelationStatus{Key: key, Endpoint: e.Endpoint, App: e.App, Offer: e.Offer, Address: addr, LastError: errString(err), Since: time.Now()})
		if time.Since(start) > 10*backoff {
			backoff = m.cfg.RetryMin
		} else {
			backoff = min(2*backoff, m.cfg.RetryMax)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// session runs one stream to one address.
func (m *Manager) session(ctx context.Context, e relconf.Relation, addr string) error {
	conn, release, err := m.conn(addr, e.App)
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st := m.cfg.Store.State()
	hello := &linkpb.Hello{ConsumerApp: m.cfg.App, ConsumerEndpoint: e.Endpoint, Offer: e.Offer, Interface: e.Interface, ProviderApp: e.App}
	if r, ok := st.FindRelation(e.Endpoint, e.App, e.Offer); ok {
		hello.Have = remoteMark(st, r)
	}
	s, err := linkpb.NewRelationsClient(conn).Relate(withToken(ctx, e.Token), grpc.MaxCallRecvMsgSize(MaxMessageSize), grpc.MaxCallSendMsgSize(MaxMessageSize))
	if err != nil {
		return err
	}
	if err := s.Send(&linkpb.Message{Msg: &linkpb.Message_Hello{Hello: hello}}); err != nil {
		return err
	}
	first, err := recvWithin(ctx, s.Recv, helloTimeout)
	if err != nil {
		return err
	}
	switch x := first.Msg.(type) {
	case *linkpb.Message_Goodbye:
		gb := &RemoteGoodbye{Reason: x.Goodbye.GetReason()}
		return m.goodbye(ctx, e, gb)
	case *linkpb.Message_Welcome:
		if got := x.Welcome.GetProviderApp(); got != e.App {
			return fmt.Errorf("the member at %s is of application %q, not %q", addr, got, e.App)
		}
	default:
		return fmt.Errorf("the provider answered Hello with %T", first.Msg)
	}
	relID, err := ensureRelation(ctx, m.cfg.Store, state.EnsureRelationOp(e.Endpoint, e.Interface, false, e.App, e.Offer))
	if err != nil {
		return fmt.Errorf("could not record the relation: %w", err)
	}
	m.setStatus(RelationStatus{Key: e.Key(), Endpoint: e.Endpoint, App: e.App, Offer: e.Offer, Connected: true, Address: addr, Since: time.Now()})
	m.cfg.Logger.Info("relation stream open", "relation", e.Key(), "address", addr)
	err = exchange(ctx, m.cfg.Store, s, relID, e.App, m.cfg.Model, first.GetWelcome().GetHave().GetDigest(), m.cfg.Logger)
	var gb *RemoteGoodbye
	if errors.As(err, &gb) {
		return m.goodbye(ctx, e, gb)
	}
	var local goodbyeError
	if errors.As(err, &local) {
		// Removed here while the stream was open (the relations file
		// changed): Run tells the provider through Unrelate.
		_ = s.CloseSend()
	}
	return err
}

// goodbye removes the relation the provider no longer offers to us.
func (m *Manager) goodbye(ctx context.Context, e relconf.Relation, gb *RemoteGoodbye) error {
	r, ok := m.cfg.Store.State().FindRelation(e.Endpoint, e.App, e.Offer)
	if !ok {
		return gb
	}
	actx, cancel := context.WithTimeout(ctx, applyTimeout)
	defer cancel()
	if _, err := m.cfg.Store.Apply(actx, state.NewCommand(state.RemoveRelationOp(r.ID))); err != nil && !errors.Is(err, state.ErrNotFound) {
		return fmt.Errorf("%w (and removing the relation here failed: %v)", gb, err)
	}
	m.cfg.Logger.Warn("relation removed: the provider no longer offers it", "relation", r.Key(), "remote", e.App+":"+e.Offer, "reason", gb.Reason)
	return gb
}
