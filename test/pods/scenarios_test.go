package pods

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestPods runs the faults one after the other on one 3-pod StatefulSet
// with persistence and TLS on; each ends with app.check: every pod ready,
// one raft leader, the same units, every bag as before, no install (or
// peer join) in a pod that got its unit back.
func TestPods(t *testing.T) {
	a := startApp(t, "tls.enabled=true")
	a.check(t)
	for _, s := range []struct {
		name string
		f    func(t *testing.T, a *app)
	}{
		{"rolling update of every pod", testRollingUpdate},
		{"the leader's sidecar killed", testKillLeaderSidecar},
		{"the leader's pod paused", testPauseLeader},
		{"the leader's pod disconnected", testDisconnectLeader},
		{"every pod recreated with its volume", testRecreateAll},
		{"certificate rotation, then a pod of another CA", testCertRotation},
	} {
		ok := t.Run(s.name, func(t *testing.T) {
			defer a.use(t)()
			start := time.Now()
			s.f(t, a)
			a.check(t)
			t.Logf("%s: passed in %v", s.name, time.Since(start).Round(time.Millisecond))
		})
		if !ok {
			return // the next fault would start from a broken group
		}
	}
}

// TestPodsNoPersistence replaces every pod of a StatefulSet without
// persistence, one at a time: each new pod starts with an empty data dir
// and gets its unit and every bag back from its peers.
func TestPodsNoPersistence(t *testing.T) {
	a := startApp(t, "tls.enabled=true", "persistence.enabled=false")
	a.check(t)
	pods := a.runningPods()
	for i := len(pods) - 1; i >= 0; i-- {
		p := pods[i]
		before := a.self(t, p)
		d := a.replace(t, p)
		if after := a.self(t, p); after == before {
			t.Fatalf("%s is still member %s: its data dir was not new", p.name, after)
		}
		t.Logf("%s replaced with an empty data dir: ready in %v", p.name, d.Round(time.Millisecond))
		a.settle("the new member promoted and the old one removed")
	}
	a.check(t)
}

// self is the raft member the pod's sidecar is (<pod>/<incarnation of its
// data dir>).
func (a *app) self(t *testing.T, p *pod) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := p.status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st.Self
}

// TestPodsDeployment rolls a Deployment's pods as its controller does with
// maxSurge 0: each pod stopped, then a new one with a new random name and
// an empty data dir, which claims the unit the old one released on its
// way out.
func TestPodsDeployment(t *testing.T) {
	a := startApp(t, "tls.enabled=true", "workload=Deployment")
	if a.m.kind != "Deployment" {
		t.Skipf("the chart rendered a %s for workload=Deployment", a.m.kind)
	}
	a.check(t)
	for i, old := range a.runningPods() {
		old.stop()
		p := a.pod(a.newPodName(i))
		start := time.Now()
		if err := p.start(); err != nil {
			t.Fatal(err)
		}
		p.waitReady()
		t.Logf("%s replaced by %s: ready in %v", old.name, p.name, time.Since(start).Round(time.Millisecond))
		a.settle("the group after " + p.name)
	}
	a.check(t)
}

// testRollingUpdate replaces the pods one at a time, the highest ordinal
// first, as the StatefulSet controller rolls an update: each new pod has a
// new uid and a new address and keeps its volume claim.
func testRollingUpdate(t *testing.T, a *app) {
	pods := a.runningPods()
	for i := len(pods) - 1; i >= 0; i-- {
		p := pods[i]
		oldIP := p.ip
		d := a.replace(t, p)
		if p.ip == oldIP {
			t.Fatalf("%s kept its address %s", p.name, oldIP)
		}
		t.Logf("%s replaced (%s -> %s): ready in %v", p.name, oldIP, p.ip, d.Round(time.Millisecond))
		a.settle("the group after " + p.name)
	}
}

// testKillLeaderSidecar kills the raft leader's sidecar with SIGKILL; the
// kubelet restarts it (restartPolicy Always) in the same pod.
func testKillLeaderSidecar(t *testing.T, a *app) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	leader, err := a.leaderPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sc := leader.sidecar()
	dockerT(t, "kill", "-s", "KILL", sc)
	waitFor(t, "the killed sidecar exited", 30*time.Second, func() error {
		if st := dockerT(t, "inspect", "-f", "{{.State.Status}}", sc); st != "exited" {
			return fmt.Errorf("%s is %s", sc, st)
		}
		return nil
	})
	waitFor(t, "another leader", time.Minute, func() error { return a.newLeader(leader) })
	// The kubelet's restart of a container with restartPolicy Always (a
	// container killed with `docker kill` is not restarted by Docker).
	dockerT(t, "start", sc)
	leader.waitReady()
}

// newLeader: a pod other than old sees a leader that is not old.
func (a *app) newLeader(old *pod) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, p := range a.runningPods() {
		if p == old {
			continue
		}
		st, err := p.status(ctx)
		if err != nil {
			return err
		}
		if st.Leader == "" || strings.HasPrefix(st.Leader, old.name+"/") {
			return fmt.Errorf("%s sees leader %q", p.name, st.Leader)
		}
		return nil
	}
	return fmt.Errorf("no other pod")
}

// runningContainers of the pod: its pause container and every container
// that is up.
func (p *pod) runningContainers(t *testing.T) []string {
	out := dockerT(t, "ps", "-q", "--filter", "label=bagkeeper-pods-pod="+p.name, "--filter", "label=bagkeeper-pods-test="+p.c.id)
	return append(strings.Fields(out), p.pause)
}

// testPauseLeader freezes every container of the leader's pod until the
// others have elected another leader (longer than the election timeout),
// then thaws them.
func testPauseLeader(t *testing.T, a *app) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	leader, err := a.leaderPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ids := leader.runningContainers(t)
	dockerT(t, append([]string{"pause"}, ids...)...)
	paused := time.Now()
	t.Cleanup(func() { docker(context.Background(), append([]string{"unpause"}, ids...)...) })
	waitFor(t, "another leader while "+leader.name+" is paused", time.Minute, func() error { return a.newLeader(leader) })
	dockerT(t, append([]string{"unpause"}, ids...)...)
	t.Logf("%s paused for %v", leader.name, time.Since(paused).Round(time.Millisecond))
}

// testDisconnectLeader takes the leader's pod off the network until the
// others have elected another leader, then puts it back at its address.
func testDisconnectLeader(t *testing.T, a *app) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	leader, err := a.leaderPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	connect := []string{"network", "connect", "--ip", leader.ip}
	for _, s := range a.serviceNames() {
		connect = append(connect, "--alias", leader.name+"."+s, "--alias", s)
	}
	connect = append(connect, a.network, leader.pause)
	dockerT(t, "network", "disconnect", a.network, leader.pause)
	off := time.Now()
	waitFor(t, "another leader while "+leader.name+" is disconnected", time.Minute, func() error { return a.newLeader(leader) })
	dockerT(t, connect...)
	t.Logf("%s disconnected for %v", leader.name, time.Since(off).Round(time.Millisecond))
}

// testRecreateAll removes every pod and starts them again at once with
// their volume claims: the group comes back from its disks.
func testRecreateAll(t *testing.T, a *app) {
	pods := a.runningPods()
	var wg sync.WaitGroup
	for _, p := range pods {
		wg.Add(1)
		go func() { defer wg.Done(); p.stop() }()
	}
	wg.Wait()
	start := time.Now()
	errs := make([]error, len(pods))
	for i, p := range pods {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = p.start() }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range pods {
		p.waitReady()
	}
	t.Logf("every pod recreated from its volume: all ready in %v", time.Since(start).Round(time.Millisecond))
}

// testCertRotation writes a bag key every 100 ms through one pod while
// every pod's TLS Secret is rotated (a new certificate from the same CA,
// `..data` swapped as the kubelet does): every write must succeed and
// every pod must serve the new certificate. Then one pod comes back with
// a certificate from another CA: it never turns ready and the others
// refuse it; with its own CA's certificate again it rejoins.
func testCertRotation(t *testing.T, a *app) {
	if len(a.tlsSecret) == 0 {
		t.Skip("the chart renders no TLS secret volume")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rel, units, err := a.peerRelation(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pods := a.runningPods()
	writer := pods[0]
	var ok, failed atomic.Int64
	var lastErr atomic.Value
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
			_, err := writer.bk(wctx, "bags", "set", "--relation", fmt.Sprint(rel), units[0], fmt.Sprintf("rotation=%d", i))
			wcancel()
			if err != nil {
				failed.Add(1)
				lastErr.Store(err)
			} else {
				ok.Add(1)
			}
		}
	}()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-done
	}()
	waitFor(t, "writes flowing", time.Minute, func() error {
		if ok.Load() < 10 {
			return fmt.Errorf("%d writes so far", ok.Load())
		}
		return nil
	})

	newData := a.ca.issue(t, release, a.dnsNames...)
	newSerial := leafSerial(t, newData)
	for _, p := range pods {
		for _, name := range a.tlsSecret {
			if err := p.secretDir(t, name).update(newData); err != nil {
				t.Fatal(err)
			}
		}
	}
	rotated := time.Now()
	client := a.ca.issue(t, release)
	waitFor(t, "every pod serving the new certificate", time.Minute, func() error {
		for _, p := range pods {
			s, err := servedSerial(p, client)
			if err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
			if s != newSerial {
				return fmt.Errorf("%s serves serial %s, want %s", p.name, s, newSerial)
			}
		}
		return nil
	})
	t.Logf("every pod serves the new certificate %v after the swap", time.Since(rotated).Round(time.Millisecond))
	after := ok.Load()
	waitFor(t, "writes after the rotation", time.Minute, func() error {
		if ok.Load() < after+20 {
			return fmt.Errorf("%d writes since", ok.Load()-after)
		}
		return nil
	})
	close(stop)
	<-done
	t.Logf("writes during the rotation: %d succeeded, %d failed", ok.Load(), failed.Load())
	if failed.Load() > 0 {
		t.Fatalf("%d writes failed during the rotation; last: %v", failed.Load(), lastErr.Load())
	}
	a.record(t) // the rotation key is part of the bags from now on
	a.settle("after the rotation")

	// A pod whose certificate is from another CA.
	p := pods[len(pods)-1]
	p.stop()
	other := newCA(t, "another CA")
	bad := other.issue(t, release, a.dnsNames...)
	a.mu.Lock()
	a.secretOverride[p.name] = map[string]map[string][]byte{}
	for _, name := range a.tlsSecret {
		a.secretOverride[p.name][name] = bad
	}
	a.mu.Unlock()
	since := time.Now().Add(-time.Second).Format(time.RFC3339)
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	others := pods[:len(pods)-1]
	waitFor(t, "the others refusing the other CA's certificate", time.Minute, func() error {
		for _, q := range others {
			logs, _ := dockerLogs(ctx, q.sidecar(), since)
			if strings.Contains(logs, "does not verify against CA") {
				return nil
			}
		}
		return fmt.Errorf("no refusal logged yet")
	})
	// It stays not ready while the others keep serving: a while longer
	// than a join would take.
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if err := p.ready(ctx); err == nil {
			t.Fatalf("%s, with another CA's certificate, turned ready", p.name)
		}
		time.Sleep(500 * time.Millisecond)
	}
	for _, q := range others {
		if err := q.ready(ctx); err != nil {
			t.Fatalf("with %s refused: %v", p.name, err)
		}
	}
	t.Logf("%s with another CA's certificate: refused and not ready", p.name)
	p.stop()
	a.mu.Lock()
	delete(a.secretOverride, p.name)
	a.mu.Unlock()
	// Its own CA's certificate (the rotated one) again.
	for _, name := range a.tlsSecret {
		a.m.secrets[name] = newData
	}
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	p.waitReady()
}

// dockerLogs returns a container's stdout and stderr since a time.
func dockerLogs(ctx context.Context, name, since string) (string, error) {
	cmdOut, err := dockerCombined(ctx, "logs", "--since", since, name)
	return cmdOut, err
}

// secretDir is the directory of a pod's Secret volume (current
// incarnation).
func (p *pod) secretDir(t *testing.T, secret string) *atomicDir {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, v := range p.c.spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == secret {
			return p.projected[v.Name]
		}
	}
	t.Fatalf("%s has no volume of secret %s", p.name, secret)
	return nil
}

// servedSerial is the serial of the certificate a pod's peer port serves.
func servedSerial(p *pod, client map[string][]byte) (string, error) {
	cert, err := tls.X509KeyPair(client["tls.crt"], client["tls.key"])
	if err != nil {
		return "", err
	}
	p.mu.Lock()
	addr := p.ip + ":7400"
	p.mu.Unlock()
	conn, err := tls.DialWithDialer(&netDialer, "tcp", addr, &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{cert}})
	if err != nil {
		return "", err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}
