//go:build linux

package e2e

import (
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// This file holds the history of a linearizability check and its model: a
// key of a bag is a register. A write sets it, a read returns it ("" while
// it is unset). The history is partitioned by key (P-compositionality), so
// porcupine checks each register on its own.

// histOp is one client operation on one register.
type histOp struct {
	process int    // the client process; a client takes a new one after an indeterminate write
	key     string // "owner:key"
	write   bool
	value   string // the value written, or the value read ("" if unset)
	// unknown marks a write that failed or timed out: it may or may not
	// have been committed, now or later. Its completion is unknown.
	unknown   bool
	call, ret int64  // nanoseconds since the history began, monotonic; ret is unused when unknown
	member    string // the pod asked
	note      string // for an indeterminate write, its error; for a read, how it saw nothing
}

func (o histOp) String() string {
	switch {
	case o.unknown:
		return fmt.Sprintf("write %s=%q by %s at %s, outcome unknown (%s)", o.key, o.value, o.member, stamp(o.call), o.note)
	case o.write:
		return fmt.Sprintf("write %s=%q by %s at %s–%s", o.key, o.value, o.member, stamp(o.call), stamp(o.ret))
	}
	if o.note != "" {
		return fmt.Sprintf("read %s → %s (%s) from %s at %s–%s", o.key, shown(o.value), o.note, o.member, stamp(o.call), stamp(o.ret))
	}
	return fmt.Sprintf("read %s → %s from %s at %s–%s", o.key, shown(o.value), o.member, stamp(o.call), stamp(o.ret))
}

// stamp formats a history timestamp.
func stamp(ns int64) string { return fmt.Sprintf("t+%.3fs", time.Duration(ns).Seconds()) }

func shown(v string) string {
	if v == "" {
		return "(unset)"
	}
	return fmt.Sprintf("%q", v)
}

// regInput and regOutput are what porcupine sees of an operation.
type regInput struct {
	key   string
	write bool
	value string // written
}

type regOutput struct {
	value   string // read
	unknown bool   // an indeterminate write
}

// opInfo is an operation's metadata, shown in the visualization.
type opInfo struct{ member, note string }

// toOperations converts the history for porcupine. An indeterminate write
// returns after everything else has happened (the representation porcupine's
// users, Jepsen's histories and etcd's robustness tests, use for an
// operation whose completion was never seen): it may take effect at any
// moment after its call, or never (as the last operation of all, observed by
// nobody).
func toOperations(ops []histOp) []porcupine.Operation {
	var end int64
	for _, o := range ops {
		end = max(end, o.call+1, o.ret+1)
	}
	out := make([]porcupine.Operation, 0, len(ops))
	for _, o := range ops {
		in := regInput{key: o.key, write: o.write}
		var res regOutput
		ret := o.ret
		switch {
		case o.unknown:
			in.value, res.unknown, ret = o.value, true, end
		case o.write:
			in.value = o.value
		default:
			res.value = o.value
		}
		out = append(out, porcupine.Operation{ClientId: o.process, Input: in, Call: o.call, Output: res, Return: ret, Metadata: opInfo{o.member, o.note}})
	}
	return out
}

// registerModel is a bag key as a register, the history partitioned by key.
var registerModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		for _, op := range history {
			k := op.Input.(regInput).key
			byKey[k] = append(byKey[k], op)
		}
		keys := make([]string, 0, len(byKey))
		for k := range byKey {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, len(keys))
		for i, k := range keys {
			out[i] = byKey[k]
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		in := input.(regInput)
		if in.write {
			return true, in.value
		}
		return output.(regOutput).value == state.(string), state
	},
	Hash: func(state any) uint64 {
		h := fnv.New64a()
		h.Write([]byte(state.(string)))
		return h.Sum64()
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(regInput), output.(regOutput)
		switch {
		case out.unknown:
			return fmt.Sprintf("%s ← %q ?", in.key, in.value)
		case in.write:
			return fmt.Sprintf("%s ← %q", in.key, in.value)
		}
		return fmt.Sprintf("%s → %s", in.key, shown(out.value))
	},
	DescribeState: func(state any) string { return shown(state.(string)) },
	DescribeOperationMetadata: func(info any) string {
		i, ok := info.(opInfo)
		if !ok {
			return ""
		}
		if i.note != "" {
			return i.member + ": " + i.note
		}
		return i.member
	},
}

// checkResult is the outcome of checkHistory.
type checkResult struct {
	result porcupine.CheckResult
	took   time.Duration
	viz    string   // the visualization, written unless the history is linearizable
	stale  []string // violations found by explainViolations
}

// checkHistory checks ops with porcupine within timeout. Unless the history
// is found linearizable, it writes porcupine's visualization (with the
// nemesis's faults as annotations) to dir and explains what it can.
func checkHistory(ops []histOp, faults []porcupine.Annotation, timeout time.Duration, dir string) (checkResult, error) {
	history := toOperations(ops)
	start := time.Now()
	res := checkResult{result: porcupine.CheckOperationsTimeout(registerModel, history, timeout)}
	res.took = time.Since(start)
	if res.result == porcupine.Ok {
		return res, nil
	}
	res.stale = explainViolations(ops)
	// Again, verbose this time: only a failing check pays for the partial
	// linearizations the visualization shows.
	_, info := porcupine.CheckOperationsVerbose(registerModel, history, timeout)
	info.AddAnnotations(faults)
	res.viz = filepath.Join(dir, "linearizability.html")
	if err := porcupine.VisualizePath(registerModel, info, res.viz); err != nil {
		return res, fmt.Errorf("writing the visualization: %w", err)
	}
	return res, writeHistoryText(filepath.Join(dir, "history.txt"), ops, faults)
}

// writeHistoryText writes the history as text, one operation or fault a
// line, in the order of their start.
func writeHistoryText(path string, ops []histOp, faults []porcupine.Annotation) error {
	type line struct {
		t int64
		s string
	}
	var lines []line
	for _, o := range ops {
		lines = append(lines, line{o.call, fmt.Sprintf("process %d: %s", o.process, o)})
	}
	for _, f := range faults {
		lines = append(lines, line{f.Start, fmt.Sprintf("nemesis: %s at %s–%s (%s)", f.Description, stamp(f.Start), stamp(f.End), f.Details)})
	}
	sort.SliceStable(lines, func(i, j int) bool { return lines[i].t < lines[j].t })
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l.s + "\n")
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// explainViolations names reads that no linearization can explain, for a
// person to read next to porcupine's verdict (which alone decides): a read
// of a value nobody wrote, a read that returned before the write of its
// value began, and a stale read: a read of a value that had certainly been
// overwritten before it began, because a later write (begun after the
// value's write took effect) had taken effect by then. A write has taken
// effect once it is acknowledged or once a read returned its value (an
// indeterminate write observed). Stale reads come first, the stalest first;
// at most 10 are listed.
func explainViolations(ops []histOp) []string {
	type found struct {
		age time.Duration
		s   string
	}
	var out []found
	// Every write by key and value, ret set to when it had certainly taken
	// effect (0 for an indeterminate write nobody observed).
	writes := map[string]map[string]histOp{}
	for _, o := range ops {
		if o.write {
			if o.unknown {
				o.ret = 0
			}
			if writes[o.key] == nil {
				writes[o.key] = map[string]histOp{}
			}
			writes[o.key][o.value] = o
		}
	}
	for _, r := range ops {
		if w, ok := writes[r.key][r.value]; ok && !r.write && w.unknown && (w.ret == 0 || r.ret < w.ret) {
			w.ret = r.ret
			writes[r.key][r.value] = w
		}
	}
	var effective []histOp
	for _, byValue := range writes {
		for _, w := range byValue {
			if w.ret != 0 {
				effective = append(effective, w)
			}
		}
	}
	sort.Slice(effective, func(i, j int) bool { return effective[i].ret < effective[j].ret })
	for _, r := range ops {
		if r.write {
			continue
		}
		w, ok := writes[r.key][r.value]
		switch {
		case r.value != "" && !ok:
			out = append(out, found{0, fmt.Sprintf("%s: a value no client wrote", r)})
			continue
		case r.value != "" && r.ret < w.call:
			out = append(out, found{0, fmt.Sprintf("%s: before its write began at %s", r, stamp(w.call))})
			continue
		}
		// The earliest write that certainly replaced the value read,
		// in effect before the read began.
		for _, w2 := range effective {
			if w2.ret >= r.call {
				break
			}
			if w2.key != r.key || w2.value == r.value || (r.value != "" && w2.call <= w.ret) {
				continue
			}
			how := "committed"
			if w2.unknown {
				how = "read back"
			}
			age := time.Duration(r.call - w2.ret)
			out = append(out, found{age, fmt.Sprintf("stale read: %s, but %q (written through %s) had replaced it, %s by %s, %v before the read began",
				r, w2.value, w2.member, how, stamp(w2.ret), age.Round(time.Millisecond))})
			break
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].age > out[j].age })
	s := make([]string, 0, min(len(out), 10))
	for _, f := range out[:min(len(out), 10)] {
		s = append(s, f.s)
	}
	if len(out) > 10 {
		s = append(s, fmt.Sprintf("… and %d more", len(out)-10))
	}
	return s
}

// TestLinearizabilityCheckerOnHandBuiltHistories proves the checker of
// TestLinearizableBagsUnderFaults able to fail: hand-built histories with a
// stale read are reported not linearizable (with a visualization and an
// explanation), and correct ones, indeterminate writes included, are
// reported linearizable. No processes run.
func TestLinearizabilityCheckerOnHandBuiltHistories(t *testing.T) {
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	w := func(p int, key, v string, call, ret int64) histOp {
		return histOp{process: p, key: key, write: true, value: v, call: ms(call), ret: ms(ret), member: "web-0"}
	}
	lost := func(p int, key, v string, call int64) histOp {
		return histOp{process: p, key: key, write: true, value: v, unknown: true, call: ms(call), member: "web-1", note: "deadline exceeded"}
	}
	r := func(p int, key, v string, call, ret int64) histOp {
		return histOp{process: p, key: key, value: v, call: ms(call), ret: ms(ret), member: "web-2"}
	}
	for _, tc := range []struct {
		name  string
		ops   []histOp
		ok    bool
		stale string // in the explanation of a violation
	}{
		{"sequential", []histOp{
			r(0, "a", "", 0, 5), w(0, "a", "c0-0", 10, 20), r(1, "a", "c0-0", 30, 40), w(1, "a", "c1-0", 50, 60), r(0, "a", "c1-0", 70, 80),
		}, true, ""},
		{"concurrent reads see the old or the new value", []histOp{
			w(0, "a", "c0-0", 0, 10), w(0, "a", "c0-1", 20, 60), r(1, "a", "c0-0", 25, 30), r(2, "a", "c0-1", 30, 40), r(1, "a", "c0-1", 45, 50),
		}, true, ""},
		{"indeterminate writes: one observed later, one never", []histOp{
			w(0, "a", "c0-0", 0, 10), lost(1, "a", "c1-0", 15), r(0, "a", "c0-0", 20, 30), r(2, "a", "c1-0", 100, 110), r(0, "a", "c1-0", 120, 130),
			lost(3, "b", "c3-0", 0), r(2, "b", "", 50, 60), w(4, "b", "c4-0", 70, 80), r(2, "b", "c4-0", 90, 95),
		}, true, ""},
		{"stale read of an overwritten value", []histOp{
			w(0, "a", "c0-0", 0, 10), w(0, "a", "c0-1", 20, 30), r(1, "a", "c0-0", 40, 50),
		}, false, `stale read: read a → "c0-0" from web-2 at t+0.040s–t+0.050s, but "c0-1" (written through web-0) had replaced it, committed by t+0.030s, 10ms before the read began`},
		{"stale read of the initial state", []histOp{
			w(0, "b", "c0-0", 0, 10), r(1, "a", "", 0, 100), r(1, "b", "", 20, 30),
		}, false, `stale read: read b → (unset) from web-2 at t+0.020s–t+0.030s, but "c0-0" (written through web-0) had replaced it`},
		{"stale read after an indeterminate write was observed", []histOp{
			w(0, "a", "c0-0", 0, 10), lost(1, "a", "c1-0", 20), r(2, "a", "c1-0", 30, 40), r(2, "a", "c0-0", 50, 60),
		}, false, `"c1-0" (written through web-1) had replaced it, read back by t+0.040s, 10ms before`},
		{"read of a value never written", []histOp{
			w(0, "a", "c0-0", 0, 10), r(1, "a", "c9-9", 20, 30),
		}, false, "a value no client wrote"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			res, err := checkHistory(tc.ops, []porcupine.Annotation{{Tag: "nemesis", Start: ms(15), End: ms(35), Description: "pause web-0"}}, 10*time.Second, dir)
			if err != nil {
				t.Fatal(err)
			}
			if got := res.result == porcupine.Ok; got != tc.ok || res.result == porcupine.Unknown {
				t.Fatalf("checked %s, want linearizable: %v; explanation: %v", res.result, tc.ok, res.stale)
			}
			if tc.ok {
				if res.viz != "" {
					t.Fatalf("a linearizable history has a visualization %s", res.viz)
				}
				// The explanation is sound too: nothing to explain here.
				if e := explainViolations(tc.ops); len(e) > 0 {
					t.Fatalf("a linearizable history explained as violations:\n%s", strings.Join(e, "\n"))
				}
				return
			}
			for _, f := range []string{res.viz, filepath.Join(dir, "history.txt")} {
				if st, err := os.Stat(f); err != nil {
					t.Fatalf("no output for a violation: %v", err)
				} else if st.Size() == 0 {
					t.Fatalf("%s is empty", f)
				}
			}
			if tc.stale != "" && !strings.Contains(strings.Join(res.stale, "\n"), tc.stale) {
				t.Fatalf("the explanation does not say %q:\n%s", tc.stale, strings.Join(res.stale, "\n"))
			}
		})
	}
}
