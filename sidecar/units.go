package sidecar

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bagkeeper/bagkeeper/raftstore"
	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

// claimLoop gets this pod its unit, and keeps watching it: a unit the
// leader released while this member was unreachable is claimed back when
// the member returns. A unit removed by an operator is not: the pod stays
// unready until it is restarted. Nor is an ordinal unit another member took
// over (a newer incarnation of this pod: two pods claim one identity); a
// pod without an ordinal whose unit was taken over claims another.
//
// It acts only once this member has caught up with the group: a member
// replaying its log after a restart passes through states long gone (its
// unit held, then removed while it was away), and would otherwise take
// one of those for news.
func (s *Sidecar) claimLoop(ctx context.Context) {
	id := string(s.node.ID())
	ordinal := s.cfg.ordinal()
	synced := false
	for {
		changed := s.node.Changed()
		// Once synced, what this loop acts on arrives as a change of the
		// state; the wait is a fallback only.
		wait := 5 * time.Second
		if !synced {
			ns := s.node.Status()
			synced = ns.LeaderAddress != "" && ns.LeaderCommitIndex > 0 && s.node.CaughtUp(ns.LeaderCommitIndex)
			if !synced {
				wait = 200 * time.Millisecond
			}
		}
		st := s.node.State()
		if synced && st.App() != "" && s.unitLost.Load().(string) == "" {
			held, ok := st.UnitHeldBy(id)
			switch {
			case ok:
				if held.Name != s.Unit() {
					s.unit.Store(held.Name)
					s.log.Info("unit held", "unit", held.Name, "ordinal", ordinal)
				}
				s.waiting.Store("")
			case s.Unit() != "" && isRemoved(st, s.Unit()):
				reason := fmt.Sprintf("unit %s was removed (%s); restart the pod to get a unit", s.Unit(), unitReason(st, s.Unit()))
				s.unitLost.Store(reason)
				s.log.Error("unit removed while the pod runs", "unit", s.Unit())
			case ordinal >= 0 && s.Unit() != "" && takenOver(st, s.Unit(), id):
				u, _ := st.Unit(s.Unit())
				reason := fmt.Sprintf("unit %s was taken over by member %s (pod %s): another pod claims this pod's identity, so this one holds no unit and claims none; stop one of the two", u.Name, u.Member, u.Pod)
				s.unitLost.Store(reason)
				s.log.Error("unit taken over by another member", "unit", u.Name, "holder", u.Member)
			default:
				if s.claim(ctx, id, ordinal) {
					continue
				}
				wait = 500 * time.Millisecond
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-time.After(wait):
		}
	}
}

// claim asks for a unit; it reports whether the pod got one.
func (s *Sidecar) claim(ctx context.Context, id string, ordinal int64) bool {
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	before := s.node.State()
	res, err := s.node.Apply(cctx, state.NewCommand(state.ClaimUnitOp(id, s.cfg.Pod, ordinal, uint32(s.cfg.Units))))
	if err != nil {
		if ctx.Err() == nil {
			s.log.Info("unit not claimed yet", "err", err)
		}
		return false
	}
	op := res.GetOps()[0]
	if op.GetWaiting() {
		why := fmt.Sprintf("waiting for a unit: all %d units of %s are active; one becomes free when its pod stops, or is taken over once its holder has been unreachable for %s", s.cfg.Units, s.cfg.App, s.cfg.UnitTakeoverAfter)
		if s.waiting.Swap(why) != why {
			s.log.Warn(why)
		}
		return false
	}
	s.waiting.Store("")
	name := op.GetUnit()
	prev := s.Unit()
	s.unit.Store(name)
	if prev != "" && prev != name {
		s.log.Warn("this pod now holds another unit", "unit", name, "previous", prev)
	} else {
		msg, args := claimedLog(before, name, id, s.cfg.Pod)
		s.log.Info(msg, args...)
	}
	return true
}

// claimedLog says what a claim of unit by member id of pod did, from the
// state before it: a new unit, a unit a predecessor released or held (a
// pod replaced: it resumes with its bags), or one taken over.
func claimedLog(before *state.State, unit, id, pod string) (string, []any) {
	u, ok := before.Unit(unit)
	switch {
	case !ok:
		return "unit claimed: a new unit, installed from scratch", []any{"unit", unit}
	case u.Member == id:
		return "unit claimed", []any{"unit", unit}
	case u.State == state.UnitActive && u.Pod == pod:
		// A new incarnation of the same pod (a StatefulSet pod replaced
		// on an empty disk) supersedes the one that held the unit.
		return "unit claimed: resumed with its relation data and state", []any{"unit", unit, "previous_member", u.Member, "previous_pod", u.Pod, "released", "no: superseded by this incarnation of the pod"}
	case u.State == state.UnitActive:
		return "unit claimed: taken over from a holder unreachable too long", []any{"unit", unit, "previous_member", u.Member, "previous_pod", u.Pod}
	default:
		return "unit claimed: resumed with its relation data and state", []any{"unit", unit, "previous_member", u.Member, "previous_pod", u.Pod, "released", u.Reason}
	}
}

// takenOver reports whether unit is held by a member other than id.
func takenOver(st *state.State, unit, id string) bool {
	u, ok := st.Unit(unit)
	return ok && u.State == state.UnitActive && u.Member != id
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
	// Waiting claimants whose member is a healthy member of the group; the
	// others are gone (or going) and are forgotten.
	var waiting []*state.Claimant
	for _, c := range st.Claimants() {
		h, ok := health[c.Member]
		switch {
		case c.Member == string(s.node.ID()) || ok && h.Healthy:
			waiting = append(waiting, c)
		case !ok:
			s.duty(ctx, "claimant forgotten", c.Member, "", state.NewCommand(state.ForgetClaimantOp(c.Member)))
		}
	}
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
			if silent.IsZero() {
				continue
			}
			switch away := now.Sub(silent); {
			case away >= s.cfg.UnitReleaseAfter:
				op = "released"
				cmd.Ops = append(cmd.Ops, state.ReleaseUnitOp(u.Name, u.Member, "member "+u.Member+" unreachable since "+silent.UTC().Format(time.RFC3339)))
			case away >= s.cfg.UnitTakeoverAfter && len(waiting) > 0:
				// Fenced: once another member claims it, nothing the old
				// holder sends for it commits.
				op = "released for takeover"
				cmd.Ops = append(cmd.Ops, state.ReleaseUnitOp(u.Name, u.Member, fmt.Sprintf("taken over: member %s unreachable since %s while pod %s waits for a unit", u.Member, silent.UTC().Format(time.RFC3339), waiting[0].Pod)))
				waiting = waiting[1:]
			default:
				continue
			}
		case state.UnitReleased:
			if now.Sub(u.Released) < s.cfg.UnitRemoveAfter {
				continue
			}
			op = "removed"
			cmd.Ops = append(cmd.Ops, state.RemoveUnitOp(u.Name, u.Released.UnixNano(), "released "+u.Released.UTC().Format(time.RFC3339)+" and not claimed for "+s.cfg.UnitRemoveAfter.String()))
		default:
			continue
		}
		s.duty(ctx, "unit "+op, u.Name, u.Member, cmd)
	}
}

// duty applies one of the leader's unit decisions. Each is a
// compare-and-set, so a unit claimed again meanwhile is left alone.
func (s *Sidecar) duty(ctx context.Context, what, unit, holder string, cmd *storepb.Command) {
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := s.node.Apply(actx, cmd)
	switch {
	case err == nil:
		s.log.Info(what, "unit", unit, "holder", holder)
	case errors.Is(err, state.ErrConflict):
		// Claimed or changed meanwhile: nothing to do.
	default:
		s.log.Warn("unit duty failed", "duty", what, "unit", unit, "err", err)
	}
}
