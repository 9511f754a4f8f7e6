package discovery

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// ErrInvalidAddress is wrapped by every error about a malformed peer
// address, so callers can tell a configuration mistake from a lookup failure
// with errors.Is.
var ErrInvalidAddress = errors.New("invalid peer address")

// addrExample is shown in error messages to say what a valid address is.
const addrExample = "peer-0.app.ns.svc:7000, 10.0.0.5:7000 or [fd00::5]:7000"

// ParseAddr checks that s is a peer address of the form host:port and
// returns it in canonical form.
//
// The port must be a decimal number from 1 to 65535. The host is either an
// IP address (an IPv6 address must be in brackets, as in "[fd00::5]:7000")
// or a DNS name made of labels of letters, digits, '-' and '_', optionally
// ending with a dot. Surrounding white space is ignored.
//
// The canonical form lowercases names, writes IP addresses in their shortest
// form (an IPv4-mapped IPv6 address becomes IPv4) and drops leading zeros of
// the port, so that equal addresses compare equal. Errors wrap
// [ErrInvalidAddress].
func ParseAddr(s string) (string, error) {
	addr, reason := parseAddr(strings.TrimSpace(s))
	if reason != "" {
		return "", fmt.Errorf("%w %q: %s", ErrInvalidAddress, s, reason)
	}
	return addr, nil
}

// parseAddr returns the canonical form of s, or a reason why s is invalid.
func parseAddr(s string) (addr, reason string) {
	if s == "" {
		return "", "empty; want host:port such as " + addrExample
	}
	if strings.Contains(s, "://") {
		return "", "looks like a URL; want host:port without a scheme, such as " + addrExample
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		var aerr *net.AddrError
		switch {
		case looksLikeBareIPv6(s):
			return "", "an IPv6 address must be in brackets followed by :port, as in [fd00::5]:7000"
		case errors.As(err, &aerr) && aerr.Err == "missing port in address":
			return "", "missing port; want host:port such as " + addrExample
		default:
			return "", "not host:port (" + err.Error() + "); want host:port such as " + addrExample
		}
	}
	p, reason := parsePort(port)
	if reason != "" {
		return "", reason
	}
	if host == "" {
		return "", "missing host; want host:port such as " + addrExample
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return net.JoinHostPort(ip.Unmap().String(), strconv.Itoa(p)), ""
	}
	if strings.HasPrefix(s, "[") {
		return "", fmt.Sprintf("%q in brackets is not an IP address", host)
	}
	name, reason := checkHostname(host)
	if reason != "" {
		return "", reason
	}
	return net.JoinHostPort(name, strconv.Itoa(p)), ""
}

// looksLikeBareIPv6 reports whether s is an IPv6 address, with or without a
// port, that lacks the brackets.
func looksLikeBareIPv6(s string) bool {
	if strings.HasPrefix(s, "[") || strings.Count(s, ":") < 2 {
		return false
	}
	if _, err := netip.ParseAddr(s); err == nil {
		return true
	}
	_, err := netip.ParseAddr(s[:strings.LastIndexByte(s, ':')])
	return err == nil
}

// parsePort parses a decimal port from 1 to 65535.
func parsePort(s string) (int, string) {
	if s == "" {
		return 0, "missing port; want host:port such as " + addrExample
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, fmt.Sprintf("port %q is not a decimal number", s)
		}
	}
	p, err := strconv.Atoi(s)
	if err != nil || p < 1 || p > 65535 {
		return 0, fmt.Sprintf("port %s out of range 1-65535", s)
	}
	return p, ""
}

// checkHostname validates a DNS name and returns it lowercased.
func checkHostname(host string) (string, string) {
	name := strings.TrimSuffix(host, ".")
	if name == "" {
		return "", fmt.Sprintf("host %q is not a DNS name", host)
	}
	if len(name) > 253 {
		return "", fmt.Sprintf("host name is %d characters long; at most 253 are allowed", len(name))
	}
	labels := strings.Split(name, ".")
	for _, label := range labels {
		switch {
		case label == "":
			return "", fmt.Sprintf("host %q has an empty label", host)
		case len(label) > 63:
			return "", fmt.Sprintf("host %q has a label longer than 63 characters", host)
		case label[0] == '-' || label[len(label)-1] == '-':
			return "", fmt.Sprintf("host %q has a label that starts or ends with '-'", host)
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", fmt.Sprintf("host %q contains %q; names may only contain letters, digits, '-', '_' and '.'", host, c)
			}
		}
	}
	if allDigits(labels[len(labels)-1]) {
		return "", fmt.Sprintf("host %q is neither a valid IP address nor a DNS name (its last label is numeric)", host)
	}
	return strings.ToLower(host), ""
}

func allDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// sortedUnique sorts addrs and removes duplicates in place. It never returns
// nil, so that "answered with nothing" is an empty, non-nil slice.
func sortedUnique(addrs []string) []string {
	if addrs == nil {
		return []string{}
	}
	slices.Sort(addrs)
	return slices.Compact(addrs)
}
