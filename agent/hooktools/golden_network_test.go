package hooktools

import (
	"errors"
	"testing"
	"time"
)

// networkFixture is §15's: the bindings known-relation, known-extra,
// valid-no-config, known-unbound and ingress-egress; no hook relation.
func networkFixture() *fakeContext {
	f := newFakeContext(-1, "", "")
	iface := func(mac, name string, addrs ...string) NetworkInterface {
		ni := NetworkInterface{MACAddress: mac, InterfaceName: name}
		for i := 0; i+1 < len(addrs); i += 2 {
			ni.Addresses = append(ni.Addresses, InterfaceAddress{Address: addrs[i], CIDR: addrs[i+1]})
		}
		return ni
	}
	f.network["known-relation"] = NetworkInfo{Interfaces: []NetworkInterface{
		iface("00:11:22:33:44:00", "eth0", "10.10.0.23", "10.10.0.0/24", "192.168.1.111", "192.168.1.0/24"),
		iface("00:11:22:33:44:11", "eth1", "10.10.1.23", "10.10.1.0/24", "192.168.2.111", "192.168.2.0/24"),
	}}
	f.network["known-extra"] = NetworkInfo{Interfaces: []NetworkInterface{
		iface("00:11:22:33:44:22", "eth2", "10.20.1.42", "10.20.1.42/24", "fc00::1", "fc00::/64"),
	}}
	f.network["valid-no-config"] = NetworkInfo{}
	unbound := iface("00:11:22:33:44:33", "eth3", "10.33.1.8", "10.33.1.8/24")
	f.network["known-unbound"] = NetworkInfo{Interfaces: []NetworkInterface{unbound}}
	f.network["ingress-egress"] = NetworkInfo{
		Interfaces:       []NetworkInterface{unbound},
		IngressAddresses: []string{"100.1.2.3", "100.4.3.2"},
		EgressSubnets:    []string{"192.168.1.0/8", "10.0.0.0/8"},
	}
	return f
}

// §15 network-get.
func TestGoldenNetworkGet(t *testing.T) {
	ng := func(id, tag string, argv []string, exit int, stdout, stderr string) gcase {
		return gcase{id: id, tag: tag, tool: "network-get", ctx: networkFixture(), argv: argv, exit: exit, stdout: stdout, stderr: stderr}
	}
	runGolden(t, []gcase{
		ng("NG01", "T", args(), 2, "", "ERROR no arguments specified\n"),
		ng("NG02", "T", args(""), 2, "", "ERROR no binding name specified\n"),
		ng("NG03", "T", args("unknown"), 1, "", "ERROR no network config found for binding \"unknown\"\n"),
		ng("NG04", "T", args("unknown", "--ingress-address"), 1, "", "ERROR no network config found for binding \"unknown\"\n"),
		ng("NG05", "T", args("valid-no-config", "--ingress-address"), 1, "", "ERROR no network config found for binding \"valid-no-config\"\n"),
		ng("NG06", "T", args("valid-no-config"), 1, "", "ERROR no network config found for binding \"valid-no-config\"\n"),
		ng("NG07", "T", args("known-extra", "--ingress-address"), 0, "10.20.1.42\n", ""),
		ng("NG08", "T", args("known-extra", "--ingress-address", "--bind-address"), 0, "bind-address: 10.20.1.42\ningress-address: 10.20.1.42\n", ""),
		ng("NG09", "T", args("known-extra"), 0, "bind-addresses:\n- mac-address: \"00:11:22:33:44:22\"\n  interface-name: eth2\n  addresses:\n  - hostname: \"\"\n    value: 10.20.1.42\n    cidr: 10.20.1.42/24\n    address: 10.20.1.42\n  - hostname: \"\"\n    value: fc00::1\n    cidr: fc00::/64\n    address: fc00::1\n  macaddress: \"00:11:22:33:44:22\"\n  interfacename: eth2\n", ""),
		ng("NG10", "T", args("known-relation", "--ingress-address"), 0, "10.10.0.23\n", ""),
		ng("NG11", "T", args("known-relation"), 0, "bind-addresses:\n- mac-address: \"00:11:22:33:44:00\"\n  interface-name: eth0\n  addresses:\n  - hostname: \"\"\n    value: 10.10.0.23\n    cidr: 10.10.0.0/24\n    address: 10.10.0.23\n  - hostname: \"\"\n    value: 192.168.1.111\n    cidr: 192.168.1.0/24\n    address: 192.168.1.111\n  macaddress: \"00:11:22:33:44:00\"\n  interfacename: eth0\n- mac-address: \"00:11:22:33:44:11\"\n  interface-name: eth1\n  addresses:\n  - hostname: \"\"\n    value: 10.10.1.23\n    cidr: 10.10.1.0/24\n    address: 10.10.1.23\n  - hostname: \"\"\n    value: 192.168.2.111\n    cidr: 192.168.2.0/24\n    address: 192.168.2.111\n  macaddress: \"00:11:22:33:44:11\"\n  interfacename: eth1\n", ""),
		ng("NG12", "T", args("known-unbound", "--ingress-address"), 0, "10.33.1.8\n", ""),
		ng("NG13", "T", args("known-unbound"), 0, "bind-addresses:\n- mac-address: \"00:11:22:33:44:33\"\n  interface-name: eth3\n  addresses:\n  - hostname: \"\"\n    value: 10.33.1.8\n    cidr: 10.33.1.8/24\n    address: 10.33.1.8\n  macaddress: \"00:11:22:33:44:33\"\n  interfacename: eth3\n", ""),
		ng("NG14", "T", args("ingress-egress", "--ingress-address", "--bind-address", "--egress-subnets"), 0, "bind-address: 10.33.1.8\negress-subnets:\n- 192.168.1.0/8\n- 10.0.0.0/8\ningress-address: 100.1.2.3\n", ""),
		ng("NG15", "T", args("ingress-egress"), 0, "bind-addresses:\n- mac-address: \"00:11:22:33:44:33\"\n  interface-name: eth3\n  addresses:\n  - hostname: \"\"\n    value: 10.33.1.8\n    cidr: 10.33.1.8/24\n    address: 10.33.1.8\n  macaddress: \"00:11:22:33:44:33\"\n  interfacename: eth3\negress-subnets:\n- 192.168.1.0/8\n- 10.0.0.0/8\ningress-addresses:\n- 100.1.2.3\n- 100.4.3.2\n", ""),
		ng("NG16", "D", args("known-extra", "--format", "json"), 0, "{\"bind-addresses\":[{\"mac-address\":\"00:11:22:33:44:22\",\"interface-name\":\"eth2\",\"addresses\":[{\"hostname\":\"\",\"value\":\"10.20.1.42\",\"cidr\":\"10.20.1.42/24\"},{\"hostname\":\"\",\"value\":\"fc00::1\",\"cidr\":\"fc00::/64\"}]}]}\n", ""),
		ng("NG17", "D", args("ingress-egress", "--format", "json"), 0, "{\"bind-addresses\":[{\"mac-address\":\"00:11:22:33:44:33\",\"interface-name\":\"eth3\",\"addresses\":[{\"hostname\":\"\",\"value\":\"10.33.1.8\",\"cidr\":\"10.33.1.8/24\"}]}],\"egress-subnets\":[\"192.168.1.0/8\",\"10.0.0.0/8\"],\"ingress-addresses\":[\"100.1.2.3\",\"100.4.3.2\"]}\n", ""),
		ng("NG18", "D", args("ingress-egress", "--egress-subnets"), 0, "192.168.1.0/8\n10.0.0.0/8\n", ""),
		ng("NG19", "D", args("known-extra", "--primary-address"), 0, "10.20.1.42\n", ""),
		ng("NG20", "D", args("known-extra", "--primary-address", "--bind-address"), 1, "", "ERROR --primary-address must be the only flag specified\n"),
	})
}

// §16 application-version-set.
func TestGoldenApplicationVersionSet(t *testing.T) {
	version := func(want string) func(*testing.T, *fakeContext) {
		return func(t *testing.T, f *fakeContext) {
			if f.version != want {
				t.Errorf("version %q, want %q", f.version, want)
			}
		}
	}
	failing := newFakeContext(-1, "", "")
	failing.versionErr = errors.New("uh oh spaghettio")
	runGolden(t, []gcase{
		{id: "AV01", tag: "T", tool: "application-version-set", argv: args(), exit: 2, stderr: "ERROR no version specified\n", check: version("")},
		{id: "AV02", tag: "T", tool: "application-version-set", argv: args("dia de los muertos"), check: version("dia de los muertos")},
		{id: "AV03", tag: "T", tool: "application-version-set", ctx: failing, argv: args("cannae"), exit: 1, stderr: "ERROR uh oh spaghettio\n"},
		{id: "AV04", tag: "D", tool: "application-version-set", argv: args("1.0", "extra"), exit: 2, stderr: "ERROR unrecognized args: [\"extra\"]\n", check: version("")},
	})
}

// goalStateFixture is §2's goal state: unit mysql/0, relations db
// {mysql/0} and server {wordpress/0}, all active since 2200-11-05 15:29:12
// UTC.
func goalStateFixture() *fakeContext {
	f := newFakeContext(-1, "", "")
	since := time.Date(2200, 11, 5, 15, 29, 12, 0, time.UTC)
	active := GoalStatus{Status: "active", Since: &since}
	f.goalState = GoalState{
		Units: map[string]GoalStatus{"mysql/0": active},
		Relations: map[string]map[string]GoalStatus{
			"db":     {"mysql/0": active},
			"server": {"wordpress/0": active},
		},
	}
	return f
}

// §19 goal-state.
func TestGoldenGoalState(t *testing.T) {
	const yaml = "units:\n  mysql/0:\n    status: active\n    since: 2200-11-05 15:29:12Z\nrelations:\n  db:\n    mysql/0:\n      status: active\n      since: 2200-11-05 15:29:12Z\n  server:\n    wordpress/0:\n      status: active\n      since: 2200-11-05 15:29:12Z\n"
	const json = "{\"units\":{\"mysql/0\":{\"status\":\"active\",\"since\":\"2200-11-05 15:29:12Z\"}},\"relations\":{\"db\":{\"mysql/0\":{\"status\":\"active\",\"since\":\"2200-11-05 15:29:12Z\"}},\"server\":{\"wordpress/0\":{\"status\":\"active\",\"since\":\"2200-11-05 15:29:12Z\"}}}}\n"
	gs := func(id, tag string, argv []string) gcase {
		return gcase{id: id, tag: tag, tool: "goal-state", ctx: goalStateFixture(), argv: argv}
	}
	withOut := func(c gcase, data string) gcase {
		c.outFile, c.outData = "some-file", data
		return c
	}
	withOutput := func(c gcase, stdout string) gcase {
		c.stdout = stdout
		return c
	}
	fail := func(c gcase, msg string) gcase {
		c.exit, c.stderr = 2, "ERROR "+msg+"\n"
		return c
	}
	runGolden(t, []gcase{
		withOutput(gs("GS01", "T", args()), yaml),
		withOutput(gs("GS02", "T", args("--format", "yaml")), yaml),
		withOutput(gs("GS03", "T", args("--format", "json")), json),
		withOut(gs("GS04", "T", args("--output", "some-file")), yaml),
		withOut(gs("GS05", "T", args("--format", "yaml", "--output", "some-file")), yaml),
		withOut(gs("GS06", "T", args("--format", "json", "--output", "some-file")), json),
		fail(gs("GS07", "D", args("--format", "smart")), "invalid value \"smart\" for option --format: unknown format \"smart\""),
		fail(gs("GS08", "D", args("extra")), "unrecognized args: [\"extra\"]"),
	})
}

// §20 unit-get.
func TestGoldenUnitGet(t *testing.T) {
	ug := func(id, tag string, ctx *fakeContext, argv []string, exit int, stdout, stderr string) gcase {
		if ctx == nil {
			ctx = newFakeContext(-1, "", "")
		}
		return gcase{id: id, tag: tag, tool: "unit-get", ctx: ctx, argv: argv, exit: exit, stdout: stdout, stderr: stderr}
	}
	binding := func(addrs ...InterfaceAddress) *fakeContext {
		f := newFakeContext(-1, "", "")
		f.network[""] = NetworkInfo{Interfaces: []NetworkInterface{{MACAddress: "00:11:22:33:44:00", InterfaceName: "eth0", Addresses: addrs}}}
		return f
	}
	v4 := InterfaceAddress{Address: "10.20.1.42", CIDR: "10.20.1.0/24"}
	v6 := InterfaceAddress{Address: "fc00::1", CIDR: "fc00::/64"}
	named := InterfaceAddress{Hostname: "host-name.somewhere.invalid", Address: "10.20.1.42", CIDR: "10.20.1.0/24"}
	runGolden(t, []gcase{
		ug("UG01", "T", nil, args("private-address"), 0, "192.168.0.99\n", ""),
		ug("UG02", "T", nil, args("private-address", "--format", "yaml"), 0, "192.168.0.99\n", ""),
		ug("UG03", "T", nil, args("private-address", "--format", "json"), 0, "\"192.168.0.99\"\n", ""),
		ug("UG04", "T", nil, args("public-address"), 0, "gimli.minecraft.testing.invalid\n", ""),
		ug("UG05", "T", nil, args("public-address", "--format", "yaml"), 0, "gimli.minecraft.testing.invalid\n", ""),
		ug("UG06", "T", nil, args("public-address", "--format", "json"), 0, "\"gimli.minecraft.testing.invalid\"\n", ""),
		{id: "UG07", tag: "T", tool: "unit-get", argv: args("--output", "some-file", "private-address"), outFile: "some-file", outData: "192.168.0.99\n"},
		ug("UG08", "T~", nil, args("protected-address"), 2, "", "ERROR unknown setting \"protected-address\"\n"),
		ug("UG09", "T~", nil, args("private-address", "blah"), 2, "", "ERROR unrecognized args: [\"blah\"]\n"),
		ug("UG10", "T", binding(v4, v6), args("private-address"), 0, "10.20.1.42\n", ""),
		ug("UG10-nobinding", "T", nil, args("private-address"), 0, "192.168.0.99\n", ""),
		ug("UG10-noaddress", "T", binding(), args("private-address"), 0, "192.168.0.99\n", ""),
		ug("UG10-v6only", "T", binding(v6), args("private-address"), 0, "fc00::1\n", ""),
		ug("UG10-hostname", "T", binding(named), args("private-address"), 0, "host-name.somewhere.invalid\n", ""),
	})
}

// unit-get with a Context that is not a UnitAddresser: the default
// binding's address serves both settings.
func TestUnitGetWithoutAddresser(t *testing.T) {
	type plain struct{ Context }
	f := newFakeContext(-1, "", "")
	for _, key := range []string{"private-address", "public-address"} {
		resp, err := Run(plain{f}, Request{Command: "unit-get", Args: args(key), Dir: "/"})
		if err != nil || resp.Code != 1 || string(resp.Stderr) != "ERROR no address for this unit: no network config found\n" {
			t.Errorf("%s without binding: %d %q %q %v", key, resp.Code, resp.Stdout, resp.Stderr, err)
		}
	}
	f.network[""] = NetworkInfo{Interfaces: []NetworkInterface{{Addresses: []InterfaceAddress{{Address: "10.1.2.3"}}}}}
	for _, key := range []string{"private-address", "public-address"} {
		resp, err := Run(plain{f}, Request{Command: "unit-get", Args: args(key), Dir: "/"})
		if err != nil || resp.Code != 0 || string(resp.Stdout) != "10.1.2.3\n" {
			t.Errorf("%s: %d %q %q %v", key, resp.Code, resp.Stdout, resp.Stderr, err)
		}
	}
}
