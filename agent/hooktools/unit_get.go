package hooktools

import (
	"errors"
	"fmt"
)

// unitGet is unit-get <private-address|public-address>.
type unitGet struct {
	ctx Context
	key string
	out output
}

func newUnitGet(ctx Context) command { return &unitGet{ctx: ctx} }

func (c *unitGet) info() *info {
	return &info{
		name:    "unit-get",
		args:    "<setting>",
		purpose: "Print this unit's private-address or public-address.",
	}
}

func (c *unitGet) setFlags(fs *flagSet) { c.out.addDefaultFlags(fs) }

func (c *unitGet) init(args []string) error {
	if len(args) == 0 {
		return errors.New("no setting specified")
	}
	if args[0] != "private-address" && args[0] != "public-address" {
		return fmt.Errorf("unknown setting %q", args[0])
	}
	c.key = args[0]
	return checkEmpty(args[1:])
}

func (c *unitGet) run(e *env) error {
	addresses, hasAddresses := c.ctx.(UnitAddresser)
	var value string
	var err error
	switch {
	case c.key == "public-address" && hasAddresses:
		value, err = addresses.PublicAddress()
	default:
		value, err = c.defaultBindingAddress()
		if err != nil && hasAddresses {
			value, err = addresses.PrivateAddress()
		}
	}
	if err != nil {
		return err
	}
	return c.out.write(e, value)
}

// defaultBindingAddress is the first address of the default binding, or
// its host name if it has one (Juju prints the name an address was
// resolved from).
func (c *unitGet) defaultBindingAddress() (string, error) {
	ni, err := c.ctx.NetworkInfo("", -1)
	if err != nil {
		return "", fmt.Errorf("no address for this unit: %w", err)
	}
	if len(ni.Interfaces) == 0 || len(ni.Interfaces[0].Addresses) == 0 {
		return "", errors.New("no address for this unit")
	}
	if a := ni.Interfaces[0].Addresses[0]; a.Hostname != "" {
		return a.Hostname, nil
	}
	return ni.Interfaces[0].Addresses[0].Address, nil
}
