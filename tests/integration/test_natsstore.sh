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

# 1.-2. A peer holding the root keeps the mount out; then the reverse (lib.sh).
harness_contend
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

# 4.-7. Revoke and kill -9 of either side (lib.sh).
RECORD=entry harness_expiry_battery
echo PASS
