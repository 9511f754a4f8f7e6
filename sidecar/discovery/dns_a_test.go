package discovery

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func TestDNSAReturnsEveryAddressWithPort(t *testing.T) {
	t.Parallel()
	srv := startTestDNS(t, false)
	srv.add(t,
		"app.test. 5 IN A 10.0.0.2",
		"app.test. 5 IN A 10.0.0.1",
		"app.test. 5 IN A 10.0.0.1",
		"app.test. 5 IN AAAA fd00::1",
	)
	src := NewDNSA("app.test.", 7000, WithResolverAddr(srv.addr))
	got, err := src.Lookup(testContext(t))
	if err != nil {
		t.Fatalf("Lookup: %v", err)
	}
	assertAddrs(t, got, []string{"10.0.0.1:7000", "10.0.0.2:7000", "[fd00::1]:7000"})
}

func TestDNSANonexistentNameIsEmptyAnswer(t *testing.T) {
	t.Parallel()
	srv := startTestDNS(t, false)
	src := NewDNSA("app.test.", 7000, WithResolverAddr(srv.addr))
	got, err := src.Lookup(testContext(t))
	if err != nil {
		t.Fatalf("Lookup of an NXDOMAIN name: error %v, want an empty answer", err)
	}
	assertAddrs(t, got, nil)
	if srv.udpQueries.Load() == 0 {
		t.Error("the test server was never asked; the answer did not come from it")
	}
}

func TestDNSANameWithoutAddressRecordsIsEmptyAnswer(t *testing.T) {
	t.Parallel()
	srv := startTestDNS(t, false)
	srv.exists("app.test.")
	src := NewDNSA("app.test.", 7000, WithResolverAddr(srv.addr))
	got, err := src.Lookup(testContext(t))
	if err != nil {
		t.Fatalf("Lookup of a name without records: error %v, want an empty answer", err)
	}
	assertAddrs(t, got, nil)
}

func TestDNSAServerFailureIsError(t *testing.T) {
	t.Parallel()
	srv := startTestDNS(t, false)
	srv.failWith("app.test.", dns.RcodeServerFailure)
	src := NewDNSA("app.test.", 7000, WithResolverAddr(srv.addr))
	got, err := src.Lookup(testContext(t))
	if err == nil {
		t.Fatalf("Lookup with SERVFAIL returned %q and no error", got)
	}
	if !strings.Contains(err.Error(), "app.test") {
		t.Errorf("error %q does not name the looked-up name", err)
	}
	if !strings.Contains(err.Error(), srv.addr) {
		t.Errorf("error %q does not name the server that was asked, %s", err, srv.addr)
	}
	assertAddrs(t, got, nil)
}

func TestDNSAUnreachableServerIsError(t *testing.T) {
	t.Parallel()
	src := NewDNSA("app.test.", 7000, WithResolverAddr(unreachableDNSAddr(t)))
	got, err := src.Lookup(testContext(t))
	if err == nil {
		t.Fatalf("Lookup against an unreachable server returned %q and no error", got)
	}
	assertAddrs(t, got, nil)
}

func TestDNSAStopsWhenContextIsCancelled(t *testing.T) {
	t.Parallel()
	srv := startSilentDNS(t)
	checkLookupStopsOnCancel(t, NewDNSA("app.test.", 7000, WithResolverAddr(srv.addr)), srv)
}

func TestDNSATimeoutIsError(t *testing.T) {
	t.Parallel()
	srv := startSilentDNS(t)
	src := NewDNSA("app.test.", 7000, WithResolverAddr(srv.addr))
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	got, err := src.Lookup(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lookup against a silent server: got %q, error %v, want one wrapping context.DeadlineExceeded", got, err)
	}
}

func TestDNSAFallsBackToTCPWhenUDPAnswerIsTruncated(t *testing.T) {
	t.Parallel()
	srv := startTestDNS(t, true)
	srv.setTruncateUDP(true)
	srv.add(t, "app.test. 5 IN A 10.0.0.1", "app.test. 5 IN A 10.0.0.2")
	src := NewDNSA("app.test.", 7000, WithResolverAddr(srv.addr))
	got, err := src.Lookup(testContext(t))
	if err != nil {
		t.Fatalf("Lookup: %v", err)
	}
	assertAddrs(t, got, []string{"10.0.0.1:7000", "10.0.0.2:7000"})
	if srv.tcpQueries.Load() == 0 {
		t.Error("no query came over TCP")
	}
}

func TestDNSAInvalidConfigurationIsReportedByLookup(t *testing.T) {
	t.Parallel()
	for _, src := range []*DNSA{
		NewDNSA("app.test.", 0),
		NewDNSA("app.test.", 65536),
		NewDNSA("", 7000),
		NewDNSA("app.test.", 7000, WithResolverAddr("10.0.0.10")),
	} {
		got, err := src.Lookup(testContext(t))
		if !errors.Is(err, ErrInvalidAddress) {
			t.Errorf("%s: Lookup returned %q, %v; want an error wrapping ErrInvalidAddress", src.Name(), got, err)
		}
	}
}

func TestDNSANameDescribesSource(t *testing.T) {
	t.Parallel()
	if got, want := NewDNSA("app.ns.svc", 7000).Name(), `dns-a "app.ns.svc" port 7000`; got != want {
		t.Errorf("Name() = %q, want %q", got, want)
	}
	if got, want := NewDNSA("app.ns.svc", 7000, WithResolverAddr("127.0.0.1:53")).Name(), `dns-a "app.ns.svc" port 7000 via 127.0.0.1:53`; got != want {
		t.Errorf("Name() = %q, want %q", got, want)
	}
}
