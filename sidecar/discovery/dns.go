package discovery

import (
	"context"
	"errors"
	"fmt"
	"net"
)

// DNSOption configures [NewDNSA] and [NewDNSSRV].
type DNSOption func(*dnsConfig)

// dnsConfig is what DNS sources share: which resolver to ask.
type dnsConfig struct {
	// resolverAddr is the DNS server given with WithResolverAddr, or "".
	resolverAddr string
	// err reports an invalid option; Lookup returns it.
	err error
	// resolver answers the queries: Go's own resolver, with the server
	// replaced when resolverAddr is set.
	resolver *net.Resolver
}

// WithResolverAddr makes a DNS source query the DNS server at addr
// ("host:port", such as "10.96.0.10:53" or "[fd00::a]:53") instead of the
// servers of the system resolver configuration. Queries go over UDP and are
// retried over TCP when the answer is truncated, exactly as without this
// option: Go's own resolver is used either way, only the server differs.
//
// Everything else of the system configuration still applies: names that do
// not end with a dot are tried with the search domains first, as in a pod,
// and attempts and timeouts are taken from it. Give fully qualified names
// ending with a dot to query exactly one name.
//
// An invalid addr does not fail construction; every Lookup of the source
// then returns an error wrapping [ErrInvalidAddress]. When given more than
// once, the last one counts.
func WithResolverAddr(addr string) DNSOption {
	return func(c *dnsConfig) {
		a, err := ParseAddr(addr)
		if err != nil {
			c.resolverAddr, c.err = "", fmt.Errorf("DNS resolver address: %w", err)
			return
		}
		c.resolverAddr, c.err = a, nil
	}
}

func newDNSConfig(opts []DNSOption) dnsConfig {
	var c dnsConfig
	for _, opt := range opts {
		opt(&c)
	}
	server := c.resolverAddr
	c.resolver = &net.Resolver{
		// Go's own resolver (reading the system configuration) is always
		// used, because only it takes a Dial function, and only through
		// Dial can a query stop when its context ends: the resolver
		// itself only honours deadlines, not cancellation.
		PreferGo: true,
		// Dial is called once per query with "udp" or, when the UDP
		// answer was truncated, "tcp".
		Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
			if server != "" {
				address = server
			}
			return dialCancellable(ctx, network, address)
		},
	}
	return c
}

// via describes the resolver for source names: "" for the system resolver.
func (c *dnsConfig) via() string {
	if c.resolverAddr == "" {
		return ""
	}
	return " via " + c.resolverAddr
}

// lookupError turns a resolver error into the answer of a DNS source.
//
// A name that does not exist (NXDOMAIN) or has no records of the asked type
// is what a headless service without ready pods gives: it is an empty
// answer, not an error. Everything else (SERVFAIL, timeouts, unreachable
// servers, an ended ctx) is an error. The error wraps ctx.Err() when ctx has
// ended, whether or not the resolver's error already does.
func (c *dnsConfig) lookupError(ctx context.Context, what string, err error) error {
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && dnsErr.IsNotFound && ctx.Err() == nil {
		return nil
	}
	return c.wrap(ctx, what, err)
}

// wrap adds context to a resolver error. Go's resolver names the server of
// the system configuration in its errors even when Dial went elsewhere;
// wrap names the server that was really asked.
func (c *dnsConfig) wrap(ctx context.Context, what string, err error) error {
	if de, ok := err.(*net.DNSError); ok && c.resolverAddr != "" {
		fixed := *de
		fixed.Server = c.resolverAddr
		err = &fixed
	}
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		return fmt.Errorf("%s: %w: %w", what, ctxErr, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}
