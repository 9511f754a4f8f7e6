package discovery

import (
	"errors"
	"strings"
	"testing"
)

func TestParseAddrAcceptsNamesAndIPsInCanonicalForm(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"peer-0.app.ns.svc:7000":              "peer-0.app.ns.svc:7000",
		"Peer-0.App.NS.svc.:7000":             "peer-0.app.ns.svc.:7000",
		"localhost:1":                         "localhost:1",
		"_raft.app:65535":                     "_raft.app:65535",
		"  10.0.0.5:7000\t":                   "10.0.0.5:7000",
		"10.0.0.5:07000":                      "10.0.0.5:7000",
		"[fd00::5]:7000":                      "[fd00::5]:7000",
		"[FD00:0:0:0:0:0:0:5]:7000":           "[fd00::5]:7000",
		"[::ffff:10.0.0.5]:7000":              "10.0.0.5:7000",
		"[10.0.0.5]:7000":                     "10.0.0.5:7000",
		"[fe80::1%eth0]:7000":                 "[fe80::1%eth0]:7000",
		"a.b-c.d0:80":                         "a.b-c.d0:80",
		"1a.example:80":                       "1a.example:80",
		"app-0.app.ns.svc.cluster.local:7000": "app-0.app.ns.svc.cluster.local:7000",
	} {
		got, err := ParseAddr(in)
		if err != nil {
			t.Errorf("ParseAddr(%q): unexpected error: %v", in, err)
			continue
		}
		if got != want {
			t.Errorf("ParseAddr(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseAddrRejectsMalformedAddressesWithReason(t *testing.T) {
	t.Parallel()
	for in, reason := range map[string]string{
		"":                                    "empty",
		"   ":                                 "empty",
		"peer-0":                              "missing port",
		"peer-0:":                             "missing port",
		":7000":                               "missing host",
		"peer-0:0":                            "out of range 1-65535",
		"peer-0:65536":                        "out of range 1-65535",
		"peer-0:99999999999999":               "out of range 1-65535",
		"peer-0:-1":                           "not a decimal number",
		"peer-0:+1":                           "not a decimal number",
		"peer-0:http":                         "not a decimal number",
		"fd00::5:7000":                        "must be in brackets",
		"::1":                                 "must be in brackets",
		"tcp://peer-0:7000":                   "looks like a URL",
		"[peer-0]:7000":                       "not an IP address",
		"peer 0:7000":                         "may only contain",
		"peer/0:7000":                         "may only contain",
		"peer..app:7000":                      "empty label",
		".peer:7000":                          "empty label",
		"-peer.app:7000":                      "starts or ends with '-'",
		"peer-.app:7000":                      "starts or ends with '-'",
		"10.0.0.256:7000":                     "neither a valid IP address nor a DNS name",
		"10.0.0:7000":                         "neither a valid IP address nor a DNS name",
		strings.Repeat("a", 64) + ".app:7000": "longer than 63",
		strings.Repeat(strings.Repeat("a", 60)+".", 5) + "x:1": "at most 253",
	} {
		got, err := ParseAddr(in)
		if err == nil {
			t.Errorf("ParseAddr(%q) = %q, want an error mentioning %q", in, got, reason)
			continue
		}
		if !errors.Is(err, ErrInvalidAddress) {
			t.Errorf("ParseAddr(%q): error %v does not wrap ErrInvalidAddress", in, err)
		}
		if !strings.Contains(err.Error(), reason) {
			t.Errorf("ParseAddr(%q): error %q does not mention %q", in, err, reason)
		}
	}
}
