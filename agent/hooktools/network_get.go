package hooktools

import (
	"errors"
	"fmt"
)

// networkGet is network-get <binding> [-r <id>] [--bind-address]
// [--ingress-address] [--egress-subnets] [--primary-address].
type networkGet struct {
	ctx      Context
	relation *relationFlag
	out      output

	binding        string
	bindAddress    bool
	ingressAddress bool
	egressSubnets  bool
	primaryAddress bool // deprecated
	keys           []string
}

func newNetworkGet(ctx Context) command {
	return &networkGet{ctx: ctx, relation: newRelationFlag(ctx)}
}

func (c *networkGet) info() *info {
	return &info{
		name:    "network-get",
		args:    "<binding-name> [--ingress-address] [--bind-address] [--egress-subnets]",
		purpose: "Print the network configuration of a binding.",
		doc: `
network-get prints the network configuration of an endpoint binding: its
interfaces and their addresses, the addresses to advertise for incoming
connections, and the subnets outgoing traffic comes from. With -r, as seen
from that relation.

One of --bind-address, --ingress-address or --egress-subnets prints just
that value; several print a map of them.
`,
		examples: `
    network-get db --ingress-address
    network-get --format=json -r db:7 db
`,
	}
}

func (c *networkGet) setFlags(fs *flagSet) {
	c.out.addDefaultFlags(fs)
	fs.boolVar(&c.primaryAddress, "Print the first bind address (deprecated)", "primary-address")
	fs.boolVar(&c.bindAddress, "Print the address to listen on", "bind-address")
	fs.boolVar(&c.ingressAddress, "Print the address to advertise", "ingress-address")
	fs.boolVar(&c.egressSubnets, "Print the subnets outgoing traffic comes from", "egress-subnets")
	c.relation.add(fs)
}

// The keys of network-get's map output.
const (
	bindAddressKey    = "bind-address"
	ingressAddressKey = "ingress-address"
	egressSubnetsKey  = "egress-subnets"
)

func (c *networkGet) init(args []string) error {
	if len(args) < 1 {
		return errors.New("no arguments specified")
	}
	c.binding = args[0]
	if c.binding == "" {
		return errors.New("no binding name specified")
	}
	c.keys = nil
	if c.bindAddress {
		c.keys = append(c.keys, bindAddressKey)
	}
	if c.ingressAddress {
		c.keys = append(c.keys, ingressAddressKey)
	}
	if c.egressSubnets {
		c.keys = append(c.keys, egressSubnetsKey)
	}
	return checkEmpty(args[1:])
}

func (c *networkGet) run(e *env) error {
	ni, err := c.ctx.NetworkInfo(c.binding, c.relation.id)
	if err != nil && !errors.Is(err, ErrNoNetworkConfig) {
		return err
	}
	if err != nil || len(ni.Interfaces) == 0 {
		return fmt.Errorf("no network config found for binding %q", c.binding)
	}
	if !c.primaryAddress && len(c.keys) == 0 {
		return c.out.write(e, networkDisplay(ni))
	}
	noAddress := fmt.Errorf("no addresses attached to space for binding %q", c.binding)
	first := ni.Interfaces[0].Addresses
	if c.primaryAddress {
		if len(c.keys) > 0 {
			return errors.New("--primary-address must be the only flag specified")
		}
		if len(first) == 0 {
			return noAddress
		}
		return c.out.write(e, first[0].Address)
	}
	values := make(map[string]any)
	if c.egressSubnets {
		values[egressSubnetsKey] = ni.EgressSubnets
	}
	if c.ingressAddress {
		switch {
		case len(ni.IngressAddresses) > 0:
			values[ingressAddressKey] = ni.IngressAddresses[0]
		case len(first) > 0:
			values[ingressAddressKey] = first[0].Address
		default:
			return noAddress
		}
	}
	if c.bindAddress {
		if len(first) == 0 {
			return noAddress
		}
		values[bindAddressKey] = first[0].Address
	}
	if len(c.keys) == 1 {
		return c.out.write(e, values[c.keys[0]])
	}
	return c.out.write(e, values)
}

// The display types give network-get's output its shape. The YAML form
// repeats some fields under their old names (address, macaddress,
// interfacename), which older charms may read; the JSON form does not.

// addressDisplay is one address of an interface.
type addressDisplay struct {
	Hostname string `json:"hostname" yaml:"hostname"`
	Address  string `json:"value" yaml:"value"`
	CIDR     string `json:"cidr" yaml:"cidr"`
	AddressX string `json:"-" yaml:"address"`
}

// interfaceDisplay is one bind address entry.
type interfaceDisplay struct {
	MACAddress     string           `json:"mac-address" yaml:"mac-address"`
	InterfaceName  string           `json:"interface-name" yaml:"interface-name"`
	Addresses      []addressDisplay `json:"addresses" yaml:"addresses"`
	MACAddressX    string           `json:"-" yaml:"macaddress"`
	InterfaceNameX string           `json:"-" yaml:"interfacename"`
}

// networkInfoDisplay is the full network-get output.
type networkInfoDisplay struct {
	Interfaces       []interfaceDisplay `json:"bind-addresses,omitempty" yaml:"bind-addresses,omitempty"`
	EgressSubnets    []string           `json:"egress-subnets,omitempty" yaml:"egress-subnets,omitempty"`
	IngressAddresses []string           `json:"ingress-addresses,omitempty" yaml:"ingress-addresses,omitempty"`
}

func networkDisplay(ni NetworkInfo) networkInfoDisplay {
	d := networkInfoDisplay{
		EgressSubnets:    append([]string(nil), ni.EgressSubnets...),
		IngressAddresses: append([]string(nil), ni.IngressAddresses...),
	}
	for _, iface := range ni.Interfaces {
		di := interfaceDisplay{
			MACAddress:     iface.MACAddress,
			InterfaceName:  iface.InterfaceName,
			Addresses:      make([]addressDisplay, 0, len(iface.Addresses)),
			MACAddressX:    iface.MACAddress,
			InterfaceNameX: iface.InterfaceName,
		}
		for _, a := range iface.Addresses {
			di.Addresses = append(di.Addresses, addressDisplay{
				Hostname: a.Hostname,
				Address:  a.Address,
				CIDR:     a.CIDR,
				AddressX: a.Address,
			})
		}
		d.Interfaces = append(d.Interfaces, di)
	}
	return d
}
