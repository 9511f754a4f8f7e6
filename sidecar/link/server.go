package link

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
	"github.com/bagkeeper/bagkeeper/sidecar/link/linkpb"
	"github.com/bagkeeper/bagkeeper/sidecar/relconf"
)

// TokenHeader is the request metadata that carries an offer's token.
const TokenHeader = "bagkeeper-offer-token"

// helloTimeout bounds how long a new stream may take to say Hello.
const helloTimeout = 10 * time.Second

// applyTimeout bounds one commit of the link (a view, a relation).
const applyTimeout = 15 * time.Second

// MaxMessageSize is the largest message of the Relations service, on both
// ends: a view as large as one raft command may be (gRPC's default of
// 4 MiB would stop a relation whose bags hold more).
const MaxMessageSize = state.MaxCommandSize + 1<<20

// Keepalive: a stream carries nothing while neither side changes, so
// without pings a peer that froze or vanished without closing its
// connections (a paused or partitioned pod) would look connected for as long
// as TCP takes to give up (minutes). Each end pings the other after
// keepaliveTime of silence and drops the connection if no answer comes
// within keepaliveTimeout: the consumer then reconnects through another
// address, and the provider's member ends its side of the stream.
const (
	keepaliveTime    = 10 * time.Second
	keepaliveTimeout = 5 * time.Second
)

// ServerOptions are the gRPC server options the Relations service needs.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessageSize), grpc.MaxSendMsgSize(MaxMessageSize),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: keepaliveTime, Timeout: keepaliveTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveTime / 2, PermitWithoutStream: true}),
	}
}

// DialOptions are the gRPC dial options of a consumer (add the transport
// credentials).
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: keepaliveTimeout})}
}

// Store is what the link needs of the raft member: the applied state, a
// signal when it changes, and commits (forwarded to the leader by any
// member).
type Store interface {
	State() *state.State
	Changed() <-chan struct{}
	Apply(ctx context.Context, cmd *storepb.Command) (*storepb.Result, error)
}

// ServerConfig configures the Relations service of a providing application.
type ServerConfig struct {
	Store Store
	// App is this application, and Model the uuid of its model.
	App, Model string
	// Config returns the relations file in force (hot-reloaded).
	Config func() *relconf.Config
	// CertApp returns the application named by the caller's client
	// certificate; nil when the relations port has no TLS, and then every
	// offer needs a token.
	CertApp func(ctx context.Context) (string, error)
	Logger  *slog.Logger
}

// Server serves the Relations service. Any member serves it: it reads its
// own applied state and its commits are forwarded to the leader.
type Server struct {
	linkpb.UnimplementedRelationsServer
	cfg ServerConfig
}

// NewServer returns the Relations service of cfg.
func NewServer(cfg ServerConfig) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Server{cfg: cfg}
}

// refusal is why a caller gets no relation: either an error status (the
// relation, if the consumer has one, stays as it is) or a Goodbye (the
// provider does not offer it: the consumer removes it).
type refusal struct {
	err     error
	goodbye string
}

// admit checks a consumer's request: the offer exists, the caller proved
// who it is, and the offer lists it.
func (s *Server) admit(ctx context.Context, providerApp, consumerApp, consumerEndpoint, offerName string) (relconf.Offer, string, *refusal) {
	if providerApp != "" && providerApp != s.cfg.App {
		return relconf.Offer{}, "", &refusal{err: status.Errorf(codes.FailedPrecondition, "this is application %q, not %q: check the relation's addresses", s.cfg.App, providerApp)}
	}
	if !state.ValidAppName(consumerApp) || !state.ValidEndpointName(consumerEndpoint) || !state.ValidEndpointName(offerName) {
		return relconf.Offer{}, "", &refusal{err: status.Errorf(codes.InvalidArgument, "consumer application %q, endpoint %q and offer %q must be valid names", consumerApp, consumerEndpoint, offerName)}
	}
	app := consumerApp
	if s.cfg.CertApp != nil {
		certApp, err := s.cfg.CertApp(ctx)
		if err != nil {
			return relconf.Offer{}, "", &refusal{err: status.Errorf(codes.Unauthenticated, "client certificate: %v", err)}
		}
		if certApp != consumerApp {
			return relconf.Offer{}, "", &refusal{err: status.Errorf(codes.PermissionDenied, "the client certificate names application %q, the request %q", certApp, consumerApp)}
		}
	}
	cfg := s.cfg.Config()
	offer, ok := cfg.Offer(offerName)
	if !ok {
		return relconf.Offer{}, "", &refusal{goodbye: fmt.Sprintf("application %q offers no endpoint %q", s.cfg.App, offerName)}
	}
	if len(offer.Token) > 0 {
		var got string
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			if v := md.Get(TokenHeader); len(v) == 1 {
				got = v[0]
			}
		}
		if subtle.ConstantTimeCompare([]byte(got), offer.Token) != 1 {
			return relconf.Offer{}, "", &refusal{err: status.Errorf(codes.Unauthenticated, "wrong or missing token for offer %q", offerName)}
		}
	} else if s.cfg.CertApp == nil {
		return relconf.Offer{}, "", &refusal{err: status.Errorf(codes.FailedPrecondition, "offer %q has no token and the relations port has no TLS: the provider must set token-file", offerName)}
	}
	if !cfg.Allows(offerName, app) {
		return relconf.Offer{}, "", &refusal{goodbye: fmt.Sprintf("offer %q of application %q does not list consumer %q", offerName, s.cfg.App, app)}
	}
	return offer, app, nil
}

func (s *Server) refuse(ctx context.Context, what string, r *refusal) {
	remote := ""
	if p, ok := peer.FromContext(ctx); ok {
		remote = p.Addr.String()
	}
	reason := r.goodbye
	if r.err != nil {
		reason = status.Convert(r.err).Message()
	}
	s.cfg.Logger.Warn("relation request refused", "request", what, "remote", remote, "reason", reason)
}

// Relate serves one relation stream.
func (s *Server) Relate(stream linkpb.Relations_RelateServer) error {
	ctx := stream.Context()
	first, err := recvWithin(ctx, stream.Recv, helloTimeout)
	if err != nil {
		return err
	}
	hello := first.GetHello()
	if hello == nil {
		return status.Error(codes.InvalidArgument, "a relation stream starts with Hello")
	}
	offer, consumer, ref := s.admit(ctx, hello.GetProviderApp(), hello.GetConsumerApp(), hello.GetConsumerEndpoint(), hello.GetOffer())
	if ref == nil && hello.GetInterface() != offer.Interface {
		ref = &refusal{err: status.Errorf(codes.FailedPrecondition, "endpoint %q of %q has interface %q, offer %q has %q", hello.GetConsumerEndpoint(), consumer, hello.GetInterface(), offer.Endpoint, offer.Interface)}
	}
	if ref != nil {
		s.refuse(ctx, "relate "+hello.GetConsumerApp()+":"+hello.GetConsumerEndpoint()+" to "+hello.GetOffer(), ref)
		if ref.err != nil {
			return ref.err
		}
		return stream.Send(&linkpb.Message{Msg: &linkpb.Message_Goodbye{Goodbye: &linkpb.Goodbye{Reason: ref.goodbye}}})
	}
	relID, err := ensureRelation(ctx, s.cfg.Store, state.OfferedRelationOp(offer.Endpoint, offer.Interface, consumer, hello.GetConsumerEndpoint()))
	if err != nil {
		return status.Errorf(codes.Unavailable, "could not record the relation: %v", err)
	}
	st := s.cfg.Store.State()
	r, ok := st.Relation(relID)
	if !ok {
		return status.Error(codes.Unavailable, "the relation was removed as it was made; try again")
	}
	if err := stream.Send(&linkpb.Message{Msg: &linkpb.Message_Welcome{Welcome: &linkpb.Welcome{ProviderApp: s.cfg.App, Have: remoteMark(st, r)}}}); err != nil {
		return err
	}
	s.cfg.Logger.Info("relation stream open", "relation", r.Key(), "consumer", consumer+":"+hello.GetConsumerEndpoint())
	err = exchange(ctx, s.cfg.Store, stream, relID, consumer, s.cfg.Model, hello.GetHave().GetDigest(), s.cfg.Logger)
	var gb goodbyeError
	if errors.As(err, &gb) {
		return stream.Send(&linkpb.Message{Msg: &linkpb.Message_Goodbye{Goodbye: &linkpb.Goodbye{Reason: string(gb)}}})
	}
	return err
}

// Unrelate removes the provider's side of a relation the consumer removed.
func (s *Server) Unrelate(ctx context.Context, req *linkpb.UnrelateRequest) (*linkpb.UnrelateResponse, error) {
	_, consumer, ref := s.admit(ctx, "", req.GetConsumerApp(), req.GetConsumerEndpoint(), req.GetOffer())
	switch {
	case ref != nil && ref.err != nil:
		s.refuse(ctx, "unrelate", ref)
		return nil, ref.err
	case ref != nil:
		// Not (or no longer) offered to the caller: the leader removes
		// such relations on its own, and the caller, who proved nothing,
		// removes nothing.
		return &linkpb.UnrelateResponse{}, nil
	}
	r, ok := s.cfg.Store.State().FindRelation(req.GetOffer(), consumer, req.GetConsumerEndpoint())
	if !ok || !r.Offered {
		// Only the offering side of a relation is the consumer's to end.
		return &linkpb.UnrelateResponse{}, nil
	}
	if _, err := s.cfg.Store.Apply(ctx, state.NewCommand(state.RemoveRelationOp(r.ID))); err != nil && !errors.Is(err, state.ErrNotFound) {
		return nil, status.Errorf(codes.Unavailable, "could not remove the relation: %v", err)
	}
	s.cfg.Logger.Info("relation removed by its consumer", "relation", r.Key(), "consumer", consumer+":"+req.GetConsumerEndpoint())
	return &linkpb.UnrelateResponse{}, nil
}

// goodbyeError ends an exchange because the relation is gone.
type goodbyeError string

func (g goodbyeError) Error() string { return string(g) }

// stream is the part of a Relate stream, on either side, that exchange uses.
type stream interface {
	Send(*linkpb.Message) error
	Recv() (*linkpb.Message, error)
}

// exchange runs both directions of an open relation until ctx ends, the
// stream fails, or the relation is gone from this side's state (a
// goodbyeError) or the other side said Goodbye (a *remoteGoodbye).
// Received views are committed to this side's log; this side's view is sent
// whenever its digest differs from the last one the other side holds.
func exchange(ctx context.Context, store Store, s stream, relID int64, remoteApp, model string, have []byte, log *slog.Logger) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := s.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			switch x := m.Msg.(type) {
			case *linkpb.Message_View:
				actx, acancel := context.WithTimeout(ctx, applyTimeout)
				_, err := store.Apply(actx, state.NewCommand(setRemoteView(relID, remoteApp, x.View)))
				acancel()
				var ce *state.CommandError
				switch {
				case err == nil:
				case errors.Is(err, state.ErrNotFound):
					// The relation is gone here; the send side says Goodbye.
				case errors.As(err, &ce):
					// The other side sent what this side refuses (a bag
					// over the limit, a unit of another application):
					// nothing was committed, and it is not retried.
					log.Warn("remote view refused", "relation", relID, "remote", remoteApp, "err", err)
				default:
					recvErr <- fmt.Errorf("could not commit the remote view: %w", err)
					return
				}
			case *linkpb.Message_Goodbye:
				recvErr <- &RemoteGoodbye{Reason: x.Goodbye.GetReason()}
				return
			default:
				recvErr <- status.Errorf(codes.InvalidArgument, "unexpected %T on an open relation", m.Msg)
				return
			}
		}
	}()
	sent := have
	for {
		ch := store.Changed()
		st := store.State()
		r, ok := st.Relation(relID)
		if !ok {
			return goodbyeError(fmt.Sprintf("application %q removed the relation", st.App()))
		}
		v := localView(st, r, model)
		if d := digest(v); !bytes.Equal(d, sent) {
			if err := s.Send(&linkpb.Message{Msg: &linkpb.Message_View{View: v}}); err != nil {
				return err
			}
			sent = d
		}
		select {
		case <-ch:
		case err := <-recvErr:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// RemoteGoodbye: the other side ended the relation for good.
type RemoteGoodbye struct{ Reason string }

func (g *RemoteGoodbye) Error() string {
	return "the remote application ended the relation: " + g.Reason
}

// recvWithin receives one message or fails after d.
func recvWithin(ctx context.Context, recv func() (*linkpb.Message, error), d time.Duration) (*linkpb.Message, error) {
	type result struct {
		m   *linkpb.Message
		err error
	}
	ch := make(chan result, 1)
	go func() {
		m, err := recv()
		ch <- result{m, err}
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.m, r.err
	case <-t.C:
		return nil, status.Errorf(codes.DeadlineExceeded, "no message within %v", d)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
