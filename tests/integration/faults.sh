# shellcheck shell=bash
# The fault campaign's machinery, sourced after lib.sh by test_faults.sh
# (a few telling schedules) and scripts/fault-campaign (all of them).
#
# Three network namespaces: the server's (a bridge, 10.77.0.1) and two
# simulated hosts, A (10.77.0.2) and B (10.77.0.3), each on a veth pair to
# the bridge and each in a mount namespace of its own with a private tmpfs
# /run/leasefs (host locks, control sockets), so only the store keeps them
# apart.  The root (FC_ROOT) is one directory both see.  The stores' servers
# run in the server's namespace: PostgreSQL (initdb in a temp dir, the
# harness's migrations applied by pgstore_peer.py), nats-server -js, one
# etcd member; fsstore is a directory both hosts see.  TTL 3 s.
#
# One run of a schedule (fc_run STORE FAULT N): A mounts and writes
# fsync-acknowledged records (faultrec.py) to a file in the root; B runs
# `leasefs mount --wait` on the same root and a writer that starts the
# moment B's mount appears; the fault is injected while A holds, held, and
# healed; if B still waits, A unmounts (a clean handover); the records are
# checked.  fc_run prints one JSON line per run (faultrec.py's check, the
# run's notes, bad: a safety violation, false_ack, stuck: no hand-over or a
# --wait mount that gave up) and returns 1 on any of the three.

# shellcheck disable=SC2034,SC2154  # FC_NS_*, FC_IP_*, FC_HOST_* are read through eval
FC_TTL=3
FC_SRV=10.77.0.1 FC_IP_a=10.77.0.2 FC_IP_b=10.77.0.3
FC_TAG=$$
FC_NS_S=lfc-s$FC_TAG FC_NS_a=lfc-a$FC_TAG FC_NS_b=lfc-b$FC_TAG
FC_ROOT=$T/root
FAKETIME_LIB=/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1
PY=/usr/bin/python3

# fc_usable: why the campaign cannot run here (stdout), or nothing.
fc_usable() {
	command -v ip >/dev/null || { echo "ip (iproute2) is not installed"; return; }
	command -v nft >/dev/null || { echo "nft (nftables) is not installed"; return; }
	command -v nsenter >/dev/null && command -v unshare >/dev/null ||
		{ echo "nsenter/unshare (util-linux) are not installed"; return; }
	local ns=lfc-probe$FC_TAG why=
	if ! ip netns add "$ns" 2>/dev/null; then
		echo "cannot make a network namespace (ip netns add)"; return
	fi
	ip netns exec "$ns" nft add table inet probe 2>/dev/null || why="nftables does not work in a network namespace"
	ip netns exec "$ns" ip link add p0 type veth peer name p1 2>/dev/null || why="no veth pairs"
	ip netns exec "$ns" ip link add b0 type bridge 2>/dev/null || why="no bridges"
	ip netns del "$ns"
	echo "$why"
}

# fc_netem: 1 if this kernel has netem (tc qdisc ... netem), else 0; a
# delay then goes through delayproxy.py instead.
fc_netem() {
	local ns=lfc-probe$FC_TAG r=0
	ip netns add "$ns"
	ip netns exec "$ns" ip link set lo up
	ip netns exec "$ns" tc qdisc add dev lo root netem delay 1ms 2>/dev/null && r=1
	ip netns del "$ns"
	echo $r
}

# fc_topology: the three namespaces, the bridge, the hosts' mount
# namespaces.  Removed at exit.
fc_topology() {
	local h
	FC_NETEM=$(fc_netem)
	for h in S a b; do
		eval "ip netns add \$FC_NS_$h"
		eval "at_exit \"ip netns del \$FC_NS_$h\""
		eval "ip netns exec \$FC_NS_$h ip link set lo up"
	done
	ip netns exec "$FC_NS_S" ip link add br0 type bridge
	ip netns exec "$FC_NS_S" ip addr add "$FC_SRV/24" dev br0
	ip netns exec "$FC_NS_S" ip link set br0 up
	for h in a b; do
		local ns ip
		eval "ns=\$FC_NS_$h ip=\$FC_IP_$h"
		ip link add h0 netns "$ns" type veth peer name "p$h" netns "$FC_NS_S"
		ip netns exec "$ns" ip addr add "$ip/24" dev h0
		ip netns exec "$ns" ip link set h0 up
		ip netns exec "$FC_NS_S" ip link set "p$h" master br0
		ip netns exec "$FC_NS_S" ip link set "p$h" up
		fc_host_start "$h" "$ns"
	done
	# A listener on the bridge answers both hosts (no ping here).
	ip netns exec "$FC_NS_S" "$PY" -c 'import socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("'"$FC_SRV"'", 9)); s.listen()
open("'"$T"'/probe.ready", "w").close(); time.sleep(30)' &
	local probe=$!
	wait_until 10 test -e "$T/probe.ready" || fail "cannot listen in the server's namespace"
	for h in a b; do
		wait_until 10 on "$h" "$PY" -c 'import socket, sys; socket.create_connection((sys.argv[1], 9), 1)' "$FC_SRV" ||
			fail "host $h does not reach the server's namespace"
	done
	kill "$probe" 2>/dev/null || true
	mkdir -p "$FC_ROOT" "$T/ma" "$T/mb"
	FC_NAME=$(python3 "$HERE/fsstore_peer.py" "$FC_ROOT" --root-name)
}

# fc_host_start H NS: a process holding host H's mount namespace (a
# private tmpfs /run/leasefs, mounts from outside propagating in) inside
# network namespace NS.  on H CMD... runs CMD on that host.
fc_host_start() {
	local h=$1 ns=$2 ready=$T/host-$1.ready pid
	mkdir -p /run/leasefs
	ip netns exec "$ns" unshare -m --propagation slave sh -c \
		"mount -t tmpfs -o mode=0700 leasefs-host-$h /run/leasefs && touch '$ready' && exec sleep 100000" &
	pid=$!
	disown "$pid"
	PIDS+=("$pid")
	eval "FC_HOST_$h=$pid"
	wait_until 10 test -e "$ready" || fail "host $h did not start"
}
on() { local h=$1 pid; shift; eval "pid=\$FC_HOST_$h"; nsenter -t "$pid" -m -n -- "$@"; }
srv() { ip netns exec "$FC_NS_S" "$@"; }

# ---------------------------------------------------------------- stores
# fc_store STORE: start STORE's server (if any) and set FC_URI (what both
# hosts use) and FC_URI_PROXY (host A's through a delay proxy).
fc_store() {
	FC_STORE=$1
	case $1 in
	pg) fc_pg_init; fc_pg_up; fc_pg_migrate
	    FC_URI="postgresql://leasefs@$FC_SRV:5432/postgres?sslmode=disable${FC_PG_PARAMS-&max_ttl=$FC_TTL}"
	    FC_URI_PROXY="postgresql://leasefs@127.0.0.1:15432/postgres?sslmode=disable${FC_PG_PARAMS-&max_ttl=$FC_TTL}"
	    FC_PORT=5432 ;;
	nats) fc_nats_up
	    FC_URI="nats://$FC_SRV:4222${FC_NATS_PARAMS-?max_ttl=$FC_TTL}"
	    FC_URI_PROXY="nats://127.0.0.1:15432${FC_NATS_PARAMS-?max_ttl=$FC_TTL}"
	    FC_PORT=4222 ;;
	etcd) fc_etcd_up
	    FC_URI="etcd://$FC_SRV:2379/fc${FC_ETCD_PARAMS-?max_ttl=$FC_TTL}"
	    FC_URI_PROXY="etcd://127.0.0.1:15432/fc${FC_ETCD_PARAMS-?max_ttl=$FC_TTL}"
	    FC_PORT=2379 ;;
	fs) mkdir -p "$T/fsstore"; FC_URI="fsstore:$T/fsstore"; FC_URI_PROXY=$FC_URI; FC_PORT= ;;
	*) fail "unknown store $1" ;;
	esac
}
fc_store_stop() {
	case $FC_STORE in
	pg) fc_pg_kill ;;
	nats) fc_nats_kill ;;
	etcd) fc_etcd_kill ;;
	esac
}
fc_kill9() { fc_store_stop; }
# fc_restart [fresh]: the server again, with its store or (fresh) without.
fc_restart() {
	case $FC_STORE in
	pg) if [ "${1:-}" = fresh ]; then
		# The spare cluster made before the kill (fc_pg_spare): the
		# server is back as fast as it would be with its store.
		rm -rf "$FC_PGW/data"; mv "$FC_PGW/spare" "$FC_PGW/data"
		fc_pg_up; fc_pg_migrate
	    else fc_pg_up; fi ;;
	nats) [ "${1:-}" != fresh ] || rm -rf "$T/js"; fc_nats_up ;;
	etcd) [ "${1:-}" != fresh ] || rm -rf "$T/etcd"
	    # A killed etcd's threads may hold its ports a moment after its
	    # main thread is a zombie (wait_pid_gone).
	    wait_until 10 fc_etcd_ports_free || fail "etcd's ports still taken after its kill"
	    fc_etcd_up ;;
	esac
}
fc_etcd_ports_free() { ! srv ss -Hltn 'sport = :2379 or sport = :2380' | grep -q .; }

PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
fc_as_pg() { runuser -u postgres -- "$@"; }
fc_pg_init() {
	[ -n "$PG_BIN" ] || fail "PostgreSQL is not installed (scripts/setup installs it)"
	if [ -z "${FC_PGW:-}" ]; then
		FC_PGW=$(mktemp -d /var/tmp/leasefs-fc-pg.XXXXXX)
		chmod 755 "$FC_PGW"; chown postgres "$FC_PGW"
		at_exit "rm -rf '$FC_PGW'"
	fi
	rm -rf "$FC_PGW/data"
	fc_as_pg "$PG_BIN/initdb" -D "$FC_PGW/data" -U leasefs -A trust --no-sync >"$FC_PGW/initdb.log" 2>&1 ||
		fail "initdb: $(tail -5 "$FC_PGW/initdb.log")"
	echo "host all all 10.77.0.0/24 trust" >>"$FC_PGW/data/pg_hba.conf"
}
fc_pg_spare() {
	rm -rf "$FC_PGW/spare"
	fc_as_pg "$PG_BIN/initdb" -D "$FC_PGW/spare" -U leasefs -A trust --no-sync >"$FC_PGW/initdb.log" 2>&1 ||
		fail "initdb: $(tail -5 "$FC_PGW/initdb.log")"
	echo "host all all 10.77.0.0/24 trust" >>"$FC_PGW/spare/pg_hba.conf"
}
fc_pg_up() {
	srv runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$FC_PGW/data" -l "$FC_PGW/server.log" -w -t 60 \
		-o "-c listen_addresses='127.0.0.1,$FC_SRV' -p 5432 -k $FC_PGW -c fsync=off -c max_connections=200" \
		start >/dev/null 2>&1 || fail "PostgreSQL did not start: $(tail -5 "$FC_PGW/server.log")"
	FC_PG_PID=$(head -1 "$FC_PGW/data/postmaster.pid")
	at_exit "kill -9 $FC_PG_PID"
}
fc_pg_migrate() {
	srv "$PY" "$HERE/pgstore_peer.py" --migrations=apply \
		"postgresql://leasefs@127.0.0.1:5432/postgres?sslmode=disable" migrate >/dev/null ||
		fail "the harness's migrations"
}
# kill -9 of the postmaster and every backend (as a crash: no shutdown).
fc_pg_kill() {
	local kids
	kids=$(ps -o pid= --ppid "$FC_PG_PID" 2>/dev/null || true)
	# shellcheck disable=SC2086
	kill -9 "$FC_PG_PID" $kids 2>/dev/null || true
	wait_pid_gone "$FC_PG_PID" 10 || fail "PostgreSQL did not die"
	# A killed postmaster may linger as a zombie for a while; its lock
	# files would make the next start refuse.
	rm -f "$FC_PGW/.s.PGSQL.5432.lock" "$FC_PGW/data/postmaster.pid"
}
fc_psql() { srv "$PG_BIN/psql" -X -At -h 127.0.0.1 -p 5432 -U leasefs postgres -c "$1"; }

fc_nats_up() {
	local before
	touch "$T/nats.log"
	before=$(grep -c "Server is ready" "$T/nats.log" || true)
	ip netns exec "$FC_NS_S" nats-server -a 0.0.0.0 -p 4222 -js -sd "$T/js" >>"$T/nats.log" 2>&1 &
	FC_NATS_PID=$!
	disown "$FC_NATS_PID"   # its kill -9 is a fault, not news
	PIDS+=("$FC_NATS_PID")
	wait_until 10 bash -c "[ \$(grep -c 'Server is ready' '$T/nats.log') -gt $before ]" ||
		fail "nats-server did not start: $(tail -5 "$T/nats.log")"
}
fc_nats_kill() { kill -9 "$FC_NATS_PID" 2>/dev/null || true; wait_pid_gone "$FC_NATS_PID" 10 || fail "nats-server did not die"; }

# One etcd member in the server's namespace, clients on every address.
fc_etcd_up() {
	command -v etcd >/dev/null || fail "etcd is not installed (scripts/setup --test installs it)"
	ip netns exec "$FC_NS_S" env -u ETCD_UNSUPPORTED_ARCH etcd --name m0 --data-dir "$T/etcd" \
		--listen-client-urls http://0.0.0.0:2379 --advertise-client-urls "http://$FC_SRV:2379" \
		--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
		--initial-cluster m0=http://127.0.0.1:2380 --initial-cluster-state new >>"$T/etcd.log" 2>&1 &
	FC_ETCD_PID=$!
	disown "$FC_ETCD_PID"
	PIDS+=("$FC_ETCD_PID")
	wait_until 20 srv "$PY" -c 'import json, sys, urllib.request
sys.exit(0 if json.load(urllib.request.urlopen("http://127.0.0.1:2379/health", timeout=1))["health"] == "true" else 1)' 2>/dev/null ||
		fail "etcd did not start: $(tail -5 "$T/etcd.log")"
}
fc_etcd_kill() { kill -9 "$FC_ETCD_PID" 2>/dev/null || true; wait_pid_gone "$FC_ETCD_PID" 10 || fail "etcd did not die"; }

# ---------------------------------------------------------------- faults
fc_part() { # in|out|both: host A's traffic with the server dropped
	on a nft add table inet f
	case $1 in in|both)
		on a nft add chain inet f i '{ type filter hook input priority 0; }'
		on a nft add rule inet f i ip saddr "$FC_SRV" drop ;;
	esac
	case $1 in out|both)
		on a nft add chain inet f o '{ type filter hook output priority 0; }'
		on a nft add rule inet f o ip daddr "$FC_SRV" drop ;;
	esac
}
fc_heal_part() { on a nft delete table inet f 2>/dev/null || true; }
# A 200 ms delay each way on host A's link: netem where the kernel has it,
# else the proxy A's mount goes through for these schedules.
fc_delay() {
	if [ "$FC_NETEM" = 1 ]; then
		on a tc qdisc add dev h0 root netem delay "${1}ms"
		srv tc qdisc add dev pa root netem delay "${1}ms"
	else
		echo "$1" >"$T/delay"
	fi
}
fc_heal_delay() {
	if [ "$FC_NETEM" = 1 ]; then
		on a tc qdisc del dev h0 root 2>/dev/null || true
		srv tc qdisc del dev pa root 2>/dev/null || true
	else
		echo 0 >"$T/delay"
	fi
}
fc_proxy_start() {
	[ -z "${FC_PROXY_PID:-}" ] || return 0
	echo 0 >"$T/delay"
	nsenter -t "$FC_HOST_a" -m -n -- "$PY" -u "$HERE/delayproxy.py" 127.0.0.1:15432 "$FC_SRV:$FC_PORT" "$T/delay" >"$T/proxy.out" 2>&1 &
	FC_PROXY_PID=$!
	PIDS+=("$FC_PROXY_PID")
	wait_until 10 grep -q ready "$T/proxy.out" || fail "delay proxy: $(cat "$T/proxy.out")"
}
fc_proxy_stop() {
	[ -n "${FC_PROXY_PID:-}" ] || return 0
	kill "$FC_PROXY_PID" 2>/dev/null || true
	FC_PROXY_PID=
}

# fc_revoke TIMEOUT: `leasefs lease revoke` of the root from host B; sets
# FC_REVOKE (exit status, ms, what it said) and FC_REVOKE_OUT.
fc_revoke() {
	local t0 rc=0 out
	t0=$(date +%s%3N)
	out=$(on b timeout 30 "$LEASEFS" lease revoke "$FC_NAME" --leases="$FC_URI" --timeout="$1" 2>&1) || rc=$?
	FC_REVOKE="exit $rc after $(( $(date +%s%3N) - t0 )) ms: $(echo "$out" | tr '\n' ' ' | cut -c1-160)"
	FC_REVOKE_OUT=$out
}

# b_progress: B writes; a B whose mount gave up (it should not: --wait)
# is noted and started again (three times at most).
b_progress() {
	b_writes && return 0
	if ! alive "$bpid" && [ "$b_restarts" -lt 3 ]; then
		b_restarts=$((b_restarts + 1))
		wait "$bpid" 2>/dev/null
		note+="B's mount exited ($?: $(tail -1 "$T/m.b" | cut -c1-200)), started again; "
		nsenter -t "$FC_HOST_b" -m -n -- "$LEASEFS" mount -f --leases="$FC_URI" --ttl=$FC_TTL --wait=90 "$FC_ROOT" "$T/mb" \
			>>"$T/m.b" 2>&1 &
		bpid=$!; PIDS+=("$bpid")
	fi
	return 1
}
acks() { { wc -l <"$1"; } 2>/dev/null || echo 0; }
a_writes() { [ "$(acks "$T/ack.a")" -ge 20 ]; }
b_writes() { [ "$(acks "$T/ack.b")" -ge 20 ]; }

# fc_run STORE FAULT N: one run; prints a JSON line, returns 1 on a violation.
fc_run() {
	local store=$1 fault=$2 n=$3 log uri_a=$FC_URI env_a=() hold=$((FC_TTL * 3)) t0 bpid da
	local note="" falseack=0 bgrant="" res rc=0 b_restarts=0
	log=log.$store.$fault.$n
	rm -f "$T/ack.a" "$T/ack.b" "$T/w.a" "$T/w.b"
	: >"$T/m.b"
	case $fault in delay|revoke-slow)
		[ "$FC_NETEM" = 1 ] || { fc_proxy_start; uri_a=$FC_URI_PROXY; } ;;
	esac
	case $fault in
	skew-slow) env_a=("LD_PRELOAD=$FAKETIME_LIB" FAKETIME=-1s FAKETIME_DONT_FAKE_MONOTONIC=1) ;;
	skew-fast) env_a=("LD_PRELOAD=$FAKETIME_LIB" FAKETIME=+1s FAKETIME_DONT_FAKE_MONOTONIC=1) ;;
	esac
	# A mounts and writes.
	MOUNTS+=("$T/ma" "$T/mb")
	# Both mounts in the foreground (-f), in the background here: their
	# daemons' logs go to m.a and m.b.
	nsenter -t "$FC_HOST_a" -m -n -- env ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 "${env_a[@]}" \
		"$LEASEFS" mount -f --leases="$uri_a" --ttl=$FC_TTL --wait=40 "$FC_ROOT" "$T/ma" \
		>"$T/m.a" 2>&1 &
	da=$!
	disown "$da"
	PIDS+=("$da")
	wait_until 60 on a "$LEASEFS" status "$T/ma" --json >/dev/null 2>&1 ||
		fail "$store $fault $n: A did not mount: $(cat "$T/m.a")"
	[ "$(on a "$LEASEFS" status "$T/ma" --json | json_get pid)" = "$da" ] || fail "A's daemon is not $da"
	[ ${#env_a[@]} -eq 0 ] || grep -q libfaketime "/proc/$da/environ" || fail "A's daemon does not run under libfaketime"
	nsenter -t "$FC_HOST_a" -m -n -- "$PY" -u "$HERE/faultrec.py" write "$T/ma" "$log" A "$T/ack.a" "$LEASEFS" >"$T/w.a" 2>&1 &
	local wa=$!; PIDS+=("$wa")
	wait_until 20 a_writes ||
		fail "$store $fault $n: A does not write: $(cat "$T/w.a")"
	# B waits for the root, its writer for B's mount.
	nsenter -t "$FC_HOST_b" -m -n -- "$LEASEFS" mount -f --leases="$FC_URI" --ttl=$FC_TTL --wait=90 "$FC_ROOT" "$T/mb" \
		>"$T/m.b" 2>&1 &
	bpid=$!; PIDS+=("$bpid")
	nsenter -t "$FC_HOST_b" -m -n -- "$PY" -u "$HERE/faultrec.py" write "$T/mb" "$log" B "$T/ack.b" "$LEASEFS" >"$T/w.b" 2>&1 &
	local wb=$!; PIDS+=("$wb")
	wait_until 10 grep -q "waiting up to" "$T/m.b" || true
	# The fault.
	t0=$(date +%s%3N)
	case $fault in
	part-both|part-in|part-out) fc_part "${fault#part-}"; wait_until $hold b_progress || true; fc_heal_part ;;
	skew-*) fc_part both; wait_until $hold b_progress || true; fc_heal_part ;;
	kill9) fc_kill9; sleep $((FC_TTL + 1)); fc_restart ;;
	wipe) [ "$store" != pg ] || fc_pg_spare
	      t0=$(date +%s%3N); fc_kill9; fc_restart fresh ;;
	pgterm)
		local i
		for i in 1 2 3; do
			fc_psql "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE client_addr = '$FC_IP_a'" >/dev/null
			sleep 1
		done ;;
	sigstop) kill -STOP "$da"; sleep $((FC_TTL * 2)); kill -CONT "$da" ;;
	delay) fc_delay "${FC_DELAY_MS:-200}"; sleep $((FC_TTL * 2)); fc_heal_delay ;;
	revoke-part)
		fc_part both; fc_revoke $((FC_TTL * 3))
		case $FC_REVOKE_OUT in *"the holder acknowledged"*) falseack=1 ;; esac
		wait_until $hold b_progress || true; fc_heal_part ;;
	revoke-slow) fc_delay "${FC_DELAY_MS:-200}"; fc_revoke $((FC_TTL * 3)); wait_until $hold b_progress || true; fc_heal_delay ;;
	revoke-stop)
		kill -STOP "$da"; fc_revoke 2
		case $FC_REVOKE_OUT in *"the holder acknowledged"*) falseack=1 ;; esac
		kill -CONT "$da" ;;
	kill-holder) kill -9 "$da"; wait_until $hold b_progress || true ;;
	revoke) fc_revoke $((FC_TTL * 3)); wait_until $hold b_progress || true ;;
	none) ;;
	*) fail "unknown fault $fault" ;;
	esac
	b_writes && bgrant="during the fault"
	# If B still waits, A hands over (it may be lost and read-only).
	wait_until $((FC_TTL * 5)) b_progress || true
	if ! b_writes; then
		note+="A unmounted to hand over; "
		on a timeout 20 "$LEASEFS" umount "$T/ma" >/dev/null 2>&1 || true
		wait_until 40 b_progress || note+="B never wrote ($(tr '\n' ' ' <"$T/m.b" | cut -c1-200)); "
	fi
	[ -n "$bgrant" ] || bgrant=after
	# The old holder's whole window: until its writer stops (bounded).
	wait_until $((FC_TTL + 3)) grep -q stopped "$T/w.a" || true
	local dt=$(( $(date +%s%3N) - t0 ))
	kill "$wa" "$wb" 2>/dev/null || true
	wait "$wa" "$wb" 2>/dev/null || true
	on b timeout 20 "$LEASEFS" umount "$T/mb" >/dev/null 2>&1 || true
	kill "$bpid" 2>/dev/null || true
	kill -CONT "$da" 2>/dev/null || true
	on a timeout 20 "$LEASEFS" umount "$T/ma" >/dev/null 2>&1 || { kill -9 "$da" 2>/dev/null; on a umount -l "$T/ma" 2>/dev/null; } || true
	wait "$bpid" 2>/dev/null || true
	wait_pid_gone "$da" 20 || { kill -9 "$da" 2>/dev/null; note+="A's daemon did not end at its umount; "; }
	[ -z "${FC_KEEP:-}" ] || { mkdir -p "$FC_KEEP/$store.$fault.$n"; cp "$T"/m.? "$T"/w.? "$T"/ack.? "$FC_ROOT/$log" "$FC_KEEP/$store.$fault.$n/" 2>/dev/null || true; }
	[ -z "${FC_REVOKE:-}" ] || note+="revoke: $FC_REVOKE; "
	FC_REVOKE=
	res=$("$PY" "$HERE/faultrec.py" check "$FC_ROOT/$log" "$T/ack.a" "$T/ack.b") || true
	[ $falseack -eq 0 ] || note+="FALSE ACK: revoke said acknowledged while A could not answer; "
	note+="A: $(grep -o 'stopped.*' "$T/w.a" || echo 'wrote to the end'); B granted $bgrant"
	! grep -q stopped "$T/w.b" || note+="; B: $(grep -o 'stopped.*' "$T/w.b")"
	"$PY" - "$res" "$store" "$fault" "$n" "$dt" "$falseack" "$note" <<-'PY'
	import json, sys
	r = json.loads(sys.argv[1])
	r.update(store=sys.argv[2], fault=sys.argv[3], run=int(sys.argv[4]), ms=int(sys.argv[5]), note=sys.argv[7])
	r["false_ack"] = int(sys.argv[6])
	# A store restarted without its data restarts epochs at 1: reported
	# (epoch), not a violation there; everywhere else it is one.
	epoch_bad = r["epoch"] and r["fault"] != "wipe"
	# bad: a safety violation; a false acknowledgement is reported apart
	# (nothing unsafe follows from it by itself) but fails the run too.
	r["bad"] = int(bool(r["order"] or r["time"] or epoch_bad))
	# No handover (B never wrote, even once A unmounted): a liveness
	# failure, reported apart (stuck), failing the run as well.
	# So is B's --wait mount giving up (it was started again).
	r["stuck"] = int(len(r["holders"]) < 2 or "B's mount exited" in r["note"])
	print(json.dumps(r))
	sys.exit(1 if r["bad"] or r["false_ack"] or r["stuck"] else 0)
	PY
}

# fc_table FILE: the table of FILE's JSON lines, one row per schedule.
fc_table() {
	"$PY" - "$1" <<-'PY'
	import json, sys
	rows = {}
	for line in open(sys.argv[1]):
	    r = json.loads(line)
	    row = rows.setdefault((r["store"], r["fault"]), {"runs": 0, "bad": 0, "ov": None, "notes": {}})
	    row["runs"] += 1
	    row["bad"] += r["bad"]
	    for o in r["overlap_ms"]:
	        row["ov"] = o if row["ov"] is None else max(row["ov"], o)
	    n = row["notes"]
	    for k, what in (("order", "records after the successor's first"), ("epoch", "epoch not above the predecessor's"),
	                    ("false_ack", "revoke falsely acknowledged")):
	        if r[k]:
	            n[what] = n.get(what, 0) + (r[k] if k == "order" else 1)
	    if len(r["holders"]) < 2:
	        n["NO HANDOVER (B never wrote)"] = n.get("NO HANDOVER (B never wrote)", 0) + 1
	    if "exited" in r["note"]:
	        n["B's --wait mount exited"] = n.get("B's --wait mount exited", 0) + 1
	    if r["fault"] in ("delay", "pgterm") and "A unmounted" not in r["note"]:
	        n["the holder lost its lease to the fault"] = n.get("the holder lost its lease to the fault", 0) + 1
	    if "A unmounted" in r["note"]:
	        n["handed over by unmount"] = n.get("handed over by unmount", 0) + 1
	print("| store | fault | runs | violations | max overlap (ms) | notes |")
	print("|---|---|---|---|---|---|")
	for (s, f), row in rows.items():
	    ov = "-" if row["ov"] is None else f"{row['ov']:.1f}"
	    notes = "; ".join(f"{k}: {v}" for k, v in row["notes"].items())
	    print(f"| {s} | {f} | {row['runs']} | {row['bad']} | {ov} | {notes} |")
	PY
}
