#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Run "$@" against a private etcd on 127.0.0.1: one member, or
# $ETCD_MEMBERS members forming one cluster.
#
# Starts etcd on free loopback ports with its data in a temp dir, waits
# (bounded) until every member's /health answers true, exports
#   LEASEFS_ETCD_ENDPOINTS=127.0.0.1:PORT[,...]  (client endpoints)
#   ETCD_PID        first member (so tests may SIGSTOP/SIGCONT it)
#   ETCD_PIDS, ETCD_CLIENT_URLS   all members, in endpoint order
#   ETCD_CLIENT_URL, ETCD_DATA_DIR   of the first member
# runs the command, then stops every member by its pid.  Exits with the
# command's status; 77 (skip) if etcd is not installed, 99 if etcd cannot
# be started.
set -u

ETCD_BIN=${ETCD_BIN:-$(command -v etcd || true)}
if [ -z "$ETCD_BIN" ]; then
	echo "etcd-harness: etcd not installed; skipping" >&2
	exit 77
fi
if [ $# -eq 0 ]; then
	echo "usage: $0 COMMAND [ARGS...]" >&2
	exit 2
fi

members=${ETCD_MEMBERS:-1}
workdir=$(mktemp -d "${TMPDIR:-/tmp}/leasefs-etcd-XXXXXX") || exit 99
etcd_pids=

cleanup() {
	local pid
	for pid in $etcd_pids; do
		# A test may have left it stopped; it must be running to exit.
		kill -CONT "$pid" 2>/dev/null
		kill -TERM "$pid" 2>/dev/null
	done
	for pid in $etcd_pids; do
		for _ in $(seq 1 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	done
	rm -rf "$workdir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# N distinct ports the kernel reports free right now.
free_ports() {
	python3 -c '
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
' "$1"
}

# Poll /health until it reports true; bounded to ~15 s.  Fails early if
# the member exited (e.g. a port was taken meanwhile).
wait_healthy() {
	local url=$1 pid=$2
	for _ in $(seq 1 150); do
		kill -0 "$pid" 2>/dev/null || return 1
		if curl -s --max-time 1 "$url/health" 2>/dev/null |
			grep -q '"health":"true"'; then
			return 0
		fi
		sleep 0.1
	done
	return 1
}

stop_members() {
	local pid
	for pid in $etcd_pids; do
		kill -KILL "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	done
	etcd_pids=
}

# Start the members; on success sets etcd_pids, client_urls, endpoints.
start_cluster() {
	local ports i cluster= cport pport url pid
	read -r -a ports < <(free_ports $((2 * members))) || return 1
	for ((i = 0; i < members; i++)); do
		cluster+="${cluster:+,}m$i=http://127.0.0.1:${ports[2 * i + 1]}"
	done
	client_urls= endpoints=
	for ((i = 0; i < members; i++)); do
		cport=${ports[2 * i]} pport=${ports[2 * i + 1]}
		url=http://127.0.0.1:$cport
		rm -rf "$workdir/data$i"
		"$ETCD_BIN" --name "m$i" \
			--data-dir "$workdir/data$i" \
			--listen-client-urls "$url" \
			--advertise-client-urls "$url" \
			--listen-peer-urls "http://127.0.0.1:$pport" \
			--initial-advertise-peer-urls "http://127.0.0.1:$pport" \
			--initial-cluster "$cluster" \
			--initial-cluster-token "leasefs-$$" \
			--initial-cluster-state new \
			>"$workdir/etcd$i.log" 2>&1 &
		etcd_pids+="${etcd_pids:+ }$!"
		client_urls+="${client_urls:+ }$url"
		endpoints+="${endpoints:+,}127.0.0.1:$cport"
	done
	i=0
	for pid in $etcd_pids; do
		i=$((i + 1))
		url=$(echo "$client_urls" | cut -d' ' -f$i)
		if ! wait_healthy "$url" "$pid"; then
			stop_members
			return 1
		fi
	done
	return 0
}

started=
for _ in 1 2 3; do
	if start_cluster; then
		started=1
		break
	fi
done
if [ -z "$started" ]; then
	echo "etcd-harness: etcd did not become healthy; log:" >&2
	tail -n 30 "$workdir"/etcd*.log >&2
	exit 99
fi

export LEASEFS_ETCD_ENDPOINTS=$endpoints
export ETCD_PIDS=$etcd_pids
export ETCD_PID=${etcd_pids%% *}
export ETCD_CLIENT_URLS=$client_urls
export ETCD_CLIENT_URL=${client_urls%% *}
export ETCD_DATA_DIR=$workdir/data0
export ETCDCTL_API=3

"$@"
exit $?
