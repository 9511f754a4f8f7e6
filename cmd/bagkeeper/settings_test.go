package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bagkeeper/bagkeeper/raftstore"
)

func testEnv(vars map[string]string) (*env, *bytes.Buffer, *bytes.Buffer) {
	var out, errb bytes.Buffer
	return &env{stdout: &out, stderr: &errb, stdin: strings.NewReader(""), lookupEnv: func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	}, environ: func() []string {
		var kv []string
		for k, v := range vars {
			kv = append(kv, k+"="+v)
		}
		return kv
	}}, &out, &errb
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSettingsPrecedenceIsFlagThenEnvThenFileThenDefault(t *testing.T) {
	cfgFile := writeFile(t, "app: from-file\nvoters: 5\nbootstrap-expect: 3\npeers:\n  - a:1\n  - b:2\nunit-release-after: 1m\n")
	e, _, _ := testEnv(map[string]string{
		"BAGKEEPER_CONFIG": cfgFile,
		"BAGKEEPER_VOTERS": "7",
		"BAGKEEPER_APP":    "from-env",
	})
	f := newRunFlags(e)
	if _, err := parse(e, f.fs, []string{"--app", "from-flag"}); err != nil {
		t.Fatal(err)
	}
	if f.app != "from-flag" {
		t.Errorf("app = %q, flag must win", f.app)
	}
	if f.voters != 7 {
		t.Errorf("voters = %d, env must beat file", f.voters)
	}
	if f.bootstrapExpect != 3 || f.unitReleaseAfter != time.Minute {
		t.Errorf("file settings not applied: expect=%d release=%s", f.bootstrapExpect, f.unitReleaseAfter)
	}
	if strings.Join(f.peers, ",") != "a:1,b:2" {
		t.Errorf("peers from a YAML list = %v", f.peers)
	}
	if f.dataDir != defaultDataDir {
		t.Errorf("default lost: %q", f.dataDir)
	}
}

func TestBadSettingsAreUsageErrorsNamingTheSource(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		file string
		args []string
		want string
	}{
		{name: "unknown flag", args: []string{"--app", "x", "--no-such-flag"}, want: "flag provided but not defined: -no-such-flag"},
		{name: "bad env value", env: map[string]string{"BAGKEEPER_VOTERS": "three"}, want: "environment variable BAGKEEPER_VOTERS=\"three\""},
		{name: "unknown file key", file: "app: x\nvoterz: 3\n", want: `unknown setting "voterz"`},
		{name: "bad file value", file: "unit-release-after: soon\n", want: `setting "unit-release-after"="soon"`},
		{name: "file not a map", file: "- a\n- b\n", want: "is not a YAML map"},
		{name: "missing file", env: map[string]string{"BAGKEEPER_CONFIG": "/nonexistent/bagkeeper.yaml"}, want: "config file:"},
		{name: "stray argument", args: []string{"--app", "x", "extra"}, want: `unexpected arguments ["extra"]`},
		{name: "missing app", args: []string{"--bind", "127.0.0.1:1"}, want: "--app is required"},
		{name: "bad app", args: []string{"--app", "Bad_App"}, want: "not a valid application name"},
		{name: "even voters", args: []string{"--app", "x", "--bind", "127.0.0.1:1", "--voters", "4"}, want: "--voters must be odd"},
		{name: "a hook above the sidecar's priority", args: []string{"--app", "x", "--bind", "127.0.0.1:1", "--charm-dir", "/charm", "--hook-nice", "-5"}, want: "--hook-nice must be between 0 and 19"},
		{name: "half TLS", args: []string{"--app", "x", "--bind", "127.0.0.1:1", "--tls-cert", "c"}, want: "needs all of --tls-cert"},
		{name: "unspecified bind without advertise", args: []string{"--app", "x"}, want: "--advertise is required"},
		{name: "bad log level", args: []string{"--app", "x", "--log-level", "loud"}, want: "--log-level"},
		{name: "bad log store", args: []string{"--app", "x", "--bind", "127.0.0.1:1", "--log-store", "sqlite"}, want: `--log-store: log store "sqlite": want "boltdb", "wal" or "segments"`},
		{name: "bad log store in the environment", env: map[string]string{"BAGKEEPER_LOG_STORE": "bolt"}, args: []string{"--app", "x", "--bind", "127.0.0.1:1"}, want: `--log-store: log store "bolt"`},
		{name: "lease shorter than the heartbeat gap", args: []string{"--app", "x", "--bind", "127.0.0.1:1", "--insecure", "--raft-heartbeat-timeout", "2s", "--raft-election-timeout", "2s"}, want: "--raft-leader-lease-timeout (400ms) must be at least a quarter of --raft-heartbeat-timeout (2s)"},
		{name: "lease longer than the heartbeat timeout", args: []string{"--app", "x", "--bind", "127.0.0.1:1", "--insecure", "--raft-leader-lease-timeout", "1s"}, want: "--raft-leader-lease-timeout (1s) must not be longer than --raft-heartbeat-timeout (500ms)"},
		{name: "non-voter append interval not shorter than the heartbeat timeout", args: []string{"--app", "x", "--bind", "127.0.0.1:1", "--insecure", "--raft-nonvoter-append-interval", "500ms"}, want: "--raft-nonvoter-append-interval (500ms) must be shorter than --raft-heartbeat-timeout (500ms)"},
		{name: "non-voter append interval given, heartbeat timeout shortened", args: []string{"--app", "x", "--bind", "127.0.0.1:1", "--insecure", "--raft-heartbeat-timeout", "100ms", "--raft-election-timeout", "100ms", "--raft-leader-lease-timeout", "100ms", "--raft-nonvoter-append-interval", "100ms"}, want: "--raft-nonvoter-append-interval (100ms) must be shorter than --raft-heartbeat-timeout (100ms)"},
		{name: "negative non-voter heartbeat interval", args: []string{"--app", "x", "--bind", "127.0.0.1:1", "--insecure", "--raft-nonvoter-heartbeat-interval", "-1s"}, want: "--raft-nonvoter-heartbeat-interval (-1s) must not be negative"},
		{name: "election timeout shorter than the heartbeat timeout", args: []string{"--app", "x", "--bind", "127.0.0.1:1", "--insecure", "--raft-election-timeout", "200ms"}, want: "--raft-election-timeout (200ms) must be at least --raft-heartbeat-timeout (500ms)"},
		{name: "secrets key without a charm", args: []string{"--app", "x", "--bind", "127.0.0.1:1", "--secrets-key-file", "k"}, want: "--secrets-key-file needs --charm-dir"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			vars := map[string]string{}
			for k, v := range c.env {
				vars[k] = v
			}
			if c.file != "" {
				vars["BAGKEEPER_CONFIG"] = writeFile(t, c.file)
			}
			e, _, errb := testEnv(vars)
			code := runMain(e, append([]string{"run"}, c.args...))
			if code != 2 {
				t.Fatalf("exit %d, want 2; stderr: %s", code, errb)
			}
			if !strings.Contains(errb.String(), c.want) {
				t.Fatalf("stderr %q does not contain %q", errb.String(), c.want)
			}
		})
	}
}

// The default non-voter append interval (100 ms) follows a heartbeat
// timeout too short for it, from any source; one given is kept (and
// checked: see the bad settings above).
func TestTheDefaultNonvoterAppendIntervalFitsAShortHeartbeatTimeout(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		args []string
		want time.Duration
	}{
		{name: "defaults", want: raftstore.DefaultNonvoterAppendInterval},
		{name: "a long heartbeat timeout", args: []string{"--raft-heartbeat-timeout", "2s"}, want: raftstore.DefaultNonvoterAppendInterval},
		{name: "a short heartbeat timeout", args: []string{"--raft-heartbeat-timeout", "200ms"}, want: 40 * time.Millisecond},
		{name: "a short heartbeat timeout from the environment", env: map[string]string{"BAGKEEPER_RAFT_HEARTBEAT_TIMEOUT": "150ms"}, want: 30 * time.Millisecond},
		{name: "an interval given", args: []string{"--raft-heartbeat-timeout", "200ms", "--raft-nonvoter-append-interval", "150ms"}, want: 150 * time.Millisecond},
		{name: "an interval given in the environment", env: map[string]string{"BAGKEEPER_RAFT_NONVOTER_APPEND_INTERVAL": "150ms"}, args: []string{"--raft-heartbeat-timeout", "200ms"}, want: 150 * time.Millisecond},
		{name: "no batching", args: []string{"--raft-heartbeat-timeout", "200ms", "--raft-nonvoter-append-interval", "-1ms"}, want: -time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, _, _ := testEnv(c.env)
			f := newRunFlags(e)
			if _, err := parse(e, f.fs, append([]string{"--app", "x"}, c.args...)); err != nil {
				t.Fatal(err)
			}
			f.fitNonvoterAppend()
			if f.nonvoterAppend != c.want {
				t.Fatalf("non-voter append interval %s, want %s", f.nonvoterAppend, c.want)
			}
		})
	}
}

func TestHelpGoesToStdoutAndExitsZero(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"run", "--help"}, {"status", "-h"}, {"bags", "--help"}, {"recover", "--help"}, {"unit", "--help"}} {
		e, out, _ := testEnv(nil)
		if code := runMain(e, args); code != 0 {
			t.Fatalf("%v: exit %d", args, code)
		}
		if !strings.Contains(out.String(), "Usage") {
			t.Fatalf("%v: no usage on stdout: %q", args, out)
		}
	}
	e, out, _ := testEnv(nil)
	runMain(e, []string{"run", "--help"})
	if !strings.Contains(out.String(), "env BAGKEEPER_UNIT_RELEASE_AFTER") {
		t.Fatalf("help does not name environment variables:\n%s", out)
	}
}

func TestAdminCommandsExplainAMissingSidecar(t *testing.T) {
	dir := t.TempDir()
	e, _, errb := testEnv(nil)
	code := runMain(e, []string{"status", "--data-dir", dir, "--timeout", "2s"})
	if code != 1 || !strings.Contains(errb.String(), "no sidecar answers at "+filepath.Join(dir, "admin.sock")) {
		t.Fatalf("exit %d, stderr %q", code, errb)
	}
}

func TestParseRelationSplitsEndpointAndID(t *testing.T) {
	type rel struct {
		id       int64
		endpoint string
	}
	for in, want := range map[string]rel{"3": {3, ""}, "db:3": {3, "db"}, "a:b:12": {12, "a:b"}} {
		id, endpoint, err := parseRelation(in)
		if err != nil || id != want.id || endpoint != want.endpoint {
			t.Errorf("%q: got %d %q %v", in, id, endpoint, err)
		}
	}
	for _, bad := range []string{"", "db:", "db:x", "-1", ":3"} {
		if _, _, err := parseRelation(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestFlagsMayFollowPositionalArguments(t *testing.T) {
	fs := newFlagSet("x", "")
	var sock string
	fs.StringVar(&sock, "admin-socket", "", "")
	rest, err := parseInterspersed(fs.FlagSet, []string{"remove", "app/3", "--admin-socket", "/s", "--", "--not-a-flag"})
	if err != nil || sock != "/s" || strings.Join(rest, " ") != "remove app/3 --not-a-flag" {
		t.Fatalf("rest %q sock %q err %v", rest, sock, err)
	}
}

// A secrets key file that holds no key stops run with exit status 1 and
// an error naming the file, before anything starts.
func TestBadSecretsKeyFileExitsWithStatus1(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "key")
	if err := os.WriteFile(key, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(dir, "data")
	for _, c := range []struct{ file, want string }{
		{key, "--secrets-key-file " + key + ": the key must be 32 raw bytes, 64 hexadecimal digits or the base64 of 32 bytes (got 10 bytes)"},
		{filepath.Join(dir, "missing"), "--secrets-key-file: open " + filepath.Join(dir, "missing")},
	} {
		e, _, errb := testEnv(nil)
		code := runMain(e, []string{"run", "--app", "x", "--bind", "127.0.0.1:1", "--data-dir", dataDir, "--charm-dir", dir, "--secrets-key-file", c.file})
		if code != 1 || !strings.Contains(errb.String(), "bagkeeper run: error: "+c.want) {
			t.Errorf("exit %d, stderr %q; want 1 and %q", code, errb, c.want)
		}
		if _, err := os.Stat(dataDir); err == nil {
			t.Fatal("the data dir was created")
		}
	}
}

func TestAMisspeltEnvironmentVariableIsRefused(t *testing.T) {
	e, _, errb := testEnv(map[string]string{"BAGKEEPER_APP": "web", "BAGKEEPER_UNIT_TAKOVER_AFTER": "1m", "BAGKEEPER_FORMAT": "json"})
	code := runMain(e, []string{"run", "--data-dir", t.TempDir(), "--insecure", "--bind", "127.0.0.1:0"})
	want := "environment variable BAGKEEPER_UNIT_TAKOVER_AFTER sets nothing: no setting is named so (did you mean BAGKEEPER_UNIT_TAKEOVER_AFTER?)"
	if code != 2 || !strings.Contains(errb.String(), want) {
		t.Fatalf("exit %d, stderr %q; want 2 and %q", code, errb, want)
	}
}

// TestOtherSettingsListsEveryFlag keeps otherSettings complete: every flag
// of every command but run, as their --help lists them.
func TestOtherSettingsListsEveryFlag(t *testing.T) {
	known := map[string]bool{}
	for _, n := range otherSettings {
		known[n] = true
	}
	paths := [][]string{{"status"}, {"bags"}, {"bags", "set"}, {"relation", "ensure"}, {"relation", "remove"}, {"unit", "remove"},
		{"actions", "run"}, {"actions", "show"}, {"actions", "list"}, {"member", "remove"}, {"leader", "transfer"}, {"recover"},
		{"hook-runner"}, {"install-tools"}, {"install"}, {"snapshot", "save"}, {"snapshot", "status"}, {"snapshot", "restore"},
		{"unit", "retry"}, {"show-unit"}, {"exec"}, {"debug-log"}}
	seen := map[string]bool{}
	for _, p := range paths {
		seen[p[0]] = true
		flags := flagsOf(p...)
		if len(flags) == 0 {
			t.Errorf("%v --help lists no flags", p)
		}
		for _, f := range flags {
			if !known[strings.TrimPrefix(f, "--")] {
				t.Errorf("%v has %s, which otherSettings lacks", p, f)
			}
		}
	}
	for _, c := range commands() {
		if !seen[c.name] && c.name != "run" && c.name != "version" && c.name != "completion" {
			t.Errorf("command %s is not checked here", c.name)
		}
	}
}

// TestAdminCommandsFindTheSocketThroughTheSidecarsConfig: a pod whose
// sidecar runs with --config (the file, or BAGKEEPER_CONFIG) is reached by
// its admin commands through the same file; its other settings are the
// sidecar's and do not trouble them.
func TestAdminCommandsFindTheSocketThroughTheSidecarsConfig(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(t.TempDir(), "bagkeeper.yaml")
	if err := os.WriteFile(cfg, []byte("app: web\nvoters: 3\ndata-dir: "+dir+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := "no sidecar answers at " + filepath.Join(dir, "admin.sock")
	for _, c := range []struct {
		vars map[string]string
		args []string
	}{
		{nil, []string{"status", "--config", cfg, "--timeout", "2s"}},
		{map[string]string{"BAGKEEPER_CONFIG": cfg}, []string{"bags", "--timeout", "2s"}},
	} {
		e, _, errb := testEnv(c.vars)
		if code := runMain(e, c.args); code != 1 || !strings.Contains(errb.String(), want) {
			t.Errorf("%v %v: exit %d, stderr %q; want %q", c.vars, c.args, code, errb, want)
		}
	}
}
