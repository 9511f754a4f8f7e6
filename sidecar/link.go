package sidecar

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/bagkeeper/bagkeeper/agent"
	"github.com/bagkeeper/bagkeeper/raftstore/transport"
	"github.com/bagkeeper/bagkeeper/sidecar/filewatch"
	"github.com/bagkeeper/bagkeeper/sidecar/link"
	"github.com/bagkeeper/bagkeeper/sidecar/link/linkpb"
	"github.com/bagkeeper/bagkeeper/sidecar/relconf"
)

// relations is the sidecar's part in relations between applications: the
// relations file (watched), the relations port serving this application's
// offers, and the leader's consumer streams.
type relations struct {
	charm   *agent.Charm
	path    string
	watcher *filewatch.Watcher
	cfg     atomic.Pointer[relconf.Config]
	// loadErr is why the file in force is not the file on disk ("" when
	// it is).
	loadErr atomic.Value

	ln    net.Listener
	srv   *grpc.Server
	mgr   *link.Manager
	certs *transport.CertReloader // nil without TLS

	// tokens watches the token files the file in force names (a mounted
	// Secret changes without the relations file changing); tokenChanged
	// receives when one may have changed. Only runRelations' loop touches
	// tokens after start.
	tokens       map[string]*tokenWatch
	tokenChanged chan struct{}
}

// tokenWatch is one watched token file.
type tokenWatch struct {
	w    *filewatch.Watcher
	stop chan struct{}
}

func (t *tokenWatch) close() {
	close(t.stop)
	t.w.Close()
}

// loadRelations reads the relations file and checks what the file alone
// cannot say: without TLS on the relations port, every offer needs a token.
func (s *Sidecar) loadRelations(rs *relations) (*relconf.Config, error) {
	cfg, err := relconf.Load(rs.path, s.cfg.App, rs.charm, false)
	if err != nil {
		return nil, err
	}
	if s.cfg.TLS == nil {
		for _, o := range cfg.Offers {
			if len(o.Token) == 0 {
				return nil, fmt.Errorf("relations file %s: offer %q has no token-file, and without TLS (--tls-cert, --tls-key, --tls-ca) only a token tells its consumers apart from anyone else", rs.path, o.Endpoint)
			}
		}
	}
	return cfg, nil
}

// watchTokens watches the token files cfg names, and no others.
func (s *Sidecar) watchTokens(rs *relations, cfg *relconf.Config) {
	want := map[string]bool{}
	for _, o := range cfg.Offers {
		if o.TokenFile != "" {
			want[o.TokenFile] = true
		}
	}
	for _, r := range cfg.Relations {
		if r.TokenFile != "" {
			want[r.TokenFile] = true
		}
	}
	for path, t := range rs.tokens {
		if !want[path] {
			t.close()
			delete(rs.tokens, path)
		}
	}
	for path := range want {
		if _, ok := rs.tokens[path]; ok {
			continue
		}
		w, err := filewatch.New(path, s.log)
		if err != nil {
			s.log.Warn("cannot watch a token file; a change to it is seen when the relations file changes", "file", path, "err", err)
			continue
		}
		t := &tokenWatch{w: w, stop: make(chan struct{})}
		rs.tokens[path] = t
		go func() {
			for {
				select {
				case <-t.stop:
					return
				case <-w.Changes():
				}
				select {
				case rs.tokenChanged <- struct{}{}:
				default:
				}
			}
		}()
	}
}

// startRelations reads the relations file and opens the relations port.
// Streams start in runRelations.
func (s *Sidecar) startRelations() error {
	if s.cfg.Agent == nil {
		return fmt.Errorf("--relations-file needs --charm-dir: relations are checked against the charm's metadata.yaml")
	}
	charm, err := agent.LoadCharm(s.cfg.Agent.CharmDir)
	if err != nil {
		return err
	}
	rs := &relations{charm: charm, path: s.cfg.RelationsFile, tokens: map[string]*tokenWatch{}, tokenChanged: make(chan struct{}, 1)}
	rs.loadErr.Store("")
	cfg, err := s.loadRelations(rs)
	if err != nil {
		return fmt.Errorf("--relations-file: %w", err)
	}
	rs.cfg.Store(cfg)
	rs.watcher, err = filewatch.New(rs.path, s.log)
	if err != nil {
		return fmt.Errorf("--relations-file: %w", err)
	}
	s.watchTokens(rs, cfg)
	// With TLS, the relations port runs mutual TLS with the peer port's
	// certificate files, and an application is the one its certificate
	// names (link.AppURIPrefix); without it, every offer has a token.
	serverCreds, dial := insecure.NewCredentials(), func(addr, _ string) (*grpc.ClientConn, error) {
		return grpc.NewClient(addr, append(link.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	}
	var certApp func(context.Context) (string, error)
	if s.cfg.TLS != nil {
		rs.certs, err = transport.NewCertReloader(*s.cfg.TLS, s.log)
		if err != nil {
			rs.close()
			return fmt.Errorf("relations port: %w", err)
		}
		serverCreds, certApp = credentials.NewTLS(link.ServerTLS(rs.certs.ServerConfig())), link.CallerApp
		dial = func(addr, app string) (*grpc.ClientConn, error) {
			return grpc.NewClient(addr, append(link.DialOptions(), grpc.WithTransportCredentials(credentials.NewTLS(link.ClientTLS(rs.certs.ClientConfig(), app))))...)
		}
	}
	if s.cfg.RelationsBind != "" {
		rs.ln, err = net.Listen("tcp", s.cfg.RelationsBind)
		if err != nil {
			rs.close()
			return fmt.Errorf("relations port: %w", err)
		}
		rs.srv = grpc.NewServer(append(link.ServerOptions(), grpc.Creds(serverCreds))...)
		linkpb.RegisterRelationsServer(rs.srv, link.NewServer(link.ServerConfig{
			Store: s.node, App: s.cfg.App, Model: s.cfg.Agent.ModelUUID, Config: rs.cfg.Load, CertApp: certApp, Logger: s.log.With("component", "relations"),
		}))
		go func() { _ = rs.srv.Serve(rs.ln) }()
	}
	rs.mgr = link.NewManager(link.ManagerConfig{
		Store: s.node, App: s.cfg.App, Model: s.cfg.Agent.ModelUUID, Config: rs.cfg.Load, IsLeader: s.node.IsLeader, Dial: dial,
		Logger: s.log.With("component", "relations"),
	})
	s.relations = rs
	return nil
}

// runRelations reloads the relations file when it changes and runs the
// leader's streams until ctx ends.
func (s *Sidecar) runRelations(ctx context.Context, wg *sync.WaitGroup) {
	rs := s.relations
	wg.Add(2)
	go func() {
		defer wg.Done()
		rs.mgr.Run(ctx)
	}()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-rs.watcher.Changes():
			case <-rs.tokenChanged:
			}
			cfg, err := s.loadRelations(rs)
			if err != nil {
				// Nothing changes on a bad file: the relations in force
				// stay, and the error is shown until the file is fixed.
				rs.loadErr.Store(err.Error())
				s.log.Error("relations file not loaded; the previous one stays in force", "file", rs.path, "err", err)
				continue
			}
			rs.loadErr.Store("")
			rs.cfg.Store(cfg)
			s.watchTokens(rs, cfg)
			s.log.Info("relations file loaded", "file", rs.path, "offers", len(cfg.Offers), "relations", len(cfg.Relations))
			rs.mgr.Reload()
		}
	}()
}

func (rs *relations) close() {
	if rs.srv != nil {
		rs.srv.Stop()
	}
	if rs.ln != nil {
		rs.ln.Close()
	}
	if rs.watcher != nil {
		rs.watcher.Close()
	}
	for _, t := range rs.tokens {
		t.close()
	}
	if rs.certs != nil {
		rs.certs.Close()
	}
}
