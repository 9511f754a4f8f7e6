// Package discovery tells a starting sidecar which peer addresses might
// exist, so that it can find a cluster to join or the peers to bootstrap
// with.
//
// A [Source] answers with advertised raft addresses ("host:port"). The
// sources are a static list ([Static]), the A/AAAA or SRV records of a
// headless service ([DNSA], [DNSSRV]) and a watched peers file ([File]).
// [Multi] queries several sources at once and merges their answers.
//
// Discovery only feeds bootstrap and join attempts. Its answers are momentary
// observations: an empty answer or a failing source is normal while pods are
// starting or DNS records are not yet published, and it never means "no peers
// exist". Nothing in this package, and nothing built on it, may remove a raft
// member or a unit because a peer is missing from an answer; identity is
// never inferred from what discovery saw.
//
// DNS sources always use Go's built-in resolver with the system
// configuration (resolv.conf: servers, search domains, ndots, timeouts), or
// with another server given by [WithResolverAddr], so that a lookup stops as
// soon as its context ends.
//
// Lookups may return addresses together with an error: the addresses are
// what was found, the error describes what could not be read (a malformed
// line, a failing DNS server). Callers should use the addresses and log the
// error.
package discovery
