package hooktools

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The secret tools' golden cases. Ids SAnn (secret-add), SGnn (secret-get),
// SSnn (secret-set), SRnn (secret-remove), SInn (secret-ids), SFnn
// (secret-info-get), SGRnn (secret-grant), SRVnn (secret-revoke) are ours:
// argv, exit code, stdout and stderr as Juju's tools give them (tag D:
// derived from Juju's implementation of the tool), and the call the tool
// makes on the context.

const testSecretID = "9m4e2mr0ui3e8a215n4g"

// fakeSecrets is a fixture context that serves secrets.
type fakeSecrets struct {
	*fakeContext
	calls   []string
	content map[string]map[string]string // by id
	labels  map[string]string            // label -> id
	info    map[string]SecretInfo
	err     error // returned by every call when set
}

func newFakeSecrets() *fakeSecrets {
	return &fakeSecrets{
		fakeContext: newFakeContext(-1, "", ""),
		content:     map[string]map[string]string{testSecretID: {"password": "s3cret", "user": "admin"}},
		labels:      map[string]string{"db": testSecretID},
		info: map[string]SecretInfo{testSecretID: {ID: testSecretID, Revision: 2, Label: "db", Owner: "application",
			Description: "the db", Rotation: "daily", Rotates: ptrTime(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)),
			Access: []SecretAccess{{Target: "application-u", Scope: "relation-peer0:0", Role: "view"}}}},
	}
}

func ptrTime(t time.Time) *time.Time { return &t }

func kvString(m map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}

func argsString(a SecretUpdateArgs) string {
	s := "content=" + kvString(a.Content)
	if a.Label != nil {
		s += " label=" + *a.Label
	}
	if a.Description != nil {
		s += " description=" + *a.Description
	}
	if a.RotatePolicy != nil {
		s += " rotate=" + *a.RotatePolicy
	}
	if a.Expire != nil {
		s += " expire=" + a.Expire.Format(time.RFC3339)
	}
	return s
}

func (f *fakeSecrets) resolve(id, label string) (string, error) {
	if id == "" {
		if id = f.labels[label]; id == "" {
			return "", fmt.Errorf("secret %q %w", label, ErrSecretNotFound)
		}
	}
	if _, ok := f.content[id]; !ok {
		return "", fmt.Errorf("secret %q %w", id, ErrSecretNotFound)
	}
	return id, nil
}

func (f *fakeSecrets) CreateSecret(owner string, a SecretUpdateArgs) (string, error) {
	f.calls = append(f.calls, "create owner="+owner+" "+argsString(a))
	return "cu3kq1rt4g0s73b0abcd", f.err
}

func (f *fakeSecrets) GetSecret(id, label string, refresh, peek bool) (map[string]string, error) {
	f.calls = append(f.calls, fmt.Sprintf("get %s label=%s refresh=%v peek=%v", id, label, refresh, peek))
	if f.err != nil {
		return nil, f.err
	}
	if id == "" {
		var err error
		if id, err = f.resolve("", label); err != nil {
			return nil, err
		}
	}
	c, ok := f.content[id]
	if !ok {
		return nil, fmt.Errorf("secret %q %w", id, ErrSecretNotFound)
	}
	return maps.Clone(c), nil
}

func (f *fakeSecrets) UpdateSecret(id string, a SecretUpdateArgs) error {
	f.calls = append(f.calls, "update "+id+" "+argsString(a))
	return f.err
}

func (f *fakeSecrets) RemoveSecret(id string, revision int) error {
	f.calls = append(f.calls, fmt.Sprintf("remove %s revision=%d", id, revision))
	return f.err
}

func (f *fakeSecrets) SecretIDs() ([]string, error) {
	f.calls = append(f.calls, "ids")
	return slices.Collect(maps.Keys(f.content)), f.err
}

func (f *fakeSecrets) SecretInfo(id, label string) (SecretInfo, error) {
	f.calls = append(f.calls, "info "+id+" label="+label)
	if f.err != nil {
		return SecretInfo{}, f.err
	}
	id, err := f.resolve(id, label)
	if err != nil {
		return SecretInfo{}, err
	}
	return f.info[id], nil
}

func (f *fakeSecrets) GrantSecret(id string, relationID int, unit string) error {
	f.calls = append(f.calls, fmt.Sprintf("grant %s relation=%d unit=%s", id, relationID, unit))
	return f.err
}

func (f *fakeSecrets) RevokeSecret(id string, relationID int, app, unit string) error {
	f.calls = append(f.calls, fmt.Sprintf("revoke %s relation=%d app=%s unit=%s", id, relationID, app, unit))
	return f.err
}

// scase is one secret tool case.
type scase struct {
	id, tag, tool string
	argv          []string
	files         map[string]string
	ctx           func() Context // nil: newFakeSecrets()
	exit          int
	stdout        string
	stderr        string
	calls         []string // nil: not checked; empty: no call
}

func runSecretGolden(t *testing.T, cases []scase) {
	t.Helper()
	saved := secretNow
	secretNow = func() time.Time { return time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC) }
	t.Cleanup(func() { secretNow = saved })
	seen := map[string]bool{}
	for _, c := range cases {
		if seen[c.id] {
			t.Fatalf("case id %s used twice", c.id)
		}
		seen[c.id] = true
		t.Run(c.id, func(t *testing.T) {
			var ctx Context
			if c.ctx != nil {
				ctx = c.ctx()
			} else {
				ctx = newFakeSecrets()
			}
			dir := t.TempDir()
			for name, data := range c.files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			resp := clientRun(t, ctx, Request{Command: c.tool, Args: c.argv, Dir: dir}, nil, osFiles{})
			if resp.Code != c.exit || string(resp.Stdout) != c.stdout || string(resp.Stderr) != c.stderr {
				t.Errorf("%s [%s] %s %q:\n got exit=%d stdout=%q stderr=%q\nwant exit=%d stdout=%q stderr=%q",
					c.id, c.tag, c.tool, c.argv, resp.Code, resp.Stdout, resp.Stderr, c.exit, c.stdout, c.stderr)
			}
			if fs, ok := ctx.(*fakeSecrets); ok && c.calls != nil && strings.Join(fs.calls, "\n") != strings.Join(c.calls, "\n") {
				t.Errorf("calls:\n got %q\nwant %q", fs.calls, c.calls)
			}
		})
	}
}

func TestGoldenSecretAdd(t *testing.T) {
	const uri = "secret:cu3kq1rt4g0s73b0abcd\n"
	runSecretGolden(t, []scase{
		{id: "SA01", tag: "D", tool: "secret-add", argv: args(), exit: 2, stderr: "ERROR missing secret value or filename\n", calls: []string{}},
		{id: "SA02", tag: "D", tool: "secret-add", argv: args("token=34ae35facd4"), stdout: uri,
			calls: []string{"create owner=application content=token=34ae35facd4"}},
		{id: "SA03", tag: "D", tool: "secret-add", argv: args("--owner", "unit", "--label", "db-password", "--description", "my database password",
			"--rotate", "monthly", "--expire", "24h", "data#base64=czNjcmV0", "user=admin"), stdout: uri,
			calls: []string{"create owner=unit content=data=s3cret,user=admin label=db-password description=my database password rotate=monthly expire=2026-12-02T10:00:00Z"}},
		{id: "SA04", tag: "D", tool: "secret-add", argv: args("--expire", "2025-01-01T06:06:06", "token=x"), stdout: uri,
			calls: []string{"create owner=application content=token=x expire=2025-01-01T06:06:06Z"}},
		// ops sends Python's isoformat(), with a UTC offset and microseconds.
		{id: "SA05", tag: "D", tool: "secret-add", argv: args("--expire", "2027-03-04T05:06:07.123456+02:00", "token=x"), stdout: uri,
			calls: []string{"create owner=application content=token=x expire=2027-03-04T03:06:07Z"}},
		{id: "SA06", tag: "D", tool: "secret-add", argv: args("--expire", "soon", "token=x"), exit: 2, stderr: "ERROR expire time or duration \"soon\" not valid\n"},
		{id: "SA07", tag: "D", tool: "secret-add", argv: args("--expire", "-1h", "token=x"), exit: 2, stderr: "ERROR negative expire duration \"-1h\" not valid\n"},
		{id: "SA08", tag: "D", tool: "secret-add", argv: args("--rotate", "fortnightly", "token=x"), exit: 2, stderr: "ERROR rotate policy \"fortnightly\" not valid\n"},
		{id: "SA09", tag: "D", tool: "secret-add", argv: args("--owner", "model", "token=x"), exit: 2, stderr: "ERROR secret owner \"model\" not valid\n"},
		{id: "SA10", tag: "D", tool: "secret-add", argv: args("Token=x"), exit: 1, stderr: "ERROR key \"Token\" not valid\n", calls: []string{}},
		{id: "SA11", tag: "D", tool: "secret-add", argv: args("token"), exit: 1, stderr: "ERROR expected key=value format, got \"token\"\n", calls: []string{}},
		{id: "SA12", tag: "D", tool: "secret-add", argv: args("key#base64=!!"), exit: 1, stderr: "ERROR invalid base64 value for key \"key\"\n", calls: []string{}},
		{id: "SA13", tag: "D", tool: "secret-add", argv: args("cert#file=tls.crt", "key=k"), files: map[string]string{"tls.crt": "PEM\n"}, stdout: uri,
			calls: []string{"create owner=application content=cert=PEM\n,key=k"}},
		{id: "SA14", tag: "D", tool: "secret-add", argv: args("--file", "s.yaml"), files: map[string]string{"s.yaml": "user: admin\npass#base64: czNjcmV0\n"}, stdout: uri,
			calls: []string{"create owner=application content=pass=s3cret,user=admin"}},
		{id: "SA15", tag: "D", tool: "secret-add", argv: args("token=x"), ctx: func() Context { return newFakeContext(-1, "", "") }, exit: 1,
			stderr: "ERROR secrets are not supported by this agent\n"},
		{id: "SA16", tag: "D", tool: "secret-add", argv: args("token=x"), ctx: func() Context {
			f := newFakeSecrets()
			f.err = fmt.Errorf("permission denied")
			return f
		}, exit: 1, stderr: "ERROR permission denied\n"},
		{id: "SA17", tag: "D", tool: "secret-add", argv: args("a=1"), exit: 1, stderr: "ERROR key \"a\" not valid\n"},
	})
}

func TestGoldenSecretGet(t *testing.T) {
	runSecretGolden(t, []scase{
		{id: "SG01", tag: "D", tool: "secret-get", argv: args(), exit: 2, stderr: "ERROR require either a secret URI or label\n"},
		{id: "SG02", tag: "D", tool: "secret-get", argv: args("secret:" + testSecretID), stdout: "password: s3cret\nuser: admin\n",
			calls: []string{"get " + testSecretID + " label= refresh=false peek=false"}},
		{id: "SG03", tag: "D", tool: "secret-get", argv: args("secret:"+testSecretID, "--format=json"), stdout: "{\"password\":\"s3cret\",\"user\":\"admin\"}\n"},
		{id: "SG04", tag: "D", tool: "secret-get", argv: args("secret:"+testSecretID, "user"), stdout: "admin\n"},
		{id: "SG05", tag: "D", tool: "secret-get", argv: args("secret:"+testSecretID, "user#base64"), stdout: "YWRtaW4=\n"},
		{id: "SG06", tag: "D", tool: "secret-get", argv: args("secret:"+testSecretID, "nope"), exit: 1, stderr: "ERROR secret key \"nope\" not found\n"},
		{id: "SG07", tag: "D", tool: "secret-get", argv: args("secret:"+testSecretID, "--peek", "--refresh"), exit: 2, stderr: "ERROR specify one of --peek or --refresh but not both\n"},
		{id: "SG08", tag: "D", tool: "secret-get", argv: args("--label", "db", "--refresh"), stdout: "password: s3cret\nuser: admin\n",
			calls: []string{"get  label=db refresh=true peek=false"}},
		{id: "SG09", tag: "D", tool: "secret-get", argv: args(testSecretID, "--label", "mine", "--peek"), stdout: "password: s3cret\nuser: admin\n",
			calls: []string{"get " + testSecretID + " label=mine refresh=false peek=true"}},
		{id: "SG10", tag: "D", tool: "secret-get", argv: args("secret://deadbeef-0bad-400d-8000-4b1d0d06f00d/" + testSecretID), stdout: "password: s3cret\nuser: admin\n"},
		{id: "SG11", tag: "D", tool: "secret-get", argv: args("secret:cu3kq1rt4g0s73b0uvuv"), exit: 1, stderr: "ERROR secret \"cu3kq1rt4g0s73b0uvuv\" not found\n"},
		{id: "SG12", tag: "D", tool: "secret-get", argv: args("secret:nope"), exit: 2, stderr: "ERROR secret URI \"secret:nope\" not valid\n"},
		{id: "SG13", tag: "D", tool: "secret-get", argv: args("--label", "other"), exit: 1, stderr: "ERROR secret \"other\" not found\n"},
		{id: "SG14", tag: "D", tool: "secret-get", argv: args(testSecretID, "user", "extra"), exit: 2, stderr: "ERROR unrecognized args: [\"extra\"]\n"},
		{id: "SG15", tag: "D", tool: "secret-get", argv: args(testSecretID, "--format", "smart"), exit: 2, stderr: "ERROR invalid value \"smart\" for option --format: unknown format \"smart\"\n"},
	})
}

func TestGoldenSecretSet(t *testing.T) {
	runSecretGolden(t, []scase{
		{id: "SS01", tag: "D", tool: "secret-set", argv: args(), exit: 2, stderr: "ERROR missing secret URI\n"},
		{id: "SS02", tag: "D", tool: "secret-set", argv: args("secret:"+testSecretID, "token=new"), calls: []string{"update " + testSecretID + " content=token=new"}},
		{id: "SS03", tag: "D", tool: "secret-set", argv: args("secret:"+testSecretID, "--rotate", "never", "--label", "l"), calls: []string{"update " + testSecretID + " content= label=l rotate=never"}},
		{id: "SS04", tag: "D", tool: "secret-set", argv: args("secret:"+testSecretID, "--expire", "1h"), calls: []string{"update " + testSecretID + " content= expire=2026-12-01T11:00:00Z"}},
		{id: "SS05", tag: "D", tool: "secret-set", argv: args("http://x"), exit: 2, stderr: "ERROR secret URI scheme \"http\" not valid\n"},
		{id: "SS06", tag: "D", tool: "secret-set", argv: args(testSecretID, "x=1"), exit: 1, stderr: "ERROR key \"x\" not valid\n", calls: []string{}},
	})
}

func TestGoldenSecretRemove(t *testing.T) {
	runSecretGolden(t, []scase{
		{id: "SR01", tag: "D", tool: "secret-remove", argv: args(), exit: 2, stderr: "ERROR missing secret URI\n"},
		{id: "SR02", tag: "D", tool: "secret-remove", argv: args("secret:" + testSecretID), calls: []string{"remove " + testSecretID + " revision=0"}},
		{id: "SR03", tag: "D", tool: "secret-remove", argv: args("secret:"+testSecretID, "--revision", "2"), calls: []string{"remove " + testSecretID + " revision=2"}},
		{id: "SR04", tag: "D", tool: "secret-remove", argv: args("secret:"+testSecretID, "extra"), exit: 2, stderr: "ERROR unrecognized args: [\"extra\"]\n"},
		{id: "SR05", tag: "D", tool: "secret-remove", argv: args("secret:"+testSecretID, "--revision", "x"), exit: 2, stderr: "ERROR invalid value \"x\" for option --revision: invalid syntax\n"},
	})
}

func TestGoldenSecretIDs(t *testing.T) {
	none := func() Context { f := newFakeSecrets(); f.content = map[string]map[string]string{}; return f }
	runSecretGolden(t, []scase{
		{id: "SI01", tag: "D", tool: "secret-ids", argv: args(), stdout: testSecretID + "\n", calls: []string{"ids"}},
		{id: "SI02", tag: "D", tool: "secret-ids", argv: args("--format", "json"), stdout: "[\"" + testSecretID + "\"]\n"},
		{id: "SI03", tag: "D", tool: "secret-ids", argv: args("--format", "yaml"), stdout: "- " + testSecretID + "\n"},
		{id: "SI04", tag: "D", tool: "secret-ids", argv: args(), ctx: none, stdout: ""},
		{id: "SI05", tag: "D", tool: "secret-ids", argv: args("--format", "json"), ctx: none, stdout: "[]\n"},
		{id: "SI06", tag: "D", tool: "secret-ids", argv: args("x"), exit: 2, stderr: "ERROR unrecognized args: [\"x\"]\n"},
	})
}

func TestGoldenSecretInfoGet(t *testing.T) {
	const yamlOut = testSecretID + ":\n  revision: 2\n  label: db\n  owner: application\n  description: the db\n  rotation: daily\n" +
		"  rotates: 2026-12-02T00:00:00Z\n  access:\n  - target: application-u\n    scope: relation-peer0:0\n    role: view\n"
	runSecretGolden(t, []scase{
		{id: "SF01", tag: "D", tool: "secret-info-get", argv: args(), exit: 2, stderr: "ERROR require either a secret URI or label\n"},
		{id: "SF02", tag: "D", tool: "secret-info-get", argv: args(testSecretID, "--label", "db"), exit: 2, stderr: "ERROR specify either a secret URI or label but not both\n"},
		{id: "SF03", tag: "D", tool: "secret-info-get", argv: args("secret:" + testSecretID), stdout: yamlOut, calls: []string{"info " + testSecretID + " label="}},
		{id: "SF04", tag: "D", tool: "secret-info-get", argv: args("--label", "db"), stdout: yamlOut},
		{id: "SF05", tag: "D", tool: "secret-info-get", argv: args("--label", "db", "--format", "json"),
			stdout: "{\"" + testSecretID + "\":{\"revision\":2,\"label\":\"db\",\"owner\":\"application\",\"description\":\"the db\",\"rotation\":\"daily\"," +
				"\"rotates\":\"2026-12-02T00:00:00Z\",\"access\":[{\"target\":\"application-u\",\"scope\":\"relation-peer0:0\",\"role\":\"view\"}]}}\n"},
		{id: "SF06", tag: "D", tool: "secret-info-get", argv: args("--label", "nope"), exit: 1, stderr: "ERROR secret \"nope\" not found\n"},
	})
}

func TestGoldenSecretGrantRevoke(t *testing.T) {
	inRelation := func() Context { f := newFakeSecrets(); f.hookRelation = 1; return f }
	runSecretGolden(t, []scase{
		{id: "SGR01", tag: "D", tool: "secret-grant", argv: args(), exit: 2, stderr: "ERROR missing secret URI\n"},
		{id: "SGR02", tag: "D", tool: "secret-grant", argv: args(testSecretID), exit: 2, stderr: "ERROR no relation id specified\n"},
		{id: "SGR03", tag: "D", tool: "secret-grant", argv: args(testSecretID, "-r", "0"), calls: []string{"grant " + testSecretID + " relation=0 unit="}},
		{id: "SGR04", tag: "D", tool: "secret-grant", argv: args(testSecretID, "--relation", "peer1:1", "--unit", "mediawiki/2"), ctx: func() Context {
			f := newFakeSecrets()
			f.relations[1].remoteApp = "mediawiki"
			return f
		}, calls: []string{"grant " + testSecretID + " relation=1 unit=mediawiki/2"}},
		{id: "SGR05", tag: "D", tool: "secret-grant", argv: args(testSecretID, "-r", "0", "--unit", "other/2"), exit: 2,
			stderr: "ERROR cannot specify unit \"other/2\" in relation to application \"remoteApp\"\n"},
		{id: "SGR06", tag: "D", tool: "secret-grant", argv: args(testSecretID, "-r", "7"), exit: 2, stderr: "ERROR invalid value \"7\" for option -r: relation not found\n"},
		{id: "SGR07", tag: "D", tool: "secret-grant", argv: args(testSecretID), ctx: inRelation, calls: []string{"grant " + testSecretID + " relation=1 unit="}},
		{id: "SGR08", tag: "D", tool: "secret-grant", argv: args(testSecretID, "-r", "0", "--unit", "bad"), exit: 2, stderr: "ERROR unit \"bad\" not valid\n"},
		{id: "SRV01", tag: "D", tool: "secret-revoke", argv: args(testSecretID), exit: 2, stderr: "ERROR missing relation or application or unit\n"},
		{id: "SRV02", tag: "D", tool: "secret-revoke", argv: args(testSecretID, "-r", "0"), calls: []string{"revoke " + testSecretID + " relation=0 app=remoteApp unit="}},
		{id: "SRV03", tag: "D", tool: "secret-revoke", argv: args(testSecretID, "--app", "mediawiki"), calls: []string{"revoke " + testSecretID + " relation=-1 app=mediawiki unit="}},
		{id: "SRV04", tag: "D", tool: "secret-revoke", argv: args(testSecretID, "--unit", "mediawiki/6"), calls: []string{"revoke " + testSecretID + " relation=-1 app= unit=mediawiki/6"}},
		{id: "SRV05", tag: "D", tool: "secret-revoke", argv: args(testSecretID, "--app", "a", "--unit", "a/1"), exit: 2, stderr: "ERROR specify only one of application or unit\n"},
		{id: "SRV06", tag: "D", tool: "secret-revoke", argv: args(testSecretID, "-r", "0", "--app", "a"), exit: 2, stderr: "ERROR do not specify both relation and app\n"},
		{id: "SRV07", tag: "D", tool: "secret-revoke", argv: args(testSecretID, "--app", "Bad"), exit: 2, stderr: "ERROR application \"Bad\" not valid\n"},
		{id: "SRV08", tag: "D", tool: "secret-revoke", argv: args(testSecretID), ctx: inRelation, calls: []string{"revoke " + testSecretID + " relation=1 app=remoteApp unit="}},
	})
}
