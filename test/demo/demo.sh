#!/usr/bin/env bash
# A narrated demo of bagkeeper on this machine, in two parts, every pod a
# sidecar on a loopback address.
#
# Part 1, one application: three pods of an application run the unit agent
# with a small bash charm (test/demo/charm: a toy database whose leader
# publishes a generated password). One pod is replaced by a pod with an EMPTY
# disk on a NEW address: it gets its unit, its relation data and its charm
# state back from its peers, its charm is not installed again, and the other
# units see nothing but its new address.
#
# Part 2, two applications related across their raft groups: "web" (three
# Deployment-style pods, test/demo/pgsql-consumer) asks "pg" (three pods,
# test/demo/pgsql-provider) for a database over a pgsql relation; the
# provider creates a role and a database for it, and, as PostgreSQL's charm
# does, revokes them when a consumer unit departs. Every web pod is then
# replaced, one at a time, by a pod with a new name, a new address and an
# empty disk. The demo checks that nothing departed on the provider, nothing
# was revoked, and the credentials stayed the same and still work; it exits
# non-zero if a check fails. With PostgreSQL installed (binaries on the PATH
# or in /usr/lib/postgresql/*/bin), a throwaway server runs the provider's
# SQL, as an unprivileged user (postgres, when the demo runs as root);
# without it the demo says how to get it, and the charms run alone and only
# log their SQL. It takes a minute or two.
#
# Usage: test/demo/demo.sh [path to the bagkeeper binary]
# The hook tools' binary, jujuc, is expected next to it (make build puts
# both in bin/). Everything the demo writes goes to .demo/ (or $DEMO_DIR).
# DEMO_POSTGRESQL=no runs part 2 with the charms alone even where PostgreSQL
# is installed. With CI set, a failure prints the end of every sidecar's log.
set -euo pipefail

BK=${1:-bin/bagkeeper}
JUJUC=$(dirname "$BK")/jujuc
APP=postgresql
DEMO=$(cd "$(dirname "$0")" && pwd)
CHARM=$DEMO/charm
PORT=7400
declare -A ADDR=([0]=127.0.0.11 [1]=127.0.0.12 [2]=127.0.0.13)
NEW_ADDR=127.0.0.21
declare -A PIDS # every sidecar this demo runs, by pod
PG_STARTED=""   # set once the throwaway PostgreSQL server is started
START=$SECONDS

part() { printf '\n\033[1;7m %s \033[0m\n' "$*"; }
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
fail() {
	printf '\n\033[1;31mdemo failed: %s\033[0m\n' "$*" >&2
	if [ -n "${CI:-}" ]; then
		for log in "$ROOT"/*/sidecar.log; do
			[ -f "$log" ] || continue
			printf '\n--- %s (its last 30 lines)\n' "${log#"$ROOT"/}" >&2
			tail -30 "$log" >&2
		done
	fi
	exit 1
}

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
if ((${#SOCKS} > 60)); then SOCKS=$(mktemp -d "${TMPDIR:-/tmp}/bkdemo.XXXXXX"); fi
mkdir -p "$SOCKS"

cleanup() {
	for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
	if [ -n "$PG_STARTED" ]; then
		pg_ctl stop -m immediate -w >/dev/null 2>&1 || true
		rm -rf "$PGDIR/data" # a throwaway: its log stays
		[[ $PGDIR == "$ROOT"/* ]] || { cp "$PGDIR"/*.log "$ROOT/postgresql/" 2>/dev/null || true; rm -rf "$PGDIR"; }
	fi
	[[ $SOCKS == "$ROOT"/* ]] || rm -rf "$SOCKS"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

peers() { echo "${ADDR[0]}:$PORT,${ADDR[1]}:$PORT,${ADDR[2]}:$PORT"; }

# wait_until WHAT COMMAND...: poll COMMAND until it succeeds (60s at most).
wait_until() {
	local what=$1 deadline=$((SECONDS + 60))
	shift
	until "$@" >/dev/null 2>&1; do
		((SECONDS < deadline)) || fail "timed out waiting for $what (logs: $SHOWN_ROOT/*/sidecar.log)"
		sleep 0.1
	done
}

# settle FILE...: wait until the hook logs FILE... have not grown for a
# second (the agents are idle).
settle() {
	local last="" now quiet=0 deadline=$((SECONDS + 60))
	while ((quiet < 10)); do
		now=$(cat "$@" 2>/dev/null | wc -l)
		if [ "$now" = "$last" ]; then quiet=$((quiet + 1)); else quiet=0 last=$now; fi
		((SECONDS < deadline)) || fail "the charms' hooks did not settle"
		sleep 0.1
	done
}

# columns TITLE FILE [TITLE FILE]...: the files side by side, each under its
# title.
columns() {
	local files=() i=0
	while (($# >= 2)); do
		{ echo "$1"; echo "------------"; cat "$2" 2>/dev/null || true; } >"$ROOT/.column-$i"
		files+=("$ROOT/.column-$i")
		i=$((i + 1))
		shift 2
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

# ---------------------------------------------------------------------------
# Part 1: one application, one pod replaced.

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

ready() { admin "$1" status --format json | grep -q '"ready": true'; }
hooks() { cat "$ROOT/pod-$1/charm/hooks.log" 2>/dev/null; }
ran() { hooks "$1" | grep -qx "$2"; }
unit_bag() { admin 0 bags --format json --relation "$REL" "$1"; }

# show_hooks N...: the pods' hook logs side by side, each under its unit.
show_hooks() {
	local args=() n
	for n in "$@"; do args+=("$APP/$n" "$ROOT/pod-$n/charm/hooks.log"); done
	columns "${args[@]}"
}

part "Part 1: one application; a pod is replaced by an empty one"

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
settle "$ROOT"/pod-*/charm/hooks.log

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
settle "$ROOT"/pod-*/charm/hooks.log
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
settle "$ROOT"/pod-*/charm/hooks.log

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

# Part 1's pods are done: they leave the machine to part 2.
for n in 0 1 2; do kill -9 "${PIDS[$n]}" 2>/dev/null || true; done
for n in 0 1 2; do wait "${PIDS[$n]}" 2>/dev/null || true; unset "PIDS[$n]"; done

# ---------------------------------------------------------------------------
# Part 2: two applications, every pod of the consumer replaced.

part "Part 2: two applications; every pod of the consumer is replaced"

PG_IPS=(127.0.0.31 127.0.0.32 127.0.0.33)
WEB_IPS=(127.0.0.41 127.0.0.42 127.0.0.43 127.0.0.44 127.0.0.45 127.0.0.46)
declare -A CHARM_OF=([pg]=$DEMO/pgsql-provider [web]=$DEMO/pgsql-consumer)
declare -A POD_IP  # pod name -> its address
WEB_PODS=()        # the running web pods, in the order they started
PG_PODS=(pg-0 pg-1 pg-2)

# pod_name HASH: a pod name as a Deployment's ReplicaSet gives it: the
# application, the pod template's hash and five random characters.
pod_name() {
	local alphabet=bcdfghjklmnpqrstvwxz2456789 s="" i
	for i in 1 2 3 4 5; do s+=${alphabet:RANDOM % ${#alphabet}:1}; done
	echo "web-$1-$s"
}

# start_pod APP POD IP FLAGS...: a new pod POD of application APP on IP: an
# empty disk ($ROOT/POD/volume), its own copy of the charm
# ($ROOT/POD/charm), a new pod UID. Both applications' pods serve the
# relations port, PORT+2: the raft leader of each answers the other's.
start_pod() {
	local app=$1 pod=$2 ip=$3 dir=$ROOT/$2
	shift 3
	mkdir -p "$dir"
	cp -r "${CHARM_OF[$app]}" "$dir/charm"
	POD_IP[$pod]=$ip
	"$BK" run --app "$app" --pod-name "$pod" --data-dir "$dir/volume" \
		--bind "$ip:$PORT" --http-bind "$ip:$((PORT + 1))" --relations-bind "$ip:$((PORT + 2))" \
		--admin-socket "$SOCKS/$pod.sock" --agent-socket "$SOCKS/$pod.agent.sock" \
		--join-token "$app-demo-token" --bootstrap-expect 3 \
		--charm-dir "$dir/charm" --charm-config "$ROOT/$app-config.yaml" --hook-tool "$JUJUC" \
		--relations-file "$ROOT/$app-relations.yaml" --pod-uid "$(od -An -tx1 -N8 /dev/urandom | tr -d ' \n')" \
		--join-interval 100ms --autopilot-interval 200ms --unhealthy-after 1s --promote-after 1s \
		--hook-retry-delay 500ms --log-format text --log-level info "$@" >>"$dir/sidecar.log" 2>&1 &
	PIDS[$pod]=$!
}

# pod_admin POD COMMAND ARGS...: a bagkeeper admin command against POD's
# sidecar.
pod_admin() { local pod=$1 cmd=$2; shift 2; "$BK" "$cmd" --admin-socket "$SOCKS/$pod.sock" "$@"; }
pod_status() { pod_admin "$1" status --format json; }
pod_ready() { pod_status "$1" | grep -q '"ready": true'; }
# json_field KEY: the value of the first "KEY": "value" of the JSON on stdin.
json_field() { grep -o "\"$1\": \"[^\"]*\"" | cut -d'"' -f4 | sed -n 1p; }
pod_unit() { pod_status "$1" | json_field unit; }
pod_hooks() { cat "$ROOT/$1/charm/hooks.log" 2>/dev/null; }
creds() { cat "$ROOT/$1/charm/creds" 2>/dev/null; }
has_creds() { [ -s "$ROOT/$1/charm/creds" ]; }
cred() { tr ' ' '\n' <<<"$2" | sed -n "s/^$1=//p"; }
hook_logs() {
	local pod
	for pod in "${PG_PODS[@]}" "${WEB_PODS[@]}"; do echo "$ROOT/$pod/charm/hooks.log"; done
}
settle_all() { local logs; mapfile -t logs < <(hook_logs); settle "${logs[@]}"; }
# sql_log: the SQL statements pg's leaders logged, in order.
sql_log() { { cat "$ROOT"/pg-*/charm/sql.log 2>/dev/null || true; } | sort -s -k1,1; }

# write_web_peers: web's discovery, as a headless Service lists the pods.
write_web_peers() {
	local pod
	for pod in "${WEB_PODS[@]}"; do echo "${POD_IP[$pod]}:$PORT"; done >"$ROOT/web-peers.new"
	mv "$ROOT/web-peers.new" "$ROOT/web-peers"
}

# A PostgreSQL server, if there is one to run: the directory of its
# binaries (initdb, pg_ctl) from the PATH, else Debian's newest
# /usr/lib/postgresql/<version>/bin; and its client, psql.
PGBIN="" PSQL=""
if [ "${DEMO_POSTGRESQL:-}" != no ]; then
	if command -v initdb >/dev/null && command -v pg_ctl >/dev/null; then
		PGBIN=$(dirname "$(readlink -f "$(command -v initdb)")")
	else
		for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V); do
			[ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && PGBIN=$d
		done
	fi
	if [ -x "$PGBIN/psql" ]; then PSQL=$PGBIN/psql; else PSQL=$(command -v psql || true); fi
	[ -n "$PSQL" ] && [ -x "$PGBIN/pg_ctl" ] || PGBIN=""
fi

# as_pg COMMAND...: runs COMMAND as the user PostgreSQL runs as. PostgreSQL
# refuses to run as root: as root, that is the user postgres (else nobody).
PG_USER=$(id -un)
as_pg() { "$@"; }
if [ -n "$PGBIN" ] && [ "$(id -u)" = 0 ]; then
	PG_USER=postgres
	id -u postgres >/dev/null 2>&1 || PG_USER=nobody
	if command -v runuser >/dev/null; then
		as_pg() { runuser -u "$PG_USER" -- "$@"; }
	else
		as_pg() { setpriv --reuid="$PG_USER" --regid="$(id -g "$PG_USER")" --init-groups -- "$@"; }
	fi
fi

# free_port: a TCP port nothing listens on at 127.0.0.1.
free_port() {
	local p
	for _ in $(seq 50); do
		p=$((20000 + RANDOM % 30000))
		(exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return 0; }
	done
	return 1
}

pg_ctl() { as_pg "$PGBIN/pg_ctl" -D "$PGDIR/data" "$@"; }

# start_postgresql: a throwaway server in $PGDIR on 127.0.0.1:$PGPORT, TCP
# only, with a superuser postgres whose password is $PGPASS.
start_postgresql() {
	PGDIR=$ROOT/postgresql
	mkdir -p "$PGDIR"
	chmod 700 "$PGDIR"
	[ "$PG_USER" = "$(id -un)" ] || chown "$PG_USER:" "$PGDIR"
	# Its user must reach it: a work dir under a home it cannot enter would not do.
	if ! as_pg test -w "$PGDIR"; then
		PGDIR=$(mktemp -d "${TMPDIR:-/tmp}/bkdemo-pg.XXXXXX")
		[ "$PG_USER" = "$(id -un)" ] || chown "$PG_USER:" "$PGDIR"
	fi
	PGPASS=$(od -An -tx1 -N12 /dev/urandom | tr -d ' \n')
	echo "$PGPASS" >"$PGDIR/pwfile"
	[ "$PG_USER" = "$(id -un)" ] || chown "$PG_USER:" "$PGDIR/pwfile"
	as_pg "$PGBIN/initdb" -D "$PGDIR/data" -U postgres --pwfile "$PGDIR/pwfile" --auth scram-sha-256 \
		-E UTF8 --no-locale --no-sync >"$PGDIR/initdb.log" 2>&1 ||
		fail "initdb failed: $(tail -3 "$PGDIR/initdb.log")"
	rm -f "$PGDIR/pwfile"
	for _ in 1 2 3; do
		PGPORT=$(free_port) || fail "no free port on 127.0.0.1 for PostgreSQL"
		cat >>"$PGDIR/data/postgresql.conf" <<-EOF
			listen_addresses = '127.0.0.1'
			port = $PGPORT
			unix_socket_directories = ''
			fsync = off
		EOF
		PG_STARTED=yes
		if pg_ctl -l "$PGDIR/server.log" -w -t 30 start >/dev/null 2>&1; then
			return 0
		fi
	done
	fail "PostgreSQL did not start: $(tail -3 "$PGDIR/server.log")"
}

# sql CREDS STATEMENT: runs STATEMENT with psql as the user of the libpq
# connection string CREDS, and prints the rows; show_sql shows the command
# first.
export PGCONNECT_TIMEOUT=5
sql() { "$PSQL" "$1" -v ON_ERROR_STOP=1 -qAt -c "$2"; }
show_sql() {
	printf '\033[2m$ psql "%s" -c "%s"\033[0m\n' "$1" "$2"
	sql "$@" 2>&1 | sed 's/^/     /'
}

if [ -n "$PGBIN" ]; then
	say "A throwaway PostgreSQL server for the provider"
	start_postgresql
	note "PostgreSQL $("$PGBIN/pg_ctl" --version | sed 's/^[^0-9]*\([0-9.]*\).*/\1/') from $PGBIN, run as user $PG_USER: a new"
	note "cluster in ${PGDIR/#"$ROOT"/$SHOWN_ROOT}, listening on 127.0.0.1:$PGPORT (TCP only, passwords"
	note "required). It is stopped when the demo ends."
	export PATH=$(dirname "$PSQL"):$PATH # for the provider's hooks: psql
	PG_CONFIG="admin-dsn: \"host=127.0.0.1 port=$PGPORT user=postgres password=$PGPASS dbname=postgres\""$'\n'"port: $PGPORT"
else
	say "No PostgreSQL here: the charms run alone"
	if [ "${DEMO_POSTGRESQL:-}" = no ]; then
		note "DEMO_POSTGRESQL=no: PostgreSQL is left out."
	else
		note "PostgreSQL is not installed (no initdb, pg_ctl and psql on the PATH or in"
		note "/usr/lib/postgresql/*/bin). To run this part against a real server, install"
		note "it (Debian, Ubuntu: apt-get install postgresql; Fedora: dnf install"
		note "postgresql-server) and run the demo again."
	fi
	note "The provider's charm only logs the SQL it would run, and the credentials are"
	note "checked by value."
	PG_CONFIG=""
fi

say "Two applications, one relation between them"
note "pg (pods pg-0, pg-1, pg-2; test/demo/pgsql-provider) offers its endpoint db"
note "to web (three Deployment-style pods; test/demo/pgsql-consumer), whose"
note "endpoint database relates to it. Each application is its own raft group;"
note "each sidecar's relations file (a mounted ConfigMap) declares the offer or"
note "the relation, and the relations port (:$((PORT + 2))) carries each side's view"
note "into the other's raft log. A shared token, in a mounted Secret, lets web in."
od -An -tx1 -N16 /dev/urandom | tr -d ' \n' >"$ROOT/db.token"
cat >"$ROOT/pg-relations.yaml" <<EOF
offers:
  - endpoint: db
    consumers: [web]
    token-file: $ROOT/db.token
EOF
pg_addrs=$(printf '%s:'$((PORT + 2))', ' "${PG_IPS[@]}")
cat >"$ROOT/web-relations.yaml" <<EOF
relations:
  - endpoint: database
    app: pg
    offer: db
    interface: pgsql
    addresses: [${pg_addrs%, }]
    token-file: $ROOT/db.token
EOF
echo "$PG_CONFIG" >"$ROOT/pg-config.yaml"
echo "database: appdb" >"$ROOT/web-config.yaml"
for f in pg-relations.yaml web-relations.yaml; do
	printf '\033[2m$ cat %s\033[0m\n' "$SHOWN_ROOT/$f"
	sed "s|$ROOT|$SHOWN_ROOT|g" "$ROOT/$f"
done
note "The provider's charm, like PostgreSQL's: its leader creates a role and the"
note "database a consumer's units ask for, and REVOKEs and DROPs them when a"
note "consumer unit departs. The consumer's charm asks for appdb and hands the"
note "credentials it gets to its workload (a file, creds)."

pg_peers=$(printf '%s:'$PORT',' "${PG_IPS[@]}")
for i in 0 1 2; do start_pod pg "pg-$i" "${PG_IPS[$i]}" --peers "${pg_peers%,}"; done
for i in 0 1 2; do WEB_PODS+=("$(pod_name 7f9c5d)"); POD_IP[${WEB_PODS[$i]}]=${WEB_IPS[$i]}; done
write_web_peers
WEB_FLAGS=(--peers-file "$ROOT/web-peers" --unit-mode claim --units 3)
for i in 0 1 2; do start_pod web "${WEB_PODS[$i]}" "${WEB_IPS[$i]}" "${WEB_FLAGS[@]}"; done
for pod in "${PG_PODS[@]}" "${WEB_PODS[@]}"; do wait_until "pod $pod to be ready" pod_ready "$pod"; done
for pod in "${WEB_PODS[@]}"; do wait_until "$pod's charm to get the credentials" has_creds "$pod"; done
settle_all

say "web's units asked for appdb; pg granted it"
note "Each web pod claimed a unit (no ordinal in a Deployment pod's name: the"
note "group hands out web/0, web/1, web/2). The provider's leader ran:"
sql_log | sed 's/^/     /'
declare -A UNIT_OF # pod -> unit
for pod in "${WEB_PODS[@]}"; do UNIT_OF[$pod]=$(pod_unit "$pod"); done
CREDS=$(creds "${WEB_PODS[0]}")
note "and every web unit's charm wrote the same credentials for its workload:"
for pod in "${WEB_PODS[@]}"; do
	printf '     %-18s %-6s %s\n' "$pod" "${UNIT_OF[$pod]}" "$(creds "$pod")"
	[ "$(creds "$pod")" = "$CREDS" ] || fail "the web units hold different credentials"
done
PASSWORD=$(cred password "$CREDS")
if [ -n "$PGBIN" ]; then
	note "The workload uses them: it creates a table and writes a row."
	show_sql "$CREDS" "CREATE TABLE notes (written text); INSERT INTO notes VALUES ('before the rollout')" ||
		fail "the workload could not use its credentials"
fi

say "A rolling update replaces every web pod"
note "Each old pod gets SIGTERM (it releases its unit and leaves web's group);"
note "a new pod with a NEW name, a NEW address and an EMPTY disk takes its place"
note "(maxSurge 0: one at a time, followers first, web's raft leader last)."
echo
note "Without bagkeeper, each new pod is a new unit: pg sees web/N depart, DROPs appdb"
note "and grants the newcomer a new password; rolling that out replaces the pods again."
echo
declare -A PG_MARK
for pod in "${PG_PODS[@]}"; do PG_MARK[$pod]=$(pod_hooks "$pod" | wc -l); done
SQL_MARK=$(sql_log | wc -l)
leader=$(pod_status "${WEB_PODS[0]}" | json_field leader)
ORDER=()
for pod in "${WEB_PODS[@]}"; do [[ $leader == "$pod/"* ]] || ORDER+=("$pod"); done
for pod in "${WEB_PODS[@]}"; do [[ $leader == "$pod/"* ]] && ORDER+=("$pod"); done
((${#ORDER[@]} == 3)) || fail "web's raft leader ($leader) is none of its pods"
NEW_PODS=()
next_ip=3
for old in "${ORDER[@]}"; do
	unit=${UNIT_OF[$old]}
	new=$(pod_name 5b8e21)
	began=$(date +%s%N)
	kill -TERM "${PIDS[$old]}"
	deadline=$((SECONDS + 30))
	while kill -0 "${PIDS[$old]}" 2>/dev/null; do
		((SECONDS < deadline)) || fail "$old did not stop within 30s of SIGTERM"
		sleep 0.1
	done
	wait "${PIDS[$old]}" || fail "$old exited with status $? after SIGTERM"
	unset "PIDS[$old]"
	rm -rf "$ROOT/$old/volume" # its emptyDir; its logs stay for reading
	rest=()
	for pod in "${WEB_PODS[@]}"; do [ "$pod" = "$old" ] || rest+=("$pod"); done
	WEB_PODS=("${rest[@]}")
	POD_IP[$new]=${WEB_IPS[$next_ip]}
	WEB_PODS+=("$new")
	write_web_peers
	start_pod web "$new" "${WEB_IPS[$next_ip]}" "${WEB_FLAGS[@]}"
	next_ip=$((next_ip + 1))
	wait_until "the new pod $new to be ready" pod_ready "$new"
	wait_until "$new's charm to get the credentials" has_creds "$new"
	UNIT_OF[$new]=$(pod_unit "$new")
	NEW_PODS+=("$new")
	printf '   %s (%s, %s) -> %s (%s): ready in %4.1fs, holds %s\n' "$old" "$unit" "${POD_IP[$old]}" \
		"$new" "${POD_IP[$new]}" "$(($(date +%s%N) - began))e-9" "${UNIT_OF[$new]}"
done
# The provider has seen every new address once its view of each web unit
# holds it.
pg_sees_new_addresses() {
	local bags pod
	bags=$(pod_admin pg-0 bags --format json)
	for pod in "${NEW_PODS[@]}"; do
		tr -d '\n ' <<<"$bags" | grep -q "\"${UNIT_OF[$pod]}\":{[^}]*\"private-address\":\"${POD_IP[$pod]}\"" || return 1
	done
}
wait_until "pg to see web's new addresses" pg_sees_new_addresses
settle_all

say "What pg's units ran while web's pods were replaced"
note "Only relation-changed: each web unit's address changed, once per pod."
note "No db-relation-departed, no db-relation-joined: web's units never left."
args=()
for pod in "${PG_PODS[@]}"; do
	pod_hooks "$pod" | tail -n +$((PG_MARK[$pod] + 1)) >"$ROOT/.since-$pod"
	args+=("pg/${pod#pg-} ($pod)" "$ROOT/.since-$pod")
done
columns "${args[@]}"
note "The SQL pg's leader ran since the grant:"
since=$(sql_log | tail -n +$((SQL_MARK + 1)))
sed 's/^/     /' <<<"${since:-(none)}"

say "What the new web pods ran"
note "Juju's sequence for a sidecar charm whose pod was recreated (upgrade-charm,"
note "config-changed, leader-settings-changed, start), then the peer events of the"
note "pods replaced after it. No database-relation-created or -joined: they are"
note "the same units, told everything already. Each new pod's charm handed the"
note "credentials to its workload:"
args=()
for pod in "${NEW_PODS[@]}"; do args+=("${UNIT_OF[$pod]} ($pod)" "$ROOT/$pod/charm/hooks.log"); done
columns "${args[@]}"
for pod in "${NEW_PODS[@]}"; do printf '     %-18s %-6s %s\n' "$pod" "${UNIT_OF[$pod]}" "$(creds "$pod")"; done
if [ -n "$PGBIN" ]; then
	note "The workload of the last new pod connects with its credentials:"
	show_sql "$(creds "${NEW_PODS[2]}")" "SELECT current_user, written FROM notes" || true # judged below
fi

# ---------------------------------------------------------------------------
# The verdict, from what the logs and the pods say.

say "Verdict"
FAILED=0
check() {
	local what=$1
	shift
	if "$@"; then
		printf '   \033[32mok\033[0m    %s\n' "$what"
	else
		printf '   \033[1;31mFAIL\033[0m  %s\n' "$what"
		FAILED=1
	fi
}
no_departure() { ! grep -Eq '^db-relation-(departed|broken)' "$ROOT"/pg-*/charm/hooks.log; }
only_address_changes() {
	local pod seen
	for pod in "${PG_PODS[@]}"; do
		seen=$(pod_hooks "$pod" | tail -n +$((PG_MARK[$pod] + 1)))
		[ -z "$(grep -Ev '^db-relation-changed web/[0-9]+$' <<<"$seen")" ] || return 1
		[ -z "$(sort <<<"$seen" | uniq -d)" ] || return 1
	done
}
no_revoke() {
	local grant
	grant=$(sql_log | grep -n 'CREATE DATABASE' | cut -d: -f1 | sed -n 1p)
	[ -n "$grant" ] && ! sql_log | tail -n +"$grant" | grep -E 'REVOKE|DROP' >/dev/null
}
same_units() {
	local old=() new=() pod
	for pod in "${ORDER[@]}"; do old+=("${UNIT_OF[$pod]}"); done
	for pod in "${NEW_PODS[@]}"; do new+=("${UNIT_OF[$pod]}"); done
	[ "${old[*]}" = "${new[*]}" ]
}
no_rejoin() {
	local pod
	for pod in "${NEW_PODS[@]}"; do
		! pod_hooks "$pod" | grep -E '^(install|database-relation-(created|joined|departed|broken))' >/dev/null || return 1
	done
}
same_password() {
	local pod
	for pod in "${NEW_PODS[@]}"; do [ "$(cred password "$(creds "$pod")")" = "$PASSWORD" ] || return 1; done
}
creds_work() {
	local pod
	for pod in "${NEW_PODS[@]}"; do
		[ "$(sql "$(creds "$pod")" "SELECT written FROM notes" 2>/dev/null)" = "before the rollout" ] || return 1
	done
}
check "pg's units ran no db-relation-departed (hooks.log of pg-0, pg-1, pg-2)" no_departure
check "pg's units ran nothing else but one db-relation-changed per web unit (its address)" only_address_changes
check "pg's leader ran no REVOKE or DROP after the grant (sql.log)" no_revoke
check "each new web pod holds the unit of the pod it replaced" same_units
check "the new web pods ran no install, no database-relation-created or -joined" no_rejoin
check "every new web pod has the same password as before: $PASSWORD" same_password
if [ -n "$PGBIN" ]; then
	check "psql with each new pod's credentials reads the row written before the rollout" creds_work
else
	printf '   --    the credentials work against PostgreSQL: not checked, no PostgreSQL\n'
fi
((FAILED == 0)) || fail "a check failed; the pods' logs and charm directories are in $SHOWN_ROOT/"
printf '\n   \033[1;32mPASS\033[0m: every consumer pod was replaced; the relation, the grant and the\n'
printf '   credentials stayed as they were. The demo took %ds.\n' $((SECONDS - START))
note "The pods' logs and charm directories are in $SHOWN_ROOT/."
