package link_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/state/statetest"
	"github.com/bagkeeper/bagkeeper/sidecar/link"
	"github.com/bagkeeper/bagkeeper/sidecar/link/linkpb"
	"github.com/bagkeeper/bagkeeper/sidecar/relconf"
	"github.com/bagkeeper/bagkeeper/test/wait"
)

const token = "s3cret-offer-token"

// pair is a provider "pg" offering db to a consumer "web" relating its
// database endpoint to it, each an in-memory store, the provider's
// Relations service on a loopback port, and both sides' managers.
type pair struct {
	t        *testing.T
	pg, web  *statetest.Store
	pgCfg    atomic.Pointer[relconf.Config]
	webCfg   atomic.Pointer[relconf.Config]
	addr     string
	pgMgr    *link.Manager
	webMgr   *link.Manager
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	listener net.Listener
	srv      *grpc.Server
}

func offers(consumers ...string) *relconf.Config {
	return &relconf.Config{Offers: []relconf.Offer{{Endpoint: "db", Interface: "pgsql", Consumers: consumers, Token: []byte(token)}}}
}

func (p *pair) relation(tok string) *relconf.Config {
	return &relconf.Config{Relations: []relconf.Relation{{Endpoint: "database", Interface: "pgsql", App: "pg", Offer: "db", Addresses: []string{p.addr}, Token: []byte(tok)}}}
}

func newPair(t *testing.T) *pair {
	insecureDial := func(addr, _ string) (*grpc.ClientConn, error) {
		return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	return newPairWith(t, insecure.NewCredentials(), nil, insecureDial, insecureDial)
}

// newPairWith makes a pair whose provider serves with creds and takes the
// caller's application from certApp, and whose managers dial with
// pgDial and webDial.
func newPairWith(t *testing.T, creds credentials.TransportCredentials, certApp func(context.Context) (string, error), pgDial, webDial func(addr, app string) (*grpc.ClientConn, error)) *pair {
	p := &pair{t: t, pg: statetest.New(t, "pg"), web: statetest.New(t, "web")}
	p.pg.Claim("pg-0", "pg-0", 0)
	p.pg.Claim("pg-1", "pg-1", 1)
	p.web.Claim("web-0", "web-0", 0)
	p.pgCfg.Store(offers("web"))
	var err error
	p.listener, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = p.listener.Addr().String()
	p.webCfg.Store(p.relation(token))
	p.srv = grpc.NewServer(append(link.ServerOptions(), grpc.Creds(creds))...)
	linkpb.RegisterRelationsServer(p.srv, link.NewServer(link.ServerConfig{Store: p.pg, App: "pg", Model: "model-pg", Config: p.pgCfg.Load, CertApp: certApp}))
	go func() { _ = p.srv.Serve(p.listener) }()
	fast := func(cfg link.ManagerConfig) link.ManagerConfig {
		cfg.Interval, cfg.RetryMin, cfg.RetryMax, cfg.RefusedRetry = 20*time.Millisecond, 10*time.Millisecond, 50*time.Millisecond, 100*time.Millisecond
		return cfg
	}
	p.pgMgr = link.NewManager(fast(link.ManagerConfig{Store: p.pg, App: "pg", Model: "model-pg", Config: p.pgCfg.Load, IsLeader: p.pg.IsLeader, Dial: pgDial}))
	p.webMgr = link.NewManager(fast(link.ManagerConfig{Store: p.web, App: "web", Model: "model-web", Config: p.webCfg.Load, IsLeader: p.web.IsLeader, Dial: webDial}))
	t.Cleanup(p.stop)
	return p
}

func (p *pair) start() {
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	p.wg.Add(2)
	go func() { defer p.wg.Done(); p.pgMgr.Run(ctx) }()
	go func() { defer p.wg.Done(); p.webMgr.Run(ctx) }()
}

func (p *pair) stopManagers() {
	if p.cancel != nil {
		p.cancel()
		p.wg.Wait()
		p.cancel = nil
	}
}

func (p *pair) stop() {
	p.stopManagers()
	p.srv.Stop()
}

// bags returns the bags of the relation of endpoint in st by owner, and
// the relation (nil when there is none).
func bags(st *state.State, endpoint string) (map[string]map[string]string, *state.Relation) {
	for _, r := range st.Relations() {
		if r.Endpoint == endpoint && !r.Peer {
			out := map[string]map[string]string{}
			for _, b := range st.Bags(r.ID) {
				out[b.Owner] = b.Data.Map()
			}
			return out, r
		}
	}
	return nil, nil
}

func (p *pair) waitFor(what string, cond func() (bool, string)) {
	p.t.Helper()
	if err := wait.For(10*time.Second, what, func() error {
		if ok, why := cond(); !ok {
			return errors.New(why)
		}
		return nil
	}); err != nil {
		p.t.Fatal(err)
	}
}

// linked waits until each side holds the other's side as it is now.
func (p *pair) linked() {
	p.t.Helper()
	p.waitFor("both sides to hold each other's view", func() (bool, string) {
		pgSide, pr := bags(p.pg.State(), "db")
		webSide, wr := bags(p.web.State(), "database")
		if pr == nil || wr == nil {
			return false, fmt.Sprintf("pg relation %v, web relation %v", pr, wr)
		}
		for _, owner := range []string{"pg", "pg/0", "pg/1"} {
			if fmt.Sprint(pgSide[owner]) != fmt.Sprint(webSide[owner]) {
				return false, fmt.Sprintf("%s: pg has %v, web has %v", owner, pgSide[owner], webSide[owner])
			}
		}
		for _, owner := range []string{"web", "web/0"} {
			if fmt.Sprint(pgSide[owner]) != fmt.Sprint(webSide[owner]) {
				return false, fmt.Sprintf("%s: web has %v, pg has %v", owner, webSide[owner], pgSide[owner])
			}
		}
		if _, ok := webSide["pg/0"]; !ok {
			return false, "web holds no pg/0"
		}
		if _, ok := pgSide["web/0"]; !ok {
			return false, "pg holds no web/0"
		}
		if pr.RemoteModel == "" || wr.RemoteModel == "" {
			return false, "a side holds no remote model yet"
		}
		return true, ""
	})
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestBothSidesHoldEachOthersView(t *testing.T) {
	p := newPair(t)
	p.start()
	p.linked()
	_, pr := bags(p.pg.State(), "db")
	if !pr.Offered || pr.RemoteApp != "web" || pr.RemoteEndpoint != "database" || pr.Interface != "pgsql" {
		t.Fatalf("pg's relation %+v, want offered db to web:database over pgsql", pr)
	}
	_, wr := bags(p.web.State(), "database")
	if wr.Offered || wr.RemoteApp != "pg" || wr.RemoteEndpoint != "db" {
		t.Fatalf("web's relation %+v, want consumed database to pg:db", wr)
	}
	if pr.RemoteModel != "model-web" || wr.RemoteModel != "model-pg" {
		t.Fatalf("remote models: pg holds %q, web holds %q", pr.RemoteModel, wr.RemoteModel)
	}

	// Each side's writes reach the other: unit bags, application bags.
	p.web.Must(state.UpdateBagOp(wr.ID, "web/0", map[string]string{"database": "appdb"}))
	p.pg.Must(state.UpdateBagOp(pr.ID, "pg", map[string]string{"password": "pw1"}), state.UpdateBagOp(pr.ID, "pg/1", map[string]string{"host": "10.0.0.2"}))
	p.linked()
	webSide, _ := bags(p.web.State(), "database")
	if webSide["pg"]["password"] != "pw1" || webSide["pg/1"]["host"] != "10.0.0.2" {
		t.Fatalf("web holds %v", webSide)
	}
	pgSide, _ := bags(p.pg.State(), "db")
	if pgSide["web/0"]["database"] != "appdb" {
		t.Fatalf("pg holds %v", pgSide)
	}

	// A unit the provider removes departs on the consumer's side; one it
	// only releases (its pod is being replaced) does not.
	p.pg.Must(state.ReleaseUnitOp("pg/0", "", "pod stopped"))
	p.pg.Must(state.RemoveUnitOp("pg/1", 0, "scaled down"))
	p.waitFor("pg/1 to depart on web", func() (bool, string) {
		webSide, _ := bags(p.web.State(), "database")
		_, has0 := webSide["pg/0"]
		_, has1 := webSide["pg/1"]
		return has0 && !has1, fmt.Sprint(webSide)
	})
}

func TestReconnectCommitsNothingAlreadyHeld(t *testing.T) {
	p := newPair(t)
	p.start()
	p.linked()
	_, wr := bags(p.web.State(), "database")
	p.web.Must(state.UpdateBagOp(wr.ID, "web/0", map[string]string{"database": "appdb"}))
	p.linked()
	p.stopManagers()
	_, pr := bags(p.pg.State(), "db")
	_, wr = bags(p.web.State(), "database")
	pgBags, webBags := p.pg.State().Bags(pr.ID), p.web.State().Bags(wr.ID)

	p.start()
	p.waitFor("the stream to reopen", func() (bool, string) {
		st := p.webMgr.Status()
		return len(st) == 1 && st[0].Connected, fmt.Sprint(st)
	})
	// Both sides had what the other sends: a change made after the
	// reconnect arrives, and nothing else was committed on its way.
	p.pg.Must(state.UpdateBagOp(pr.ID, "pg", map[string]string{"marker": "after"}))
	p.waitFor("the marker to reach web", func() (bool, string) {
		webSide, _ := bags(p.web.State(), "database")
		return webSide["pg"]["marker"] == "after", fmt.Sprint(webSide["pg"])
	})
	_, pr2 := bags(p.pg.State(), "db")
	if pr2.RemoteRevision != pr.RemoteRevision {
		t.Errorf("pg applied a view of web again after the reconnect (revision %d, was %d)", pr2.RemoteRevision, pr.RemoteRevision)
	}
	for _, b := range pgBags {
		if nb, _ := p.pg.State().Bag(pr.ID, b.Owner); nb.Revision != b.Revision {
			t.Errorf("pg's bag of %s went from revision %d to %d", b.Owner, b.Revision, nb.Revision)
		}
	}
	for _, b := range webBags {
		if nb, _ := p.web.State().Bag(wr.ID, b.Owner); b.Owner != "pg" && nb.Revision != b.Revision {
			t.Errorf("web's bag of %s went from revision %d to %d", b.Owner, b.Revision, nb.Revision)
		}
	}
}

// relate opens a raw stream to the provider, sends hello and returns the
// first answer.
func relate(t *testing.T, addr, tok string, hello *linkpb.Hello) (*linkpb.Message, error) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if tok != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, link.TokenHeader, tok)
	}
	s, err := linkpb.NewRelationsClient(conn).Relate(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.Send(&linkpb.Message{Msg: &linkpb.Message_Hello{Hello: hello}}); err != nil {
		return nil, err
	}
	return s.Recv()
}

func TestProviderRefusesWhatItDoesNotOffer(t *testing.T) {
	p := newPair(t)
	good := func() *linkpb.Hello {
		return &linkpb.Hello{ConsumerApp: "web", ConsumerEndpoint: "database", Offer: "db", Interface: "pgsql", ProviderApp: "pg"}
	}
	for _, tc := range []struct {
		name    string
		tok     string
		hello   func(*linkpb.Hello)
		code    codes.Code
		goodbye bool
	}{
		{"no token", "", nil, codes.Unauthenticated, false},
		{"wrong token", "guess", nil, codes.Unauthenticated, false},
		{"another provider", token, func(h *linkpb.Hello) { h.ProviderApp = "mysql" }, codes.FailedPrecondition, false},
		{"another interface", token, func(h *linkpb.Hello) { h.Interface = "mysql" }, codes.FailedPrecondition, false},
		{"bad consumer name", token, func(h *linkpb.Hello) { h.ConsumerApp = "Web!" }, codes.InvalidArgument, false},
		{"unknown offer", token, func(h *linkpb.Hello) { h.Offer = "cache" }, codes.OK, true},
		{"consumer not listed", token, func(h *linkpb.Hello) { h.ConsumerApp = "api" }, codes.OK, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := good()
			if tc.hello != nil {
				tc.hello(h)
			}
			before := p.pg.State().Index()
			m, err := relate(t, p.addr, tc.tok, h)
			if tc.goodbye {
				if err != nil || m.GetGoodbye() == nil {
					t.Fatalf("got %v, %v; want Goodbye", m, err)
				}
				t.Logf("goodbye: %s", m.GetGoodbye().GetReason())
			} else if status.Code(err) != tc.code {
				t.Fatalf("got %v, %v; want %v", m, err, tc.code)
			} else {
				t.Logf("refused: %v", err)
			}
			if after := p.pg.State().Index(); after != before {
				t.Errorf("the refused request committed %d entries on the provider", after-before)
			}
		})
	}
	if m, err := relate(t, p.addr, token, good()); err != nil || m.GetWelcome().GetProviderApp() != "pg" {
		t.Fatalf("a good hello got %v, %v", m, err)
	}
}

func TestWrongTokenKeepsTheRelationAndItsData(t *testing.T) {
	p := newPair(t)
	p.start()
	p.linked()
	_, pr := bags(p.pg.State(), "db")
	p.pg.Must(state.UpdateBagOp(pr.ID, "pg", map[string]string{"password": "pw1"}))
	p.linked()
	p.stopManagers()
	p.webCfg.Store(p.relation("stale-token"))
	p.start()
	p.waitFor("the stream to fail", func() (bool, string) {
		st := p.webMgr.Status()
		return len(st) == 1 && !st[0].Connected && st[0].LastError != "", fmt.Sprint(st)
	})
	webSide, wr := bags(p.web.State(), "database")
	if wr == nil || webSide["pg"]["password"] != "pw1" {
		t.Fatalf("web holds %v after a refused reconnect; want the relation and its data kept", webSide)
	}
}

func (p *pair) goneOnBoth() {
	p.t.Helper()
	p.waitFor("the relation to be gone on both sides", func() (bool, string) {
		_, pr := bags(p.pg.State(), "db")
		_, wr := bags(p.web.State(), "database")
		return pr == nil && wr == nil, fmt.Sprintf("pg %v, web %v", pr, wr)
	})
}

func TestRelationRemovedFromEitherSidesFileIsRemovedOnBoth(t *testing.T) {
	t.Run("consumer", func(t *testing.T) {
		p := newPair(t)
		p.start()
		p.linked()
		p.webCfg.Store(&relconf.Config{})
		p.goneOnBoth()
	})
	t.Run("provider", func(t *testing.T) {
		p := newPair(t)
		p.start()
		p.linked()
		p.pgCfg.Store(offers("api"))
		p.goneOnBoth()
		// The consumer asks again now and then and is refused each time:
		// the relation is not made again until the provider offers it.
		p.waitFor("a refusal", func() (bool, string) {
			st := p.webMgr.Status()
			return len(st) == 1 && st[0].LastError != "", fmt.Sprint(st)
		})
		if _, wr := bags(p.web.State(), "database"); wr != nil {
			t.Fatalf("web made the relation again: %+v", wr)
		}
		p.pgCfg.Store(offers("web", "api"))
		p.linked()
	})
}

func TestOnlyTheLeaderRunsStreams(t *testing.T) {
	p := newPair(t)
	p.web.SetLeader(false)
	p.start()
	// For twenty of the manager's rounds, nothing happens on a follower.
	deadline := time.Now().Add(20 * 20 * time.Millisecond)
	for time.Now().Before(deadline) {
		if st := p.webMgr.Status(); len(st) != 0 {
			t.Fatalf("a follower runs streams: %v", st)
		}
		if _, wr := bags(p.web.State(), "database"); wr != nil {
			t.Fatalf("a follower made the relation")
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.web.SetLeader(true)
	p.linked()
	p.web.SetLeader(false)
	p.waitFor("the stream to stop", func() (bool, string) {
		return len(p.webMgr.Status()) == 0, fmt.Sprint(p.webMgr.Status())
	})
}

// TestUnrelateRemovesOnlyWhatTheCallerMayEnd: Unrelate ends only the
// offering side of a relation, for a caller the offer admits.
func TestUnrelateRemovesOnlyWhatTheCallerMayEnd(t *testing.T) {
	p := newPair(t)
	conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := linkpb.NewRelationsClient(conn)
	unrelate := func(tok string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if tok != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, link.TokenHeader, tok)
		}
		_, err := c.Unrelate(ctx, &linkpb.UnrelateRequest{ConsumerApp: "web", ConsumerEndpoint: "database", Offer: "db"})
		return err
	}
	// pg consumes an offer of web's under the same names (made by hand,
	// with no manager running): not the caller's to end.
	consumed := p.pg.Must(state.EnsureRelationOp("db", "pgsql", false, "web", "database")).GetOps()[0].GetRelationId()
	if err := unrelate(""); status.Code(err) != codes.Unauthenticated {
		t.Errorf("without a token: %v", err)
	}
	if err := unrelate(token); err != nil {
		t.Errorf("for a relation pg consumes: %v", err)
	}
	if _, ok := p.pg.State().Relation(consumed); !ok {
		t.Fatal("Unrelate removed a relation the provider consumes")
	}
	p.pg.Must(state.RemoveRelationOp(consumed))

	p.start()
	p.linked()
	p.stopManagers()
	p.pgCfg.Store(offers("api"))
	if err := unrelate(token); err != nil {
		t.Errorf("for an offer that no longer lists the caller: %v", err)
	}
	if _, pr := bags(p.pg.State(), "db"); pr == nil {
		t.Fatal("Unrelate from a caller the offer no longer lists removed the relation")
	}
	p.pgCfg.Store(offers("web"))
	if err := unrelate(token); err != nil {
		t.Fatal(err)
	}
	if _, pr := bags(p.pg.State(), "db"); pr != nil {
		t.Fatalf("the offered relation is still there: %+v", pr)
	}
}

// TestViewsLargerThanGRPCsDefaultLimitPass: a relation whose bags hold
// more than gRPC's default 4 MiB message still flows.
func TestViewsLargerThanGRPCsDefaultLimitPass(t *testing.T) {
	p := newPair(t)
	p.start()
	p.linked()
	_, pr := bags(p.pg.State(), "db")
	big := strings.Repeat("x", 5<<20)
	p.pg.Must(state.UpdateBagOp(pr.ID, "pg", map[string]string{"blob": big}))
	p.waitFor("the 5 MiB bag to reach web", func() (bool, string) {
		webSide, _ := bags(p.web.State(), "database")
		return len(webSide["pg"]["blob"]) == len(big), fmt.Sprintf("%d bytes", len(webSide["pg"]["blob"]))
	})
}
