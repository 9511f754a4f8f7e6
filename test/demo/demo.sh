#!/usr/bin/env bash
# A narrated demo of bagkeeper on this machine: three sidecars on loopback
# addresses play three pods of one Juju application, each running the unit
# agent with a small bash charm (test/demo/charm: a toy database whose leader
# publishes a generated password). One pod is then replaced by a pod with an
# EMPTY disk on a NEW address: it gets its unit, its relation data and its
# charm state back from its peers, its charm is not installed again, and the
# other units see nothing but its new address.
#
# Usage: test/demo/demo.sh [path to the bagkeeper binary]
# The hook tools' binary, jujuc, is expected next to it (make build puts
# both in bin/). Everything the demo writes goes to .demo/ (or $DEMO_DIR).
set -euo pipefail

BK=${1:-bin/bagkeeper}
JUJUC=$(dirname "$BK")/jujuc
APP=postgresql
CHARM=$(cd "$(dirname "$0")/charm" && pwd)
PORT=7400
declare -A ADDR=([0]=127.0.0.11 [1]=127.0.0.12 [2]=127.0.0.13)
NEW_ADDR=127.0.0.21
PIDS=()

say()  { printf '\n\033[1m== %s\033[0m\n' "$*"; }
note() { printf '   %s\n' "$*"; }
# run shows a command, with the demo's paths shortened, and runs it.
run() {
	local shown="$*"
	shown=${shown//"$BK"/bagkeeper}
	shown=${shown//"$ROOT"/$SHOWN_ROOT}
	shown=${shown//"$SOCKS"/\$SOCKS}
	printf '\033[2m$ %s\033[0m\n' "$shown"
	"$@"
}
fail() { printf '\n\033[1;31mdemo failed: %s\033[0m\n' "$*" >&2; exit 1; }

for bin in "$BK" "$JUJUC"; do
	[ -x "$bin" ] || { echo "no $(basename "$bin") binary at $bin: run 'make build' first" >&2; exit 1; }
done
BK=$(cd "$(dirname "$BK")" && pwd)/$(basename "$BK")
JUJUC=$(cd "$(dirname "$JUJUC")" && pwd)/jujuc

# The sidecars get absolute paths: they hand them on to the hooks, which run
# in the charm's directory.
SHOWN_ROOT=${DEMO_DIR:-.demo}
ROOT=$SHOWN_ROOT
rm -rf "$ROOT"
mkdir -p "$ROOT"
ROOT=$(cd "$ROOT" && pwd)
# The sockets' paths must stay short (a Unix socket path has at most 107
# bytes): in $ROOT if it is short, else in a temporary directory.
SOCKS=$ROOT/sockets
if ((${#SOCKS} > 80)); then SOCKS=$(mktemp -d "${TMPDIR:-/tmp}/bkdemo.XXXXXX"); fi
mkdir -p "$SOCKS"

cleanup() {
	for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
	[[ $SOCKS == "$ROOT"/* ]] || rm -rf "$SOCKS"
}
trap cleanup EXIT

peers() { echo "${ADDR[0]}:$PORT,${ADDR[1]}:$PORT,${ADDR[2]}:$PORT"; }

# The charm's config, as an operator sets it (in Kubernetes: a mounted
# ConfigMap). Every pod watches it.
CONFIG=$ROOT/charm-config.yaml
echo "max-connections: 100" >"$CONFIG"

# start N: a NEW pod postgresql-N on ${ADDR[N]}: its disk (the raft data) is
# $ROOT/pod-N/volume, its container's copy of the charm $ROOT/pod-N/charm,
# and it gets a new pod UID, as every new pod does.
start() {
	local n=$1 ip=${ADDR[$1]} pod=$ROOT/pod-$1
	mkdir -p "$pod"
	[ -d "$pod/charm" ] || cp -r "$CHARM" "$pod/charm"
	"$BK" run --app "$APP" --pod-name "$APP-$n" --data-dir "$pod/volume" \
		--bind "$ip:$PORT" --http-bind "$ip:$((PORT + 1))" --admin-socket "$SOCKS/admin-$n.sock" \
		--peers "$(peers)" --bootstrap-expect 3 --join-token demo-token --promote-after 1s \
		--charm-dir "$pod/charm" --charm-config "$CONFIG" --hook-tool "$JUJUC" \
		--agent-socket "$SOCKS/agent-$n.sock" --pod-uid "$(od -An -tx1 -N8 /dev/urandom | tr -d ' \n')" \
		--log-format text --log-level warn >>"$pod/sidecar.log" 2>&1 &
	PIDS[$n]=$!
}

# admin N COMMAND ARGS...: a bagkeeper admin command against pod N's sidecar.
admin() { local n=$1 cmd=$2; shift 2; "$BK" "$cmd" --admin-socket "$SOCKS/admin-$n.sock" "$@"; }

# wait_until WHAT COMMAND...: poll COMMAND until it succeeds (30s at most).
wait_until() {
	local what=$1 deadline=$((SECONDS + 30))
	shift
	until "$@" >/dev/null 2>&1; do
		((SECONDS < deadline)) || fail "timed out waiting for $what (logs: $ROOT/pod-*/sidecar.log)"
		sleep 0.1
	done
}

ready() { admin "$1" status --format json | grep -q '"ready": true'; }
hooks() { cat "$ROOT/pod-$1/charm/hooks.log" 2>/dev/null; }
ran() { hooks "$1" | grep -qx "$2"; }
unit_bag() { admin 0 bags --format json --relation "$REL" "$1"; }

# settle: wait until the charms have run no hook for a second (the agents
# are idle).
settle() {
	local last="" now quiet=0 deadline=$((SECONDS + 30))
	while ((quiet < 10)); do
		now=$(cat "$ROOT"/pod-*/charm/hooks.log 2>/dev/null | wc -l)
		if [ "$now" = "$last" ]; then quiet=$((quiet + 1)); else quiet=0 last=$now; fi
		((SECONDS < deadline)) || fail "the charms' hooks did not settle"
		sleep 0.1
	done
}

# show_hooks N...: the pods' hook logs side by side, each under its unit.
show_hooks() {
	local files=() n
	for n in "$@"; do
		{ echo "$APP/$n"; echo "------------"; hooks "$n"; } >"$ROOT/.hooks-$n"
		files+=("$ROOT/.hooks-$n")
	done
	local width
	width=$(cat "${files[@]}" | awk '{ if (length > w) w = length } END { print w + 2 }')
	paste -d'|' "${files[@]}" | awk -F'|' -v w="$width" '{
		line = "  "
		for (i = 1; i <= NF; i++) line = line sprintf(" %-" w "s", $i)
		sub(/ +$/, "", line)
		print line
	}'
}

say "Three pods of '$APP' start on empty disks, each with the charm"
note "Each pod runs 'bagkeeper run' with --charm-dir: the sidecar is the pod's"
note "unit agent. The sidecars bootstrap ONE raft group; each claims the unit of"
note "its ordinal ($APP-1 -> unit $APP/1) and runs the charm's hooks"
note "(test/demo/charm/dispatch, a toy database charm), serving them the hook"
note "tools (relation-set, is-leader, ...) on a Unix socket."
for n in 0 1 2; do start "$n"; done
for n in 0 1 2; do wait_until "pod $APP-$n to be ready" ready "$n"; done
REL=$(admin 0 status --format json | grep -o '"key": "replicas:[0-9]*"' | cut -d'"' -f4)
[ -n "$REL" ] || fail "no peer relation"
for n in 0 1 2; do
	for m in 0 1 2; do
		[ "$n" = "$m" ] || wait_until "$APP/$n to see $APP/$m join" ran "$n" "replicas-relation-changed $APP/$m"
	done
done
settle

say "The hooks each unit ran"
note "Juju's order: install, the peer relation created, leader-elected for the"
note "leader or leader-settings-changed for the others, config-changed, start;"
note "then relation-joined and relation-changed for each peer. Relation hooks are"
note "named after the relation's endpoint (replicas-relation-joined), as in Juju;"
note "relation-changed without a unit: the leader wrote the application bag."
show_hooks 0 1 2

say "What the hooks wrote: the relation data bags"
note "Each unit published its role and connection limit (the sidecar adds its"
note "address); the leader generated the replication password. Every member of"
note "the raft group holds the same copy; this is $APP-2's."
run "$BK" bags --admin-socket "$SOCKS/admin-2.sock" --relation "$REL"
PRIMARY=$(unit_bag "$APP" | grep -o '"primary": "[^"]*"' | cut -d'"' -f4)
PASSWORD=$(unit_bag "$APP" | grep -o '"password": "[^"]*"' | cut -d'"' -f4)
[ -n "$PRIMARY" ] && [ -n "$PASSWORD" ] || fail "the leader did not publish the password"

say "The operator changes the charm config: no pod restarts"
note "The config file is watched (a mounted ConfigMap in Kubernetes): every unit"
note "runs config-changed in the pod it is in, and publishes the new limit."
run sed -i 's/100/250/' "$CONFIG"
for n in 0 1 2; do
	wait_until "$APP/$n to publish the new limit" sh -c "'$BK' bags --admin-socket '$SOCKS/admin-$n.sock' --format json --relation '$REL' '$APP/$n' | grep -q '\"max-connections\": \"250\"'"
done
settle
run "$BK" bags --admin-socket "$SOCKS/admin-0.sock" --relation "$REL" "$APP/0"

# The victim is a unit that does not lead: replacing the leader works as
# well, but the leadership lease (a promise to the charm) takes a minute to
# run out before another unit may lead.
V=1
[ "$PRIMARY" != "$APP/1" ] || V=2
OTHERS=()
declare -A MARK
for n in 0 1 2; do
	[ "$n" = "$V" ] && continue
	OTHERS+=("$n")
	MARK[$n]=$(hooks "$n" | wc -l)
done
OLD_ADDR=${ADDR[$V]}
INSTALLED_ON=$(cat "$ROOT/pod-$V/charm/installed-on")

say "Pod $APP-$V dies and is replaced: empty disk, new address"
note "kill -9; the pod's volume and its container are gone; the new pod comes up"
note "on $NEW_ADDR under the same name, as a StatefulSet reschedules a pod to a"
note "node without its disk. Without bagkeeper this would be a NEW unit with"
note "EMPTY bags: the charm would be installed again, and the other units would"
note "see $APP/$V depart and a stranger join."
kill -9 "${PIDS[$V]}"
wait "${PIDS[$V]}" 2>/dev/null || true
rm -rf "$ROOT/pod-$V"
ADDR[$V]=$NEW_ADDR
start "$V"
wait_until "the new pod $APP-$V to be ready" ready "$V"
wait_until "$APP/$V's hooks" ran "$V" start
settle

say "The new pod has its unit and its bags back"
run "$BK" bags --admin-socket "$SOCKS/admin-$V.sock" --relation "$REL" "$APP/$V"
note "Same unit ($APP/$V), same role and data; only its address moved"
note "($OLD_ADDR -> $NEW_ADDR). The password is the one the leader generated:"
run "$BK" bags --admin-socket "$SOCKS/admin-$V.sock" --relation "$REL" "$APP"
unit_bag "$APP/$V" | grep -q "\"private-address\": \"$NEW_ADDR\"" || fail "$APP/$V's bag does not hold its new address"
unit_bag "$APP" | grep -q "\"password\": \"$PASSWORD\"" || fail "the password changed"

say "What the charm of the new pod ran"
note "No install, no relation-created, no relation-joined: the unit's event"
note "cursor is replicated with its bags, so the agent knows what the charm was"
note "told. It runs what Juju runs for a sidecar charm whose pod was recreated:"
note "upgrade-charm, config-changed, leader-settings-changed (it does not lead),"
note "start; then relation-changed for anything that changed while it was away"
note "(nothing did). Its charm state came back too: in start, state-get"
note "installed-on said $(cat "$ROOT/pod-$V/charm/installed-on"), the time of the first install."
show_hooks "$V"
[ "$(cat "$ROOT/pod-$V/charm/installed-on")" = "$INSTALLED_ON" ] || fail "the charm state was lost"
if hooks "$V" | grep -Eq '^(install|replicas-relation-(created|joined|departed))'; then
	fail "the new pod's charm ran hooks a moved pod must not run"
fi

say "What the other units saw meanwhile"
note "Only relation-changed for $APP/$V: its address changed. No departure, no"
note "join: nothing for the charm to renegotiate."
for n in "${OTHERS[@]}"; do
	seen=$(hooks "$n" | tail -n +$((MARK[$n] + 1)))
	printf '   %s:\n' "$APP/$n"
	sed 's/^/     /' <<<"$seen"
	[ "$seen" = "replicas-relation-changed $APP/$V" ] || fail "$APP/$n should have seen exactly $APP/$V's address change"
done

say "The raft group, healed"
note "The new pod's raft member is a NEW incarnation (pod name + a fresh id), so"
note "it never votes with a memory it lost; the old incarnation was removed and"
note "the new one promoted to voter once caught up."
voters_back() {
	local s
	s=$(admin "$V" status --format json)
	[ "$(grep -c '"suffrage": "voter"' <<<"$s")" = 3 ] && ! grep -q '"reachable": false' <<<"$s"
}
wait_until "three voters" voters_back
run "$BK" status --admin-socket "$SOCKS/admin-$V.sock"

say "Done"
note "The pods' logs and charm directories are in $SHOWN_ROOT/."
