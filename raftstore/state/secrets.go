package state

import (
	"bytes"
	"slices"
	"strings"
	"time"

	iradix "github.com/hashicorp/go-immutable-radix/v2"

	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

// Juju secrets, as the state machine keeps them. The content of each
// revision is sealed by the member that proposed it (AES-256-GCM under the
// application's secrets key); the state machine stores it as it came and
// never sees it in plain text. Everything else (owner, labels, grants,
// which revision each consumer follows) is plain metadata.

// Limits of secrets.
const (
	// MaxSecretSealed bounds one revision's sealed content.
	MaxSecretSealed = 80 << 10
	// MaxSecretLabel and MaxSecretDescription bound the metadata.
	MaxSecretLabel       = 1 << 10
	MaxSecretDescription = 4 << 10
	// MaxSecretRevisions bounds the live revisions of one secret: the
	// owner removes the ones no consumer follows (secret-remove hook).
	MaxSecretRevisions = 100
	// SecretKeyIDSize is the size of a key id.
	SecretKeyIDSize = 8
	// secretNonceSize is AES-GCM's standard nonce size.
	secretNonceSize = 12
)

// Secret is one Juju secret.
type Secret struct {
	// ID is the secret's id (20 characters of base32hex, lower case): its
	// URI is "secret:" + ID.
	ID string
	// Owner is the application's name (an application secret, managed by
	// the leader) or a unit's (managed by that unit).
	Owner        string
	Label        string
	Description  string
	RotatePolicy string
	// NextRotate is when the owner is next due a secret-rotate hook (zero:
	// never).
	NextRotate     time.Time
	Created        time.Time
	Updated        time.Time
	LatestRevision int64
	// Revisions are the revisions still kept, in ascending order; the
	// latest is always among them.
	Revisions []SecretRevision
	// Grants, ordered by relation id then target.
	Grants []SecretGrant
	// Consumers are the units that read the secret without owning it,
	// ordered by unit name.
	Consumers []SecretConsumer
}

// SecretRevision is one revision's sealed content.
type SecretRevision struct {
	Revision  int64
	KeyID     []byte
	Nonce     []byte
	Sealed    []byte
	Created   time.Time
	ExpiresAt time.Time // zero: never
}

// SecretGrant lets Target (an application or a unit) read the secret for
// as long as relation RelationID exists.
type SecretGrant struct {
	RelationID int64
	Target     string
}

// SecretConsumer is what a consuming unit follows of a secret.
type SecretConsumer struct {
	Unit     string
	Revision int64
	Label    string
}

// Revision returns a kept revision.
func (s *Secret) Revision(rev int64) (*SecretRevision, bool) {
	for i := range s.Revisions {
		if s.Revisions[i].Revision == rev {
			return &s.Revisions[i], true
		}
	}
	return nil, false
}

// Latest returns the latest revision.
func (s *Secret) Latest() *SecretRevision {
	r, _ := s.Revision(s.LatestRevision)
	return r
}

// Consumer returns what unit follows of the secret.
func (s *Secret) Consumer(unit string) (SecretConsumer, bool) {
	for _, c := range s.Consumers {
		if c.Unit == unit {
			return c, true
		}
	}
	return SecretConsumer{}, false
}

// OwnedBy reports whether unit manages the secret: its own unit secret, or
// an application secret of its application while it is the leader.
func (s *Secret) OwnedBy(unit string, leader bool) bool {
	if s.Owner == unit {
		return true
	}
	app, _, ok := ParseUnitName(unit)
	return ok && app == s.Owner && leader
}

// OwnerSide reports whether unit reads the secret as its owner does
// (always the latest revision): its own unit secret, or any application
// secret of its application.
func (s *Secret) OwnerSide(unit string) bool {
	if s.Owner == unit {
		return true
	}
	app, _, ok := ParseUnitName(unit)
	return ok && app == s.Owner
}

// Granted reports whether unit was granted the secret, itself or through
// its application.
func (s *Secret) Granted(unit string) bool {
	app, _, _ := ParseUnitName(unit)
	for _, g := range s.Grants {
		if g.Target == unit || g.Target == app {
			return true
		}
	}
	return false
}

// RotateInterval is the period of a rotation policy (0 for never or none).
func RotateInterval(policy string) time.Duration {
	const day = 24 * time.Hour
	switch policy {
	case "hourly":
		return time.Hour
	case "daily":
		return day
	case "weekly":
		return 7 * day
	case "monthly":
		return 30 * day
	case "quarterly":
		return 90 * day
	case "yearly":
		return 365 * day
	}
	return 0
}

// ValidRotatePolicy reports whether p is a rotation policy Juju knows.
func ValidRotatePolicy(p string) bool {
	return p == "never" || RotateInterval(p) > 0
}

// ValidSecretID reports whether id is a secret id: 20 characters of
// lower-case base32hex (an xid, as Juju makes them).
func ValidSecretID(id string) bool {
	if len(id) != 20 {
		return false
	}
	for _, c := range id {
		if (c < '0' || c > '9') && (c < 'a' || c > 'v') {
			return false
		}
	}
	return true
}

// Secrets returns every secret, ordered by id.
func (s *State) Secrets() []*Secret {
	var out []*Secret
	walk(s.secrets, func(_ []byte, v *Secret) bool {
		out = append(out, v)
		return true
	})
	return out
}

// Secret returns a secret by id.
func (s *State) Secret(id string) (*Secret, bool) {
	return s.secrets.Get([]byte(id))
}

// SecretsKeyID is the id of the key the stored secrets were sealed with
// (nil while there is none).
func (s *State) SecretsKeyID() []byte {
	var id []byte
	walk(s.secrets, func(_ []byte, v *Secret) bool {
		for _, r := range v.Revisions {
			id = r.KeyID
			return false
		}
		return true
	})
	return id
}

func (t *txn) secretTxn() *iradix.Txn[*Secret] {
	if t.secrets == nil {
		t.secrets = t.base.secrets.Txn()
	}
	return t.secrets
}

func (t *txn) secretRoot() *iradix.Node[*Secret] {
	if t.secrets != nil {
		return t.secrets.Root()
	}
	return t.base.secrets.Root()
}

// getSecret returns a copy of a secret to change (its slices are still
// shared: replace them, never write into them).
func (t *txn) getSecret(id string) (*Secret, *CommandError) {
	s, ok := t.secretTxn().Get([]byte(id))
	if !ok {
		return nil, opErr(storepb.ErrorCode_NOT_FOUND, "secret %q not found", id)
	}
	c := *s
	return &c, nil
}

func (t *txn) putSecret(s *Secret) {
	s.Updated = t.now
	t.secretTxn().Insert([]byte(s.ID), s)
}

// checkSecretOwner validates the owner of a new secret.
func (t *txn) checkSecretOwner(owner string) *CommandError {
	if owner == t.readMeta().app {
		return nil
	}
	if _, err := t.liveUnit(owner); err != nil {
		return opErr(storepb.ErrorCode_INVALID, "secret owner %q is neither the application nor one of its units", owner)
	}
	return nil
}

// checkOwnerOf refuses a change of s asked by anyone but its owner.
func checkOwnerOf(s *Secret, owner string) *CommandError {
	if s.Owner != owner {
		return opErr(storepb.ErrorCode_INVALID, "permission denied: secret %q is owned by %s, not %s", s.ID, s.Owner, owner)
	}
	return nil
}

// sealedRevision validates sealed content against the key the store's
// secrets were sealed with.
func (t *txn) sealedRevision(c *storepb.SealedContent, rev int64, expire int64) (SecretRevision, *CommandError) {
	switch {
	case c == nil || len(c.GetCiphertext()) == 0:
		return SecretRevision{}, opErr(storepb.ErrorCode_INVALID, "a secret revision needs content")
	case len(c.GetKeyId()) != SecretKeyIDSize || len(c.GetNonce()) != secretNonceSize:
		return SecretRevision{}, opErr(storepb.ErrorCode_INVALID, "sealed secret content needs a %d byte key id and a %d byte nonce", SecretKeyIDSize, secretNonceSize)
	case len(c.GetCiphertext()) > MaxSecretSealed:
		return SecretRevision{}, opErr(storepb.ErrorCode_TOO_LARGE, "sealed secret content of %d bytes is over the %d byte limit", len(c.GetCiphertext()), MaxSecretSealed)
	}
	var have []byte
	it := t.secretRoot().Iterator()
	for _, v, ok := it.Next(); ok && have == nil; _, v, ok = it.Next() {
		if len(v.Revisions) > 0 {
			have = v.Revisions[0].KeyID
		}
	}
	if have != nil && !bytes.Equal(have, c.GetKeyId()) {
		return SecretRevision{}, opErr(storepb.ErrorCode_CONFLICT, "secrets key mismatch: the stored secrets were sealed with key id %x, this content with key id %x", have, c.GetKeyId())
	}
	return SecretRevision{Revision: rev, KeyID: bytes.Clone(c.GetKeyId()), Nonce: bytes.Clone(c.GetNonce()), Sealed: bytes.Clone(c.GetCiphertext()),
		Created: t.now, ExpiresAt: fromUnixNano(expire)}, nil
}

// checkSecretLabel refuses a label another secret of the same owner has.
func (t *txn) checkSecretLabel(owner, id, label string) *CommandError {
	if label == "" {
		return nil
	}
	if len(label) > MaxSecretLabel {
		return opErr(storepb.ErrorCode_TOO_LARGE, "secret label of %d bytes is over the %d byte limit", len(label), MaxSecretLabel)
	}
	it := t.secretRoot().Iterator()
	for _, s, ok := it.Next(); ok; _, s, ok = it.Next() {
		if s.ID != id && s.Owner == owner && s.Label == label {
			return opErr(storepb.ErrorCode_CONFLICT, "secret with label %q already exists", label)
		}
	}
	return nil
}

func checkSecretMeta(description, policy string) *CommandError {
	if len(description) > MaxSecretDescription {
		return opErr(storepb.ErrorCode_TOO_LARGE, "secret description of %d bytes is over the %d byte limit", len(description), MaxSecretDescription)
	}
	if policy != "" && !ValidRotatePolicy(policy) {
		return opErr(storepb.ErrorCode_INVALID, "rotate policy %q not valid", policy)
	}
	return nil
}

func (t *txn) nextRotate(policy string) time.Time {
	if d := RotateInterval(policy); d > 0 {
		return t.now.Add(d)
	}
	return time.Time{}
}

func (t *txn) createSecret(o *storepb.CreateSecret) (*storepb.OpResult, *CommandError) {
	if !ValidSecretID(o.GetId()) {
		return nil, opErr(storepb.ErrorCode_INVALID, "secret id %q not valid", o.GetId())
	}
	if _, ok := t.secretTxn().Get([]byte(o.GetId())); ok {
		return nil, opErr(storepb.ErrorCode_CONFLICT, "secret %q already exists", o.GetId())
	}
	if err := t.checkSecretOwner(o.GetOwner()); err != nil {
		return nil, err
	}
	if err := checkSecretMeta(o.GetDescription(), o.GetRotatePolicy()); err != nil {
		return nil, err
	}
	if err := t.checkSecretLabel(o.GetOwner(), o.GetId(), o.GetLabel()); err != nil {
		return nil, err
	}
	rev, err := t.sealedRevision(o.GetContent(), 1, o.GetExpireUnixNano())
	if err != nil {
		return nil, err
	}
	s := &Secret{ID: o.GetId(), Owner: o.GetOwner(), Label: o.GetLabel(), Description: o.GetDescription(),
		RotatePolicy: o.GetRotatePolicy(), NextRotate: t.nextRotate(o.GetRotatePolicy()),
		Created: t.now, LatestRevision: 1, Revisions: []SecretRevision{rev}}
	t.putSecret(s)
	return &storepb.OpResult{}, nil
}

func (t *txn) updateSecret(o *storepb.UpdateSecret) (*storepb.OpResult, *CommandError) {
	s, err := t.getSecret(o.GetId())
	if err != nil {
		return nil, err
	}
	if err := checkOwnerOf(s, o.GetOwner()); err != nil {
		return nil, err
	}
	if err := checkSecretMeta(o.GetDescription(), o.GetRotatePolicy()); err != nil {
		return nil, err
	}
	if o.GetSetLabel() {
		if err := t.checkSecretLabel(s.Owner, s.ID, o.GetLabel()); err != nil {
			return nil, err
		}
		s.Label = o.GetLabel()
	}
	if o.GetSetDescription() {
		s.Description = o.GetDescription()
	}
	if o.GetSetRotatePolicy() && o.GetRotatePolicy() != s.RotatePolicy {
		s.RotatePolicy = o.GetRotatePolicy()
		s.NextRotate = t.nextRotate(s.RotatePolicy)
	}
	switch {
	case o.GetContent() != nil:
		if len(s.Revisions) >= MaxSecretRevisions {
			return nil, opErr(storepb.ErrorCode_TOO_LARGE, "secret %q keeps %d revisions, the most it may: remove revisions no one follows first", s.ID, len(s.Revisions))
		}
		expire := unixNano(s.Latest().ExpiresAt)
		if o.GetSetExpire() {
			expire = o.GetExpireUnixNano()
		}
		rev, err := t.sealedRevision(o.GetContent(), s.LatestRevision+1, expire)
		if err != nil {
			return nil, err
		}
		s.LatestRevision = rev.Revision
		s.Revisions = append(slices.Clip(s.Revisions), rev)
		if d := RotateInterval(s.RotatePolicy); d > 0 {
			s.NextRotate = t.now.Add(d) // rotated: the next one is due a period on
		}
	case o.GetSetExpire():
		revs := slices.Clone(s.Revisions)
		revs[len(revs)-1].ExpiresAt = fromUnixNano(o.GetExpireUnixNano())
		s.Revisions = revs
	}
	t.putSecret(s)
	return &storepb.OpResult{}, nil
}

func (t *txn) removeSecret(o *storepb.RemoveSecret) (*storepb.OpResult, *CommandError) {
	s, err := t.getSecret(o.GetId())
	if err != nil {
		return nil, err
	}
	if err := checkOwnerOf(s, o.GetOwner()); err != nil {
		return nil, err
	}
	rev := o.GetRevision()
	if rev <= 0 || (len(s.Revisions) == 1 && s.Revisions[0].Revision == rev) {
		t.secretTxn().Delete([]byte(s.ID))
		return &storepb.OpResult{}, nil
	}
	if _, ok := s.Revision(rev); !ok {
		return nil, opErr(storepb.ErrorCode_NOT_FOUND, "secret revision %d for %q not found", rev, s.ID)
	}
	if rev == s.LatestRevision {
		return nil, opErr(storepb.ErrorCode_INVALID, "cannot remove the latest revision %d of secret %q: remove the secret instead", rev, s.ID)
	}
	s.Revisions = slices.DeleteFunc(slices.Clone(s.Revisions), func(r SecretRevision) bool { return r.Revision == rev })
	t.putSecret(s)
	return &storepb.OpResult{}, nil
}

// grantTarget checks that target is an application of relation r, or a
// unit of one.
func (t *txn) grantTarget(r *Relation, target string) *CommandError {
	app := t.readMeta().app
	remote := r.RemoteApp
	if r.Peer {
		remote = app
	}
	tapp, _, isUnit := ParseUnitName(target)
	if !isUnit {
		tapp = target
	}
	if tapp != remote {
		return opErr(storepb.ErrorCode_INVALID, "cannot grant secret to %q: it is not the remote side of relation %s", target, r.Key())
	}
	return nil
}

func (t *txn) grantSecret(o *storepb.GrantSecret) (*storepb.OpResult, *CommandError) {
	s, err := t.getSecret(o.GetId())
	if err != nil {
		return nil, err
	}
	if err := checkOwnerOf(s, o.GetOwner()); err != nil {
		return nil, err
	}
	r, ok := t.getRelation(o.GetRelationId())
	if !ok {
		return nil, opErr(storepb.ErrorCode_NOT_FOUND, "relation %d not found", o.GetRelationId())
	}
	if err := t.grantTarget(r, o.GetTarget()); err != nil {
		return nil, err
	}
	g := SecretGrant{RelationID: r.ID, Target: o.GetTarget()}
	if slices.Contains(s.Grants, g) {
		return &storepb.OpResult{}, nil
	}
	grants := append(slices.Clone(s.Grants), g)
	slices.SortFunc(grants, func(a, b SecretGrant) int {
		if a.RelationID != b.RelationID {
			return int(a.RelationID - b.RelationID)
		}
		return strings.Compare(a.Target, b.Target)
	})
	s.Grants = grants
	t.putSecret(s)
	return &storepb.OpResult{}, nil
}

func (t *txn) revokeSecret(o *storepb.RevokeSecret) (*storepb.OpResult, *CommandError) {
	s, err := t.getSecret(o.GetId())
	if err != nil {
		return nil, err
	}
	if err := checkOwnerOf(s, o.GetOwner()); err != nil {
		return nil, err
	}
	grants := slices.DeleteFunc(slices.Clone(s.Grants), func(g SecretGrant) bool {
		return g.Target == o.GetTarget() && (o.GetRelationId() < 0 || g.RelationID == o.GetRelationId())
	})
	if len(grants) == len(s.Grants) {
		return &storepb.OpResult{}, nil
	}
	s.Grants = grants
	t.dropUngrantedConsumers(s)
	t.putSecret(s)
	return &storepb.OpResult{}, nil
}

// dropUngrantedConsumers forgets the consumers that may no longer read s.
func (t *txn) dropUngrantedConsumers(s *Secret) {
	s.Consumers = slices.DeleteFunc(slices.Clone(s.Consumers), func(c SecretConsumer) bool { return !s.Granted(c.Unit) && !s.OwnerSide(c.Unit) })
}

func (t *txn) trackSecret(o *storepb.TrackSecret) (*storepb.OpResult, *CommandError) {
	s, err := t.getSecret(o.GetId())
	if err != nil {
		return nil, err
	}
	if _, err := t.liveUnit(o.GetUnit()); err != nil {
		return nil, err
	}
	if !s.Granted(o.GetUnit()) && !s.OwnerSide(o.GetUnit()) {
		return nil, opErr(storepb.ErrorCode_INVALID, "permission denied: %s may not read secret %q", o.GetUnit(), s.ID)
	}
	if _, ok := s.Revision(o.GetRevision()); !ok {
		return nil, opErr(storepb.ErrorCode_NOT_FOUND, "secret revision %d for %q not found", o.GetRevision(), s.ID)
	}
	c, _ := s.Consumer(o.GetUnit())
	c.Unit, c.Revision = o.GetUnit(), o.GetRevision()
	if o.GetSetLabel() {
		if len(o.GetLabel()) > MaxSecretLabel {
			return nil, opErr(storepb.ErrorCode_TOO_LARGE, "secret label of %d bytes is over the %d byte limit", len(o.GetLabel()), MaxSecretLabel)
		}
		if o.GetLabel() != "" {
			it := t.secretRoot().Iterator()
			for _, other, ok := it.Next(); ok; _, other, ok = it.Next() {
				if oc, ok := other.Consumer(o.GetUnit()); ok && other.ID != s.ID && oc.Label == o.GetLabel() {
					return nil, opErr(storepb.ErrorCode_CONFLICT, "secret with label %q already exists", o.GetLabel())
				}
			}
		}
		c.Label = o.GetLabel()
	}
	old, had := s.Consumer(o.GetUnit())
	if had && old == c {
		return &storepb.OpResult{}, nil
	}
	consumers := slices.DeleteFunc(slices.Clone(s.Consumers), func(x SecretConsumer) bool { return x.Unit == c.Unit })
	consumers = append(consumers, c)
	slices.SortFunc(consumers, func(a, b SecretConsumer) int { return strings.Compare(a.Unit, b.Unit) })
	s.Consumers = consumers
	t.putSecret(s)
	return &storepb.OpResult{}, nil
}

func (t *txn) secretRotated(o *storepb.SecretRotated) (*storepb.OpResult, *CommandError) {
	s, ok := t.secretTxn().Get([]byte(o.GetId()))
	if !ok || unixNano(s.NextRotate) != o.GetDueUnixNano() {
		return &storepb.OpResult{}, nil // removed, or rescheduled meanwhile
	}
	c := *s
	c.NextRotate = t.nextRotate(c.RotatePolicy)
	t.putSecret(&c)
	return &storepb.OpResult{}, nil
}

// applySecretOp applies the secret ops; ok is false for any other op.
func (t *txn) applySecretOp(op *storepb.Op) (res *storepb.OpResult, err *CommandError, ok bool) {
	switch o := op.GetOp().(type) {
	case *storepb.Op_CreateSecret:
		res, err = t.createSecret(o.CreateSecret)
	case *storepb.Op_UpdateSecret:
		res, err = t.updateSecret(o.UpdateSecret)
	case *storepb.Op_RemoveSecret:
		res, err = t.removeSecret(o.RemoveSecret)
	case *storepb.Op_GrantSecret:
		res, err = t.grantSecret(o.GrantSecret)
	case *storepb.Op_RevokeSecret:
		res, err = t.revokeSecret(o.RevokeSecret)
	case *storepb.Op_TrackSecret:
		res, err = t.trackSecret(o.TrackSecret)
	case *storepb.Op_SecretRotated:
		res, err = t.secretRotated(o.SecretRotated)
	default:
		return nil, nil, false
	}
	return res, err, true
}

// forgetRelationSecrets drops the grants made for a relation (called when
// it is removed), and the consumers that could read only through them.
func (t *txn) forgetRelationSecrets(relationID int64) {
	var changed []*Secret
	it := t.secretRoot().Iterator()
	for _, s, ok := it.Next(); ok; _, s, ok = it.Next() {
		if slices.ContainsFunc(s.Grants, func(g SecretGrant) bool { return g.RelationID == relationID }) {
			c := *s
			c.Grants = slices.DeleteFunc(slices.Clone(s.Grants), func(g SecretGrant) bool { return g.RelationID == relationID })
			t.dropUngrantedConsumers(&c)
			changed = append(changed, &c)
		}
	}
	for _, s := range changed {
		t.putSecret(s)
	}
}

// forgetUnitSecrets removes a removed unit's own secrets, its grants and
// what it consumed.
func (t *txn) forgetUnitSecrets(unit string) {
	var drop []string
	var changed []*Secret
	it := t.secretRoot().Iterator()
	for _, s, ok := it.Next(); ok; _, s, ok = it.Next() {
		switch {
		case s.Owner == unit:
			drop = append(drop, s.ID)
		case slices.ContainsFunc(s.Grants, func(g SecretGrant) bool { return g.Target == unit }),
			slices.ContainsFunc(s.Consumers, func(c SecretConsumer) bool { return c.Unit == unit }):
			c := *s
			c.Grants = slices.DeleteFunc(slices.Clone(s.Grants), func(g SecretGrant) bool { return g.Target == unit })
			c.Consumers = slices.DeleteFunc(slices.Clone(s.Consumers), func(x SecretConsumer) bool { return x.Unit == unit })
			changed = append(changed, &c)
		}
	}
	for _, id := range drop {
		t.secretTxn().Delete([]byte(id))
	}
	for _, s := range changed {
		t.putSecret(s)
	}
}

// secretToPB and secretFromPB convert a secret to and from its snapshot
// record.
func secretToPB(s *Secret) *storepb.SecretRecord {
	rec := &storepb.SecretRecord{Id: s.ID, Owner: s.Owner, Label: s.Label, Description: s.Description, RotatePolicy: s.RotatePolicy,
		NextRotateUnixNano: unixNano(s.NextRotate), CreatedUnixNano: unixNano(s.Created), UpdatedUnixNano: unixNano(s.Updated),
		LatestRevision: s.LatestRevision}
	for _, r := range s.Revisions {
		rec.Revisions = append(rec.Revisions, &storepb.SecretRevisionRecord{Revision: r.Revision,
			Content:         &storepb.SealedContent{KeyId: r.KeyID, Nonce: r.Nonce, Ciphertext: r.Sealed},
			CreatedUnixNano: unixNano(r.Created), ExpireUnixNano: unixNano(r.ExpiresAt)})
	}
	for _, g := range s.Grants {
		rec.Grants = append(rec.Grants, &storepb.SecretGrantRecord{RelationId: g.RelationID, Target: g.Target})
	}
	for _, c := range s.Consumers {
		rec.Consumers = append(rec.Consumers, &storepb.SecretConsumerRecord{Unit: c.Unit, Revision: c.Revision, Label: c.Label})
	}
	return rec
}

func secretFromPB(rec *storepb.SecretRecord) *Secret {
	s := &Secret{ID: rec.GetId(), Owner: rec.GetOwner(), Label: rec.GetLabel(), Description: rec.GetDescription(), RotatePolicy: rec.GetRotatePolicy(),
		NextRotate: fromUnixNano(rec.GetNextRotateUnixNano()), Created: fromUnixNano(rec.GetCreatedUnixNano()), Updated: fromUnixNano(rec.GetUpdatedUnixNano()),
		LatestRevision: rec.GetLatestRevision()}
	for _, r := range rec.GetRevisions() {
		c := r.GetContent()
		s.Revisions = append(s.Revisions, SecretRevision{Revision: r.GetRevision(), KeyID: c.GetKeyId(), Nonce: c.GetNonce(), Sealed: c.GetCiphertext(),
			Created: fromUnixNano(r.GetCreatedUnixNano()), ExpiresAt: fromUnixNano(r.GetExpireUnixNano())})
	}
	for _, g := range rec.GetGrants() {
		s.Grants = append(s.Grants, SecretGrant{RelationID: g.GetRelationId(), Target: g.GetTarget()})
	}
	for _, c := range rec.GetConsumers() {
		s.Consumers = append(s.Consumers, SecretConsumer{Unit: c.GetUnit(), Revision: c.GetRevision(), Label: c.GetLabel()})
	}
	return s
}

// The functions below build one secret op each.

// CreateSecretOp adds a secret.
func CreateSecretOp(id, owner, label, description, rotate string, expire time.Time, content *storepb.SealedContent) *storepb.Op {
	return &storepb.Op{Op: &storepb.Op_CreateSecret{CreateSecret: &storepb.CreateSecret{Id: id, Owner: owner, Label: label, Description: description,
		RotatePolicy: rotate, ExpireUnixNano: unixNano(expire), Content: content}}}
}

// UpdateSecretOp changes a secret; build it with the SecretUpdate setters.
func UpdateSecretOp(u *storepb.UpdateSecret) *storepb.Op {
	return &storepb.Op{Op: &storepb.Op_UpdateSecret{UpdateSecret: u}}
}

// RemoveSecretOp removes a revision of a secret, or (revision 0) all of it.
func RemoveSecretOp(id, owner string, revision int64) *storepb.Op {
	return &storepb.Op{Op: &storepb.Op_RemoveSecret{RemoveSecret: &storepb.RemoveSecret{Id: id, Owner: owner, Revision: revision}}}
}

// GrantSecretOp grants target read access to a secret over a relation.
func GrantSecretOp(id, owner string, relationID int64, target string) *storepb.Op {
	return &storepb.Op{Op: &storepb.Op_GrantSecret{GrantSecret: &storepb.GrantSecret{Id: id, Owner: owner, RelationId: relationID, Target: target}}}
}

// RevokeSecretOp revokes target's grants (relationID < 0: over every
// relation).
func RevokeSecretOp(id, owner string, relationID int64, target string) *storepb.Op {
	return &storepb.Op{Op: &storepb.Op_RevokeSecret{RevokeSecret: &storepb.RevokeSecret{Id: id, Owner: owner, RelationId: relationID, Target: target}}}
}

// TrackSecretOp records the revision a consumer follows, and its label
// when setLabel.
func TrackSecretOp(id, unit string, revision int64, setLabel bool, label string) *storepb.Op {
	return &storepb.Op{Op: &storepb.Op_TrackSecret{TrackSecret: &storepb.TrackSecret{Id: id, Unit: unit, Revision: revision, SetLabel: setLabel, Label: label}}}
}

// SecretRotatedOp reschedules a secret's rotation that was due at due.
func SecretRotatedOp(id string, due time.Time) *storepb.Op {
	return &storepb.Op{Op: &storepb.Op_SecretRotated{SecretRotated: &storepb.SecretRotated{Id: id, DueUnixNano: unixNano(due)}}}
}
