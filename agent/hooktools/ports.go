package hooktools

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// ICMP ranges have no ports; like Juju, they are stored with From and To
// set to icmpPort.
const icmpPort = -1

// parsePortRange parses "<port>[/<protocol>]", "<from>-<to>[/<protocol>]"
// or "icmp" with Juju's rules and messages; the protocol defaults to tcp.
func parsePortRange(s string) (PortRange, error) {
	protocol := "tcp"
	ports, proto, hasProto := strings.Cut(s, "/")
	if hasProto {
		protocol = proto
	}
	var p PortRange
	switch parts := strings.Split(ports, "-"); {
	case len(parts) > 2:
		return p, fmt.Errorf("invalid port range %q", ports)
	case len(parts) == 1 && parts[0] == "icmp":
		p.From, p.To = icmpPort, icmpPort
	case len(parts) == 1:
		port, err := strconv.Atoi(parts[0])
		if err != nil {
			return p, fmt.Errorf("invalid port %q: %w", ports, err)
		}
		p.From, p.To = port, port
	default:
		var err error
		if p.From, err = strconv.Atoi(parts[0]); err != nil {
			return p, fmt.Errorf("invalid port %q: %w", parts[0], err)
		}
		if p.To, err = strconv.Atoi(parts[1]); err != nil {
			return p, fmt.Errorf("invalid port %q: %w", parts[1], err)
		}
	}
	if p.From == icmpPort {
		protocol = "icmp"
	}
	p.Protocol = protocol
	return p, p.validate()
}

// validate checks a range as Juju does.
func (p PortRange) validate() error {
	proto := strings.ToLower(p.Protocol)
	switch {
	case proto != "tcp" && proto != "udp" && proto != "icmp":
		return fmt.Errorf(`invalid protocol %q, expected "tcp", "udp", or "icmp"`, proto)
	case proto == "icmp" && (p.From != icmpPort || p.To != icmpPort):
		return fmt.Errorf(`protocol "icmp" doesn't support any ports; got "%v"`, p.From)
	case proto == "icmp":
		return nil
	case p.From > p.To:
		return fmt.Errorf("invalid port range %s", p)
	case p.From < 0 || p.From > 65535 || p.To < 0 || p.To > 65535:
		return fmt.Errorf("port range bounds must be between 0 and 65535, got %d-%d", p.From, p.To)
	}
	return nil
}

// String formats a range as Juju does: "80/tcp", "8000-8099/udp", "icmp".
func (p PortRange) String() string {
	protocol := strings.ToLower(p.Protocol)
	switch {
	case protocol == "icmp":
		return protocol
	case p.From == p.To:
		return fmt.Sprintf("%d/%s", p.From, protocol)
	}
	return fmt.Sprintf("%d-%d/%s", p.From, p.To, protocol)
}

// sortPortRanges sorts by protocol, then first port, then last port.
func sortPortRanges(ranges []PortRange) {
	sort.Slice(ranges, func(i, j int) bool {
		a, b := ranges[i], ranges[j]
		if a.Protocol != b.Protocol {
			return a.Protocol < b.Protocol
		}
		if a.From != b.From {
			return a.From < b.From
		}
		return a.To < b.To
	})
}
