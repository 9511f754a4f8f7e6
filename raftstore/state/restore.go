package state

import (
	"time"

	iradix "github.com/hashicorp/go-immutable-radix/v2"
)

// ForNewGroup returns a copy of s to start a new group from, as
// `bagkeeper snapshot restore` does: the same application, relations,
// bags, units, charm state, hook cursors, statuses, unit extras, leader
// settings, secrets and actions, at the same index, but
//
//   - under clusterID, a new cluster id: the new group is never mistaken
//     for the one the state was copied from, and no member of that group
//     can join it;
//   - at generation 0, with no recovery plan: the recoveries of the old
//     group are its own history;
//   - with the leadership lease expired at now (its unit and epoch kept,
//     so the next claim starts a new epoch): the member that held it
//     belongs to the old group;
//   - without client sessions, waiting claimants and divergence reports:
//     all of them name members of the old group.
//
// Units keep their state and holder: an active unit stays held by a member
// of the old group until its pod claims it again (by ordinal, or by pod
// name), which starts a new claim epoch; a unit whose pod never comes back
// is released and removed by the leader's usual rules.
func (s *State) ForNewGroup(clusterID string, now time.Time) *State {
	c := *s
	m := *s.meta
	m.clusterID = clusterID
	m.generation, m.generationPlan, m.generationStarted = 0, "", time.Time{}
	m.lease.Member = ""
	if m.lease.Expires.After(now) {
		m.lease.Expires = now
	}
	c.meta = &m
	c.sessions = iradix.New[*session]()
	c.claimants = iradix.New[*Claimant]()
	c.divergent = iradix.New[*Divergence]()
	return &c
}

// Counts is how much a state holds.
type Counts struct {
	Units       int `json:"units"`
	ActiveUnits int `json:"active_units"`
	Relations   int `json:"relations"`
	Bags        int `json:"bags"`
	// Keys counts the keys of every bag.
	Keys        int `json:"keys"`
	CharmStates int `json:"charm_states"`
	// CharmKeys counts the keys of every unit's charm state.
	CharmKeys int `json:"charm_keys"`
	Secrets   int `json:"secrets"`
	Actions   int `json:"actions"`
}

// Count counts what s holds.
func (s *State) Count() Counts {
	var c Counts
	for _, u := range s.Units() {
		if u.State == UnitRemoved {
			continue
		}
		c.Units++
		if u.State == UnitActive {
			c.ActiveUnits++
		}
	}
	c.Relations = s.relations.Len()
	walk(s.bags, func(_ []byte, b *Bag) bool {
		c.Bags++
		c.Keys += b.Data.Len()
		return true
	})
	walk(s.charm, func(_ []byte, v Settings) bool {
		c.CharmStates++
		c.CharmKeys += v.Len()
		return true
	})
	c.Secrets = s.secrets.Len()
	c.Actions = s.actions.Len()
	return c
}
