#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Run "$@" against a private nats-server with JetStream on 127.0.0.1: its
# store in a temp dir, on a free port.  Waits (bounded) until it answers,
# exports
#   LEASEFS_NATS_URI   nats://127.0.0.1:PORT
#   NATS_PID, NATS_PORT, NATS_MON_PORT (monitoring), NATS_STORE_DIR, NATS_BIN
# runs the command, then stops the server.  Exits with the command's
# status; 77 (skip) if nats-server is not installed, 99 if it cannot be
# started.
set -u

NATS_BIN=${NATS_BIN:-$(command -v nats-server || echo /usr/sbin/nats-server)}
if [ ! -x "$NATS_BIN" ]; then
	echo "nats-harness: nats-server not installed; skipping" >&2
	exit 77
fi
if [ $# -eq 0 ]; then
	echo "usage: $0 COMMAND [ARGS...]" >&2
	exit 2
fi
workdir=$(mktemp -d "${TMPDIR:-/tmp}/leasefs-nats-XXXXXX") || exit 99
nats_pid=
cleanup() {
	if [ -n "$nats_pid" ]; then
		kill -CONT "$nats_pid" 2>/dev/null
		kill -TERM "$nats_pid" 2>/dev/null
		for _ in $(seq 1 50); do kill -0 "$nats_pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$nats_pid" 2>/dev/null
		wait "$nats_pid" 2>/dev/null
	fi
	rm -rf "$workdir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# pick_ports: two ports the kernel reports free right now (another process
# may take one before the server binds it: then the start is retried).
pick_ports() {
	read -r port mon < <(python3 -c '
import socket
a, b = socket.socket(), socket.socket()
a.bind(("127.0.0.1", 0)); b.bind(("127.0.0.1", 0))
print(a.getsockname()[1], b.getsockname()[1])')
}
# nats_start: (re)start the server on the same port and store.
nats_start() {
	"$NATS_BIN" -a 127.0.0.1 -p "$port" -m "$mon" -js -sd "$workdir/js" \
		>>"$workdir/server.log" 2>&1 &
	nats_pid=$!
	for _ in $(seq 1 100); do
		kill -0 "$nats_pid" 2>/dev/null || return 1
		grep -q "Server is ready" "$workdir/server.log" 2>/dev/null &&
			python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)' "$port" 2>/dev/null &&
			return 0
		sleep 0.1
	done
	return 1
}
started=
for _ in 1 2 3; do
	pick_ports
	if nats_start; then
		started=1
		break
	fi
	kill -KILL "$nats_pid" 2>/dev/null
	wait "$nats_pid" 2>/dev/null
	nats_pid=
done
if [ -z "$started" ]; then
	echo "nats-harness: nats-server did not start:" >&2
	tail -n 20 "$workdir/server.log" >&2
	exit 99
fi
export LEASEFS_NATS_URI="nats://127.0.0.1:$port"
export NATS_PID=$nats_pid NATS_PORT=$port NATS_MON_PORT=$mon NATS_STORE_DIR=$workdir/js NATS_BIN
export NATS_LOG=$workdir/server.log
"$@"
exit $?
