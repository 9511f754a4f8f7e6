//go:build linux

package e2e

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// fakeDNS is the cluster DNS for the pods' headless service: it answers A
// queries for one name with the addresses the test sets, or fails as told.
type fakeDNS struct {
	name string // FQDN
	addr string

	mu    sync.Mutex
	mode  string // "answer", "nxdomain" or "servfail"
	hosts []string

	queries atomic.Int64
	srv     *dns.Server
	done    chan error
}

func startFakeDNS(t *testing.T, host, name string) *fakeDNS {
	t.Helper()
	pc, err := net.ListenPacket("udp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	d := &fakeDNS{name: dns.Fqdn(name), addr: pc.LocalAddr().String(), mode: "answer", done: make(chan error, 1)}
	started := make(chan struct{})
	d.srv = &dns.Server{PacketConn: pc, Handler: d, NotifyStartedFunc: func() { close(started) }}
	go func() { d.done <- d.srv.ActivateAndServe() }()
	select {
	case <-started:
	case err := <-d.done:
		t.Fatalf("DNS server: %v", err)
	}
	t.Cleanup(d.stop)
	return d
}

func (d *fakeDNS) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	d.queries.Add(1)
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	d.mu.Lock()
	mode, hosts := d.mode, append([]string(nil), d.hosts...)
	d.mu.Unlock()
	q := req.Question[0]
	switch {
	case mode == "servfail":
		m.Rcode = dns.RcodeServerFailure
	case !strings.EqualFold(q.Name, d.name) || mode == "nxdomain":
		m.Rcode = dns.RcodeNameError
	case q.Qtype == dns.TypeA:
		for _, h := range hosts {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 1}, A: net.ParseIP(h)})
		}
	}
	_ = w.WriteMsg(m)
}

func (d *fakeDNS) set(mode string, hosts ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.mode, d.hosts = mode, hosts
}

// stop shuts the server down; its port then refuses queries.
func (d *fakeDNS) stop() {
	d.mu.Lock()
	srv := d.srv
	d.srv = nil
	d.mu.Unlock()
	if srv != nil {
		_ = srv.Shutdown()
		<-d.done
	}
}

// TestDiscoveryOutageLongerThanReleaseTimeoutChangesNothing makes discovery
// answer nothing — the peers file emptied, the DNS name gone
// (NXDOMAIN), then the DNS server failing (SERVFAIL), then not answering at
// all — for clearly longer than --unit-release-after and
// --unit-remove-after together. Discovery only ever feeds bootstrap and
// joins: the members keep talking over their own addresses, so no unit may
// be released or removed and no member may leave (invariant 2: identity is
// never inferred from a momentary observation). Afterwards a new write must
// still commit.
//
// Both kinds of pods are tried: StatefulSet pods (their units are never
// released for being away) and Deployment pods, whose units the leader does
// release once their member is unreachable — so for them a discovery outage
// mistaken for unreachable members would show.
func TestDiscoveryOutageLongerThanReleaseTimeoutChangesNothing(t *testing.T) {
	for _, tc := range []struct {
		name       string
		deployment bool
	}{
		{"StatefulSet pods", false},
		{"Deployment pods", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testDiscoveryOutage(t, tc.deployment)
		})
	}
}

func testDiscoveryOutage(t *testing.T, deployment bool) {
	c := newCluster(t, "--unit-release-after", "2s", "--unit-remove-after", "2s", "--unit-mode", "auto")
	dnsSrv := startFakeDNS(t, c.newHost(), "web.e2e.test")
	c.flags = append(c.flags, "--discovery-dns", dnsSrv.name, "--dns-resolver", dnsSrv.addr)

	pods := make([]*pod, 3)
	var hosts []string
	for i := range pods {
		name := fmt.Sprintf("web-%d", i)
		if deployment {
			name = deploymentPodName(c.app, "6d4f8b")
		}
		pods[i] = c.newPod(name, "--bootstrap-expect", "3")
		hosts = append(hosts, pods[i].host)
	}
	dnsSrv.set("answer", hosts...)
	// Only DNS finds the peers at the start: that source demonstrably works.
	c.setDiscovery([]string{})
	c.startAll(pods)
	c.waitReady(pods...)
	before := c.waitOneCluster(startTimeout, "the initial cluster, found through DNS", wantVoters(3), wantMembers(3), allUnitsActive)
	want := seed(t, c.leaderPod(before), before.unitNames(), 512)
	before = c.waitOneCluster(startTimeout, "after seeding", wantVoters(3), allUnitsActive)

	unchanged := func() (bool, string) {
		// One view of the pods that agree with each other: an election
		// (a busy machine can delay a heartbeat past the timeout) makes
		// them disagree for a moment without changing the group.
		v, problem := c.observeCluster()
		for settle := time.Now().Add(3 * time.Second); problem != "" && time.Now().Before(settle); {
			time.Sleep(50 * time.Millisecond)
			v, problem = c.observeCluster()
		}
		if problem != "" {
			return false, problem
		}
		for _, chk := range []viewCheck{sameIDs(before), wantVoters(3), wantUnits(before.units, nil), allUnitsActive, sameClusterID(before)} {
			if p := chk(v); p != "" {
				return false, p + "\n  view: " + v.String()
			}
		}
		for name, u := range v.units {
			if u.member != before.units[name].member {
				return false, fmt.Sprintf("unit %s moved from %s to %s", name, before.units[name].member, u.member)
			}
		}
		return true, ""
	}

	phases := []struct {
		what string
		set  func()
	}{
		{"the DNS name does not exist", func() { dnsSrv.set("nxdomain") }},
		{"the DNS server fails", func() { dnsSrv.set("servfail") }},
		{"the DNS server is gone", dnsSrv.stop},
	}
	for _, ph := range phases {
		q := dnsSrv.queries.Load()
		ph.set()
		holdFor(t, 2500*time.Millisecond, "the cluster unchanged while "+ph.what+" and the peers file is empty", unchanged)
		if ph.what != "the DNS server is gone" && dnsSrv.queries.Load() == q {
			t.Fatalf("no pod asked DNS while %s: the outage was not observed", ph.what)
		}
	}
	// 7.5s without discovery: over three times the release timeout, and
	// the release and remove timeouts back to back.
	c.waitBags(want)
	c.mustCommit(want, pods[1])

	if deployment {
		// The control: a Deployment pod that is really gone does lose its
		// unit after the timeouts, so the quiet above was not for want of
		// a working release clock.
		v := c.waitOneCluster(startTimeout, "before the control", wantVoters(3))
		gone := c.followers(v)[0]
		unit := v.statuses[gone.name].GetUnit()
		gone.kill()
		c.waitOneCluster(startTimeout, "the unit of the killed pod released, then removed", unitState(unit, "removed"))
	}
}
