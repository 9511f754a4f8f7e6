#!/usr/bin/env bash
# Exhaustive checks of test/model/claims.pml with spin (make model,
# make model-mutants): the model in both pod kinds must hold every
# invariant, and every mutant must produce a counterexample. Needs spin and
# a C compiler. Usage: check.sh [model|mutants|all]. The faults the
# environment injects are bounded: MODEL_FAULTS (default 1) for Deployment
# pods and the mutants, MODEL_STS_FAULTS (default 2) for StatefulSet pods.
set -euo pipefail
what=${1:-all}
here=$(cd "$(dirname "$0")" && pwd)
faults=${MODEL_FAULTS:-1}
sts_faults=${MODEL_STS_FAULTS:-2}
command -v spin >/dev/null || { echo "model: spin is not installed (Debian: apt-get install spin)"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# verify NAME EXPECT FAULTS FLAGS...: build and run pan in a directory of
# its own; EXPECT is "pass" (no error) or "fail" (an assertion violated,
# trail kept). -O1: pan.c compiles in a third of -O2's time and runs
# barely slower.
verify() {
	local name=$1 expect=$2 faults=$3
	shift 3
	local dir=$work/$name
	mkdir -p "$dir"
	cp "$here/claims.pml" "$dir/"
	(
		cd "$dir"
		if [ "$expect" = pass ]; then
			# the invariants, and the LTL property that every calm run ends
			# (acceptance cycles, no fairness needed)
			spin -a -DFAULTS="$faults" -DCALM_ENDS "$@" claims.pml >/dev/null
			gcc -O1 -w -DNOFAIR -o pan pan.c
			./pan -a -m500000 -c1 >out.txt 2>&1 || true
		else
			spin -a -DFAULTS="$faults" "$@" claims.pml >/dev/null
			gcc -O1 -w -DSAFETY -DNOFAIR -o pan pan.c
			./pan -m500000 -c1 >out.txt 2>&1 || true
		fi
	)
	local errors states vector elapsed
	errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$dir/out.txt")
	states=$(sed -n 's/^ *\([0-9e.+]*\) states, stored.*/\1/p' "$dir/out.txt")
	vector=$(sed -n 's/^State-vector \([0-9]*\) byte.*/\1/p' "$dir/out.txt")
	elapsed=$(sed -n 's/^pan: elapsed time \(.*\)/\1/p' "$dir/out.txt")
	if grep -q 'max search depth too small' "$dir/out.txt"; then
		echo "model $name: search depth too small"; cat "$dir/out.txt"; return 1
	fi
	case $expect in
	pass)
		printf 'model %-12s faults<=%s: no invariant violated, every calm run ends, with every unit held: %s states stored, state vector %s bytes, %s\n' "$name" "$faults" "$states" "$vector" "$elapsed"
		[ "$errors" = 0 ] || { cat "$dir/out.txt"; (cd "$dir" && spin -t -B -T -DFAULTS="$faults" -DCALM_ENDS "$@" claims.pml | tail -30); return 1; }
		;;
	fail)
		[ "${errors:-0}" != 0 ] || { echo "mutant $name: spin found no error: the invariant it breaks is not checked"; return 1; }
		printf 'mutant %-25s fails as it must: %s\n' "$name" "$(grep -m1 -o 'assertion violated.*(at depth [0-9]*)' "$dir/out.txt")"
		(cd "$dir" && spin -t -B -T -DFAULTS="$faults" "$@" claims.pml | grep -v '^ST' | grep -v '^MEM leader' | tail -8 | sed 's/^/    /')
		;;
	esac
}

# run NAME EXPECT FAULTS FLAGS...: verify in the background, its report
# kept until the end, so that the runs share the machine's cores and their
# reports still come in order.
names=()
run() {
	names+=("$1")
	verify "$@" >"$work/$1.report" 2>&1 &
	pids+=($!)
}
pids=()
if [ "$what" = model ] || [ "$what" = all ]; then
	run deployment pass "$faults"
	run statefulset pass "$sts_faults" -DSTATEFULSET
fi
if [ "$what" = mutants ] || [ "$what" = all ]; then
	run nofence fail "$faults" -DMUTATE_NOFENCE
	run noscale fail "$faults" -DMUTATE_NOSCALE
	run raftlease fail "$faults" -DMUTATE_RAFTLEASE
	run nocas fail "$faults" -DMUTATE_NOCAS
	run joinvoter fail "$faults" -DMUTATE_JOINVOTER
	run norelease fail "$faults" -DMUTATE_NORELEASE
fi
status=0
for i in "${!pids[@]}"; do
	wait "${pids[$i]}" || status=1
	cat "$work/${names[$i]}.report"
done
exit $status
