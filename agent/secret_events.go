package agent

import (
	"time"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
)

// Secret hook kinds.
const (
	HookSecretChanged = "secret-changed"
	HookSecretRotate  = "secret-rotate"
	HookSecretExpired = "secret-expired"
	HookSecretRemove  = "secret-remove"
)

// SecretHook is the secret a secret hook is about.
type SecretHook struct {
	ID string
	// Label is the owner's label (owner hooks) or the consumer's
	// (secret-changed).
	Label string
	// Revision is the revision of secret-expired and secret-remove.
	Revision int64
	// Due is the rotation time a secret-rotate hook was run for.
	Due time.Time
}

// SecretsCursor is what a unit was told of secrets, per secret id.
type SecretsCursor struct {
	// Changed: the latest revision a consumer was told of (secret-changed).
	Changed map[string]int64 `json:"changed,omitempty"`
	// Expired: the revision whose expiry the owner was told of.
	Expired map[string]int64 `json:"expired,omitempty"`
	// Obsolete: the highest revision the owner was told no consumer
	// follows any more (secret-remove).
	Obsolete map[string]int64 `json:"obsolete,omitempty"`
}

// secretEvents returns the next secret hook, secret by secret in id order:
// for the unit that manages a secret (its own, or the application's while
// it leads) secret-rotate when its rotation is due, secret-expired when
// its latest revision has expired, and secret-remove for each older
// revision no consumer follows; for a consumer, secret-changed when a
// revision newer than the one it follows exists. Rotation is rescheduled
// by the hook's commit (SecretRotated), so the cursor does not track it.
func secretEvents(c Cursor, v View) (Hook, bool) {
	st := v.State
	leader := st.Lease().HeldBy(v.Unit, v.Now)
	var old SecretsCursor
	if c.Secrets != nil {
		old = *c.Secrets
	}
	next := func(update func(*SecretsCursor)) Cursor {
		n := c
		sc := SecretsCursor{Changed: map[string]int64{}, Expired: map[string]int64{}, Obsolete: map[string]int64{}}
		// Secrets gone are forgotten.
		for _, m := range []struct{ from, to map[string]int64 }{{old.Changed, sc.Changed}, {old.Expired, sc.Expired}, {old.Obsolete, sc.Obsolete}} {
			for id, rev := range m.from {
				if _, ok := st.Secret(id); ok {
					m.to[id] = rev
				}
			}
		}
		update(&sc)
		n.Secrets = &sc
		return n
	}
	for _, s := range st.Secrets() {
		if s.OwnedBy(v.Unit, leader) {
			if !s.NextRotate.IsZero() && !v.Now.Before(s.NextRotate) {
				return Hook{Name: HookSecretRotate, Secret: &SecretHook{ID: s.ID, Label: s.Label, Due: s.NextRotate}, Next: c}, true
			}
			if r := s.Latest(); r != nil && !r.ExpiresAt.IsZero() && !v.Now.Before(r.ExpiresAt) && old.Expired[s.ID] < r.Revision {
				return Hook{Name: HookSecretExpired, Secret: &SecretHook{ID: s.ID, Label: s.Label, Revision: r.Revision},
					Next: next(func(sc *SecretsCursor) { sc.Expired[s.ID] = r.Revision })}, true
			}
			for _, r := range s.Revisions {
				if r.Revision >= s.LatestRevision || r.Revision <= old.Obsolete[s.ID] || followed(s, r.Revision) {
					continue
				}
				rev := r.Revision
				return Hook{Name: HookSecretRemove, Secret: &SecretHook{ID: s.ID, Label: s.Label, Revision: rev},
					Next: next(func(sc *SecretsCursor) { sc.Obsolete[s.ID] = rev })}, true
			}
			continue
		}
		if cons, ok := s.Consumer(v.Unit); ok && s.LatestRevision > cons.Revision && old.Changed[s.ID] < s.LatestRevision {
			latest := s.LatestRevision
			return Hook{Name: HookSecretChanged, Secret: &SecretHook{ID: s.ID, Label: cons.Label},
				Next: next(func(sc *SecretsCursor) { sc.Changed[s.ID] = latest })}, true
		}
	}
	return Hook{}, false
}

// followed reports whether a consumer follows revision rev of s.
func followed(s *state.Secret, rev int64) bool {
	for _, c := range s.Consumers {
		if c.Revision == rev {
			return true
		}
	}
	return false
}
