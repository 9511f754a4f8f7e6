package agent

import (
	"context"
	"time"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
)

// leaseLoop holds the application leadership lease for this unit while its
// member leads the raft group: it takes the lease once it is free (never
// while another unit's lease runs, so two units never both hold one) and
// renews it when a third of it has run. is-leader promises at least
// LeaseGuarantee of leadership, so the lease lasts twice that or more.
func (a *Agent) leaseLoop(ctx context.Context) {
	for {
		wait := time.Second
		if a.tendLease() {
			wait = a.cfg.LeaseDuration / 6
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// tendLease takes or renews the lease when this unit's member leads; it
// reports whether the unit holds the lease now.
func (a *Agent) tendLease() bool {
	unit := a.unit()
	if unit == "" || !a.node.IsLeader() {
		return false
	}
	st := a.node.State()
	if u, ok := st.Unit(unit); !ok || u.State != state.UnitActive || u.Member != a.cfg.Member {
		return false
	}
	l := st.Lease()
	now := a.now()
	if l.Unit != "" && l.Unit != unit && now.Before(l.Expires) {
		return false // another unit's lease runs; it is taken once it ends
	}
	if l.Unit == unit && l.Expires.Sub(now) > a.cfg.LeaseDuration*2/3 {
		return true // renewed recently enough
	}
	if _, err := a.apply(state.ClaimLeaseOp(unit, a.cfg.Member, int64(a.cfg.LeaseDuration))); err != nil {
		a.logger().Debug("leadership lease not taken", "err", err)
		return false
	}
	if l.Unit != unit {
		a.logger().Info("this unit is now the application leader", "unit", unit)
	}
	return true
}

// ReleaseLease gives the lease up (a leader stopping gracefully), so the
// next leader need not wait for it to run out.
func (a *Agent) ReleaseLease(ctx context.Context) {
	if unit := a.unit(); unit != "" && a.node.State().Lease().Unit == unit {
		if _, err := a.applyCtx(ctx, state.ReleaseLeaseOp(unit)); err != nil {
			a.logger().Warn("releasing the leadership lease", "err", err)
		}
	}
}
