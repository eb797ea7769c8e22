#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Run "$@" against a private single-member etcd on 127.0.0.1.
#
# Starts etcd on free loopback ports with its data in a temp dir, waits
# (bounded) until /health answers true, exports
#   LEASEFS_ETCD_ENDPOINTS=127.0.0.1:PORT   (client endpoint)
#   ETCD_PID                                 (so tests may SIGSTOP/SIGCONT it)
#   ETCD_DATA_DIR, ETCD_CLIENT_URL
# runs the command, then stops etcd by its pid.  Exits with the command's
# status; 77 (skip) if etcd is not installed, 99 if etcd cannot be started.
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

workdir=$(mktemp -d "${TMPDIR:-/tmp}/leasefs-etcd-XXXXXX") || exit 99
etcd_pid=

cleanup() {
	if [ -n "$etcd_pid" ]; then
		# A test may have left it stopped; it must be running to exit.
		kill -CONT "$etcd_pid" 2>/dev/null
		kill -TERM "$etcd_pid" 2>/dev/null
		for _ in $(seq 1 50); do
			kill -0 "$etcd_pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$etcd_pid" 2>/dev/null
		wait "$etcd_pid" 2>/dev/null
	fi
	rm -rf "$workdir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Two distinct ports the kernel reports free right now.
free_ports() {
	python3 - <<'EOF'
import socket
socks = []
for _ in range(2):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

# Poll /health until it reports true; bounded to ~15 s.  Fails early if
# etcd exited (e.g. a port was taken meanwhile).
wait_healthy() {
	local url=$1
	for _ in $(seq 1 150); do
		kill -0 "$etcd_pid" 2>/dev/null || return 1
		if curl -s --max-time 1 "$url/health" 2>/dev/null |
			grep -q '"health":"true"'; then
			return 0
		fi
		sleep 0.1
	done
	return 1
}

start_etcd() {
	local cport pport
	read -r cport pport < <(free_ports) || return 1
	ETCD_CLIENT_URL=http://127.0.0.1:$cport
	rm -rf "$workdir/data"
	"$ETCD_BIN" --name leasefs-test \
		--data-dir "$workdir/data" \
		--listen-client-urls "$ETCD_CLIENT_URL" \
		--advertise-client-urls "$ETCD_CLIENT_URL" \
		--listen-peer-urls "http://127.0.0.1:$pport" \
		--initial-advertise-peer-urls "http://127.0.0.1:$pport" \
		--initial-cluster "leasefs-test=http://127.0.0.1:$pport" \
		--initial-cluster-state new \
		>"$workdir/etcd.log" 2>&1 &
	etcd_pid=$!
	if wait_healthy "$ETCD_CLIENT_URL"; then
		LEASEFS_ETCD_ENDPOINTS=127.0.0.1:$cport
		return 0
	fi
	kill -KILL "$etcd_pid" 2>/dev/null
	wait "$etcd_pid" 2>/dev/null
	etcd_pid=
	return 1
}

started=
for _ in 1 2 3; do
	if start_etcd; then
		started=1
		break
	fi
done
if [ -z "$started" ]; then
	echo "etcd-harness: etcd did not become healthy; log:" >&2
	tail -n 30 "$workdir/etcd.log" >&2
	exit 99
fi

export LEASEFS_ETCD_ENDPOINTS ETCD_CLIENT_URL
export ETCD_PID=$etcd_pid
export ETCD_DATA_DIR=$workdir/data
export ETCDCTL_API=3

"$@"
status=$?
exit $status
