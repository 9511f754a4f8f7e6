package sidecar

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/bagkeeper/bagkeeper/raftstore"
	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
	"github.com/bagkeeper/bagkeeper/test/wait"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		// go-metrics' process-wide sink expires old samples in the background.
		goleak.IgnoreTopFunction("github.com/armon/go-metrics.(*Metrics).collectStats"),
	)
}

func TestPodOrdinalOnlyForStatefulSetNames(t *testing.T) {
	cases := map[string]int64{
		"mysql-0":              0,
		"mysql-12":             12,
		"my-app-3":             -1, // belongs to app "my-app", asked for "mysql"
		"mysql-01":             -1,
		"mysql-7f9c5d-x2k9z":   -1, // Deployment pod
		"mysql":                -1,
		"mysql-":               -1,
		"postgresql-k8s-2":     -1,
		"mysql-99999999999999": 99999999999999,
	}
	for pod, want := range cases {
		if got := PodOrdinal(pod, "mysql"); got != want {
			t.Errorf("PodOrdinal(%q) = %d, want %d", pod, got, want)
		}
	}
	if got := PodOrdinal("postgresql-k8s-2", "postgresql-k8s"); got != 2 {
		t.Errorf("hyphenated app: got %d", got)
	}
}

func TestConfigRefusesAnUnprotectedPeerPort(t *testing.T) {
	c := Config{App: "app", Pod: "app-0", DataDir: t.TempDir()}
	if err := c.validate(); err == nil || !strings.Contains(err.Error(), "--insecure") {
		t.Fatalf("got %v", err)
	}
	c.Insecure = true
	c.UnitMode = "sometimes"
	if err := c.validate(); err == nil || !strings.Contains(err.Error(), "--unit-mode") {
		t.Fatalf("got %v", err)
	}
	c.UnitMode = UnitModeOrdinal
	c.Pod = "web-abc"
	if err := c.validate(); err == nil || !strings.Contains(err.Error(), "ordinal") {
		t.Fatalf("got %v", err)
	}
}

// startSingle runs a one-member sidecar in this process.
func startSingle(t *testing.T, pod string) (*Sidecar, context.CancelFunc, chan error) {
	t.Helper()
	sock, err := os.MkdirTemp("", "bk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sock) })
	s, err := Start(Config{
		App: "app", Pod: pod, DataDir: filepath.Join(t.TempDir(), "data"),
		Bind: "127.0.0.1:0", Advertise: "127.0.0.1:0", HTTPBind: "127.0.0.1:0",
		AdminSocket: filepath.Join(sock, "a.sock"), Insecure: true,
		Raft:   raftstore.Config{BootstrapExpect: 1, JoinInterval: 50 * time.Millisecond},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return s, cancel, done
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func waitFor(t *testing.T, what string, cond func() error) {
	t.Helper()
	wait.Until(t, 10*time.Second, what, cond)
}

func TestProbesMetricsAndAdminOfARunningSidecar(t *testing.T) {
	s, cancel, done := startSingle(t, "app-0")
	base := "http://" + s.HTTPAddr()
	if code, _ := get(t, base+"/healthz"); code != 200 {
		t.Fatalf("/healthz = %d", code)
	}
	waitFor(t, "/readyz", func() error {
		if code, body := get(t, base+"/readyz"); code != 200 {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
	if s.Unit() != "app/0" {
		t.Fatalf("a StatefulSet pod app-0 holds %q, want app/0", s.Unit())
	}
	_, metrics := get(t, base+"/metrics")
	for _, want := range []string{`bagkeeper_units{state="active"} 1`, `bagkeeper_ready 1`, `bagkeeper_raft_state{state="Leader"} 1`, `bagkeeper_members{suffrage="voter"} 1`, "bagkeeper_raft_apply"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	conn, err := grpc.NewClient("unix://"+s.cfg.AdminSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	admin := adminpb.NewAdminClient(conn)
	ctx := context.Background()
	rel, err := admin.EnsureRelation(ctx, &adminpb.EnsureRelationRequest{Endpoint: "peers", Interface: "p", Peer: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.SetBag(ctx, &adminpb.SetBagRequest{RelationId: rel.GetRelationId(), Owner: "app/0", Set: map[string]string{"k": "v"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.SetBag(ctx, &adminpb.SetBagRequest{RelationId: rel.GetRelationId(), Owner: "app/9", Set: map[string]string{"k": "v"}}); err == nil || !strings.Contains(err.Error(), "app/9 does not exist") {
		t.Fatalf("write to an unknown unit: %v", err)
	}
	// A relation named endpoint:id must be on that endpoint; an owner that
	// is no unit or application of the group is a mistake, not "{}".
	if _, err := admin.SetBag(ctx, &adminpb.SetBagRequest{RelationId: rel.GetRelationId(), Endpoint: "wrong", Owner: "app/0", Set: map[string]string{"k": "w"}}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `not on endpoint "wrong"`) {
		t.Fatalf("write through the wrong endpoint: %v", err)
	}
	if _, err := admin.GetBags(ctx, &adminpb.GetBagsRequest{RelationId: rel.GetRelationId(), Endpoint: "wrong"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("read through the wrong endpoint: %v", err)
	}
	if _, err := admin.GetBags(ctx, &adminpb.GetBagsRequest{RelationId: -1, Owner: "nosuch/3"}); status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "nosuch/3 has no bag here") {
		t.Fatalf("bags of nosuch/3: %v", err)
	}
	for _, owner := range []string{"app/0", "app"} {
		if _, err := admin.GetBags(ctx, &adminpb.GetBagsRequest{RelationId: rel.GetRelationId(), Endpoint: "peers", Owner: owner}); err != nil {
			t.Fatalf("bags of %s: %v", owner, err)
		}
	}
	if b, err := admin.GetBags(ctx, &adminpb.GetBagsRequest{RelationId: -1, Owner: "app/0"}); err != nil || len(b.GetBags()) != 1 || b.GetBags()[0].GetData()["k"] != "v" {
		t.Fatalf("bags of app/0: %v %v", b, err)
	}
	st, err := admin.Status(ctx, &adminpb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !st.GetReady() || st.GetUnit() != "app/0" || len(st.GetMembers()) != 1 || !st.GetMembers()[0].GetReachable() || st.GetRelations()[0].GetBags() != 1 {
		t.Fatalf("status %v", st)
	}
	if code, body := get(t, base+"/startupz"); code != 200 || body != "started\n" {
		t.Fatalf("/startupz = %d %q", code, body)
	}
	code, body := get(t, base+"/status")
	var hs adminpb.StatusResponse
	if code != 200 || protojson.Unmarshal([]byte(body), &hs) != nil || hs.GetUnit() != "app/0" || hs.GetLeader() == "" || len(hs.GetRelations()) != 1 {
		t.Fatalf("/status = %d %s", code, body)
	}
	if strings.Contains(body, `"v"`) {
		t.Fatalf("/status shows a bag's content: %s", body)
	}
	info, err := os.Stat(s.cfg.AdminSocket)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("admin socket mode %v (%v), want 0600", info.Mode().Perm(), err)
	}

	// A graceful stop releases the unit before the member goes.
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	done <- nil // for the cleanup
	u, ok := s.State().Unit("app/0")
	if !ok || u.State != state.UnitReleased || u.Reason != "pod stopped" {
		t.Fatalf("unit after graceful stop: %+v", u)
	}
}

func TestRelationEnsureOnlyOnTheCharmsEndpoints(t *testing.T) {
	sock, err := os.MkdirTemp("", "bk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sock) })
	charm := t.TempDir()
	md := "name: web\npeers:\n  replicas:\n    interface: web-peers\nrequires:\n  db:\n    interface: pgsql\n"
	if err := os.WriteFile(filepath.Join(charm, "metadata.yaml"), []byte(md), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Start(Config{
		App: "web", Pod: "web-0", DataDir: filepath.Join(t.TempDir(), "data"),
		Bind: "127.0.0.1:0", Advertise: "127.0.0.1:0", AdminSocket: filepath.Join(sock, "a.sock"), Insecure: true,
		Raft:   raftstore.Config{BootstrapExpect: 1, JoinInterval: 50 * time.Millisecond},
		Agent:  &AgentSettings{CharmDir: charm, Socket: filepath.Join(sock, "agent.sock"), ToolBinary: os.Args[0], RemoteRunner: true},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	conn, err := grpc.NewClient("unix://"+s.cfg.AdminSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	admin := adminpb.NewAdminClient(conn)
	for _, c := range []struct {
		req  *adminpb.EnsureRelationRequest
		want string
	}{
		{&adminpb.EnsureRelationRequest{Endpoint: "rpelicas", Peer: true}, `the charm web has no endpoint "rpelicas" (its endpoints: db, replicas)`},
		{&adminpb.EnsureRelationRequest{Endpoint: "replicas", RemoteApp: "pg", RemoteEndpoint: "x"}, `"replicas" is a peer endpoint of the charm web: give --peer`},
		{&adminpb.EnsureRelationRequest{Endpoint: "db", Peer: true}, `"db" is not a peer endpoint of the charm web`},
	} {
		if _, err := admin.EnsureRelation(context.Background(), c.req); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.req, err, c.want)
		}
	}
	waitFor(t, "a relation on a declared endpoint", func() error {
		_, err := admin.EnsureRelation(context.Background(), &adminpb.EnsureRelationRequest{Endpoint: "db", Interface: "pgsql", RemoteApp: "pg", RemoteEndpoint: "database"})
		return err
	})
}
