package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

func TestParseHelpDefaults(t *testing.T) {
	help := `Usage: bagkeeper run --app APP [flags]

Flags:
  --app name
      Juju application name this pod runs (required)
      env BAGKEEPER_APP
  --raft-heartbeat-timeout duration
      raft heartbeat timeout (duration) (default 500ms)
      env BAGKEEPER_RAFT_HEARTBEAT_TIMEOUT
  --raft-snapshot-threshold n
      log entries between snapshots (n) (default 8192)
      env BAGKEEPER_RAFT_SNAPSHOT_THRESHOLD
  --advertise host:port
      host:port peers dial to reach this pod
      (default: --bind, when its host is not 0.0.0.0)
      env BAGKEEPER_ADVERTISE
`
	got := parseHelpDefaults(help)
	want := map[string]string{
		"raft-heartbeat-timeout":  "500ms",
		"raft-snapshot-threshold": "8192",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("default of %s = %q, want %q", k, got[k], v)
		}
	}
	if v, ok := got["app"]; ok {
		t.Errorf("app has default %q, want none", v)
	}
	if v, ok := got["advertise"]; ok {
		t.Errorf("advertise has default %q, want none", v)
	}
	b := &bagkeeperTarget{defaults: got}
	if d := b.defaultOf("raft-election-timeout"); d != "500ms (assumed)" {
		t.Errorf("defaultOf a flag missing from --help = %q", d)
	}
}

func TestFlagValue(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "def"},
		{[]string{"--pprof"}, "def"},
		{[]string{"--raft-election-timeout=700ms"}, "700ms"},
		{[]string{"-raft-election-timeout=700ms"}, "700ms"},
		{[]string{"--raft-election-timeout", "800ms", "--pprof"}, "800ms"},
		{[]string{"--raft-election-timeout=1s", "--raft-election-timeout=2s"}, "2s"},
		{[]string{"--raft-election-timeout-x=1s"}, "def"},
		{[]string{"raft-election-timeout=1s"}, "def"},
	} {
		if got := flagValue(c.args, "raft-election-timeout", "def"); got != c.want {
			t.Errorf("flagValue(%q) = %q, want %q", c.args, got, c.want)
		}
	}
}

func TestPrintable(t *testing.T) {
	raw := make([]byte, 256)
	for i := range raw {
		raw[i] = byte(i)
	}
	s := printable(raw)
	if len(s) != len(raw) || !utf8.ValidString(s) {
		t.Fatalf("printable: %d bytes, valid UTF-8 %v", len(s), utf8.ValidString(s))
	}
	for _, c := range s {
		if !strings.ContainsRune(printableAlphabet, c) {
			t.Fatalf("printable produced %q", c)
		}
	}
}

func TestWriterKeepsBoundedKeys(t *testing.T) {
	w := &bkWriter{}
	var deleted []string
	for i := range bkKeepKeys + 3 {
		if old := w.remember(fmt.Sprintf("k%d", i)); old != "" {
			deleted = append(deleted, old)
		}
	}
	if strings.Join(deleted, ",") != "k0,k1,k2" {
		t.Errorf("deleted %v, want k0, k1, k2", deleted)
	}
	if len(w.recent) != bkKeepKeys {
		t.Errorf("kept %d keys, want %d", len(w.recent), bkKeepKeys)
	}
}

func TestParseProc(t *testing.T) {
	// The command name may contain spaces and parentheses.
	stat := "4242 (bag (keeper) x) S 1 4242 4242 0 -1 4194560 1500 0 0 0 250 75 0 0 20 0 9 0 100 0 0"
	cpu, err := parseProcStatCPU(stat)
	if err != nil {
		t.Fatal(err)
	}
	if want := 3250 * time.Millisecond; cpu != want {
		t.Errorf("cpu = %v, want %v", cpu, want)
	}
	if _, err := parseProcStatCPU("4242 (x) S 1 2"); err == nil {
		t.Error("short stat line accepted")
	}
	mem := parseProcStatus("Name:\tbagkeeper\nVmRSS:\t   21504 kB\nRssAnon:\t    6144 kB\nThreads:\t9\n")
	if mem["VmRSS"] != 21504*1024 || mem["RssAnon"] != 6144*1024 || mem["Threads"] != 9 {
		t.Errorf("parseProcStatus = %v", mem)
	}
	s := readProc(os.Getpid())
	if !s.readingsOK || s.rss <= 0 {
		t.Errorf("readProc(self) = %+v", s)
	}
}

func TestDigestBags(t *testing.T) {
	a := []*adminpb.Bag{
		{RelationId: 1, Owner: "bench", Data: map[string]string{"a": "1", "b": "22"}},
		{RelationId: 0, Owner: "bench/0", Data: map[string]string{"x": "y"}},
	}
	b := []*adminpb.Bag{a[1], a[0]}
	da, db := digestBags(a), digestBags(b)
	if da != db {
		t.Errorf("digest depends on the order of bags")
	}
	if da.bags != 2 || da.keys != 3 || da.bytes != 7 {
		t.Errorf("digest counts = %+v", da)
	}
	c := []*adminpb.Bag{
		{RelationId: 1, Owner: "bench", Data: map[string]string{"a": "1", "b": "2"}},
		a[1],
	}
	if digestBags(c).sum == da.sum {
		t.Errorf("digest ignores a changed value")
	}
	// Moving a key between bags changes the digest.
	d := []*adminpb.Bag{
		{RelationId: 1, Owner: "bench", Data: map[string]string{"a": "1"}},
		{RelationId: 0, Owner: "bench/0", Data: map[string]string{"x": "y", "b": "22"}},
	}
	if digestBags(d).sum == da.sum {
		t.Errorf("digest ignores which bag holds a key")
	}
}

func TestSnapshotIndex(t *testing.T) {
	dir := t.TempDir()
	if n := snapshotIndex(dir); n != 0 {
		t.Errorf("no snapshots: index %d", n)
	}
	for _, name := range []string{"2-100-1700000000000", "3-8300-1700000001000", "3-9999-1700000002000.tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, "raft", "snapshots", name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if n := snapshotIndex(dir); n != 8300 {
		t.Errorf("snapshot index %d, want 8300", n)
	}
}

// TestBagkeeperTarget builds bagkeeper, starts a real 3-member cluster,
// writes through the harness's client (to the leader and via a
// follower), runs one hand-off and one failover trial, the idle and
// wiped-pod measurements on 1 MiB on a fresh cluster, and checks that every process is gone
// after Stop. It takes about half a minute; -short skips it.
func TestBagkeeperTarget(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real cluster")
	}
	env := testEnv(t, nil)
	env.Config.ProbeInterval = 5 * time.Millisecond
	tg, err := newBagkeeperTarget(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	env.Target = tg
	b := tg.(*bagkeeperTarget)
	t.Cleanup(func() {
		if err := tg.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	if err := tg.Start(ctx, env.Dir); err != nil {
		t.Fatal(err)
	}
	for _, via := range []string{"leader", "follower"} {
		w, err := b.newWriter(via)
		if err != nil {
			t.Fatal(err)
		}
		for i := range bkKeepKeys + 4 {
			if err := w.Put(ctx, fmt.Sprintf("test/%s/%d", via, i), []byte{byte(i), 0xff}); err != nil {
				t.Fatalf("put via %s: %v", via, err)
			}
		}
		w.Close()
	}
	// SetBag returns once the receiving member applied the write; every
	// member has all of it once the cluster is healthy.
	if err := b.waitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	for _, m := range b.members {
		resp, err := m.admin.GetBags(ctx, &adminpb.GetBagsRequest{RelationId: b.relationID, Owner: bkApp})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetBags()) != 1 {
			t.Fatalf("%s: %d bags, want 1", m.pod, len(resp.GetBags()))
		}
		data := resp.GetBags()[0].GetData()
		if len(data) != 2*bkKeepKeys {
			t.Errorf("%s: %d keys in the bag, want %d (each writer keeps its last %d)", m.pod, len(data), 2*bkKeepKeys, bkKeepKeys)
		}
		if v := data[fmt.Sprintf("test/leader/%d", bkKeepKeys+3)]; v != printable([]byte{byte(bkKeepKeys + 3), 0xff}) {
			t.Errorf("%s: last key of the leader writer = %q", m.pod, v)
		}
		if _, ok := data["test/leader/0"]; ok {
			t.Errorf("%s: the writer's oldest key was not deleted", m.pod)
		}
	}

	for _, tc := range []struct {
		name    string
		disturb func(context.Context) (time.Time, error)
	}{
		{"hand-off", tg.StopLeader},
		{"failover", tg.KillLeader},
	} {
		res, err := runTrial(ctx, env, 1, tc.disturb)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		t.Logf("%s: first commit after %v, longest stall %v", tc.name, res.FirstCommit, res.Stall)
		down := 0
		for _, m := range b.members {
			if m.proc.Exited() {
				down++
			}
		}
		if down != 1 {
			t.Errorf("%s: %d members down, want 1", tc.name, down)
		}
		if err := tg.Restore(ctx); err != nil {
			t.Fatalf("%s: restore: %v", tc.name, err)
		}
	}

	rows, err := b.measureIdle(ctx, env, "test", 100*time.Millisecond, 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || !strings.HasPrefix(rows[0].Value, "RSS ") || !strings.HasPrefix(rows[1].Value, "RSS ") {
		t.Errorf("idle rows = %+v", rows)
	}
	old := slices.Clone(b.members)
	if err := b.startFresh(ctx, filepath.Join(env.Dir, "fresh")); err != nil {
		t.Fatal(err)
	}
	for _, m := range old {
		if !m.proc.Exited() {
			t.Errorf("%s of the first cluster still running", m.pod)
		}
	}
	row, err := b.measureWipe(ctx, env, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %s (%s)", row.What, row.Value, row.Note)
	if row.Value == "" || !strings.Contains(row.Note, "same sha256") {
		t.Errorf("wipe row = %+v", row)
	}
	if b.fill.keys != 1<<20/bkFillEntry {
		t.Errorf("filled %d keys, want %d", b.fill.keys, 1<<20/bkFillEntry)
	}

	if err := tg.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, m := range b.members {
		if !m.proc.Exited() {
			t.Errorf("%s still running after Stop", m.pod)
		}
	}
}
