package discovery

import (
	"errors"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

const srvName = "_raft._tcp.app.test."

func TestDNSSRVReturnsTargetNamesNotIPs(t *testing.T) {
	t.Parallel()
	srv := startTestDNS(t, false)
	srv.add(t,
		srvName+" 5 IN SRV 0 50 7000 app-1.app.test.",
		srvName+" 5 IN SRV 0 50 7000 App-0.app.test.",
		srvName+" 5 IN SRV 10 10 7001 app-2.app.test.",
		srvName+" 5 IN SRV 0 50 7000 app-0.app.test.",
		"app-0.app.test. 5 IN A 10.0.0.1",
	)
	src := NewDNSSRV(srvName, WithResolverAddr(srv.addr))
	got, err := src.Lookup(testContext(t))
	if err != nil {
		t.Fatalf("Lookup: %v", err)
	}
	assertAddrs(t, got, []string{"app-0.app.test:7000", "app-1.app.test:7000", "app-2.app.test:7001"})
}

func TestDNSSRVNonexistentNameIsEmptyAnswer(t *testing.T) {
	t.Parallel()
	srv := startTestDNS(t, false)
	src := NewDNSSRV(srvName, WithResolverAddr(srv.addr))
	got, err := src.Lookup(testContext(t))
	if err != nil {
		t.Fatalf("Lookup of an NXDOMAIN name: error %v, want an empty answer", err)
	}
	assertAddrs(t, got, nil)
	if srv.udpQueries.Load() == 0 {
		t.Error("the test server was never asked; the answer did not come from it")
	}
}

func TestDNSSRVNameWithoutRecordsIsEmptyAnswer(t *testing.T) {
	t.Parallel()
	srv := startTestDNS(t, false)
	srv.exists(srvName)
	src := NewDNSSRV(srvName, WithResolverAddr(srv.addr))
	got, err := src.Lookup(testContext(t))
	if err != nil {
		t.Fatalf("Lookup of a name without records: error %v, want an empty answer", err)
	}
	assertAddrs(t, got, nil)
}

func TestDNSSRVServerFailureIsError(t *testing.T) {
	t.Parallel()
	srv := startTestDNS(t, false)
	srv.failWith(srvName, dns.RcodeServerFailure)
	src := NewDNSSRV(srvName, WithResolverAddr(srv.addr))
	got, err := src.Lookup(testContext(t))
	if err == nil {
		t.Fatalf("Lookup with SERVFAIL returned %q and no error", got)
	}
	if !strings.Contains(err.Error(), "_raft._tcp.app.test") {
		t.Errorf("error %q does not name the looked-up name", err)
	}
	if !strings.Contains(err.Error(), srv.addr) {
		t.Errorf("error %q does not name the server that was asked, %s", err, srv.addr)
	}
}

func TestDNSSRVRefusedIsError(t *testing.T) {
	t.Parallel()
	srv := startTestDNS(t, false)
	srv.failWith(srvName, dns.RcodeRefused)
	src := NewDNSSRV(srvName, WithResolverAddr(srv.addr))
	if got, err := src.Lookup(testContext(t)); err == nil {
		t.Fatalf("Lookup with REFUSED returned %q and no error", got)
	}
}

func TestDNSSRVUnreachableServerIsError(t *testing.T) {
	t.Parallel()
	src := NewDNSSRV(srvName, WithResolverAddr(unreachableDNSAddr(t)))
	if got, err := src.Lookup(testContext(t)); err == nil {
		t.Fatalf("Lookup against an unreachable server returned %q and no error", got)
	}
}

func TestDNSSRVStopsWhenContextIsCancelled(t *testing.T) {
	t.Parallel()
	srv := startSilentDNS(t)
	checkLookupStopsOnCancel(t, NewDNSSRV(srvName, WithResolverAddr(srv.addr)), srv)
}

func TestDNSSRVKeepsValidRecordsAndReportsInvalidOnes(t *testing.T) {
	t.Parallel()
	srv := startTestDNS(t, false)
	srv.add(t,
		srvName+" 5 IN SRV 0 50 7000 app-0.app.test.",
		srvName+" 5 IN SRV 0 50 0 app-1.app.test.",
		srvName+" 5 IN SRV 0 0 0 .",
	)
	src := NewDNSSRV(srvName, WithResolverAddr(srv.addr))
	got, err := src.Lookup(testContext(t))
	assertAddrs(t, got, []string{"app-0.app.test:7000"})
	if !errors.Is(err, ErrInvalidAddress) {
		t.Fatalf("error %v, want one wrapping ErrInvalidAddress for the port-0 record", err)
	}
	if !strings.Contains(err.Error(), "app-1.app.test") {
		t.Errorf("error %q does not name the invalid record", err)
	}
}

func TestDNSSRVFallsBackToTCPWhenUDPAnswerIsTruncated(t *testing.T) {
	t.Parallel()
	srv := startTestDNS(t, true)
	srv.setTruncateUDP(true)
	srv.add(t,
		srvName+" 5 IN SRV 0 50 7000 app-0.app.test.",
		srvName+" 5 IN SRV 0 50 7000 app-1.app.test.",
	)
	src := NewDNSSRV(srvName, WithResolverAddr(srv.addr))
	got, err := src.Lookup(testContext(t))
	if err != nil {
		t.Fatalf("Lookup: %v", err)
	}
	assertAddrs(t, got, []string{"app-0.app.test:7000", "app-1.app.test:7000"})
	if srv.tcpQueries.Load() == 0 {
		t.Error("no query came over TCP")
	}
}

func TestDNSSRVInvalidConfigurationIsReportedByLookup(t *testing.T) {
	t.Parallel()
	for _, src := range []*DNSSRV{
		NewDNSSRV(""),
		NewDNSSRV(srvName, WithResolverAddr("not an address")),
	} {
		got, err := src.Lookup(testContext(t))
		if !errors.Is(err, ErrInvalidAddress) {
			t.Errorf("%s: Lookup returned %q, %v; want an error wrapping ErrInvalidAddress", src.Name(), got, err)
		}
	}
}

func TestDNSSRVNameDescribesSource(t *testing.T) {
	t.Parallel()
	if got, want := NewDNSSRV("_raft._tcp.app.ns.svc").Name(), `dns-srv "_raft._tcp.app.ns.svc"`; got != want {
		t.Errorf("Name() = %q, want %q", got, want)
	}
}
