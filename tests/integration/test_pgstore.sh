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
psql_q() { "$PG_BIN/psql" -X -At -h 127.0.0.1 -p "$PG_PORT" -U leasefs postgres -c "$1"; }

# 1. The peer holds the root: the mount is busy, naming the peer's epoch.
start_peer hold
peer_says '^granted '
pe=$(peer_epoch)
rc=0; out=$(timeout 30 "$LEASEFS" mount --ttl=$TTL "$R" "$M" 2>&1) || rc=$?
[ $rc -eq 75 ] || fail "mount while the peer holds: exit $rc ($out)"
case "$out" in *"held at epoch $pe"*) ;; *) fail "busy message lacks the peer's epoch $pe: $out" ;; esac
findmnt -rn "$M" >/dev/null && fail "something mounted"
ok "peer holds at epoch $pe: mount exits 75 naming it"

# 2. The peer releases: the mount gets epoch + 1; the peer is refused
#    with the mount's epoch.
peer_release
mount_ws "$R" "$M" --ttl=$TTL
me=$(status_of "$M" epoch)
[ "$me" -eq $((pe + 1)) ] || fail "mount epoch $me, want $((pe + 1))"
out=$("$PY" "$PEER" "$LEASEFS_PG_URI" "$NAME" try)
[ "$out" = "busy $me" ] || fail "peer while the mount holds: '$out', want 'busy $me'"
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

# 4. Revoke of the mount: the peer, trying all along, is granted only once
#    the mount is read-only (its first write through the mount is EROFS).
exec 7>>"$M/r"
WRITE_PROBE=$M/after start_peer wait
"$LEASEFS" lease revoke "$NAME" >"$T/revoke.out" 2>&1 || fail "revoke: $(cat "$T/revoke.out")"
grep -q "acknowledged" "$T/revoke.out" || fail "revoke did not see the ack: $(cat "$T/revoke.out")"
peer_says '^probe: '
grep -q '^probe: EROFS' "$PEER_OUT" || fail "the peer was granted while the mount still wrote: $(cat "$PEER_OUT")"
[ "$(peer_epoch)" -eq $((me + 1)) ] || fail "peer granted at $(peer_epoch), want $((me + 1))"
expect_erofs bash -c "echo more >&7"
[ ! -e "$R/after" ] || fail "a write reached the root"
exec 7>&-
ok "revoke: the peer is granted epoch $((me + 1)) only after the mount turned read-only"
"$LEASEFS" umount "$M"

# 5. A revoke of the peer cannot tell it: exit 3, and it keeps the name
#    (it renews past its first expiry).
pe=$(peer_epoch)
rc=0; "$LEASEFS" lease revoke "$NAME" --timeout=$((TTL * 3)) >"$T/revoke.out" 2>&1 || rc=$?
[ $rc -eq 3 ] || fail "revoke of a harness holder: exit $rc ($(cat "$T/revoke.out"))"
grep -q "not a leasefs mount" "$T/revoke.out" || fail "revoke did not say why: $(cat "$T/revoke.out")"
out=$("$PY" "$PEER" "$LEASEFS_PG_URI" "$NAME" try)
[ "$out" = "busy $pe" ] || fail "after the revoke another peer got '$out', want 'busy $pe'"
ok "revoke of a live harness holder exits 3 and says it cannot be told; it keeps the name"

# 6. kill -9 of the holding peer: its row expires on the database's clock;
#    a mount waiting for it gets the next epoch then, not before.
kill -9 "$PEER_PID"; wait "$PEER_PID" 2>/dev/null || true
t0=$(date +%s%N)
mount_ws "$R" "$M" --ttl=$TTL --wait=$((TTL * 3))
dt=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$(status_of "$M" epoch)" -eq $((pe + 1)) ] || fail "after the peer's kill -9: epoch $(status_of "$M" epoch)"
ok "peer killed -9: the mount gets epoch $((pe + 1)) once the row expired (${dt} ms)"

# 7. kill -9 of the mount's daemon: the peer gets the name only after the
#    daemon's row expired.
me=$(status_of "$M" epoch)
kill -9 "$DAEMON_PID"
start_peer wait
peer_says '^granted ' $((TTL * 4))
[ "$(peer_epoch)" -eq $((me + 1)) ] || fail "peer after the daemon's kill -9: $(cat "$PEER_OUT")"
ok "daemon killed -9: the waiting peer gets epoch $((me + 1)) after its expiry"
peer_release
"$LEASEFS" umount "$M" 2>/dev/null || true

# 8. Epochs only go up, and rows stay: the harness's table has the name at
#    the last epoch, nobody holding it.
[ "$(psql_q "SELECT epoch, holder IS NULL FROM looprig.looprig_leases WHERE name = '$NAME'")" = "$((me + 1))|t" ] ||
	fail "the table ends as $(psql_q "SELECT epoch, holder IS NULL FROM looprig.looprig_leases WHERE name = '$NAME'")"
ok "the row stays at epoch $((me + 1)), free"
echo PASS
