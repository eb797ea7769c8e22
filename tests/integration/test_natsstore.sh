#!/usr/bin/env bash
# A harness session and a leasefs mount share one natsstore lease (a
# private nats-server with JetStream), in both directions, with one epoch
# sequence.  The harness is played by natspeer/peer.mjs, written from the
# store's facts with npm's nats client.
if [ -z "${LEASEFS_NATS_URI:-}" ]; then
	exec "$(dirname "$0")/../nats-harness.sh" bash "$0" "$@"
fi
. "$(dirname "$0")/lib.sh"
PEER=$HERE/natspeer/peer.mjs
[ -d "$HERE/natspeer/node_modules/nats" ] ||
	fail "the peer's nats client is not installed (scripts/setup runs npm ci in tests/integration/natspeer)"

R=$T/root M=$T/mnt
export LEASEFS_LEASES=$LEASEFS_NATS_URI
TTL=3
mkdir -p "$R" "$M"
NAME=$(python3 "$HERE/fsstore_peer.py" "$R" --root-name)
KEY=$(echo "$NAME" | sed 's/_/_u/g; s/\./_d/g; s,/,_s,g')

start_peer() { peer_start node "$PEER" "$LEASEFS_NATS_URI" "$NAME" "$1" "${2:-$TTL}"; } # MODE [TTL]
peer_try() { node "$PEER" "$LEASEFS_NATS_URI" "$NAME" try "$TTL"; }

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
out=$(peer_try)
[ "$out" = "busy $me" ] || fail "peer while the mount holds: '$out', want 'busy $me'"
ok "mount holds at epoch $me (the peer's + 1); the peer is refused with it"

# 3. The server restarts under the mount (its store kept): the mount
#    reconnects, renews and keeps the lease.
kill -TERM "$NATS_PID"; wait_pid_gone "$NATS_PID" 10 || fail "nats-server did not stop"
"$NATS_BIN" -a 127.0.0.1 -p "$NATS_PORT" -js -sd "$NATS_STORE_DIR" >>"$NATS_LOG" 2>&1 &
PIDS+=($!)
before=$(grep -c "Server is ready" "$NATS_LOG")
wait_until 10 bash -c "[ \$(grep -c 'Server is ready' '$NATS_LOG') -gt $before ]" || fail "nats-server did not restart"
# revision: the key's revision (every renewal writes a new one).
revision() { (cd "$HERE/natspeer" && node -e '
import("nats").then(async ({ connect }) => {
  const nc = await connect({ servers: process.argv[1] });
  const kv = await nc.jetstream().views.kv("natsstore_leases");
  console.log((await kv.get(process.argv[2])).revision);
  await nc.close();
});' "${LEASEFS_NATS_URI#nats://}" "$KEY" 2>/dev/null); }
renewed_since() { [ "$(revision)" -gt "$1" ] 2>/dev/null; }
r0=$(revision)
[ -n "$r0" ] || fail "cannot read the key after the restart"
wait_until $((TTL * 3)) renewed_since "$r0" || fail "no renewal after the restart"
[ "$(status_of "$M" state)" = held ] || fail "the mount lost its lease over a restart: $(status_of "$M" state)"
echo still > "$M/r" || fail "write after the restart"
ok "server restart: the mount reconnects, renews and keeps epoch $me"

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

# 5. A revoke of the peer cannot tell it: exit 3, and it keeps the name.
pe=$(peer_epoch)
rc=0; "$LEASEFS" lease revoke "$NAME" --timeout=$((TTL * 3)) >"$T/revoke.out" 2>&1 || rc=$?
[ $rc -eq 3 ] || fail "revoke of a harness holder: exit $rc ($(cat "$T/revoke.out"))"
grep -q "not a leasefs mount" "$T/revoke.out" || fail "revoke did not say why: $(cat "$T/revoke.out")"
out=$(peer_try)
[ "$out" = "busy $pe" ] || fail "after the revoke another peer got '$out', want 'busy $pe'"
ok "revoke of a live harness holder exits 3 and says it cannot be told; it keeps the name"

# 6. kill -9 of the holding peer: its entry expires; a mount waiting for
#    it gets the next epoch then.
kill -9 "$PEER_PID"; wait "$PEER_PID" 2>/dev/null || true
t0=$(date +%s%N)
mount_ws "$R" "$M" --ttl=$TTL --wait=$((TTL * 3))
dt=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$(status_of "$M" epoch)" -eq $((pe + 1)) ] || fail "after the peer's kill -9: epoch $(status_of "$M" epoch)"
ok "peer killed -9: the mount gets epoch $((pe + 1)) once the entry expired (${dt} ms)"

# 7. kill -9 of the mount's daemon: the peer gets the name only after the
#    daemon's entry expired.
me=$(status_of "$M" epoch)
kill -9 "$DAEMON_PID"
start_peer wait
peer_says '^granted ' $((TTL * 4))
[ "$(peer_epoch)" -eq $((me + 1)) ] || fail "peer after the daemon's kill -9: $(cat "$PEER_OUT")"
ok "daemon killed -9: the waiting peer gets epoch $((me + 1)) after its expiry"
peer_release
"$LEASEFS" umount "$M" 2>/dev/null || true
echo PASS
