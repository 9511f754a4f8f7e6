package transport

import (
	"fmt"
	"net"
	"strconv"
)

// advertiseAddr validates advertise and fills in defaults from bound.
func advertiseAddr(advertise string, bound net.Addr) (string, error) {
	tcp, _ := bound.(*net.TCPAddr)
	if advertise == "" {
		if tcp == nil || tcp.IP.IsUnspecified() {
			return "", fmt.Errorf("advertise address needed: peers cannot dial the bound address %s", bound)
		}
		return tcp.String(), nil
	}
	host, port, err := net.SplitHostPort(advertise)
	if err != nil {
		return "", fmt.Errorf("advertise address %q is not host:port: %w", advertise, err)
	}
	if host == "" {
		return "", fmt.Errorf("advertise address %q has no host", advertise)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return "", fmt.Errorf("advertise address %q is unspecified; advertise an address or name peers can dial", advertise)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return "", fmt.Errorf("advertise address %q: port %q is not a number in 0..65535", advertise, port)
	}
	if n == 0 {
		if tcp == nil {
			return "", fmt.Errorf("advertise address %q: port 0 but the bound port is unknown", advertise)
		}
		port = strconv.Itoa(tcp.Port)
	}
	return net.JoinHostPort(host, port), nil
}

// advertisedAddr is a net.Addr for an advertised "host:port", which may hold
// a DNS name.
type advertisedAddr string

func (a advertisedAddr) Network() string { return "tcp" }
func (a advertisedAddr) String() string  { return string(a) }
