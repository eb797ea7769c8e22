#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Run "$@" against a private PostgreSQL on 127.0.0.1: a cluster made by
# initdb in a temp dir (as the postgres user: the server refuses root),
# on a free port, its socket in that dir.  Waits (bounded) until it
# accepts connections, exports
#   LEASEFS_PG_URI   postgresql://leasefs@127.0.0.1:PORT/postgres
#   PG_DATA, PG_BIN, PG_PORT, PG_RUN (the user it runs as)
# runs the command, then stops the server.  Exits with the command's
# status; 77 (skip) if PostgreSQL is not installed, 99 if it cannot be
# started.  PG_MAX_CONNECTIONS sets max_connections (default 300).
set -u

PG_BIN=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}
if [ -z "$PG_BIN" ] || [ ! -x "$PG_BIN/initdb" ]; then
	echo "pg-harness: PostgreSQL not installed; skipping" >&2
	exit 77
fi
if [ $# -eq 0 ]; then
	echo "usage: $0 COMMAND [ARGS...]" >&2
	exit 2
fi
PG_RUN=postgres
id "$PG_RUN" >/dev/null 2>&1 || PG_RUN=nobody
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u "$PG_RUN" -- "$@"; else "$@"; fi; }

workdir=$(mktemp -d "${TMPDIR:-/tmp}/leasefs-pg-XXXXXX") || exit 99
chmod 755 "$workdir"
[ "$(id -u)" -ne 0 ] || chown "$PG_RUN" "$workdir"
cleanup() {
	as_pg "$PG_BIN/pg_ctl" -D "$workdir/data" -m immediate -w -t 10 stop >/dev/null 2>&1
	rm -rf "$workdir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A port the kernel reports free right now (another process may take it
# before the server binds it: then the start is retried on another).
free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
if ! as_pg "$PG_BIN/initdb" -D "$workdir/data" -U leasefs -A trust --no-sync \
	>"$workdir/initdb.log" 2>&1; then
	echo "pg-harness: initdb failed:" >&2
	tail -n 20 "$workdir/initdb.log" >&2
	exit 99
fi
pg_start() {
	as_pg "$PG_BIN/pg_ctl" -D "$workdir/data" -l "$workdir/server.log" -w -t 30 \
		-o "-c listen_addresses=127.0.0.1 -p $port -k $workdir -c fsync=off \
		    -c max_connections=${PG_MAX_CONNECTIONS:-300}" start >/dev/null 2>&1
}
started=
for _ in 1 2 3; do
	port=$(free_port)
	if pg_start; then
		started=1
		break
	fi
done
if [ -z "$started" ]; then
	echo "pg-harness: the server did not start:" >&2
	tail -n 20 "$workdir/server.log" >&2
	exit 99
fi

export LEASEFS_PG_URI="postgresql://leasefs@127.0.0.1:$port/postgres"
export PG_DATA=$workdir/data PG_BIN PG_PORT=$port PG_RUN PG_SOCKDIR=$workdir
"$@"
exit $?
