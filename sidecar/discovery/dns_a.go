package discovery

import (
	"context"
	"fmt"
	"net"
	"strconv"
)

// DNSA finds peers through the A and AAAA records of a name, typically the
// headless service of the application, whose records are the IPs of its
// ready pods. Each IP is paired with a fixed port. It is safe for concurrent
// use.
type DNSA struct {
	name string
	port int
	cfg  dnsConfig
}

var _ Source = (*DNSA)(nil)

// NewDNSA returns a source that resolves the A and AAAA records of name and
// pairs each IP address with port.
//
// name may be relative (resolved with the search domains, as in a pod) or
// fully qualified with a trailing dot. NewDNSA does not fail: an invalid port
// (outside 1-65535) or option makes every Lookup return an error wrapping
// [ErrInvalidAddress].
func NewDNSA(name string, port int, opts ...DNSOption) *DNSA {
	return &DNSA{name: name, port: port, cfg: newDNSConfig(opts)}
}

// Name returns `dns-a "name" port N`, followed by ` via host:port` when
// [WithResolverAddr] was given.
func (d *DNSA) Name() string {
	return fmt.Sprintf("dns-a %q port %d%s", d.name, d.port, d.cfg.via())
}

// Lookup resolves the name and returns "ip:port" for every address found,
// with IPv6 addresses in brackets. A name that does not exist or has no
// address records is an empty answer with a nil error; a failing or
// unreachable DNS server, or an ended ctx, is an error.
func (d *DNSA) Lookup(ctx context.Context) ([]string, error) {
	if d.cfg.err != nil {
		return []string{}, d.cfg.err
	}
	if d.port < 1 || d.port > 65535 {
		return []string{}, fmt.Errorf("%w: port %d of DNS name %q out of range 1-65535", ErrInvalidAddress, d.port, d.name)
	}
	if d.name == "" {
		return []string{}, fmt.Errorf("%w: empty DNS name", ErrInvalidAddress)
	}
	ips, err := d.cfg.resolver.LookupNetIP(ctx, "ip", d.name)
	if err != nil {
		return []string{}, d.cfg.lookupError(ctx, "resolving A/AAAA records", err)
	}
	port := strconv.Itoa(d.port)
	addrs := make([]string, 0, len(ips))
	for _, ip := range ips {
		addrs = append(addrs, net.JoinHostPort(ip.Unmap().WithZone("").String(), port))
	}
	return sortedUnique(addrs), nil
}
