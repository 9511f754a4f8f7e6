package hooktools

import (
	"errors"
	"slices"
	"testing"
)

// logged checks the lines juju-log logged ("LEVEL message").
func logged(want ...string) func(*testing.T, *fakeContext) {
	return func(t *testing.T, f *fakeContext) {
		t.Helper()
		if !slices.Equal(f.logs, want) {
			t.Errorf("logged %q, want %q", f.logs, want)
		}
	}
}

// §12 juju-log.
func TestGoldenJujuLog(t *testing.T) {
	// JL07: the hook relation's id string is empty.
	emptyKey := newFakeContext(5, "", "")
	emptyKey.addRelation(5, "db").key = str("")
	// JL08: the context has no hook relation at all.
	// JL09: the hook relation is not found.
	notFound := newFakeContext(5, "", "")
	// JL10: reading the hook relation fails.
	bad := newFakeContext(5, "", "")
	bad.relationErr[5] = errors.New("bad")

	runGolden(t, []gcase{
		{id: "JL01", tag: "T~", tool: "juju-log", argv: args(), exit: 2, stderr: "ERROR no message specified\n", check: logged()},
		{id: "JL02", tag: "T~", tool: "juju-log", argv: args("-l"), exit: 2, stderr: "ERROR option needs an argument: -l\n"},
		{id: "JL03", tag: "T~", tool: "juju-log", argv: args("--log-level"), exit: 2, stderr: "ERROR option needs an argument: --log-level\n"},
		{id: "JL04", tag: "T~", tool: "juju-log", argv: args("-l", "FATAL"), exit: 2, stderr: "ERROR no message specified\n"},
		{id: "JL05", tag: "T~", tool: "juju-log", argv: args("--log-level", "FATAL"), exit: 2, stderr: "ERROR no message specified\n"},
		{id: "JL06", tag: "T", tool: "juju-log", argv: args("--format", "foo", "msg"), stderr: "--format flag deprecated for command \"juju-log\"", check: logged("INFO msg")},
		{id: "JL07", tag: "T", tool: "juju-log", ctx: emptyKey, argv: args("foo", "msg"), check: logged("INFO : foo msg")},
		{id: "JL08", tag: "T", tool: "juju-log", argv: args("foo", "msg"), check: logged("INFO foo msg")},
		{id: "JL09", tag: "T", tool: "juju-log", ctx: notFound, argv: args("foo", "msg"), check: logged("INFO foo msg")},
		{id: "JL10", tag: "T~", tool: "juju-log", ctx: bad, argv: args("foo", "msg"), exit: 1, stderr: "ERROR bad\n", check: logged()},
		{id: "JL11", tag: "D", tool: "juju-log", argv: args("--", "-x", "msg"), check: logged("INFO -x msg")},
		// An invalid level logs a warning, then the message at INFO [D].
		{id: "JL-badlevel", tag: "D", tool: "juju-log", argv: args("-l", "loud", "msg"),
			check: logged("WARNING Specified log level of \"loud\" is not valid", "INFO msg")},
	})

	// The log record table (juju 2.x TestBadges): level and relation prefix.
	const msg = "the chickens are 110% AWESOME"
	for _, tc := range []struct {
		prefix []string
		level  string
	}{
		{nil, "INFO"},
		{args("--debug"), "DEBUG"},
		{args("--log-level", "TRACE"), "TRACE"},
		{args("--log-level", "info"), "INFO"},
		{args("--log-level", "WaRnInG"), "WARNING"},
		{args("--log-level", "error"), "ERROR"},
	} {
		argv := append(slices.Clone(tc.prefix), "the chickens", "are 110% AWESOME")
		runGolden(t, []gcase{
			{id: "JLB-" + tc.level + "-norel", tag: "T", tool: "juju-log", ctx: newFakeContext(-1, "", ""), argv: argv, check: logged(tc.level + " " + msg)},
			{id: "JLB-" + tc.level + "-rel", tag: "T", tool: "juju-log", ctx: newFakeContext(1, "u/1", ""), argv: argv, check: logged(tc.level + " peer1:1: " + msg)},
		})
	}
}

// statusSets checks the statuses status-set set ("unit status/message").
func statusSets(want ...string) func(*testing.T, *fakeContext) {
	return func(t *testing.T, f *fakeContext) {
		t.Helper()
		if !slices.Equal(f.statusSets, want) {
			t.Errorf("status sets %q, want %q", f.statusSets, want)
		}
	}
}

// §13 status-set.
func TestGoldenStatusSet(t *testing.T) {
	const invalidFoo = "ERROR invalid status \"foo\", expected one of [maintenance blocked waiting active]\n"
	runGolden(t, []gcase{
		{id: "STS-I1", tag: "T~", tool: "status-set", argv: args("maintenance"), check: statusSets("unit maintenance/")},
		{id: "STS-I2", tag: "T~", tool: "status-set", argv: args("maintenance", ""), check: statusSets("unit maintenance/")},
		{id: "STS-I3", tag: "T~", tool: "status-set", argv: args("maintenance", "hello"), check: statusSets("unit maintenance/hello")},
		{id: "STS-I4", tag: "T~", tool: "status-set", argv: args(), exit: 2, stderr: "ERROR invalid args, require <status> [message]\n", check: statusSets()},
		{id: "STS-I5", tag: "T~", tool: "status-set", argv: args("maintenance", "hello", "extra"), exit: 2, stderr: "ERROR unrecognized args: [\"extra\"]\n", check: statusSets()},
		{id: "STS-I6", tag: "T~", tool: "status-set", argv: args("foo", "hello"), exit: 2, stderr: invalidFoo, check: statusSets()},
		{id: "STS-R1", tag: "T", tool: "status-set", argv: args("maintenance", "doing some work"), check: statusSets("unit maintenance/doing some work")},
		{id: "STS-R2", tag: "T", tool: "status-set", argv: args("active", ""), check: statusSets("unit active/")},
		{id: "STS-R3", tag: "T", tool: "status-set", argv: args("--application", "maintenance", "doing some work"), check: statusSets("app maintenance/doing some work")},
		{id: "STS-R4", tag: "T", tool: "status-set", argv: args("--application", "active", ""), check: statusSets("app active/")},
		{id: "STS-R5", tag: "D", tool: "status-set", argv: args("error"), exit: 2,
			stderr: "ERROR invalid status \"error\", expected one of [maintenance blocked waiting active]\n", check: statusSets()},
	})
}

// statusFixture is §14's: unit status error/"doing work" with data
// {foo: bar}; application status active with one unit whose name is ""
// (Juju's test double sets no unit name).
func statusFixture() *fakeContext {
	f := newFakeContext(-1, "", "")
	f.unitStatus = Status{Status: "error", Message: "doing work", Data: map[string]any{"foo": "bar"}}
	f.appStatus = Status{Status: "active", Message: "this is a application status"}
	f.unitStatuses = map[string]Status{"": {Status: "active", Message: "this is a unit status"}}
	return f
}

// §14 status-get.
func TestGoldenStatusGet(t *testing.T) {
	sg := func(id, tag string, argv []string, exit int, stdout, stderr string) gcase {
		return gcase{id: id, tag: tag, tool: "status-get", ctx: statusFixture(), argv: argv, exit: exit, stdout: stdout, stderr: stderr}
	}
	runGolden(t, []gcase{
		sg("SGT1", "T~", args("--format", "json", "--include-data"), 0, "{\"message\":\"doing work\",\"status\":\"error\",\"status-data\":{\"foo\":\"bar\"}}\n", ""),
		sg("SGT2", "T~", args("--format", "yaml"), 0, "status: error\n", ""),
		sg("SGT3", "T", args(), 0, "error\n", ""),
		{id: "SGT4", tag: "T~", tool: "status-get", ctx: statusFixture(), argv: args("--format", "json", "--output", "some-file", "--include-data"),
			outFile: "some-file", outData: "{\"message\":\"doing work\",\"status\":\"error\",\"status-data\":{\"foo\":\"bar\"}}\n"},
		sg("SGT5", "T~", args("--format", "json", "--include-data", "--application"), 0,
			"{\"application-status\":{\"message\":\"this is a application status\",\"status\":\"active\",\"status-data\":{},\"units\":{\"\":{\"message\":\"this is a unit status\",\"status\":\"active\",\"status-data\":{}}}}}\n", ""),
		sg("SGT6", "D", args("--include-data"), 0, "message: doing work\nstatus: error\nstatus-data:\n  foo: bar\n", ""),
		sg("SGT7", "D", args("--application"), 0, "active\n", ""),
		sg("SGT8", "D", args("--format", "yaml", "--application"), 0, "application-status:\n  status: active\n  units:\n    \"\":\n      status: active\n", ""),
		sg("SGT9", "D", args("extra"), 2, "", "ERROR unrecognized args: [\"extra\"]\n"),
	})
}

// Leader-only paths of the status tools, as Juju's hook context refuses a
// non-leader (its ErrIsNotLeader, annotated by status-get only).
func TestGoldenStatusByANonLeader(t *testing.T) {
	nonLeader := func() *fakeContext {
		f := statusFixture()
		f.statusErr = ErrIsNotLeader
		return f
	}
	runGolden(t, []gcase{
		{id: "LDR01", tag: "D", tool: "status-get", ctx: nonLeader(), argv: args("--application"), exit: 1, stderr: "ERROR finding application status: this unit is not the leader\n"},
		{id: "LDR02", tag: "D", tool: "status-get", ctx: nonLeader(), argv: args("--application", "--include-data", "--format", "json"), exit: 1, stderr: "ERROR finding application status: this unit is not the leader\n"},
		{id: "LDR03", tag: "D", tool: "status-set", ctx: nonLeader(), argv: args("--application", "active", "fine"), exit: 1, stderr: "ERROR this unit is not the leader\n"},
	})
}
