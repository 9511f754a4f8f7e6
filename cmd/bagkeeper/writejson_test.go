package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

// writeAdmin answers every admin write as a sidecar that commits it would.
type writeAdmin struct {
	fakeAdmin
}

func (*writeAdmin) SetBag(context.Context, *adminpb.SetBagRequest) (*adminpb.SetBagResponse, error) {
	return &adminpb.SetBagResponse{Index: 7}, nil
}

func (*writeAdmin) EnsureRelation(context.Context, *adminpb.EnsureRelationRequest) (*adminpb.EnsureRelationResponse, error) {
	return &adminpb.EnsureRelationResponse{RelationId: 3}, nil
}

func (*writeAdmin) RemoveRelation(context.Context, *adminpb.RemoveRelationRequest) (*adminpb.RemoveRelationResponse, error) {
	return &adminpb.RemoveRelationResponse{Index: 9}, nil
}

func (*writeAdmin) RemoveUnit(context.Context, *adminpb.RemoveUnitRequest) (*adminpb.RemoveUnitResponse, error) {
	return &adminpb.RemoveUnitResponse{}, nil
}

func (*writeAdmin) RemoveMember(context.Context, *adminpb.RemoveMemberRequest) (*adminpb.RemoveMemberResponse, error) {
	return &adminpb.RemoveMemberResponse{}, nil
}

func (*writeAdmin) TransferLeadership(context.Context, *adminpb.TransferLeadershipRequest) (*adminpb.TransferLeadershipResponse, error) {
	return &adminpb.TransferLeadershipResponse{Previous: "web-0/a", Leader: "web-1/b"}, nil
}

// Every command that writes says what it did as one JSON object with
// --format json (scripts), and as a line by default.
func TestWritesPrintJSON(t *testing.T) {
	sock := serveFake(t, &writeAdmin{})
	for _, tc := range []struct {
		args []string
		text string
		json map[string]any
	}{
		{[]string{"bags", "set", "--relation", "db:1", "web/0", "a=1", "b="}, "committed at raft index 7\n",
			map[string]any{"relation_id": 1.0, "owner": "web/0", "set": map[string]any{"a": "1"}, "deleted": []any{"b"}, "index": 7.0}},
		{[]string{"relation", "ensure", "--endpoint", "db", "--remote-app", "pg", "--remote-endpoint", "db"}, "db:3\n",
			map[string]any{"relation": "db:3", "relation_id": 3.0}},
		{[]string{"relation", "remove", "db:3"}, "relation db:3 removed at raft index 9\n",
			map[string]any{"relation": "db:3", "removed": true, "index": 9.0}},
		{[]string{"unit", "remove", "web/2"}, "unit web/2 removed\n", map[string]any{"unit": "web/2", "removed": true}},
		{[]string{"member", "remove", "web-2/c"}, "member web-2/c removed\n", map[string]any{"member": "web-2/c", "removed": true}},
		{[]string{"leader", "transfer"}, "leader: web-1/b (was web-0/a)\n", map[string]any{"previous": "web-0/a", "leader": "web-1/b", "moved": true}},
	} {
		name := strings.Join(tc.args[:2], " ")
		// The command's two words, the flags, then its arguments.
		with := func(flags ...string) []string {
			return append(append(append([]string(nil), tc.args[:2]...), append([]string{"--admin-socket", sock}, flags...)...), tc.args[2:]...)
		}
		args := with()
		e, out, errb := testEnv(nil)
		if code := runMain(e, args); code != 0 || out.String() != tc.text {
			t.Errorf("%s: exit %d, %q (stderr %q), want %q", name, code, out, errb, tc.text)
		}
		jargs := with("--format", "json")
		e, out, errb = testEnv(nil)
		if code := runMain(e, jargs); code != 0 {
			t.Errorf("%s --format json: exit %d (stderr %q)", name, code, errb)
			continue
		}
		var got map[string]any
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Errorf("%s --format json: %v: %q", name, err, out)
			continue
		}
		gb, _ := json.Marshal(got)
		wb, _ := json.Marshal(tc.json)
		if string(gb) != string(wb) {
			t.Errorf("%s --format json: %s, want %s", name, gb, wb)
		}
		yargs := with("--format", "yaml")
		e, _, _ = testEnv(nil)
		if code := runMain(e, yargs); code != 2 {
			t.Errorf("%s --format yaml: exit %d, want 2 (a usage mistake)", name, code)
		}
	}
}

func (*writeAdmin) PlanRecovery(_ context.Context, req *adminpb.PlanRecoveryRequest) (*adminpb.RecoveryPlan, error) {
	return recoveryPlan(req.GetSurvivors()), nil
}

func (*writeAdmin) StageRecovery(_ context.Context, req *adminpb.StageRecoveryRequest) (*adminpb.StageRecoveryResponse, error) {
	return &adminpb.StageRecoveryResponse{Plan: recoveryPlan(req.GetSurvivors()), Role: "lead"}, nil
}

func recoveryPlan(survivors []*adminpb.Survivor) *adminpb.RecoveryPlan {
	p := &adminpb.RecoveryPlan{Id: "0123456789ab", Digest: "0123456789abcdef", ClusterId: "c1", Generation: 2, Leader: survivors[0].GetId()}
	for _, s := range survivors {
		p.Survivors = append(p.Survivors, &adminpb.PlannedSurvivor{Id: s.GetId(), Address: s.GetAddress(), LastLogTerm: 3, LastIndex: 40, Role: "lead"})
	}
	return p
}

// recover --plan and --at-next-start print the plan as JSON too.
func TestRecoverPrintsJSON(t *testing.T) {
	sock := serveFake(t, &writeAdmin{})
	file := filepath.Join(t.TempDir(), "survivors.json")
	if err := os.WriteFile(file, []byte(`[{"id": "web-0/a", "address": "10.0.0.1:7400"}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	wantPlan := map[string]any{"id": "0123456789ab", "digest": "0123456789abcdef", "cluster_id": "c1", "generation": 2.0, "leader": "web-0/a",
		"survivors": []any{map[string]any{"id": "web-0/a", "address": "10.0.0.1:7400", "last_log_term": 3.0, "last_index": 40.0, "role": "lead"}}}
	for _, tc := range []struct {
		args []string
		want map[string]any
	}{
		{[]string{"--plan"}, map[string]any{"plan": wantPlan}},
		{[]string{"--at-next-start", "--plan-digest", "0123456789abcdef"}, map[string]any{"plan": wantPlan, "role": "lead"}},
	} {
		e, out, errb := testEnv(nil)
		args := append([]string{"recover", "--admin-socket", sock, "--survivors", file, "--format", "json"}, tc.args...)
		if code := runMain(e, args); code != 0 {
			t.Fatalf("%v: exit %d: %s", tc.args, code, errb)
		}
		var got map[string]any
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatalf("%v: %v: %q", tc.args, err, out)
		}
		gb, _ := json.Marshal(got)
		wb, _ := json.Marshal(tc.want)
		if string(gb) != string(wb) {
			t.Errorf("%v: %s, want %s", tc.args, gb, wb)
		}
	}
}
