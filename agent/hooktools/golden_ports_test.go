package hooktools

import "testing"

// openedPortsFixture is §17's: ("", 80/tcp), ("foo", 10-20/tcp),
// ("bar", 63/udp), ("", 53-55/udp) opened in that order.
func openedPortsFixture() *fakeContext {
	f := newFakeContext(-1, "", "")
	for _, op := range []struct {
		endpoint string
		p        PortRange
	}{
		{"", PortRange{80, 80, "tcp"}},
		{"foo", PortRange{10, 20, "tcp"}},
		{"bar", PortRange{63, 63, "udp"}},
		{"", PortRange{53, 55, "udp"}},
	} {
		_ = f.OpenPort(op.endpoint, op.p)
	}
	return f
}

// §17 opened-ports.
func TestGoldenOpenedPorts(t *testing.T) {
	op := func(id, tag string, ctx *fakeContext, argv []string, exit int, stdout, stderr string) gcase {
		return gcase{id: id, tag: tag, tool: "opened-ports", ctx: ctx, argv: argv, exit: exit, stdout: stdout, stderr: stderr}
	}
	fx := openedPortsFixture
	runGolden(t, []gcase{
		op("OP01", "T", fx(), args(), 0, "10-20/tcp\n80/tcp\n53-55/udp\n63/udp\n", ""),
		op("OP02", "T", fx(), args("--format", "smart"), 0, "10-20/tcp\n80/tcp\n53-55/udp\n63/udp\n", ""),
		op("OP03", "T", fx(), args("--format", "json"), 0, "[\"10-20/tcp\",\"80/tcp\",\"53-55/udp\",\"63/udp\"]\n", ""),
		op("OP04", "T", fx(), args("--format", "yaml"), 0, "- 10-20/tcp\n- 80/tcp\n- 53-55/udp\n- 63/udp\n", ""),
		op("OP05", "T", fx(), args("--endpoints"), 0, "10-20/tcp (foo)\n80/tcp (*)\n53-55/udp (*)\n63/udp (bar)\n", ""),
		op("OP06", "T", fx(), args("--endpoints", "--format", "smart"), 0, "10-20/tcp (foo)\n80/tcp (*)\n53-55/udp (*)\n63/udp (bar)\n", ""),
		op("OP07", "T", fx(), args("--endpoints", "--format", "json"), 0, "[\"10-20/tcp (foo)\",\"80/tcp (*)\",\"53-55/udp (*)\",\"63/udp (bar)\"]\n", ""),
		op("OP08", "T", fx(), args("--endpoints", "--format", "yaml"), 0, "- 10-20/tcp (foo)\n- 80/tcp (*)\n- 53-55/udp (*)\n- 63/udp (bar)\n", ""),
		op("OP09", "T~", nil, args("foo"), 2, "", "ERROR unrecognized args: [\"foo\"]\n"),
		op("OP10", "D", nil, args(), 0, "", ""),
		op("OP11", "D", nil, args("--format", "json"), 0, "[]\n", ""),
	})
}

// §18.1 TestOpenClose: steps on one context; the open ports after each.
func TestGoldenOpenClose(t *testing.T) {
	f := newFakeContext(-1, "", "")
	for _, step := range []struct {
		id, tool string
		argv     []string
		stderr   string
		ports    string
	}{
		{"PT01", "open-port", args("80"), "", `"": [80/tcp]`},
		{"PT02", "open-port", args("99/tcp"), "", `"": [80/tcp 99/tcp]`},
		{"PT03", "open-port", args("100-200"), "", `"": [80/tcp 99/tcp 100-200/tcp]`},
		{"PT04", "open-port", args("443/udp"), "", `"": [80/tcp 99/tcp 100-200/tcp 443/udp]`},
		{"PT05", "close-port", args("80/TCP"), "", `"": [99/tcp 100-200/tcp 443/udp]`},
		{"PT06", "close-port", args("100-200/tcP"), "", `"": [99/tcp 443/udp]`},
		{"PT07", "close-port", args("443"), "", `"": [99/tcp 443/udp]`},
		{"PT08", "close-port", args("443/udp"), "", `"": [99/tcp]`},
		{"PT09", "open-port", args("123/udp"), "", `"": [99/tcp 123/udp]`},
		{"PT10", "close-port", args("9999/UDP"), "", `"": [99/tcp 123/udp]`},
		{"PT11", "open-port", args("icmp"), "", `"": [icmp 99/tcp 123/udp]`},
		{"PT12", "open-port", args("--endpoints", "foo,bar", "1337/tcp"), "", `"": [icmp 99/tcp 123/udp], "bar": [1337/tcp], "foo": [1337/tcp]`},
		{"PT13", "close-port", args("--endpoints", "foo", "1337/tcp"), "", `"": [icmp 99/tcp 123/udp], "bar": [1337/tcp], "foo": []`},
		{"PTD1", "open-port", args("--format", "foo", "80"), "--format flag deprecated for command \"open-port\"", `"": [icmp 80/tcp 99/tcp 123/udp], "bar": [1337/tcp], "foo": []`},
		{"PTD2", "close-port", args("--format", "foo", "80/TCP"), "--format flag deprecated for command \"close-port\"", `"": [icmp 99/tcp 123/udp], "bar": [1337/tcp], "foo": []`},
	} {
		resp, err := Run(f, Request{Command: step.tool, Args: step.argv, Dir: "/"})
		if err != nil || resp.Code != 0 || len(resp.Stdout) != 0 || string(resp.Stderr) != step.stderr {
			t.Fatalf("%s: %d %q %q %v", step.id, resp.Code, resp.Stdout, resp.Stderr, err)
		}
		if got := f.portsString(); got != step.ports {
			t.Fatalf("%s: ports %s, want %s", step.id, got, step.ports)
		}
	}
}

// §18.2 argument errors (listed without ids; PEnn number them
// in the listed order). Every error exits 2 and changes nothing.
func TestGoldenPortErrors(t *testing.T) {
	noChange := func(t *testing.T, f *fakeContext) {
		if s := f.portsString(); s != "" {
			t.Errorf("ports changed: %s", s)
		}
	}
	pe := func(id string, argv []string, msg string) gcase {
		return gcase{id: id, tag: "D", tool: "open-port", argv: argv, exit: 2, stderr: "ERROR " + msg + "\n", check: noChange}
	}
	runGolden(t, []gcase{
		pe("PE01", args(), "no port or range specified"),
		pe("PE02", args("65536"), "port range bounds must be between 0 and 65535, got 65536-65536"),
		pe("PE03", args("99999/UDP"), "port range bounds must be between 0 and 65535, got 99999-99999"),
		pe("PE04", args("two"), `invalid port "two": strconv.Atoi: parsing "two": invalid syntax`),
		pe("PE05", args("blah/blah/blah"), `invalid port "blah": strconv.Atoi: parsing "blah": invalid syntax`),
		pe("PE06", args("80/http"), `invalid protocol "http", expected "tcp", "udp", or "icmp"`),
		pe("PE07", args("9999/foo"), `invalid protocol "foo", expected "tcp", "udp", or "icmp"`),
		pe("PE08", args("80-90/http"), `invalid protocol "http", expected "tcp", "udp", or "icmp"`),
		pe("PE09", args("1-0"), "invalid port range 1-0/tcp"),
		pe("PE10", args("20-10/tcp"), "invalid port range 20-10/tcp"),
		pe("PE11", args("80/icmp"), `protocol "icmp" doesn't support any ports; got "80"`),
		pe("PE12", args("10-55-100"), `invalid port range "10-55-100"`),
		pe("PE13", args("spam-100"), `invalid port "spam": strconv.Atoi: parsing "spam": invalid syntax`),
		pe("PE14", args("100-spam"), `invalid port "spam": strconv.Atoi: parsing "spam": invalid syntax`),
		pe("PE15", args("123", "haha"), `unrecognized args: ["haha"]`),
		pe("PE16", args("-42"), "option provided but not defined: -4"),
		pe("PE17", args("--", "-42"), `invalid port "": strconv.Atoi: parsing "": invalid syntax`),
		pe("PE18", args("--endpoints"), "option needs an argument: --endpoints"),
	})
	// Accepted forms: exit 0, no output.
	for _, tc := range []struct{ arg, ports string }{
		{"0", `"": [0/tcp]`},
		{"65535", `"": [65535/tcp]`},
		{"icmp", `"": [icmp]`},
		{"icmp/tcp", `"": [icmp]`},
		{"80/TCP", `"": [80/tcp]`},
		{"8000-8099/udp", `"": [8000-8099/udp]`},
	} {
		f := newFakeContext(-1, "", "")
		resp, err := Run(f, Request{Command: "open-port", Args: args(tc.arg), Dir: "/"})
		if err != nil || resp.Code != 0 || len(resp.Stdout)+len(resp.Stderr) != 0 {
			t.Errorf("PE-ok %s: %d %q %q %v", tc.arg, resp.Code, resp.Stdout, resp.Stderr, err)
		}
		if got := f.portsString(); got != tc.ports {
			t.Errorf("PE-ok %s: ports %s, want %s", tc.arg, got, tc.ports)
		}
	}
	// The same rules hold for close-port.
	runGolden(t, []gcase{{id: "PE-close", tag: "D", tool: "close-port", argv: args("80/http"), exit: 2,
		stderr: "ERROR invalid protocol \"http\", expected \"tcp\", \"udp\", or \"icmp\"\n"}})
}
