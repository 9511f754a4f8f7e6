//go:build linux

package e2e

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSecretsSurviveAnEmptyDiskAndNeverReachTheDisk runs the secrets charm
// of testdata/secrets-charm on three sidecars sharing one secrets key: the
// leader adds an application secret and grants it over the peer relation,
// and every unit reads it. The leader's pod is then replaced on an empty
// disk at a new address: its unit reads the secret again in its start
// hook, from what its peers replicated to it. No file of any data dir
// (raft log, snapshots, identity) ever holds the secret's value, although
// they hold its id.
func TestSecretsSurviveAnEmptyDiskAndNeverReachTheDisk(t *testing.T) {
	value := "e2e-plaintext-" + randHex(12)
	keyFile := filepath.Join(t.TempDir(), "secrets.key")
	if err := os.WriteFile(keyFile, []byte(randHex(32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "charm")
	if err := copyDir("testdata/secrets-charm", src); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "value"), []byte(value), 0o600); err != nil {
		t.Fatal(err)
	}
	cc := newAppCluster(t, "vault", src, "--secrets-key-file", keyFile,
		"--raft-snapshot-threshold", "16", "--raft-snapshot-interval", "200ms", "--raft-trailing-logs", "16")
	cc.startPods(3)

	readBy := func(p *pod, hook string) string { return strings.TrimSuffix(cc.read(p, "read-"+hook), "\n") }
	waitFor(t, startTimeout, "every unit to read the secret", func() (bool, string) {
		var missing []string
		for _, p := range cc.runningPods() {
			if readBy(p, "cluster-relation-changed") != value && readBy(p, "start") != value {
				missing = append(missing, fmt.Sprintf("%s (hooks %q, bags %v)", p.name, cc.read(p, "hooks.log"), cc.peerBags(p)))
			}
		}
		return len(missing) == 0, "not yet read by " + strings.Join(missing, ", ")
	})
	var leader *pod
	for _, p := range cc.runningPods() {
		if strings.Contains(cc.read(p, "hooks.log"), " leader-elected\n") {
			leader = p
		}
	}
	if leader == nil {
		t.Fatal("no unit ran leader-elected")
	}
	id := cc.peerBags(leader)[cc.app]["secret-id"]
	if !strings.HasPrefix(id, "secret:") {
		t.Fatalf("the application bag holds secret-id %q", id)
	}
	unit := cc.unitOf(leader)

	// Enough writes for every member to take a snapshot.
	for i := 0; i < 40; i++ {
		if err := leader.setBag(10*time.Second, cc.rel, unit, map[string]string{"filler": fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, startTimeout, "a snapshot in every data dir", func() (bool, string) {
		for _, p := range cc.runningPods() {
			if !hasSnapshot(p.dataDir) {
				return false, "no snapshot yet in " + p.dataDir
			}
		}
		return true, ""
	})

	leader.kill()
	leader.wipe()
	leader.move()
	cc.freshPod(leader)
	leader.start()
	cc.waitReady(leader)
	waitFor(t, startTimeout, unit+" on its new pod to read the secret in its start hook", func() (bool, string) {
		return readBy(leader, "start") == value, fmt.Sprintf("read %q; hooks %q", readBy(leader, "start"), cc.read(leader, "hooks.log"))
	})
	if got := cc.unitOf(leader); got != unit {
		t.Fatalf("the replaced pod holds %s, want %s", got, unit)
	}

	// The value is on no disk of the group; its id is (the check can see).
	var files, withID int
	for _, p := range cc.runningPods() {
		err := filepath.WalkDir(p.dataDir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Type()&fs.ModeSocket != 0 {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			files++
			if bytes.Contains(data, []byte(value)) {
				t.Errorf("%s holds the secret's value in plain text", path)
			}
			if bytes.Contains(data, []byte(strings.TrimPrefix(id, "secret:"))) {
				withID++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// Nor in any sidecar's log.
	logs, _ := filepath.Glob(filepath.Join(cc.dir, "*.log"))
	for _, l := range logs {
		if data, err := os.ReadFile(l); err == nil && bytes.Contains(data, []byte(value)) {
			t.Errorf("the sidecar log %s holds the secret's value", l)
		}
	}
	if len(logs) == 0 {
		t.Error("no sidecar log found to check")
	}
	if withID == 0 {
		t.Fatalf("none of the %d files of the data dirs holds even the secret's id: the search proves nothing", files)
	}
	if !t.Failed() {
		t.Logf("the secret's value is in none of %d files of the data dirs; %d hold its id", files, withID)
	}

	// A pod restarted with another key does not start its unit agent: it
	// is not ready, says why, and runs no hook; with the right key again it
	// is ready and runs the hook that became due meanwhile.
	var other *pod
	for _, p := range cc.runningPods() {
		if p != leader {
			other = p
			break
		}
	}
	otherKey := filepath.Join(t.TempDir(), "other.key")
	if err := os.WriteFile(otherKey, []byte(randHex(32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	saved := slices.Clone(other.extra)
	other.kill()
	other.extra = append(slices.Clone(saved), "--secrets-key-file", otherKey)
	other.start()
	waitFor(t, startTimeout, other.name+" to say its key does not match", func() (bool, string) {
		code, body := other.readyz()
		return code == 503 && strings.Contains(body, "the unit agent does not start: secrets key mismatch"), fmt.Sprintf("%d %s", code, body)
	})
	before := len(cc.hooks(other))
	if err := leader.setBag(10*time.Second, cc.rel, unit, map[string]string{"poke": "1"}); err != nil {
		t.Fatal(err)
	}
	holdFor(t, 2*time.Second, "no hook on "+other.name+", whose key does not match", func() (bool, string) {
		runs := cc.hooks(other)
		return len(runs) == before, runsString(runs[before:])
	})
	other.kill()
	other.extra = saved
	other.start()
	cc.waitReady(other)
	waitFor(t, startTimeout, other.name+" with its key to run the relation-changed due", func() (bool, string) {
		runs := cc.hooks(other)
		return slices.Contains(runs[before:], hookRun{cc.unitOf(other), "cluster-relation-changed", ""}), runsString(runs[before:])
	})
}

// hasSnapshot reports whether a data dir holds a raft snapshot.
func hasSnapshot(dataDir string) bool {
	found := false
	_ = filepath.WalkDir(dataDir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.Contains(path, "snapshots") && strings.HasSuffix(path, "state.bin") {
			found = true
		}
		return nil
	})
	return found
}

// TestSidecarWithABadSecretsKeyDoesNotStart: a key file that holds no key
// stops the sidecar at once, with exit status 1 and an error naming the
// file, before anything is started (no data dir is created).
func TestSidecarWithABadSecretsKeyDoesNotStart(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "secrets.key")
	if err := os.WriteFile(keyFile, []byte(hex.EncodeToString([]byte("too short"))), 0o600); err != nil {
		t.Fatal(err)
	}
	cc := newAppCluster(t, "vault", "testdata/secrets-charm", "--secrets-key-file", keyFile)
	p := cc.newPod("vault-0")
	cc.freshPod(p)
	p.start()
	pr := p.process()
	if !pr.wait(20 * time.Second) {
		t.Fatalf("%s still runs 20s after starting with a bad key", p.name)
	}
	log := p.lastLog()
	want := "bagkeeper run: error: --secrets-key-file " + keyFile + ": the key must be 32 raw bytes, 64 hexadecimal digits or the base64 of 32 bytes"
	if pr.exitCode() != 1 || !strings.Contains(log, want) {
		t.Fatalf("%s %s; want exit status 1 and %q\n%s", p.name, pr.exitStatus(), want, log)
	}
	if _, err := os.Stat(p.dataDir); err == nil {
		t.Errorf("the data dir %s was created by a sidecar that refused to start", p.dataDir)
	}
}
