package agent

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/state/statetest"
)

var (
	rawKeyA = bytes.Repeat([]byte{0xa5}, 32)
	rawKeyB = bytes.Repeat([]byte{0x5a}, 32)
)

func mustKey(t *testing.T, raw []byte) *SecretsKey {
	t.Helper()
	k, err := ParseSecretsKey(raw)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func withKey(k *SecretsKey) agentOpt { return func(c *Config) { c.SecretsKey = k } }

// commit commits what the tool agent's hook buffered, as a hook that
// exits 0 does, and starts the hook's buffers afresh.
func (ta *toolAgent) commit(t *testing.T) {
	t.Helper()
	ta.store.Must(ta.hc.ops()...)
	ta.hc.mu.Lock()
	ta.hc.secrets = secretBuffer{}
	ta.hc.mu.Unlock()
}

// view is what the tool agent's hook reads of secrets.
func (ta *toolAgent) view(t *testing.T) *state.State {
	t.Helper()
	st, err := ta.hc.secretView()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestSecretsKeyFormatsAndID(t *testing.T) {
	mac := hmac.New(sha256.New, rawKeyA)
	mac.Write([]byte("bagkeeper secrets key"))
	wantID := hex.EncodeToString(mac.Sum(nil)[:8])
	for name, data := range map[string][]byte{
		"raw":          rawKeyA,
		"hex":          []byte(hex.EncodeToString(rawKeyA)),
		"hex+newline":  []byte(hex.EncodeToString(rawKeyA) + "\n"),
		"base64":       []byte(base64.StdEncoding.EncodeToString(rawKeyA)),
		"base64+space": []byte(base64.StdEncoding.EncodeToString(rawKeyA) + " \r\n\t"),
	} {
		k, err := ParseSecretsKey(data)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if k.ID() != wantID {
			t.Errorf("%s: key id %s, want %s", name, k.ID(), wantID)
		}
	}
	for name, data := range map[string][]byte{
		"empty":       nil,
		"short":       []byte("0123456789"),
		"31 raw":      rawKeyA[:31],
		"bad hex":     []byte(strings.Repeat("zz", 32)),
		"16 base64":   []byte(base64.StdEncoding.EncodeToString(rawKeyA[:16])),
		"33 raw":      append(bytes.Clone(rawKeyA), 1),
		"hex+garbage": []byte(hex.EncodeToString(rawKeyA) + "x"),
	} {
		if _, err := ParseSecretsKey(data); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	path := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(path, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadSecretsKey(path); err == nil || !strings.Contains(err.Error(), "--secrets-key-file "+path) {
		t.Fatalf("a bad key file: %v", err)
	}
}

func TestSecretToolsWithoutAKeyOrWithAnotherOne(t *testing.T) {
	ta := startToolAgent(t)
	dir := t.TempDir()
	r := ta.run(t, dir, nil, nil, "secret-add", "password=x")
	if r.code != 1 || r.stderr != "ERROR secrets are not enabled: the sidecar has no --secrets-key-file\n" {
		t.Fatalf("secret-add without a key: %+v", r)
	}
	// An agent with the key, then one with another key, on the same store.
	withA := startToolAgent(t, withKey(mustKey(t, rawKeyA)), func(c *Config) { c.Store = ta.store })
	r = withA.run(t, dir, nil, nil, "secret-add", "password=x")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "secret:") {
		t.Fatalf("secret-add with the key: %+v", r)
	}
	uri := strings.TrimSpace(r.stdout)
	if len(ta.store.State().Secrets()) != 0 {
		t.Fatal("secret-add committed before its hook ended")
	}
	ta.store.Must(withA.hc.ops()...) // withA's hook ends (its store is ta's)
	// A member with another key refuses, naming both ids.
	keyB := mustKey(t, rawKeyB)
	withB := startToolAgent(t, withKey(keyB), func(c *Config) { c.Store = ta.store })
	want := fmt.Sprintf("ERROR secrets key mismatch: the stored secrets were sealed with key id %s, this sidecar's --secrets-key-file has key id %s\n", mustKey(t, rawKeyA).ID(), keyB.ID())
	for _, argv := range [][]string{{"secret-get", uri}, {"secret-add", "password=y"}, {"secret-ids"}} {
		if r := withB.run(t, dir, nil, nil, argv[0], argv[1:]...); r.code != 1 || r.stderr != want {
			t.Errorf("%q with another key: %+v", argv, r)
		}
	}
	if err := CheckSecretsKey(ta.store.State(), keyB); err == nil || !strings.Contains(err.Error(), "key mismatch") {
		t.Fatalf("the startup check: %v", err)
	}
	if err := CheckSecretsKey(ta.store.State(), mustKey(t, rawKeyA)); err != nil {
		t.Fatal(err)
	}
}

// The calls ops 2.x/3.x makes (ops/model.py's _ModelBackend), with its
// argument forms: --format=json reads, isoformat() expiry times.
func TestSecretToolsAsOpsCallsThem(t *testing.T) {
	ta := startToolAgent(t, withKey(mustKey(t, rawKeyA)))
	dir := t.TempDir()
	run := func(want int, argv ...string) string {
		t.Helper()
		r := ta.run(t, dir, nil, nil, argv[0], argv[1:]...)
		if r.code != want {
			t.Fatalf("%q: %+v", argv, r)
		}
		return r.stdout + r.stderr
	}
	expire := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Second)
	id := strings.TrimSpace(run(0, "secret-add", "--label", "db", "--description", "the db", "--expire", expire.Format("2006-01-02T15:04:05.000000+00:00"),
		"--rotate", "daily", "--owner", "application", "username=admin", "password=hunter2"))
	bare := strings.TrimPrefix(id, "secret:")
	if !strings.HasPrefix(id, "secret:") || len(bare) != 20 {
		t.Fatalf("secret-add printed %q", id)
	}
	var info map[string]map[string]any
	if err := json.Unmarshal([]byte(run(0, "secret-info-get", "--label", "db", "--format=json")), &info); err != nil {
		t.Fatal(err)
	}
	got := info[bare]
	if got["revision"] != 1.0 || got["label"] != "db" || got["owner"] != "application" || got["rotation"] != "daily" ||
		got["expiry"] != expire.Format(time.RFC3339) || got["description"] != "the db" || got["rotates"] == nil {
		t.Fatalf("secret-info-get: %v", info)
	}
	var content map[string]string
	if err := json.Unmarshal([]byte(run(0, "secret-get", id, "--format=json")), &content); err != nil || content["password"] != "hunter2" || content["username"] != "admin" {
		t.Fatalf("secret-get: %v %v", content, err)
	}
	if out := run(0, "secret-get", "--label", "db", "--format=json"); !strings.Contains(out, `"hunter2"`) {
		t.Fatalf("secret-get by label: %s", out)
	}
	if out := run(0, "secret-ids"); strings.TrimSpace(out) != bare {
		t.Fatalf("secret-ids: %q", out)
	}
	run(0, "secret-set", id, "password=hunter3")
	if out := run(0, "secret-get", id, "password"); out != "hunter3\n" {
		t.Fatalf("the owner reads the latest: %q", out)
	}
	run(0, "secret-grant", id, "--relation", fmt.Sprint(ta.rel))
	run(0, "secret-grant", id, "--relation", fmt.Sprint(ta.rel), "--unit", "app/1")
	if out := run(0, "secret-info-get", id); !strings.Contains(out, "target: application-app") || !strings.Contains(out, "target: unit-app-1") {
		t.Fatalf("grants in secret-info-get: %s", out)
	}
	run(0, "secret-revoke", id, "--relation", fmt.Sprint(ta.rel), "--unit", "app/1")
	if s, _ := ta.view(t).Secret(bare); len(s.Grants) != 1 || s.Grants[0].Target != "app" {
		t.Fatalf("after revoke: %+v", s.Grants)
	}
	// Not found, as ops expects it ("not found" → SecretNotFoundError).
	if out := run(1, "secret-get", "secret:cu3kq1rt4g0s73b0abcd"); out != "ERROR secret \"cu3kq1rt4g0s73b0abcd\" not found\n" {
		t.Fatalf("missing secret: %q", out)
	}
	if out := run(1, "secret-info-get", "--label", "nope"); !strings.HasSuffix(out, "not found\n") {
		t.Fatalf("missing label: %q", out)
	}
	// What the hook wrote commits with it.
	if _, ok := ta.store.State().Secret(bare); ok {
		t.Fatal("the secret was committed before the hook ended")
	}
	ta.commit(t)
	if s, ok := ta.store.State().Secret(bare); !ok || s.LatestRevision != 2 || len(s.Grants) != 1 {
		t.Fatalf("committed: %+v", s)
	}
	// Only the leader manages application secrets; a unit secret is its own.
	ta.store.Must(state.ReleaseLeaseOp("app/0"))
	if out := run(1, "secret-set", id, "password=x"); out != "ERROR permission denied\n" {
		t.Fatalf("non-leader secret-set: %q", out)
	}
	if out := run(1, "secret-add", "password=x"); out != "ERROR this unit is not the leader\n" {
		t.Fatalf("non-leader secret-add: %q", out)
	}
	uid := strings.TrimSpace(run(0, "secret-add", "--owner", "unit", "password=mine"))
	if out := run(0, "secret-info-get", uid, "--format", "yaml"); !strings.Contains(out, "owner: unit") {
		t.Fatalf("unit secret info: %s", out)
	}
	run(0, "secret-remove", uid)
	if _, ok := ta.view(t).Secret(strings.TrimPrefix(uid, "secret:")); ok {
		t.Fatal("secret-remove left the secret")
	}
}

// secretsAgent starts the agent of unit (app/N) on a shared store.
func secretsAgent(t *testing.T, s *statetest.Store, unit, script string, key *SecretsKey) *testAgent {
	n := strings.TrimPrefix(unit, "app/")
	return startAgent(t, s, charm(t, script), withKey(key), func(c *Config) {
		c.Unit = func() string { return unit }
		c.Member, c.Pod = "app-"+n+"/x", "pod-"+n
	})
}

func readFile(t *testing.T, path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// Two units, each its own agent and bash charm: app/0 adds a secret of its
// own and grants it over the peer relation; the other unit
// reads it, follows revision 1 after a secret-set until it refreshes (told
// by secret-changed), and then the leader is told, by secret-remove, that
// revision 1 is followed by no one, and removes it. (A unit of the
// application that owns a secret reads its latest revision, as the owner
// does: only units of other owners follow revisions.)
func TestSecretsBetweenPeersWithBashCharms(t *testing.T) {
	s := newMemStore(t)
	rel := twoUnits(s)
	key := mustKey(t, rawKeyA)
	leader := secretsAgent(t, s, "app/0", `
log() { echo "$*" >> "$JUJU_CHARM_DIR/secrets.log"; }
case "$JUJU_HOOK_NAME" in
leader-elected)
	id=$(secret-add --owner unit --label db password=first-PLAINTEXT-7f3a) || exit 1
	secret-grant "$id" -r "$(relation-ids cluster)" || exit 1
	relation-set -r "$(relation-ids cluster)" --app "secret-id=$id" || exit 1
	state-set "id=$id" ;;
cluster-relation-changed)
	if [ "$(relation-get read app/1)" = yes ] && [ -z "$(state-get set)" ]; then
		secret-set "$(state-get id)" password=second-PLAINTEXT-9c1d || exit 1
		state-set set=yes
	fi ;;
secret-remove)
	log "remove $JUJU_SECRET_ID $JUJU_SECRET_LABEL $JUJU_SECRET_REVISION"
	secret-remove "$JUJU_SECRET_ID" --revision "$JUJU_SECRET_REVISION" || exit 1 ;;
esac`, key)
	other := secretsAgent(t, s, "app/1", `
log() { echo "$*" >> "$JUJU_CHARM_DIR/secrets.log"; }
case "$JUJU_HOOK_NAME" in
cluster-relation-changed)
	id=$(relation-get --app secret-id app)
	if [ -n "$id" ] && [ -z "$(state-get read)" ]; then
		log "read $(secret-get "$id" password --label mine)"
		relation-set read=yes
		state-set read=yes
	fi ;;
secret-changed)
	log "changed $JUJU_SECRET_ID $JUJU_SECRET_LABEL"
	log "tracked $(secret-get "$JUJU_SECRET_ID" password)"
	log "peek $(secret-get "$JUJU_SECRET_ID" password --peek)"
	log "still $(secret-get --label mine)"
	log "refresh $(secret-get "$JUJU_SECRET_ID" password --refresh)"
	log "now $(secret-get "$JUJU_SECRET_ID" password)" ;;
esac`, key)
	var id string
	waitFor(t, "the leader's secret-remove of revision 1", func() error {
		if id = bag(s, rel, "app")["secret-id"]; id == "" {
			return fmt.Errorf("no secret id in the application bag yet; hooks %q %q, errors %+v %+v", leader.hooks(), other.hooks(), s.State().UnitExtra("app/0"), s.State().UnitExtra("app/1"))
		}
		if !strings.Contains(readFile(t, filepath.Join(leader.dir, "secrets.log")), "remove "+id+" db 1") {
			return fmt.Errorf("leader: %q, other: %q", readFile(t, filepath.Join(leader.dir, "secrets.log")), readFile(t, filepath.Join(other.dir, "secrets.log")))
		}
		if sec, ok := s.State().Secret(strings.TrimPrefix(id, "secret:")); !ok || len(sec.Revisions) != 1 {
			return fmt.Errorf("revisions: %+v", sec)
		}
		return nil
	})
	want := []string{
		"read first-PLAINTEXT-7f3a",
		"changed " + id + " mine",
		"tracked first-PLAINTEXT-7f3a",
		"peek second-PLAINTEXT-9c1d",
		"still password: first-PLAINTEXT-7f3a",
		"refresh second-PLAINTEXT-9c1d",
		"now second-PLAINTEXT-9c1d",
	}
	if got := strings.Split(strings.TrimSpace(readFile(t, filepath.Join(other.dir, "secrets.log"))), "\n"); !slices.Equal(got, want) {
		t.Fatalf("the consumer saw:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Nothing in the replicated state holds the content in plain text.
	var snap bytes.Buffer
	if err := state.WriteSnapshot(&snap, s.State()); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(snap.Bytes(), []byte("PLAINTEXT")) {
		t.Fatal("the snapshot holds a secret in plain text")
	}
	if !bytes.Contains(snap.Bytes(), []byte(strings.TrimPrefix(id, "secret:"))) {
		t.Fatal("the snapshot does not even hold the secret's id: the check above proves nothing")
	}
}

// The owner is told of expiry and due rotation; a rotation hook's commit
// reschedules it.
func TestSecretExpiryAndRotationHooks(t *testing.T) {
	s := newMemStore(t)
	twoUnits(s)
	key := mustKey(t, rawKeyA)
	a := secretsAgent(t, s, "app/0", `
case "$JUJU_HOOK_NAME" in
start)
	secret-add --label soon --expire 2s password=x >/dev/null || exit 1
	secret-add --label turn --owner unit --rotate hourly password=y >/dev/null || exit 1 ;;
secret-expired|secret-rotate)
	echo "$JUJU_HOOK_NAME $JUJU_SECRET_LABEL ${JUJU_SECRET_REVISION:-none}" >> "$JUJU_CHARM_DIR/secrets.log" ;;
esac`, key)
	logged := func() string { return readFile(t, filepath.Join(a.dir, "secrets.log")) }
	waitFor(t, "both secrets", func() error {
		if n := len(s.State().Secrets()); n != 2 {
			return fmt.Errorf("%d secrets; hooks %q %+v", n, a.hooks(), s.State().UnitExtra("app/0"))
		}
		return nil
	})
	// The agent's clock is the store's: move it past the expiry (the tool
	// turned "2s" into a time by the real clock), and wake the agent.
	s.Advance(time.Until(s.Now()) + 3*time.Second)
	s.Must(state.HashStateOp())
	waitFor(t, "secret-expired", func() error {
		if !strings.Contains(logged(), "secret-expired soon 1\n") {
			return fmt.Errorf("log %q, hooks %q %+v", logged(), a.hooks(), s.State().UnitExtra("app/0"))
		}
		return nil
	})
	if strings.Contains(logged(), "secret-rotate") {
		t.Fatal("a rotation ran before it was due")
	}
	// Move the clock an hour and more on: the rotation is due.
	s.Advance(61 * time.Minute)
	s.Must(state.HashStateOp())
	waitFor(t, "secret-rotate", func() error {
		if !strings.Contains(logged(), "secret-rotate turn none\n") {
			return fmt.Errorf("log %q", logged())
		}
		return nil
	})
	var turn *state.Secret
	for _, sec := range s.State().Secrets() {
		if sec.Label == "turn" {
			turn = sec
		}
	}
	waitFor(t, "the rotation to be rescheduled", func() error {
		for _, sec := range s.State().Secrets() {
			if sec.Label == "turn" && sec.NextRotate.After(s.Now()) {
				return nil
			}
		}
		return errors.New("not rescheduled")
	})
	if n := strings.Count(logged(), "secret-rotate"); n != 1 || turn == nil || turn.Owner != "app/0" {
		t.Fatalf("rotations: %d, secret %+v", n, turn)
	}
	if n := strings.Count(logged(), "secret-expired"); n != 1 {
		t.Fatalf("secret-expired ran %d times", n)
	}
}

// A hook's secret changes commit with it: a hook that fails leaves no
// secret behind, and its retry adds the one secret it succeeds with.
func TestSecretsCommitOnlyWithTheHook(t *testing.T) {
	s := newMemStore(t)
	twoUnits(s)
	a := secretsAgent(t, s, "app/0", `
if [ "$JUJU_HOOK_NAME" = start ]; then
	secret-add --label once password=x >/dev/null || exit 1
	secret-get --label once >/dev/null || exit 1
	[ -e "$JUJU_CHARM_DIR/fixed" ] || exit 3
fi`, mustKey(t, rawKeyA))
	waitFor(t, "start to fail twice", func() error {
		if n := strings.Count(strings.Join(a.hooks(), "\n"), "start"); n < 2 {
			return fmt.Errorf("start ran %d times", n)
		}
		return nil
	})
	if n := len(s.State().Secrets()); n != 0 {
		t.Fatalf("a failed hook committed %d secrets", n)
	}
	if err := os.WriteFile(filepath.Join(a.dir, "fixed"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the retried start to commit", func() error {
		if e := s.State().UnitExtra("app/0"); e.HookError != "" {
			return errors.New("start still failing")
		}
		if n := len(s.State().Secrets()); n != 1 {
			return fmt.Errorf("%d secrets", n)
		}
		return nil
	})
}
