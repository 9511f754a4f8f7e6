package sidecar

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bagkeeper/bagkeeper/raftstore"
	"github.com/bagkeeper/bagkeeper/raftstore/state"
)

// claimLoop gets this pod its unit, and keeps watching it: a unit the
// leader released while this member was unreachable is claimed back when
// the member returns. A unit removed by an operator is not: the pod stays
// unready until it is restarted.
func (s *Sidecar) claimLoop(ctx context.Context) {
	id := string(s.node.ID())
	ordinal := s.cfg.ordinal()
	for {
		changed := s.node.Changed()
		st := s.node.State()
		if st.App() != "" && s.unitLost.Load().(string) == "" {
			held, ok := st.UnitHeldBy(id)
			switch {
			case ok:
				if held.Name != s.Unit() {
					s.unit.Store(held.Name)
					s.log.Info("unit held", "unit", held.Name, "ordinal", ordinal)
				}
			case s.Unit() != "" && isRemoved(st, s.Unit()):
				reason := fmt.Sprintf("unit %s was removed (%s); restart the pod to get a unit", s.Unit(), unitReason(st, s.Unit()))
				s.unitLost.Store(reason)
				s.log.Error("unit removed while the pod runs", "unit", s.Unit())
			default:
				s.claim(ctx, id, ordinal)
				continue
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-time.After(time.Second):
		}
	}
}

func (s *Sidecar) claim(ctx context.Context, id string, ordinal int64) {
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	res, err := s.node.Apply(cctx, state.NewCommand(state.ClaimUnitOp(id, s.cfg.Pod, ordinal)))
	if err != nil {
		if ctx.Err() == nil {
			s.log.Info("unit not claimed yet", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
		return
	}
	name := res.GetOps()[0].GetUnit()
	prev := s.Unit()
	s.unit.Store(name)
	if prev != "" && prev != name {
		s.log.Warn("this pod now holds another unit", "unit", name, "previous", prev)
	} else {
		s.log.Info("unit claimed", "unit", name)
	}
}

func isRemoved(st *state.State, unit string) bool {
	u, ok := st.Unit(unit)
	return ok && u.State == state.UnitRemoved
}

func unitReason(st *state.State, unit string) string {
	if u, ok := st.Unit(unit); ok {
		return u.Reason
	}
	return ""
}

// reapLoop runs the leader's unit duties: release the units of members
// unreachable for UnitReleaseAfter (units claimed without an ordinal only),
// remove released units unclaimed for UnitRemoveAfter. Each decision is applied as a compare-and-set, so a
// unit claimed again meanwhile is left alone.
func (s *Sidecar) reapLoop(ctx context.Context) {
	interval := min(s.cfg.UnitReleaseAfter, s.cfg.UnitRemoveAfter) / 4
	interval = max(min(interval, 5*time.Second), 100*time.Millisecond)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if s.node.IsLeader() {
			s.reapOnce(ctx)
		}
	}
}

func (s *Sidecar) reapOnce(ctx context.Context) {
	now := s.cfg.Now()
	since := s.node.LeaderSince()
	health := map[string]raftstore.MemberHealth{}
	for _, h := range s.node.MemberHealth() {
		health[string(h.ID)] = h
	}
	st := s.node.State()
	for _, u := range st.Units() {
		var op string
		var cmd = state.NewCommand()
		switch u.State {
		case state.UnitActive:
			if u.Member == string(s.node.ID()) {
				continue
			}
			if u.ByOrdinal {
				// Only pod <app>-N can ever hold app/N: releasing it would
				// not let anyone else use it, only start the removal clock
				// on a unit whose pod is merely away.
				continue
			}
			silent := since
			if h, ok := health[u.Member]; ok {
				if h.Healthy {
					continue
				}
				silent = h.Since
			}
			if silent.IsZero() || now.Sub(silent) < s.cfg.UnitReleaseAfter {
				continue
			}
			op = "released"
			cmd.Ops = append(cmd.Ops, state.ReleaseUnitOp(u.Name, u.Member, "member "+u.Member+" unreachable since "+silent.UTC().Format(time.RFC3339)))
		case state.UnitReleased:
			if now.Sub(u.Released) < s.cfg.UnitRemoveAfter {
				continue
			}
			op = "removed"
			cmd.Ops = append(cmd.Ops, state.RemoveUnitOp(u.Name, u.Released.UnixNano(), "released "+u.Released.UTC().Format(time.RFC3339)+" and not claimed for "+s.cfg.UnitRemoveAfter.String()))
		default:
			continue
		}
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := s.node.Apply(actx, cmd)
		cancel()
		switch {
		case err == nil:
			s.log.Info("unit "+op, "unit", u.Name, "holder", u.Member)
		case errors.Is(err, state.ErrConflict):
			// Claimed or changed meanwhile: nothing to do.
		default:
			s.log.Warn("unit duty failed", "unit", u.Name, "err", err)
		}
	}
}
