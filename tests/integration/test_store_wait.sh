#!/usr/bin/env bash
# --wait waits for the store too, and a mount is never born lost (natsstore,
# private nats-servers):
#  1. A mount started before its store's server comes up once the server
#     does, having said once what it waits for.
#  2. A server that never comes: the mount gives up at the deadline, naming
#     the store.
#  3. The server stops for longer than the TTL while a mount waits for a
#     busy root (its session lease expires meanwhile), then comes back: the
#     waiting mount either comes up healthy or fails having given back all
#     it took; either way a successor gets the root afterwards.
#  4. A shared mount's --wait waits for a root held exclusively too.
# bound: 120
if [ -z "${LEASEFS_NATS_URI:-}" ]; then
	exec "$(dirname "$0")/../nats-harness.sh" bash "$0" "$@"
fi
. "$(dirname "$0")/lib.sh"

R=$T/root MA=$T/ma MB=$T/mb MC=$T/mc
TTL=2
# A bucket leasefs makes is granted from only once it is older than max_ttl
# and a third (the harness's fixed 30 s by default): 4 s here.
Q="?max_ttl=3"
mkdir -p "$R" "$MA" "$MB" "$MC"

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# nats_on PORT DIR: a nats-server with JetStream on PORT, its store in DIR,
# killed at exit; returns once it answers.
nats_on() {
	"$NATS_BIN" -a 127.0.0.1 -p "$1" -js -sd "$2" >>"$2.log" 2>&1 &
	PIDS+=($!)
	wait_until 20 python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)' "$1" ||
		fail "nats-server on $1 did not start: $(tail -5 "$2.log")"
}
# mount_bg OUT MNT ARGS...: `leasefs mount ARGS... ROOT MNT` in the
# background, its output in OUT, its exit status in OUT.rc once it returns.
mount_bg() {
	local out=$1 mnt=$2; shift 2
	MOUNTS+=("$mnt")
	: >"$out"
	( rc=0; timeout 120 "$LEASEFS" mount "$@" "$R" "$mnt" >"$out" 2>&1 || rc=$?
	  echo "$rc" >"$out.rc" ) &
}
mount_rc() { wait_until "$2" test -s "$1.rc" || fail "mount did not return: $(cat "$1")"; cat "$1.rc"; }
waits_said() { grep -c "waiting up to" "$1" || true; }

# 1. The mount first, then the server.
P=$(free_port)
URI=nats://127.0.0.1:$P$Q
LEASEFS_LEASES=$URI mount_bg "$T/m1.out" "$MA" --ttl=$TTL --wait=60
wait_until 30 grep -q "waiting up to 60 s" "$T/m1.out" || fail "the mount did not say it waits: $(cat "$T/m1.out")"
grep -q "$URI" "$T/m1.out" || fail "the wait does not name the store: $(cat "$T/m1.out")"
findmnt -rn "$MA" >/dev/null && fail "mounted before its store came"
nats_on "$P" "$T/js1"
rc=$(mount_rc "$T/m1.out" 30)
[ "$rc" -eq 0 ] || fail "the mount after its server came: exit $rc ($(cat "$T/m1.out"))"
PIDS+=("$(status_of "$MA" pid)")
[ "$(waits_said "$T/m1.out")" -eq 1 ] || fail "the wait was said $(waits_said "$T/m1.out") times: $(cat "$T/m1.out")"
[ "$(status_of "$MA" state)" = held ] || fail "state $(status_of "$MA" state)"
echo one > "$MA/f" || fail "cannot write"
"$LEASEFS" umount "$MA"
ok "mount --wait before its server: up once the server is (said once)"

# 2. A server that never comes: exit at the deadline, the store named.
P=$(free_port)
URI=nats://127.0.0.1:$P$Q
t0=$(date +%s%N)
rc=0; out=$(LEASEFS_LEASES=$URI timeout 60 "$LEASEFS" mount --wait=3 "$R" "$MA" 2>&1) || rc=$?
dt=$(( ($(date +%s%N) - t0) / 1000000 ))
[ $rc -eq 1 ] || fail "no server: exit $rc ($out)"
[ $dt -ge 3000 ] && [ $dt -lt 15000 ] || fail "no server: gave up after $dt ms, not at the 3 s deadline"
[ "$(waits_said <(echo "$out"))" -eq 1 ] || fail "the wait was said other than once: $out"
tail -n 1 <<<"$out" | grep -q "$URI" || fail "the last word does not name the store: $out"
findmnt -rn "$MA" >/dev/null && fail "something mounted"
ok "no server within --wait=3: exit 1 after $dt ms, naming $URI"

# 3. The harness's server stops for longer than the TTL while B waits.
export LEASEFS_LEASES=$LEASEFS_NATS_URI$Q
mount_ws "$R" "$MA" --ttl=$TTL --wait=20   # past the new bucket's grace
mount_bg "$T/b.out" "$MB" --ttl=$TTL --wait=90
wait_until 30 grep -q "waiting up to 90 s" "$T/b.out" || fail "B did not wait: $(cat "$T/b.out")"
kill -TERM "$NATS_PID"; wait_pid_gone "$NATS_PID" 10 || fail "nats-server did not stop"
# A's safe-until passes first; then one more TTL, so that every lease of
# A and B has expired in the store's own terms too.  Nothing marks that
# moment but the clock: the outage is the point of the test.
wait_until $((TTL * 5)) has_line '^lost$' status_of "$MA" state || fail "A still $(status_of "$MA" state) without its server"
sleep "$TTL"
"$NATS_BIN" -a 127.0.0.1 -p "$NATS_PORT" -js -sd "$NATS_STORE_DIR" >>"$NATS_LOG" 2>&1 &
PIDS+=($!)
rc=$(mount_rc "$T/b.out" 60)
if [ "$rc" -eq 0 ]; then
	PIDS+=("$(status_of "$MB" pid)")
	[ "$(status_of "$MB" state)" = held ] || fail "B was born $(status_of "$MB" state): $(cat "$T/b.out")"
	echo two > "$MB/f" || fail "B cannot write"
	[ "$(waits_said "$T/b.out")" -eq 1 ] || fail "B said its wait $(waits_said "$T/b.out") times: $(cat "$T/b.out")"
	"$LEASEFS" umount "$MB"
	ok "B came up healthy after the outage"
else
	findmnt -rn "$MB" >/dev/null && fail "B failed ($rc) but left a mount"
	ok "B failed after the outage (exit $rc): $(tail -n 1 "$T/b.out")"
fi
# Whatever B did, the root is free for a successor (A, lost, let go too).
mount_ws "$R" "$MC" --ttl=$TTL
[ "$(status_of "$MC" state)" = held ] || fail "C: $(status_of "$MC" state)"
echo three > "$MC/f" || fail "C cannot write"
"$LEASEFS" umount "$MC"
"$LEASEFS" umount "$MA" 2>/dev/null || true
ok "after the outage a successor mounts the root"

# 4. Shared placement: the exclusive holder is waited for, said once.
mount_ws "$R" "$MA" --ttl=$TTL
mount_bg "$T/s.out" "$MB" --ttl=$TTL --placement=shared --wait=60
wait_until 30 grep -q "waiting up to 60 s" "$T/s.out" || fail "the shared mount did not wait: $(cat "$T/s.out")"
grep -q "workspace busy" "$T/s.out" || fail "the shared mount's wait is not the busy root: $(cat "$T/s.out")"
"$LEASEFS" umount "$MA"
rc=$(mount_rc "$T/s.out" 30)
[ "$rc" -eq 0 ] || fail "the shared mount after the holder left: exit $rc ($(cat "$T/s.out"))"
PIDS+=("$(status_of "$MB" pid)")
[ "$(status_of "$MB" placement)" = shared ] || fail "not shared"
[ "$(waits_said "$T/s.out")" -eq 1 ] || fail "said $(waits_said "$T/s.out") times: $(cat "$T/s.out")"
"$LEASEFS" umount "$MB"
ok "a shared mount's --wait waits for the exclusive holder"
echo PASS
