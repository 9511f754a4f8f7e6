package discovery

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// testDNS is an authoritative DNS server on 127.0.0.1 serving records
// given by the test. Names without records answer NXDOMAIN.
type testDNS struct {
	addr string

	mu          sync.Mutex
	names       map[string][]dns.RR // by lowercased FQDN; present = name exists
	rcodes      map[string]int      // names that answer with this rcode
	truncateUDP bool                // answer UDP queries with TC set and no records

	udpQueries atomic.Int32
	tcpQueries atomic.Int32
}

// startTestDNS starts a DNS server on UDP and, if withTCP, on TCP at the
// same port. It is shut down when the test ends.
func startTestDNS(t *testing.T, withTCP bool) *testDNS {
	t.Helper()
	s := &testDNS{names: map[string][]dns.RR{}, rcodes: map[string]int{}}
	var (
		pc  net.PacketConn
		ln  net.Listener
		err error
	)
	// The TCP port of the same number may be taken; try a few UDP ports.
	for range 10 {
		pc, err = net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("listening on UDP: %v", err)
		}
		if !withTCP {
			break
		}
		ln, err = net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			break
		}
		pc.Close()
		if !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatalf("listening on TCP: %v", err)
		}
	}
	if err != nil {
		t.Fatalf("no port free on both UDP and TCP: %v", err)
	}
	s.addr = pc.LocalAddr().String()
	s.serve(t, &dns.Server{PacketConn: pc, Handler: s})
	if ln != nil {
		s.serve(t, &dns.Server{Listener: ln, Handler: s})
	}
	return s
}

// serve runs srv until the test ends, waiting until it is serving.
func (s *testDNS) serve(t *testing.T, srv *dns.Server) {
	t.Helper()
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	stopped := make(chan error, 1)
	go func() { stopped <- srv.ActivateAndServe() }()
	select {
	case <-started:
	case err := <-stopped:
		t.Fatalf("DNS server did not start: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Shutdown(); err != nil {
			t.Errorf("shutting down DNS server: %v", err)
		}
		<-stopped
	})
}

// add adds resource records written in zone-file syntax, such as
// "app.test. 30 IN A 10.0.0.1".
func (s *testDNS) add(t *testing.T, records ...string) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range records {
		rr, err := dns.NewRR(r)
		if err != nil {
			t.Fatalf("bad test record %q: %v", r, err)
		}
		name := strings.ToLower(rr.Header().Name)
		s.names[name] = append(s.names[name], rr)
	}
}

// exists makes name exist without records, so queries answer NODATA.
func (s *testDNS) exists(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.names[name]; !ok {
		s.names[name] = nil
	}
}

// failWith makes every query for name answer with rcode.
func (s *testDNS) failWith(name string, rcode int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rcodes[name] = rcode
}

func (s *testDNS) setTruncateUDP(v bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.truncateUDP = v
}

// ServeDNS implements dns.Handler.
func (s *testDNS) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	m.RecursionAvailable = true
	udp := w.LocalAddr().Network() == "udp"
	if udp {
		s.udpQueries.Add(1)
	} else {
		s.tcpQueries.Add(1)
	}
	if len(r.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		_ = w.WriteMsg(m)
		return
	}
	q := r.Question[0]
	name := strings.ToLower(q.Name)

	s.mu.Lock()
	rcode, fail := s.rcodes[name]
	rrs, known := s.names[name]
	truncate := s.truncateUDP && udp
	s.mu.Unlock()

	switch {
	case fail:
		m.Rcode = rcode
	case !known:
		m.Rcode = dns.RcodeNameError
	case truncate:
		m.Truncated = true
	default:
		for _, rr := range rrs {
			if rr.Header().Rrtype == q.Qtype {
				m.Answer = append(m.Answer, rr)
			}
		}
	}
	_ = w.WriteMsg(m)
}

// silentDNS is a UDP server that reads queries and never answers. received
// gets a value for every query.
type silentDNS struct {
	addr     string
	received chan struct{}
}

func startSilentDNS(t *testing.T) *silentDNS {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening on UDP: %v", err)
	}
	s := &silentDNS{addr: pc.LocalAddr().String(), received: make(chan struct{}, 64)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
			select {
			case s.received <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		pc.Close()
		<-done
	})
	return s
}

// unreachableDNSAddr returns a loopback UDP address where nothing listens.
func unreachableDNSAddr(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening on UDP: %v", err)
	}
	addr := pc.LocalAddr().String()
	pc.Close()
	return addr
}

// checkLookupStopsOnCancel starts a Lookup of src against the silent
// server srv, cancels it once the query has arrived, and checks that the
// Lookup returns promptly with an error wrapping context.Canceled.
func checkLookupStopsOnCancel(t *testing.T, src Source, srv *silentDNS) {
	t.Helper()
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := src.Lookup(ctx)
		errc <- err
	}()
	select {
	case <-srv.received:
	case <-ctx.Done():
		t.Fatal("the server never received a query")
	}
	cancel()
	// Go's resolver alone would only notice the cancellation at its own
	// per-query timeout (5s by default); the bound below is generous for
	// a prompt return and shorter than that.
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Lookup after cancel: error %v, want one wrapping context.Canceled", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Lookup did not return within 3s of its context being cancelled")
	}
}
