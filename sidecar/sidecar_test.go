package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"go.uber.org/goleak"
	"go.yaml.in/yaml/v3"
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
		// A raft future dropped on shutdown is never answered; its waiter
		// stays by design (raftstore/future.go).
		goleak.IgnoreAnyFunction("github.com/bagkeeper/bagkeeper/raftstore.(*Node).await.func1"),
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

// TestProfilesOnlyWhenAskedFor checks that Go's profiles are served on the
// probe port with --pprof, and not without.
func TestProfilesOnlyWhenAskedFor(t *testing.T) {
	off, _, _ := startSingle(t, "app-0")
	if code, _ := get(t, "http://"+off.HTTPAddr()+"/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("without --pprof /debug/pprof/ answered %d, want 404", code)
	}
	on, _, _ := startSingle(t, "app-0", func(c *Config) { c.Pprof = true })
	code, body := get(t, "http://"+on.HTTPAddr()+"/debug/pprof/goroutine?debug=1")
	if code != http.StatusOK || !strings.Contains(body, "goroutine profile:") {
		t.Errorf("with --pprof the goroutine profile answered %d: %.200s", code, body)
	}
}

// startSingle runs a one-member sidecar in this process.
func startSingle(t *testing.T, pod string, opts ...func(*Config)) (*Sidecar, context.CancelFunc, chan error) {
	t.Helper()
	sock, err := os.MkdirTemp("", "bk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sock) })
	cfg := Config{
		App: "app", Pod: pod, DataDir: filepath.Join(t.TempDir(), "data"),
		Bind: "127.0.0.1:0", Advertise: "127.0.0.1:0", HTTPBind: "127.0.0.1:0",
		AdminSocket: filepath.Join(sock, "a.sock"), Insecure: true,
		Raft:   raftstore.Config{BootstrapExpect: 1, JoinInterval: 50 * time.Millisecond},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	for _, o := range opts {
		o(&cfg)
	}
	s, err := Start(cfg)
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
	for _, want := range []string{`bagkeeper_units{state="active"} 1`, `bagkeeper_ready 1`, `bagkeeper_raft_state{state="Leader"} 1`, `bagkeeper_members{suffrage="voter"} 1`,
		"bagkeeper_raft_apply_total", "bagkeeper_raft_commit_time_seconds_bucket", "bagkeeper_raft_fsm_apply_seconds_count"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// Prometheus' conventions, as promtool check metrics has them.
	problems, err := promlint.New(strings.NewReader(metrics)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("/metrics: %s: %s", p.Metric, p.Text)
	}
	_, incarnation, _ := strings.Cut(string(s.node.ID()), "/")
	if regexp.MustCompile(`(?m)^bagkeeper[a-z0-9_]*[A-Z]`).MatchString(metrics) || regexp.MustCompile(`(?m)^[^{ ]*`+incarnation).MatchString(metrics) {
		t.Errorf("/metrics has camelCase names or member ids in names")
	}
	if !strings.Contains(metrics, `bagkeeper_info{app="app",member="`+string(s.node.ID())+`",pod="app-0"`) {
		t.Errorf("/metrics lacks bagkeeper_info")
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
	// relation remove: not a peer relation, nor through the wrong endpoint;
	// an operator's relation with another application, yes.
	if _, err := admin.RemoveRelation(ctx, &adminpb.RemoveRelationRequest{RelationId: rel.GetRelationId()}); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "is a peer relation") {
		t.Fatalf("removing the peer relation: %v", err)
	}
	db, err := admin.EnsureRelation(ctx, &adminpb.EnsureRelationRequest{Endpoint: "db", Interface: "pgsql", RemoteApp: "pg", RemoteEndpoint: "database"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.SetBag(ctx, &adminpb.SetBagRequest{RelationId: db.GetRelationId(), Owner: "app/0", Set: map[string]string{"k": "v"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RemoveRelation(ctx, &adminpb.RemoveRelationRequest{RelationId: db.GetRelationId(), Endpoint: "peers"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("removing db through the wrong endpoint: %v", err)
	}
	if _, err := admin.RemoveRelation(ctx, &adminpb.RemoveRelationRequest{RelationId: db.GetRelationId(), Endpoint: "db"}); err != nil {
		t.Fatalf("removing db: %v", err)
	}
	if _, err := admin.GetBags(ctx, &adminpb.GetBagsRequest{RelationId: db.GetRelationId()}); status.Code(err) != codes.NotFound {
		t.Fatalf("bags of a removed relation: %v", err)
	}
	st, err := admin.Status(ctx, &adminpb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !st.GetReady() || st.GetUnit() != "app/0" || len(st.GetMembers()) != 1 || !st.GetMembers()[0].GetReachable() || len(st.GetRelations()) != 1 || st.GetRelations()[0].GetBags() != 1 {
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

// startWithCharm runs a one-member sidecar with a unit agent in this
// process (hooks run remotely: no runner connects, so none runs).
func startWithCharm(t *testing.T) *Sidecar {
	t.Helper()
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
		Bind: "127.0.0.1:0", Advertise: "127.0.0.1:0", HTTPBind: "127.0.0.1:0", AdminSocket: filepath.Join(sock, "a.sock"), Insecure: true,
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
	return s
}

func TestRelationEnsureOnlyOnTheCharmsEndpoints(t *testing.T) {
	s := startWithCharm(t)
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
	// The unit agent's metrics, under Prometheus' conventions too (no hook
	// has run: no runner is connected).
	waitFor(t, "the agent's metrics", func() error {
		_, metrics := get(t, "http://"+s.HTTPAddr()+"/metrics")
		for _, want := range []string{"bagkeeper_hooks_due ", "bagkeeper_unit_leader ", "bagkeeper_unit_hook_failed 0", "bagkeeper_unit_hook_attempt 0"} {
			if !strings.Contains(metrics, want) {
				return fmt.Errorf("/metrics lacks %q", want)
			}
		}
		problems, err := promlint.New(strings.NewReader(metrics)).Lint()
		if err != nil || len(problems) > 0 {
			return fmt.Errorf("promlint: %v %v", err, problems)
		}
		return nil
	})
	waitFor(t, "a relation on a declared endpoint", func() error {
		_, err := admin.EnsureRelation(context.Background(), &adminpb.EnsureRelationRequest{Endpoint: "db", Interface: "pgsql", RemoteApp: "pg", RemoteEndpoint: "database"})
		return err
	})
}

// TestAlertsAndDashboardNameExportedMetrics: every metric the alert rules
// and the Grafana dashboard in monitoring/ use is one a sidecar exports.
func TestAlertsAndDashboardNameExportedMetrics(t *testing.T) {
	s := startWithCharm(t)
	exported := map[string]bool{}
	waitFor(t, "the leader's raft metrics", func() error {
		_, metrics := get(t, "http://"+s.HTTPAddr()+"/metrics")
		for _, m := range regexp.MustCompile(`(?m)^# TYPE (\S+) (\S+)$`).FindAllStringSubmatch(metrics, -1) {
			exported[m[1]] = true
			if m[2] == "histogram" {
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					exported[m[1]+suffix] = true
				}
			}
		}
		if !exported["bagkeeper_raft_commit_time_seconds"] || !exported["bagkeeper_members_unhealthy"] {
			return errors.New("no commit or no health round yet")
		}
		return nil
	})
	// The hook metrics have no series before a hook runs: their names come
	// from their descriptions.
	ch := make(chan *prometheus.Desc, 16)
	for _, c := range s.metrics.agent.Collectors() {
		c.Describe(ch)
	}
	close(ch)
	for d := range ch {
		name := regexp.MustCompile(`fqName: "([^"]+)"`).FindStringSubmatch(d.String())[1]
		exported[name] = true
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			exported[name+suffix] = true
		}
	}
	var exprs []string
	b, err := os.ReadFile("../monitoring/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert, Expr string
			}
		}
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" {
				t.Errorf("a rule without alert or expr: %+v", r)
			}
			exprs = append(exprs, r.Expr)
		}
	}
	b, err = os.ReadFile("../monitoring/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	if len(exprs) < 20 {
		t.Fatalf("only %d expressions found", len(exprs))
	}
	names := regexp.MustCompile(`\b(bagkeeper_[a-z0-9_]+|process_[a-z0-9_]+|go_[a-z0-9_]+)\b`)
	for _, e := range exprs {
		for _, n := range names.FindAllString(e, -1) {
			if !exported[n] {
				t.Errorf("%s is not exported (in %q)", n, strings.TrimSpace(e))
			}
		}
	}
}
