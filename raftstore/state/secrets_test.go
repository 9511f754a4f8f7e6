package state_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/state/statetest"
	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

const sid = "cu3kq1rt4g0s73b0abcd"

var keyA = []byte("keyid-aa")

func sealed(key []byte, text string) *storepb.SealedContent {
	return &storepb.SealedContent{KeyId: key, Nonce: make([]byte, 12), Ciphertext: []byte(text)}
}

// secretsStore has app/0 and app/1 and a peer relation.
func secretsStore(t *testing.T) (*statetest.Store, int64) {
	m := statetest.New(t, "app")
	m.Claim("m0", "app-0", 0)
	m.Claim("m1", "app-1", 1)
	return m, m.Relation("peers", "p")
}

func TestSecretRevisionsGrantsAndConsumers(t *testing.T) {
	m, rel := secretsStore(t)
	m.Must(state.CreateSecretOp(sid, "app", "db", "the db", "", time.Time{}, sealed(keyA, "c1")))
	s, ok := m.State().Secret(sid)
	if !ok || s.LatestRevision != 1 || s.Owner != "app" || s.Label != "db" || len(s.Revisions) != 1 {
		t.Fatalf("created secret: %+v", s)
	}
	// app/1 reads through the application: owner side, no grant needed.
	if !s.OwnerSide("app/1") || s.OwnedBy("app/1", false) || !s.OwnedBy("app/1", true) {
		t.Fatal("ownership of an application secret")
	}
	// Only the owner changes it.
	if err := m.Do(state.UpdateSecretOp(&storepb.UpdateSecret{Id: sid, Owner: "app/0", Content: sealed(keyA, "x")})); !errors.Is(err, state.ErrInvalid) {
		t.Fatalf("update by a non-owner: %v", err)
	}
	m.Must(state.UpdateSecretOp(&storepb.UpdateSecret{Id: sid, Owner: "app", Content: sealed(keyA, "c2")}))
	m.Must(state.UpdateSecretOp(&storepb.UpdateSecret{Id: sid, Owner: "app", SetLabel: true, Label: "db2"}))
	s, _ = m.State().Secret(sid)
	if s.LatestRevision != 2 || len(s.Revisions) != 2 || string(s.Latest().Sealed) != "c2" || s.Label != "db2" {
		t.Fatalf("after update: %+v", s)
	}
	// A unit secret of app/0, granted to app/1 over the peer relation.
	const uid = "cu3kq1rt4g0s73b0uvuv"
	m.Must(state.CreateSecretOp(uid, "app/0", "", "", "", time.Time{}, sealed(keyA, "u1")))
	if err := m.Do(state.TrackSecretOp(uid, "app/1", 1, false, "")); !errors.Is(err, state.ErrInvalid) {
		t.Fatalf("a consumer without a grant: %v", err)
	}
	if err := m.Do(state.GrantSecretOp(uid, "app/0", rel, "other")); !errors.Is(err, state.ErrInvalid) {
		t.Fatalf("grant to an application not in the relation: %v", err)
	}
	m.Must(state.GrantSecretOp(uid, "app/0", rel, "app/1"))
	m.Must(state.TrackSecretOp(uid, "app/1", 1, true, "mine"))
	m.Must(state.UpdateSecretOp(&storepb.UpdateSecret{Id: uid, Owner: "app/0", Content: sealed(keyA, "u2")}))
	s, _ = m.State().Secret(uid)
	if c, ok := s.Consumer("app/1"); !ok || c.Revision != 1 || c.Label != "mine" {
		t.Fatalf("the consumer must still follow revision 1: %+v", s.Consumers)
	}
	// The revision a consumer follows can be removed by the owner (it asks
	// after secret-remove), the latest cannot.
	if err := m.Do(state.RemoveSecretOp(uid, "app/0", 2)); !errors.Is(err, state.ErrInvalid) {
		t.Fatalf("removing the latest revision: %v", err)
	}
	if err := m.Do(state.RemoveSecretOp(uid, "app/0", 7)); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("removing a missing revision: %v", err)
	}
	m.Must(state.TrackSecretOp(uid, "app/1", 2, false, ""))
	m.Must(state.RemoveSecretOp(uid, "app/0", 1))
	s, _ = m.State().Secret(uid)
	if _, ok := s.Revision(1); ok || s.LatestRevision != 2 {
		t.Fatalf("revision 1 must be gone: %+v", s.Revisions)
	}
	if c, _ := s.Consumer("app/1"); c.Label != "mine" {
		t.Fatal("tracking a new revision lost the consumer's label")
	}
	// Revoking drops the grant and the consumer.
	m.Must(state.RevokeSecretOp(uid, "app/0", -1, "app/1"))
	s, _ = m.State().Secret(uid)
	if len(s.Grants) != 0 || len(s.Consumers) != 0 {
		t.Fatalf("after revoke: %+v %+v", s.Grants, s.Consumers)
	}
	// Removing the secret.
	m.Must(state.RemoveSecretOp(uid, "app/0", 0))
	if _, ok := m.State().Secret(uid); ok {
		t.Fatal("secret not removed")
	}
	if err := m.Do(state.UpdateSecretOp(&storepb.UpdateSecret{Id: uid, Owner: "app/0", SetLabel: true})); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("updating a removed secret: %v", err)
	}
}

func TestSecretLabelsAreUniquePerOwner(t *testing.T) {
	m, _ := secretsStore(t)
	m.Must(state.CreateSecretOp(sid, "app", "db", "", "", time.Time{}, sealed(keyA, "c")))
	err := m.Do(state.CreateSecretOp("cu3kq1rt4g0s73b0abce", "app", "db", "", "", time.Time{}, sealed(keyA, "c")))
	if !errors.Is(err, state.ErrConflict) {
		t.Fatalf("a second secret labelled db: %v", err)
	}
	// Another owner may use the label.
	m.Must(state.CreateSecretOp("cu3kq1rt4g0s73b0abce", "app/0", "db", "", "", time.Time{}, sealed(keyA, "c")))
	if err := m.Do(state.CreateSecretOp(sid, "app", "", "", "", time.Time{}, sealed(keyA, "c"))); !errors.Is(err, state.ErrConflict) {
		t.Fatalf("a secret id used twice: %v", err)
	}
}

func TestSecretsRefuseBadInput(t *testing.T) {
	m, _ := secretsStore(t)
	before := strip(state.Dump(m.State()))
	for name, op := range map[string]*storepb.Op{
		"bad id":        state.CreateSecretOp("NOT-AN-ID", "app", "", "", "", time.Time{}, sealed(keyA, "c")),
		"bad owner":     state.CreateSecretOp(sid, "other", "", "", "", time.Time{}, sealed(keyA, "c")),
		"missing unit":  state.CreateSecretOp(sid, "app/9", "", "", "", time.Time{}, sealed(keyA, "c")),
		"no content":    state.CreateSecretOp(sid, "app", "", "", "", time.Time{}, nil),
		"short key id":  state.CreateSecretOp(sid, "app", "", "", "", time.Time{}, sealed([]byte("k"), "c")),
		"bad policy":    state.CreateSecretOp(sid, "app", "", "", "fortnightly", time.Time{}, sealed(keyA, "c")),
		"too large":     state.CreateSecretOp(sid, "app", "", "", "", time.Time{}, sealed(keyA, string(make([]byte, state.MaxSecretSealed+1)))),
		"unknown track": state.TrackSecretOp(sid, "app/1", 1, false, ""),
	} {
		if err := m.Do(op); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if after := strip(state.Dump(m.State())); after != before {
		t.Fatalf("refused ops changed the state:\n%s\n%s", before, after)
	}
}

func TestSecretsKeyMismatchIsRefused(t *testing.T) {
	m, _ := secretsStore(t)
	m.Must(state.CreateSecretOp(sid, "app", "", "", "", time.Time{}, sealed(keyA, "c")))
	err := m.Do(state.CreateSecretOp("cu3kq1rt4g0s73b0abce", "app", "", "", "", time.Time{}, sealed([]byte("keyid-bb"), "c")))
	if !errors.Is(err, state.ErrConflict) {
		t.Fatalf("content sealed with another key: %v", err)
	}
	if !bytes.Equal(m.State().SecretsKeyID(), keyA) {
		t.Fatalf("key id %x", m.State().SecretsKeyID())
	}
}

func TestSecretRotationAndExpiryAreScheduledFromTheCommandTime(t *testing.T) {
	m, _ := secretsStore(t)
	expire := m.Now().Add(time.Hour)
	m.Must(state.CreateSecretOp(sid, "app", "", "", "daily", expire, sealed(keyA, "c")))
	s, _ := m.State().Secret(sid)
	due := s.NextRotate
	if !due.Equal(m.Now().Add(24*time.Hour)) || !s.Latest().ExpiresAt.Equal(expire.UTC()) {
		t.Fatalf("rotate %s, expire %s (now %s)", due, s.Latest().ExpiresAt, m.Now())
	}
	m.Advance(25 * time.Hour)
	m.Must(state.SecretRotatedOp(sid, due))
	s, _ = m.State().Secret(sid)
	if !s.NextRotate.Equal(m.Now().Add(24 * time.Hour)) {
		t.Fatalf("rotation rescheduled to %s (now %s)", s.NextRotate, m.Now())
	}
	// A stale report changes nothing.
	m.Must(state.SecretRotatedOp(sid, due))
	if s2, _ := m.State().Secret(sid); !s2.NextRotate.Equal(s.NextRotate) {
		t.Fatal("a stale rotation report moved the schedule")
	}
	// A new revision keeps the expiry unless told otherwise.
	m.Must(state.UpdateSecretOp(&storepb.UpdateSecret{Id: sid, Owner: "app", Content: sealed(keyA, "d")}))
	if s, _ = m.State().Secret(sid); !s.Latest().ExpiresAt.Equal(expire.UTC()) {
		t.Fatalf("expiry of revision 2: %s", s.Latest().ExpiresAt)
	}
	m.Must(state.UpdateSecretOp(&storepb.UpdateSecret{Id: sid, Owner: "app", SetRotatePolicy: true, RotatePolicy: "never"}))
	if s, _ = m.State().Secret(sid); !s.NextRotate.IsZero() {
		t.Fatal("policy never still rotates")
	}
}

func TestSecretsGoWithTheirRelationAndUnit(t *testing.T) {
	m, rel := secretsStore(t)
	const uid = "cu3kq1rt4g0s73b0uvuv"
	m.Must(state.CreateSecretOp(sid, "app", "", "", "", time.Time{}, sealed(keyA, "c")))
	m.Must(state.CreateSecretOp(uid, "app/1", "", "", "", time.Time{}, sealed(keyA, "c")))
	m.Must(state.GrantSecretOp(uid, "app/1", rel, "app/0"))
	m.Must(state.TrackSecretOp(uid, "app/0", 1, false, ""))
	m.Must(state.RemoveRelationOp(rel))
	s, _ := m.State().Secret(uid)
	if len(s.Grants) != 0 || len(s.Consumers) != 0 {
		t.Fatalf("grants and consumers must go with the relation: %+v", s)
	}
	m.Must(state.RemoveUnitOp("app/1", 0, "test"))
	if _, ok := m.State().Secret(uid); ok {
		t.Fatal("a removed unit's secret must go with it")
	}
	if _, ok := m.State().Secret(sid); !ok {
		t.Fatal("the application secret must stay")
	}
}

func TestSnapshotAndHashCoverSecrets(t *testing.T) {
	m, rel := secretsStore(t)
	m.Must(state.CreateSecretOp(sid, "app", "db", "desc", "weekly", m.Now().Add(time.Hour), sealed(keyA, "c1")))
	m.Must(state.UpdateSecretOp(&storepb.UpdateSecret{Id: sid, Owner: "app", Content: sealed(keyA, "c2")}))
	m.Must(state.GrantSecretOp(sid, "app", rel, "app"))
	m.Must(state.TrackSecretOp(sid, "app/1", 1, true, "l"))
	got := reloaded(t, m.State())
	if a, b := state.Dump(m.State()), state.Dump(got); a != b {
		t.Fatalf("snapshot lost secrets:\n%s\n---\n%s", a, b)
	}
	h1, _ := state.HashState(m.State())
	m.Must(state.TrackSecretOp(sid, "app/1", 2, false, ""))
	h2, _ := state.HashState(m.State())
	if bytes.Equal(h1, h2) {
		t.Fatal("the state hash does not cover what consumers follow")
	}
}
