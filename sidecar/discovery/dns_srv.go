package discovery

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// DNSSRV finds peers through SRV records, such as those Kubernetes publishes
// for a named port of a headless service
// ("_raft._tcp.app.ns.svc.cluster.local"). It is safe for concurrent use.
type DNSSRV struct {
	name string
	cfg  dnsConfig
}

var _ Source = (*DNSSRV)(nil)

// NewDNSSRV returns a source that resolves the SRV records of name.
//
// name is the full record name including service and protocol labels, as in
// "_raft._tcp.app.ns.svc.cluster.local"; it may be relative (resolved with
// the search domains) or fully qualified with a trailing dot. NewDNSSRV does
// not fail: an empty name or invalid option makes every Lookup return an
// error.
func NewDNSSRV(name string, opts ...DNSOption) *DNSSRV {
	return &DNSSRV{name: name, cfg: newDNSConfig(opts)}
}

// Name returns `dns-srv "name"`, followed by ` via host:port` when
// [WithResolverAddr] was given.
func (d *DNSSRV) Name() string {
	return fmt.Sprintf("dns-srv %q%s", d.name, d.cfg.via())
}

// Lookup resolves the SRV records and returns "target:port" for each, using
// the target names (such as the DNS names of pods) without the trailing dot,
// not their IP addresses: names are resolved again on every dial, so they
// stay right when a pod comes back with a new IP.
//
// Priorities and weights are ignored; every target is a candidate peer. A
// record whose target is "." (service explicitly unavailable) is skipped. A
// record with an invalid target or port 0 is reported in the error while the
// valid ones are still returned. A name that does not exist or has no SRV
// records is an empty answer with a nil error; a failing or unreachable DNS
// server, or an ended ctx, is an error.
func (d *DNSSRV) Lookup(ctx context.Context) ([]string, error) {
	if d.cfg.err != nil {
		return []string{}, d.cfg.err
	}
	if d.name == "" {
		return []string{}, fmt.Errorf("%w: empty SRV record name", ErrInvalidAddress)
	}
	_, srvs, err := d.cfg.resolver.LookupSRV(ctx, "", "", d.name)
	if err != nil {
		if len(srvs) == 0 {
			return []string{}, d.cfg.lookupError(ctx, "resolving SRV records", err)
		}
		// Go's resolver returns the well-formed records together with
		// an error about the others; keep both.
		err = d.cfg.wrap(ctx, "resolving SRV records", err)
	}
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	addrs := make([]string, 0, len(srvs))
	for _, srv := range srvs {
		target := strings.TrimSuffix(srv.Target, ".")
		if target == "" {
			continue
		}
		addr, aerr := ParseAddr(net.JoinHostPort(target, strconv.Itoa(int(srv.Port))))
		if aerr != nil {
			errs = append(errs, fmt.Errorf("SRV record %q: %w", srv.Target, aerr))
			continue
		}
		addrs = append(addrs, addr)
	}
	return sortedUnique(addrs), errors.Join(errs...)
}
