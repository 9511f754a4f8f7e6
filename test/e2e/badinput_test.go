//go:build linux

package e2e

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

// TestBadInputGetsClearErrorAndChangesNothing feeds bagkeeper bad input
// next to a running cluster: wrong flags, unusable or foreign data dirs, a
// peer of another application or with another join token, a corrupt raft
// store, and two processes sharing a data dir or an admin socket. Each must
// get a clear error (exit status and message checked) and change nothing:
// the cluster keeps its id, configuration, units and bags.
func TestBadInputGetsClearErrorAndChangesNothing(t *testing.T) {
	c := newCluster(t)
	pods := c.startCluster(3)
	v := c.waitOneCluster(startTimeout, "before any bad input", wantVoters(3))
	want := seed(t, c.leaderPod(v), v.unitNames(), 256)

	// run is a subtest whose cluster must look the same afterwards.
	run := func(name string, fn func(t *testing.T, before *clusterView)) {
		t.Run(name, func(t *testing.T) {
			defer c.use(t)()
			before := c.waitOneCluster(startTimeout, "before "+name, wantVoters(3), wantMembers(3), allUnitsActive)
			fn(t, &before)
			c.waitOneCluster(startTimeout, "the cluster unchanged after "+name,
				sameIDs(before), sameClusterID(before), wantVoters(3), wantUnits(before.units, nil), allUnitsActive)
			c.waitBags(want)
		})
	}

	// runArgs are the flags of a well-formed `run` of a new pod of the
	// application, which each case then spoils.
	runArgs := func(dataDir string, withToken bool) []string {
		host := c.newHost()
		args := []string{"run", "--app", c.app, "--pod-name", "web-9", "--data-dir", dataDir,
			"--bind", host + ":7400", "--http-bind", host + ":7401",
			"--admin-socket", filepath.Join(c.sockDir, "bad.sock"), "--peers-file", c.peersFile, "--log-format", "text"}
		if withToken {
			args = append(args, "--join-token", c.token)
		}
		return args
	}

	for _, tc := range []struct {
		name    string
		args    []string
		noToken bool
		stderr  []string
	}{
		{name: "unknown flag", args: []string{"--bogus-flag"},
			stderr: []string{"flag provided but not defined: -bogus-flag", "Run 'bagkeeper run --help' for usage."}},
		{name: "even voter target", args: []string{"--voters", "4"},
			stderr: []string{"--voters must be odd and between 1 and 7, got 4"}},
		{name: "unparsable duration", args: []string{"--raft-election-timeout", "soon"},
			stderr: []string{`invalid value "soon" for flag -raft-election-timeout`}},
		{name: "unknown leave-on-stop", args: []string{"--leave-on-stop", "maybe"},
			stderr: []string{`--leave-on-stop must be auto, true or false, got "maybe"`}},
		{name: "unknown unit mode", args: []string{"--unit-mode", "sideways"},
			stderr: []string{`--unit-mode must be auto, ordinal or claim, got "sideways"`}},
		{name: "ordinal unit mode without an ordinal", args: []string{"--unit-mode", "ordinal", "--pod-name", "web-abc"},
			stderr: []string{`--unit-mode=ordinal needs a pod name ending in -<number>, got "web-abc"`}},
		{name: "unprotected peer port", noToken: true,
			stderr: []string{"the peer port needs protection", "--join-token", "--insecure"}},
	} {
		run("usage error: "+tc.name, func(t *testing.T, _ *clusterView) {
			dataDir := filepath.Join(c.dir, "never-created")
			args := append(runArgs(dataDir, !tc.noToken), tc.args...)
			r := runCLI(t, 30*time.Second, args...)
			// Status 2 is bad usage, as runMain documents.
			if r.code != 2 {
				t.Errorf("exit status %d, want 2 (bad usage)\n%s", r.code, r)
			}
			for _, s := range tc.stderr {
				if !strings.Contains(r.stderr, s) {
					t.Errorf("stderr does not say %q\n%s", s, r)
				}
			}
			if _, err := os.Stat(dataDir); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the data dir was created by a run that was refused (stat: %v)", err)
			}
		})
	}

	for _, tc := range []struct{ name, sub string }{
		{"data dir is a regular file", ""},
		{"data dir below a regular file", "sub"},
	} {
		run(tc.name, func(t *testing.T, _ *clusterView) {
			file := filepath.Join(c.dir, "volume-file")
			if err := os.WriteFile(file, []byte("keep me\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			dataDir := filepath.Join(file, tc.sub)
			r := runCLI(t, 30*time.Second, runArgs(dataDir, true)...)
			if r.code != 1 || !strings.Contains(r.stderr, "data dir "+dataDir) || !strings.Contains(r.stderr, "not a directory") {
				t.Errorf("want exit status 1 and an error naming data dir %s as not a directory\n%s", dataDir, r)
			}
			if b, _ := os.ReadFile(file); string(b) != "keep me\n" {
				t.Errorf("the file in the data dir's place was changed to %q", b)
			}
		})
	}

	run("two processes on one data dir", func(t *testing.T, before *clusterView) {
		owner := pods[1]
		args := append(runArgs(owner.dataDir, true), "--pod-name", owner.name)
		r := runCLI(t, 30*time.Second, args...)
		if r.code != 1 || !strings.Contains(r.stderr, "data dir "+owner.dataDir+" is in use by another bagkeeper process") {
			t.Errorf("want exit status 1 and an error that the data dir is in use\n%s", r)
		}
		st, err := owner.status()
		if err != nil || st.GetSelf() != before.selfOf(owner) || !st.GetReady() {
			t.Errorf("%s after the second process: self %q ready %v (err %v), want %s, ready", owner.name, st.GetSelf(), st.GetReady(), err, before.selfOf(owner))
		}
	})

	for _, tc := range []struct {
		name, pod, app, token string
		clusterSays           string // in a member's log
		rogueSays             string // a regexp, in the rogue pod's log
	}{
		{"peer of another application", "other-0", "other", "",
			`dialer serves application \"other\", this node serves \"web\"`,
			`peer \S+ serves application [\\"]*web[\\"]*, this node serves [\\"]*other`},
		{"peer with another join token", "web-7", "", "some-other-token",
			`dialer's join token differs from this node's`,
			`peer \S+ rejected the join token`},
	} {
		run(tc.name, func(t *testing.T, before *clusterView) {
			rogue := c.newPod(tc.pod)
			rogue.outsider, rogue.app, rogue.token = true, tc.app, tc.token
			rogue.start() // and listed in discovery: the members probe it too
			defer rogue.kill()
			waitFor(t, startTimeout, "a member to log that it rejected the rogue pod", func() (bool, string) {
				for _, p := range c.runningPods() {
					if strings.Contains(p.lastLog(), tc.clusterSays) {
						return true, ""
					}
				}
				return false, "no member log says " + tc.clusterSays
			})
			holdFor(t, 2*time.Second, "the rogue pod outside the cluster", func() (bool, string) {
				st, err := rogue.status()
				if err != nil {
					return false, "rogue: " + err.Error() + exitNote(rogue)
				}
				if st.GetClusterId() != "" || len(st.GetMembers()) != 0 || st.GetReady() {
					return false, "the rogue pod joined or formed a cluster: " + st.String()
				}
				if v, problem := c.observeCluster(); problem != "" || sameIDs(*before)(v) != "" {
					return false, problem + sameIDs(*before)(v)
				}
				return true, ""
			})
			if code, body := rogue.readyz(); code == 200 {
				t.Errorf("the rogue pod is ready: %s", body)
			}
			// The misconfigured pod itself must say why it cannot join, not
			// only the members it knocks at.
			if log := rogue.lastLog(); !regexp.MustCompile(tc.rogueSays).MatchString(log) {
				t.Errorf("the rogue pod's log never says why it cannot join (want %s); it says:\n%s", tc.rogueSays, log)
			}
		})
	}

	run("data dir of another application", func(t *testing.T, before *clusterView) {
		victim := pods[2]
		victim.kill()
		args := append(runArgs(victim.dataDir, true), "--app", "other", "--pod-name", "other-0")
		r := runCLI(t, 30*time.Second, args...)
		if r.code != 1 || !strings.Contains(r.stderr, `data dir `+victim.dataDir+` belongs to application "web", not "other"`) {
			t.Errorf("want exit status 1 and an error that the data dir belongs to web\n%s", r)
		}
		victim.start()
		c.waitReady(victim)
		c.waitOneCluster(startTimeout, victim.name+" back with its identity", sameIDs(*before))
	})

	run("corrupt raft store", func(t *testing.T, before *clusterView) {
		victim := c.followers(*before)[0]
		oldID := before.selfOf(victim)
		victim.kill()
		// The store's file of raft's term and vote: seglog's stable file
		// (the default), raft.db (BAGKEEPER_E2E_LOG_STORE=boltdb) or
		// raft-wal's meta file (=wal).
		var db string
		var fi os.FileInfo
		for _, p := range []string{filepath.Join("segments", "stable"), "raft.db", filepath.Join("wal", "wal-meta.db")} {
			var err error
			if fi, err = os.Stat(filepath.Join(victim.dataDir, "raft", p)); err == nil {
				db = filepath.Join(victim.dataDir, "raft", p)
				break
			}
		}
		if db == "" {
			t.Fatalf("no raft store in %s", victim.dataDir)
		}
		garbage := make([]byte, fi.Size())
		_, _ = rand.Read(garbage)
		if err := os.WriteFile(db, garbage, 0o600); err != nil {
			t.Fatal(err)
		}
		victim.start()
		pr := victim.process()
		if !pr.wait(20 * time.Second) {
			t.Fatalf("%s runs on a corrupt raft store", victim.name)
		}
		log := victim.lastLog()
		if pr.exitCode() != 1 || !strings.Contains(log, "raft store "+db+" cannot be opened") || !strings.Contains(log, "move the data dir away") {
			t.Errorf("%s %s; want exit status 1 and an error naming %s and saying what to do\n%s", victim.name, pr.exitStatus(), db, log)
		}
		c.writePeers()

		// The others go on, the broken member still configured.
		mid := c.waitOneCluster(startTimeout, "the other members unaffected",
			sameIDs(*before), sameClusterID(*before), wantUnits(before.units, nil))
		if mid.leader == oldID {
			t.Fatalf("the broken member %s is still the leader", oldID)
		}
		c.mustCommit(want, c.runningPods()[0])

		// Doing what the message says brings the pod back, with its data,
		// as a new incarnation.
		if err := os.Rename(victim.dataDir, victim.dataDir+".damaged"); err != nil {
			t.Fatal(err)
		}
		victim.start()
		c.waitReady(victim)
		after := c.waitOneCluster(startTimeout, "the pod back as a new incarnation",
			without(oldID), wantMembers(3), wantVoters(3), sameClusterID(*before), wantUnits(before.units, nil))
		if after.selfOf(victim) == oldID {
			t.Fatalf("%s came back with its old id", victim.name)
		}
		c.waitBags(want)
		before.members = after.members // the expected change, for run's final check
	})

	run("two processes on one admin socket", func(t *testing.T, before *clusterView) {
		owner := pods[0]
		intruder := c.newPod("web-8")
		intruder.outsider = true
		intruder.sock = owner.sock
		intruder.token = "not-the-clusters-token" // it must not join either way
		intruder.mu.Lock()
		intruder.starts++
		intruder.mu.Unlock()
		if err := intruder.spawn(); err != nil {
			t.Fatal(err)
		}
		pr := intruder.process()
		defer func() {
			// Whatever happened, give the owner its socket back (a restart
			// recreates it) so that the cluster check that follows is about
			// the cluster and not about this failure again.
			pr.kill()
			if st, err := owner.status(); err != nil || st.GetSelf() != before.selfOf(owner) {
				owner.kill()
				owner.start()
				c.waitReady(owner)
			}
		}()
		if !pr.wait(5 * time.Second) {
			t.Errorf("a second sidecar on %s's admin socket %s is still running after 5s; want it refused with an error naming the socket", owner.name, owner.sock)
		} else if pr.exitCode() == 0 || !strings.Contains(intruder.lastLog(), owner.sock) {
			t.Errorf("the second sidecar %s; want a non-zero exit and an error naming %s\n%s", pr.exitStatus(), owner.sock, intruder.lastLog())
		}
		if st, err := owner.status(); err != nil || st.GetSelf() != before.selfOf(owner) {
			t.Errorf("while the second sidecar ran, %s's admin socket answered as %q (err %v), want %s", owner.name, st.GetSelf(), err, before.selfOf(owner))
		}
		pr.kill()
		if st, err := owner.status(); err != nil || st.GetSelf() != before.selfOf(owner) {
			t.Errorf("after the second sidecar stopped, %s's admin socket answered as %q (err %v), want %s", owner.name, st.GetSelf(), err, before.selfOf(owner))
		}
	})
}

// TestAWriteWithoutALeaderSaysSo: with two of three voters killed, a write
// through the survivor fails within the CLI's timeout with what an operator
// needs (no leader, how many voters answer, nothing committed), not with
// gRPC's internals or "no sidecar answers".
func TestAWriteWithoutALeaderSaysSo(t *testing.T) {
	c := newCluster(t)
	c.startCluster(3)
	v := c.waitOneCluster(startTimeout, "the cluster", wantVoters(3))
	leader := c.leaderPod(v)
	rel, err := leader.ensureRelation(&adminpb.EnsureRelationRequest{Endpoint: "replicas", Interface: "web-peers", Peer: true})
	if err != nil {
		t.Fatal(err)
	}
	fs := c.followers(v)
	survivor := fs[0]
	waitFor(t, startTimeout, "the survivor to have the relation", func() (bool, string) {
		st, err := survivor.statusNoProbe()
		if err != nil {
			return false, err.Error()
		}
		return len(st.GetRelations()) == 1, fmt.Sprint(st.GetRelations())
	})
	leader.kill()
	fs[1].kill()
	res := runCLI(t, 30*time.Second, "bags", "set", "--admin-socket", survivor.sock, "--timeout", "5s", "--relation", "replicas:"+itoa(rel), "web", "k=v")
	want := "no raft leader (1 of 3 voters reachable; a leader needs 2); not committed"
	if res.code != 1 || !strings.Contains(res.stderr, want) || strings.Contains(res.stderr, "no sidecar answers") {
		t.Fatalf("a write without a leader: %v\nwant exit 1 and %q", res, want)
	}
}
