#!/usr/bin/env bash
# A narrated demo of bagkeeper on this machine: three sidecars on loopback
# addresses play three pods of one application. One pod is replaced by a
# pod with an EMPTY disk on a NEW address — and gets its unit and its
# relation data back from its peers.
#
# Usage: test/demo/demo.sh [path to the bagkeeper binary]
set -euo pipefail

BK=${1:-bin/bagkeeper}
APP=postgresql
ROOT=${DEMO_DIR:-.demo}
PORT=7400
declare -A ADDR=([0]=127.0.0.11 [1]=127.0.0.12 [2]=127.0.0.13)
NEW_ADDR=127.0.0.21
PIDS=()

say()  { printf '\n\033[1m== %s\033[0m\n' "$*"; }
note() { printf '   %s\n' "$*"; }
run()  { printf '\033[2m$ %s\033[0m\n' "$*"; "$@"; }

cleanup() {
	for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup EXIT

[ -x "$BK" ] || { echo "no bagkeeper binary at $BK: run 'make build' first" >&2; exit 1; }
rm -rf "$ROOT"
mkdir -p "$ROOT"

peers() { echo "${ADDR[0]}:$PORT,${ADDR[1]}:$PORT,${ADDR[2]}:$PORT"; }

# start N: run pod postgresql-N on ${ADDR[N]} with its disk in $ROOT/pod-N.
start() {
	local n=$1 ip=${ADDR[$1]}
	"$BK" run --app "$APP" --pod-name "$APP-$n" --data-dir "$ROOT/pod-$n" \
		--bind "$ip:$PORT" --http-bind "$ip:$((PORT + 1))" --admin-socket "$ROOT/admin-$n.sock" \
		--peers "$(peers)" --bootstrap-expect 3 --join-token demo-token \
		--log-format text --log-level warn >>"$ROOT/pod-$n.log" 2>&1 &
	PIDS[$n]=$!
}

admin() { local n=$1; shift; "$BK" "$@" --admin-socket "$ROOT/admin-$n.sock"; }

wait_ready() {
	local n=$1 deadline=$((SECONDS + 30))
	until admin "$n" status --format json 2>/dev/null | grep -q '"ready": true'; do
		if ((SECONDS > deadline)); then
			echo "pod $APP-$n did not become ready; its log:" >&2
			tail -20 "$ROOT/pod-$n.log" >&2
			exit 1
		fi
		sleep 0.2
	done
}

say "Three pods of '$APP' start on empty disks"
note "Each runs 'bagkeeper run' beside the charm. They find each other through"
note "--peers, agree on one configuration and bootstrap ONE raft group; each pod"
note "claims the unit matching its ordinal ($APP-1 -> unit $APP/1)."
for n in 0 1 2; do start "$n"; done
for n in 0 1 2; do wait_ready "$n"; done
run "$BK" status --admin-socket "$ROOT/admin-0.sock"

say "The charm writes relation data"
note "A peer relation, then each unit's own bag and the leader's application bag."
note "(Charms do this with relation-set; 'bags set' is the operator's equivalent.)"
REL=$(admin 0 relation ensure --endpoint replicas --interface postgresql-peers --peer)
note "relation: $REL"
for n in 0 1 2; do
	run "$BK" bags set --admin-socket "$ROOT/admin-$n.sock" --relation "$REL" "$APP/$n" \
		"ingress-address=${ADDR[$n]}" "replication-slot=slot_$n" >/dev/null
done
run "$BK" bags set --admin-socket "$ROOT/admin-0.sock" --relation "$REL" "$APP" \
	"replication-password=Zq8-demo-secret" "primary=$APP/0" >/dev/null
run "$BK" bags --admin-socket "$ROOT/admin-1.sock" "$APP/1"

say "Pod $APP-1 dies and is replaced: empty disk, new address"
note "kill -9, its volume is gone, and the new pod comes up on $NEW_ADDR."
note "Without bagkeeper this would be a NEW unit with EMPTY bags, and the other"
note "side of every relation would see a departure and a join."
kill -9 "${PIDS[1]}"
wait "${PIDS[1]}" 2>/dev/null || true
rm -rf "$ROOT/pod-1"
ADDR[1]=$NEW_ADDR
start 1
wait_ready 1
note "ready: /readyz turned green only once its state had caught up, so the"
note "bags were there before any hook could have run."

say "The replaced pod has its unit and its bags back"
run "$BK" bags --admin-socket "$ROOT/admin-1.sock" "$APP/1"
run "$BK" bags --admin-socket "$ROOT/admin-1.sock" "$APP"
note "Same unit ($APP/1), same data. Its raft member is a NEW incarnation"
note "(pod name + a fresh id), so it never votes with a memory it lost; the old"
note "incarnation was removed and the new one promoted to voter once caught up:"
deadline=$((SECONDS + 30))
until admin 1 status --format json | grep -c '"suffrage": "voter"' | grep -qx 3 &&
	! admin 1 status --format json | grep -q '"reachable": false'; do
	((SECONDS < deadline)) || break
	sleep 0.3
done
run "$BK" status --admin-socket "$ROOT/admin-1.sock"

say "Done"
note "Logs are in $ROOT/. See docs/architecture.md for how this works."
