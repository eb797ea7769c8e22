#!/usr/bin/env bash
# A harness session and a leasefs mount share one pgstore lease (a private
# PostgreSQL), in both directions, with one epoch sequence.  The harness is
# played by pgstore_peer.py, written from the store's facts with psycopg2.
if [ -z "${LEASEFS_PG_URI:-}" ]; then
	exec "$(dirname "$0")/../pg-harness.sh" bash "$0" "$@"
fi
. "$(dirname "$0")/lib.sh"
# Debian's python3 has python3-psycopg2 (another python3 may be first in PATH).
PY=/usr/bin/python3
"$PY" -c 'import psycopg2' 2>/dev/null || fail "python3-psycopg2 is not installed (scripts/setup installs it)"

R=$T/root M=$T/mnt
PEER=$HERE/pgstore_peer.py
export LEASEFS_LEASES=$LEASEFS_PG_URI
TTL=3
mkdir -p "$R" "$M"
NAME=$(python3 "$HERE/fsstore_peer.py" "$R" --root-name)

start_peer() { peer_start "$PY" "$PEER" "$LEASEFS_PG_URI" "$NAME" "$1" "${2:-$TTL}"; } # MODE [TTL]
peer_try() { "$PY" "$PEER" "$LEASEFS_PG_URI" "$NAME" try; }
psql_q() { "$PG_BIN/psql" -X -At -h 127.0.0.1 -p "$PG_PORT" -U leasefs postgres -c "$1"; }

# 1.-2. A peer holding the root keeps the mount out; then the reverse (lib.sh).
harness_contend
[ "$(psql_q "SELECT epoch FROM looprig.looprig_leases WHERE name = '$NAME'")" = "$me" ] ||
	fail "the harness's table does not say epoch $me"
ok "mount holds at epoch $me (the peer's + 1); the peer is refused with it"

# 3. The database restarts under the mount, and then its connection is
#    cut: each time it reconnects and renews (the row's revision moves on)
#    and keeps the lease.
revision() { psql_q "SELECT revision FROM looprig.looprig_leases WHERE name = '$NAME'"; }
renewed_since() { [ "$(revision)" -gt "$1" ] 2>/dev/null; }
runuser -u "$PG_RUN" -- "$PG_BIN/pg_ctl" -D "$PG_DATA" -m fast -w restart >/dev/null
r0=$(revision)
wait_until $((TTL * 2)) renewed_since "$r0" || fail "no renewal after the restart"
psql_q "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'leasefs'" >/dev/null
r0=$(revision)
wait_until $((TTL * 2)) renewed_since "$r0" || fail "no renewal after the connection was cut"
[ "$(status_of "$M" state)" = held ] || fail "the mount lost its lease: $(status_of "$M" state)"
echo still > "$M/r" || fail "write after the restart"
ok "database restart and a cut connection: the mount reconnects, renews and keeps epoch $me"

# 4.-7. Revoke and kill -9 of either side (lib.sh).
RECORD=row harness_expiry_battery

# 8. Epochs only go up, and rows stay: the harness's table has the name at
#    the last epoch, nobody holding it.
[ "$(psql_q "SELECT epoch, holder IS NULL FROM looprig.looprig_leases WHERE name = '$NAME'")" = "$((me + 1))|t" ] ||
	fail "the table ends as $(psql_q "SELECT epoch, holder IS NULL FROM looprig.looprig_leases WHERE name = '$NAME'")"
ok "the row stays at epoch $((me + 1)), free"
echo PASS
