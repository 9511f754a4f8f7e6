package transport

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// serveHealth runs a gRPC health server on l's gRPC listener until cleanup.
func serveHealth(t *testing.T, l *Listener) {
	t.Helper()
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l.GRPCListener()) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-done; err != nil {
			t.Errorf("gRPC Serve: %v", err)
		}
	})
}

// healthClient connects to addr through dial and returns a health client.
func healthClient(t *testing.T, addr string, dial func(context.Context, string) (net.Conn, error)) healthpb.HealthClient {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithContextDialer(dial),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc.NewClient: %v", err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return healthpb.NewHealthClient(cc)
}

func checkServing(ctx context.Context, c healthpb.HealthClient) error {
	resp, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return fmt.Errorf("health check: %w", err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("health status %v, want SERVING", resp.GetStatus())
	}
	return nil
}

func TestGRPCHealthCheckOverListener(t *testing.T) {
	t.Parallel()
	cfg, _ := testCfg("wordpress", "join-token")
	l := listen(t, "", cfg)
	serveHealth(t, l)
	if got := l.GRPCListener().Addr().String(); got != l.Advertise() {
		t.Fatalf("GRPCListener().Addr() = %q, want %q", got, l.Advertise())
	}
	c := healthClient(t, l.Advertise(), Dialer(cfg))
	if err := checkServing(context.Background(), c); err != nil {
		t.Fatal(err)
	}
}

// TestRaftAndGRPCInterleavedOnOneListener runs raft RPCs and gRPC calls
// concurrently against one listener.
func TestRaftAndGRPCInterleavedOnOneListener(t *testing.T) {
	t.Parallel()
	cfg, _ := testCfg("wordpress", "join-token")
	server := listen(t, "", cfg)
	serveHealth(t, server)
	b := newRaftPeer(t, server)
	client := listen(t, "", cfg)
	a := newRaftPeer(t, client)
	hc := healthClient(t, server.Advertise(), client.Dialer())

	const rounds = 20
	var wg sync.WaitGroup
	errs := make(chan error, 2*rounds)
	for i := range rounds {
		wg.Add(2)
		go func() {
			defer wg.Done()
			errs <- checkServing(context.Background(), hc)
		}()
		go func() {
			defer wg.Done()
			errs <- appendEntries(a, b, uint64(i+1), []byte(fmt.Sprint("entry-", i)))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	for i := range rounds {
		if !b.received([]byte(fmt.Sprint("entry-", i))) {
			t.Errorf("entry-%d not received", i)
		}
	}
}
