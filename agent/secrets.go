package agent

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/bagkeeper/bagkeeper/agent/hooktools"
	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

// Secrets. The content of every secret revision is sealed here, in the
// member whose hook wrote it, before it is proposed: the raft log, the
// snapshots and every data dir hold only AES-256-GCM ciphertext under the
// application's secrets key (--secrets-key-file, the same file mounted in
// every pod of the application). The key never leaves the process. Each
// sealed revision carries the key's id, the first 8 bytes of
// HMAC-SHA256(key, "bagkeeper secrets key"), so that a member with another
// key is told so instead of failing to decrypt: the state machine refuses
// content sealed with a key other than the stored secrets', and every
// secret tool of such a member fails naming both ids.
//
// Secret changes (secret-add, secret-set, secret-remove, secret-grant,
// secret-revoke, and the revision a consumer follows) are kept with the
// hook and committed with its other writes and its cursor, only if it
// exits 0, as Juju commits them. Each is checked when the tool is called,
// against the current state with the hook's earlier secret changes
// applied, which is also what the hook's secret tools read.

// SecretsKeySize is the size of an application secrets key.
const SecretsKeySize = 32

// MaxSecretContent bounds a secret revision's content (its JSON encoding).
const MaxSecretContent = 64 << 10

// SecretsKey is an application's secrets key.
type SecretsKey struct {
	aead cipher.AEAD
	id   []byte
}

// errSecretsDisabled is the error of every secret tool of an agent without
// a key.
var errSecretsDisabled = errors.New("secrets are not enabled: the sidecar has no --secrets-key-file")

// ParseSecretsKey reads a key: 32 raw bytes, or 64 hexadecimal digits, or
// the standard base64 of 32 bytes; trailing white space is ignored.
func ParseSecretsKey(data []byte) (*SecretsKey, error) {
	var key []byte
	trimmed := bytes.TrimRight(data, " \t\r\n")
	switch {
	case len(data) == SecretsKeySize:
		key = data
	case len(trimmed) == 2*SecretsKeySize:
		k, err := hex.DecodeString(string(trimmed))
		if err != nil {
			return nil, fmt.Errorf("the key is 64 characters but not hexadecimal: %v", err)
		}
		key = k
	default:
		k, err := base64.StdEncoding.DecodeString(string(trimmed))
		if err != nil || len(k) != SecretsKeySize {
			return nil, fmt.Errorf("the key must be %d raw bytes, 64 hexadecimal digits or the base64 of %d bytes (got %d bytes)", SecretsKeySize, SecretsKeySize, len(data))
		}
		key = k
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("bagkeeper secrets key"))
	return &SecretsKey{aead: aead, id: mac.Sum(nil)[:state.SecretKeyIDSize]}, nil
}

// LoadSecretsKey reads a key file (see ParseSecretsKey).
func LoadSecretsKey(path string) (*SecretsKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--secrets-key-file: %w", err)
	}
	k, err := ParseSecretsKey(data)
	if err != nil {
		return nil, fmt.Errorf("--secrets-key-file %s: %w", path, err)
	}
	return k, nil
}

// ID is the key's id (shown in logs and errors; it reveals nothing of the
// key).
func (k *SecretsKey) ID() string { return hex.EncodeToString(k.id) }

// seal encrypts a revision's content, bound to the secret's id.
func (k *SecretsKey) seal(id string, content map[string]string) (*storepb.SealedContent, error) {
	plain, err := json.Marshal(content)
	if err != nil {
		return nil, err
	}
	if len(plain) > MaxSecretContent {
		return nil, fmt.Errorf("secret content of %d bytes is over the %d byte limit", len(plain), MaxSecretContent)
	}
	nonce := make([]byte, k.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return &storepb.SealedContent{KeyId: bytes.Clone(k.id), Nonce: nonce, Ciphertext: k.aead.Seal(nil, nonce, plain, []byte(id))}, nil
}

// open decrypts a revision.
func (k *SecretsKey) open(id string, r *state.SecretRevision) (map[string]string, error) {
	if !bytes.Equal(r.KeyID, k.id) {
		return nil, k.mismatch(r.KeyID)
	}
	plain, err := k.aead.Open(nil, r.Nonce, r.Sealed, []byte(id))
	if err != nil {
		return nil, fmt.Errorf("secret %q revision %d cannot be decrypted: %v", id, r.Revision, err)
	}
	var content map[string]string
	if err := json.Unmarshal(plain, &content); err != nil {
		return nil, fmt.Errorf("secret %q revision %d is damaged: %v", id, r.Revision, err)
	}
	return content, nil
}

func (k *SecretsKey) mismatch(stored []byte) error {
	return fmt.Errorf("secrets key mismatch: the stored secrets were sealed with key id %x, this sidecar's --secrets-key-file has key id %s", stored, k.ID())
}

// CheckSecretsKey reports whether key (nil: none) can read the secrets of
// st; the sidecar logs the answer once the member has caught up.
func CheckSecretsKey(st *state.State, key *SecretsKey) error {
	stored := st.SecretsKeyID()
	switch {
	case stored == nil:
		return nil
	case key == nil:
		return fmt.Errorf("the store holds secrets sealed with key id %x, and this sidecar has no --secrets-key-file", stored)
	case !bytes.Equal(stored, key.id):
		return key.mismatch(stored)
	}
	return nil
}

// newSecretID returns a new secret id: 12 random bytes in lower-case
// base32hex, 20 characters, as Juju's ids look.
func newSecretID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return strings.ToLower(base32.HexEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

var _ hooktools.SecretsContext = (*hookContext)(nil)

// secretsKey returns the agent's key once it is known to match the
// store's.
func (c *hookContext) secretsKey(st *state.State) (*SecretsKey, error) {
	k := c.a.cfg.SecretsKey
	if k == nil {
		return nil, errSecretsDisabled
	}
	if stored := st.SecretsKeyID(); stored != nil && !bytes.Equal(stored, k.id) {
		return nil, k.mismatch(stored)
	}
	return k, nil
}

var errPermissionDenied = errors.New("permission denied")

func secretNotFound(what string) error {
	return fmt.Errorf("secret %q %w", what, hooktools.ErrSecretNotFound)
}

// secretBuffer is a hook's secret changes, committed with the hook.
type secretBuffer struct {
	ops []*storepb.Op
}

// secretView is the state the hook's secret tools see: the current state
// with the hook's buffered secret changes, and extra, applied (by a state
// machine of its own, at the agent's clock). An op that would fail at
// commit fails here.
func (c *hookContext) secretView(extra ...*storepb.Op) (*state.State, error) {
	live := c.a.node.State()
	c.mu.Lock()
	ops := append(slices.Clone(c.secrets.ops), extra...)
	c.mu.Unlock()
	if len(ops) == 0 {
		return live, nil
	}
	m := state.NewMachine()
	m.Restore(live)
	cmd := state.NewCommand(ops...)
	cmd.TimeUnixNano = c.a.now().UnixNano()
	data, err := state.EncodeEntry(cmd)
	if err != nil {
		return nil, err
	}
	res, err := m.Apply(live.Index()+1, data)
	if err != nil {
		return nil, err
	}
	if err := state.ResultError(res); err != nil {
		return nil, err
	}
	return m.State(), nil
}

// view is secretView for reads.
func (c *hookContext) view() (*state.State, error) {
	st, err := c.secretView()
	return st, secretError(err)
}

// applySecret buffers ops for a secret owned by owner, once they pass
// against the hook's view: the leader's lease is checked with an
// application secret's, there and at commit.
func (c *hookContext) applySecret(owner string, ops ...*storepb.Op) error {
	if owner == c.app {
		ops = append([]*storepb.Op{state.CheckLeaseOp(c.unit)}, ops...)
	}
	if _, err := c.secretView(ops...); err != nil {
		return secretError(err)
	}
	c.mu.Lock()
	c.secrets.ops = append(c.secrets.ops, ops...)
	c.mu.Unlock()
	return nil
}

// secretError gives a refused secret op's error as the tools print it.
func secretError(err error) error {
	if isNotLeader(err) {
		return errPermissionDenied
	}
	var ce *state.CommandError
	if errors.As(err, &ce) {
		return errors.New(ce.Msg)
	}
	return err
}

// managedSecret returns, for a tool that changes the secret id, the key
// (once it is known to match the store's), the hook's view of secrets and
// the secret, which this unit must manage.
func (c *hookContext) managedSecret(id string) (*SecretsKey, *state.State, *state.Secret, error) {
	k, err := c.secretsKey(c.a.node.State())
	if err != nil {
		return nil, nil, nil, err
	}
	st, err := c.view()
	if err != nil {
		return nil, nil, nil, err
	}
	s, err := c.managed(st, id, "")
	if err != nil {
		return nil, nil, nil, err
	}
	return k, st, s, nil
}

// managed returns a secret this unit manages, by id or by owner label.
func (c *hookContext) managed(st *state.State, id, label string) (*state.Secret, error) {
	leader, _ := c.IsLeader()
	if id != "" {
		s, ok := st.Secret(id)
		if !ok {
			return nil, secretNotFound(id)
		}
		if !s.OwnedBy(c.unit, leader) {
			return nil, errPermissionDenied
		}
		return s, nil
	}
	for _, s := range st.Secrets() {
		if s.Label == label && s.OwnedBy(c.unit, leader) {
			return s, nil
		}
	}
	return nil, secretNotFound(label)
}

func (c *hookContext) CreateSecret(owner string, args hooktools.SecretUpdateArgs) (string, error) {
	k, err := c.secretsKey(c.a.node.State())
	if err != nil {
		return "", err
	}
	who := c.unit
	if owner == "application" {
		if ok, _ := c.IsLeader(); !ok {
			return "", hooktools.ErrIsNotLeader // as Juju's hook context
		}
		who = c.app
	}
	id := newSecretID()
	sealed, err := k.seal(id, args.Content)
	if err != nil {
		return "", err
	}
	var expire time.Time
	if args.Expire != nil {
		expire = *args.Expire
	}
	op := state.CreateSecretOp(id, who, deref(args.Label), deref(args.Description), deref(args.RotatePolicy), expire, sealed)
	if err := c.applySecret(who, op); err != nil {
		return "", err
	}
	return id, nil
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func (c *hookContext) UpdateSecret(id string, args hooktools.SecretUpdateArgs) error {
	k, _, s, err := c.managedSecret(id)
	if err != nil {
		return err
	}
	u := &storepb.UpdateSecret{Id: s.ID, Owner: s.Owner}
	if args.Content != nil {
		if u.Content, err = k.seal(s.ID, args.Content); err != nil {
			return err
		}
	}
	if args.Label != nil {
		u.SetLabel, u.Label = true, *args.Label
	}
	if args.Description != nil {
		u.SetDescription, u.Description = true, *args.Description
	}
	if args.RotatePolicy != nil {
		u.SetRotatePolicy, u.RotatePolicy = true, *args.RotatePolicy
	}
	if args.Expire != nil {
		u.SetExpire, u.ExpireUnixNano = true, args.Expire.UnixNano()
	}
	return c.applySecret(s.Owner, state.UpdateSecretOp(u))
}

func (c *hookContext) RemoveSecret(id string, revision int) error {
	_, _, s, err := c.managedSecret(id)
	if err != nil {
		return err
	}
	return c.applySecret(s.Owner, state.RemoveSecretOp(s.ID, s.Owner, int64(revision)))
}

func (c *hookContext) GetSecret(id, label string, refresh, peek bool) (map[string]string, error) {
	k, err := c.secretsKey(c.a.node.State())
	if err != nil {
		return nil, err
	}
	st, err := c.view()
	if err != nil {
		return nil, err
	}
	var s *state.Secret
	if id != "" {
		var ok bool
		if s, ok = st.Secret(id); !ok {
			return nil, secretNotFound(id)
		}
	} else {
		for _, x := range st.Secrets() {
			if cons, ok := x.Consumer(c.unit); (ok && cons.Label == label) || (x.Label == label && x.OwnerSide(c.unit)) {
				s = x
				break
			}
		}
		if s == nil {
			return nil, secretNotFound(label)
		}
	}
	leader, _ := c.IsLeader()
	if s.OwnerSide(c.unit) {
		// The owner's side always reads the latest revision; a label given
		// with the id relabels a secret this unit manages.
		if id != "" && label != "" && label != s.Label && s.OwnedBy(c.unit, leader) {
			if err := c.applySecret(s.Owner, state.UpdateSecretOp(&storepb.UpdateSecret{Id: s.ID, Owner: s.Owner, SetLabel: true, Label: label})); err != nil {
				return nil, err
			}
		}
		return k.open(s.ID, s.Latest())
	}
	if !s.Granted(c.unit) {
		return nil, errPermissionDenied
	}
	cons, tracking := s.Consumer(c.unit)
	rev := cons.Revision
	setLabel := id != "" && label != "" && label != cons.Label
	switch {
	case peek:
		rev = s.LatestRevision
	case refresh || !tracking:
		rev = s.LatestRevision
		fallthrough
	default:
		if rev != cons.Revision || setLabel || !tracking {
			if err := c.applySecret("", state.TrackSecretOp(s.ID, c.unit, rev, setLabel, label)); err != nil {
				return nil, err
			}
		}
	}
	r, ok := s.Revision(rev)
	if !ok {
		return nil, fmt.Errorf("secret %q revision %d %w", s.ID, rev, hooktools.ErrSecretNotFound)
	}
	return k.open(s.ID, r)
}

func (c *hookContext) SecretIDs() ([]string, error) {
	if _, err := c.secretsKey(c.a.node.State()); err != nil {
		return nil, err
	}
	st, err := c.view()
	if err != nil {
		return nil, err
	}
	leader, _ := c.IsLeader()
	var out []string
	for _, s := range st.Secrets() {
		if s.OwnedBy(c.unit, leader) {
			out = append(out, s.ID)
		}
	}
	return out, nil
}

func (c *hookContext) SecretInfo(id, label string) (hooktools.SecretInfo, error) {
	if _, err := c.secretsKey(c.a.node.State()); err != nil {
		return hooktools.SecretInfo{}, err
	}
	st, err := c.view()
	if err != nil {
		return hooktools.SecretInfo{}, err
	}
	s, err := c.managed(st, id, label)
	if errors.Is(err, errPermissionDenied) {
		err = secretNotFound(id)
	}
	if err != nil {
		return hooktools.SecretInfo{}, err
	}
	in := hooktools.SecretInfo{ID: s.ID, Revision: int(s.LatestRevision), Label: s.Label, Owner: "unit", Description: s.Description, Rotation: s.RotatePolicy}
	if s.Owner == c.app {
		in.Owner = "application"
	}
	if r := s.Latest(); r != nil && !r.ExpiresAt.IsZero() {
		t := r.ExpiresAt
		in.Expiry = &t
	}
	if !s.NextRotate.IsZero() {
		t := s.NextRotate
		in.Rotates = &t
	}
	for _, g := range s.Grants {
		a := hooktools.SecretAccess{Target: "application-" + g.Target, Scope: fmt.Sprintf("relation-%d", g.RelationID), Role: "view"}
		if app, n, ok := state.ParseUnitName(g.Target); ok {
			a.Target = fmt.Sprintf("unit-%s-%d", app, n)
		}
		if r, ok := st.Relation(g.RelationID); ok {
			a.Scope = "relation-" + r.Key()
		}
		in.Access = append(in.Access, a)
	}
	return in, nil
}

func (c *hookContext) GrantSecret(id string, relationID int, unit string) error {
	_, st, s, err := c.managedSecret(id)
	if err != nil {
		return err
	}
	target := unit
	if target == "" {
		r, ok := st.Relation(int64(relationID))
		if !ok {
			return hooktools.ErrRelationNotFound
		}
		target = r.RemoteApp
		if r.Peer {
			target = c.app
		}
	}
	return c.applySecret(s.Owner, state.GrantSecretOp(s.ID, s.Owner, int64(relationID), target))
}

func (c *hookContext) RevokeSecret(id string, relationID int, app, unit string) error {
	_, _, s, err := c.managedSecret(id)
	if err != nil {
		return err
	}
	target := app
	if unit != "" {
		target = unit
	}
	return c.applySecret(s.Owner, state.RevokeSecretOp(s.ID, s.Owner, int64(relationID), target))
}

// secretHookOps are the hook's secret writes, committed with its cursor;
// a secret-rotate hook also reschedules the rotation it was run for. The
// caller holds c.mu.
func (c *hookContext) secretHookOps() []*storepb.Op {
	ops := slices.Clone(c.secrets.ops)
	if h := c.hook; h.Name == HookSecretRotate && h.Secret != nil {
		ops = append(ops, state.SecretRotatedOp(h.Secret.ID, h.Secret.Due))
	}
	return ops
}

// secretEnv adds the JUJU_SECRET_* variables of a secret hook.
func secretEnv(env map[string]string, h Hook) {
	if h.Secret == nil {
		return
	}
	env["JUJU_SECRET_ID"] = hooktools.SecretURI(h.Secret.ID)
	if h.Secret.Label != "" {
		env["JUJU_SECRET_LABEL"] = h.Secret.Label
	}
	if h.Secret.Revision > 0 {
		env["JUJU_SECRET_REVISION"] = fmt.Sprint(h.Secret.Revision)
	}
}
