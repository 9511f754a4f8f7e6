//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestRecoveryRefusesWhatWouldSplitTheGroup runs `bagkeeper recover` as an
// operator might after losing three of five voters, wrong ways first. A
// healthy group is refused; so is each of the two survivors given a file
// listing only itself (which once made two groups with one cluster id and
// a different value for one key on each), a plan whose digest is not the
// survivors' plan, and a survivor list with a member that does not run.
// The one plan both survivors stage makes one group that keeps every
// committed bag: the survivor with the most complete log leads it, the
// other rejoins as a new member; the group's generation is 1; the lost
// member whose disk comes back is refused, and says why.
func TestRecoveryRefusesWhatWouldSplitTheGroup(t *testing.T) {
	c := newCluster(t, "--voters", "5")
	pods := c.startCluster(5)
	v := c.waitOneCluster(startTimeout, "five voters", wantVoters(5), wantMembers(5))
	want := seed(t, c.leaderPod(v), v.unitNames(), 1024)
	c.waitBags(want, pods...)
	a, b := pods[0], pods[1]
	ids := map[*pod]string{}
	for _, p := range pods {
		ids[p] = v.selfOf(p)
	}
	survivors := func(name string, ps ...*pod) string {
		var list []map[string]string
		for _, p := range ps {
			list = append(list, map[string]string{"id": ids[p], "address": p.addr()})
		}
		path := filepath.Join(c.dir, name+".json")
		data, _ := json.Marshal(list)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	recoverCLI := func(p *pod, args ...string) cliResult {
		return runCLI(t, 60*time.Second, append([]string{"recover", "--admin-socket", p.sock, "--timeout", "30s"}, args...)...)
	}
	refused := func(res cliResult, says string) {
		t.Helper()
		if res.code != 1 || !strings.Contains(res.stderr, "recovery refused") || !strings.Contains(res.stderr, says) {
			t.Fatalf("want a refusal saying %q, got %s", says, res)
		}
	}
	both := survivors("both", a, b)
	refused(recoverCLI(a, "--plan", "--survivors", both), "knows a leader")

	// Three voters are lost: two with their disks, one whose disk is kept.
	kept := pods[2]
	for _, p := range pods[2:] {
		p.kill()
		if p != kept {
			p.wipe()
		}
	}
	waitFor(t, startTimeout, "the survivors to lose their leader", func() (bool, string) {
		for _, p := range []*pod{a, b} {
			st, err := p.statusNoProbe()
			if err != nil || st.GetLeader() != "" {
				return false, fmt.Sprintf("%s: leader %q %v", p.name, st.GetLeader(), err)
			}
		}
		return true, ""
	})
	// Until it has been a while since the last contact with a leader, any
	// plan is refused for that; wait for the refusals that count.
	waitFor(t, startTimeout, "the time since the last leader to pass", func() (bool, string) {
		res := recoverCLI(a, "--plan", "--survivors", both)
		return !strings.Contains(res.stderr, "heard from a leader"), res.String()
	})
	refused(recoverCLI(a, "--plan", "--survivors", survivors("only-a", a)), "still runs but is not listed")
	refused(recoverCLI(b, "--plan", "--survivors", survivors("only-b", b)), "still runs but is not listed")
	refused(recoverCLI(a, "--plan", "--survivors", survivors("with-lost", a, b, kept)), "does not answer")
	refused(recoverCLI(a, "--at-next-start", "--survivors", both, "--plan-digest", strings.Repeat("ab", 32)), "not the one given")
	if res := recoverCLI(a, "--plan", "--survivors", filepath.Join(c.dir, "bad.json")); res.code == 0 {
		t.Fatalf("a missing survivors file: %s", res)
	}
	badAddr := filepath.Join(c.dir, "bad-address.json")
	if err := os.WriteFile(badAddr, []byte(`[{"id": "`+ids[a]+`", "address": "not-an-address"}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	if res := recoverCLI(a, "--plan", "--survivors", badAddr); res.code == 0 || !strings.Contains(res.stderr, "not host:port") {
		t.Fatalf("a survivor without a port: %s", res)
	}

	plan := recoverCLI(a, "--plan", "--survivors", both)
	m := regexp.MustCompile(`--plan-digest ([0-9a-f]{64})`).FindStringSubmatch(plan.stdout)
	if plan.code != 0 || m == nil {
		t.Fatalf("--plan: %s", plan)
	}
	digest := m[1]
	for _, p := range []*pod{a, b} {
		if res := recoverCLI(p, "--at-next-start", "--survivors", both, "--plan-digest", digest); res.code != 0 || !strings.Contains(res.stdout, "Staged on this member") {
			t.Fatalf("staging on %s: %s", p.name, res)
		}
	}
	for _, p := range []*pod{a, b} {
		p.stop()
	}
	for _, p := range []*pod{a, b} {
		p.start()
	}
	waitFor(t, startTimeout, "one recovered group of the two survivors", func() (bool, string) {
		var leaders, gens []string
		for _, p := range []*pod{a, b} {
			st, err := p.status()
			if err != nil {
				return false, err.Error()
			}
			leaders = append(leaders, st.GetLeader())
			gens = append(gens, fmt.Sprint(st.GetGeneration()))
			if len(st.GetMembers()) != 2 {
				return false, fmt.Sprintf("%s sees %d members", p.name, len(st.GetMembers()))
			}
		}
		return leaders[0] != "" && leaders[0] == leaders[1] && gens[0] == "1" && gens[1] == "1", fmt.Sprint(leaders, gens)
	})
	c.waitReady(a, b)
	got, err := a.bags()
	if err != nil {
		t.Fatal(err)
	}
	if d := diffBags(want, got); d != "" {
		t.Fatalf("the recovered group lost committed bags: %s", d)
	}
	renewed := 0
	for _, p := range []*pod{a, b} {
		st, _ := p.statusNoProbe()
		if st.GetSelf() != ids[p] {
			renewed++
		}
	}
	if renewed != 1 {
		t.Fatalf("%d survivors came back as new members, want 1 (the one that did not lead)", renewed)
	}

	kept.start()
	waitFor(t, startTimeout, kept.name+", left out of the recovery, to be refused", func() (bool, string) {
		code, body := kept.readyz()
		return code == 503 && strings.Contains(body, "which was recovered since"), fmt.Sprintf("%d %s", code, body)
	})
	if st, err := a.status(); err != nil || len(st.GetMembers()) != 2 {
		t.Fatalf("the refused member was let in: %v %v", st.GetMembers(), err)
	}
}
