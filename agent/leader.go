package agent

import (
	"context"
	"time"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
)

// leaseLoop keeps the application leadership with units, as Juju's lease
// manager does: leadership belongs to a unit, not to a pod or to the raft
// leader. The unit holding the lease renews it through raft from whichever
// member its pod is, every sixth of the lease; a replaced pod that claims
// the same unit goes on renewing, so nothing is elected anywhere. Every
// other unit checks each second whether the lease has lapsed unrenewed and
// then claims it; the store grants it to the first claim it applies and
// refuses the others (and any claim while another unit's lease runs), so
// two units never both hold it.
func (a *Agent) leaseLoop(ctx context.Context) {
	for {
		wait := time.Second
		if a.tendLease() {
			wait = a.cfg.LeaseDuration / 12
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// tendLease takes the lease when it is free or lapsed, or renews it when
// this unit holds it; it reports whether the unit holds it now.
func (a *Agent) tendLease() bool {
	unit := a.unit()
	if unit == "" {
		return false
	}
	st := a.node.State()
	if u, ok := st.Unit(unit); !ok || u.State != state.UnitActive || u.Member != a.cfg.Member {
		return false
	}
	l := st.Lease()
	now := a.now()
	if l.Unit != "" && l.Unit != unit && now.Before(l.Expires) {
		return false // another unit's lease runs; it is taken once it lapses
	}
	if l.Unit == unit && l.Expires.Sub(now) > a.cfg.LeaseDuration*5/6 {
		return true // renewed recently enough
	}
	if _, err := a.apply(state.ClaimLeaseOp(unit, a.cfg.Member, int64(a.cfg.LeaseDuration))); err != nil {
		a.logger().Debug("leadership lease not taken", "err", err)
		return l.Unit == unit && now.Before(l.Expires)
	}
	if l.Unit != unit || !now.Before(l.Expires) {
		a.logger().Info("this unit is now the application leader", "unit", unit)
	}
	return true
}
