#!/usr/bin/env bash
# fsstore: who holds a lock file is never misread while /proc/locks
# churns.  /proc/locks is read a page at a time, each read starting at a
# record's index, so locks dropped between two reads make a later line
# slip past the reader.  A revoke waiting for a stopped mount, with
# thousands of locks on the host and processes taking and dropping more
# all the while, must never report the holder's acknowledgement; once the
# mount runs again it acknowledges for real.
# bound: 90
. "$(dirname "$0")/lib.sh"

S=$T/store R=$T/root M=$T/mnt
export LEASEFS_LEASES="fsstore:$S"
mkdir -p "$R" "$M" "$T/farm"
NAME=$(python3 "$HERE/fsstore_peer.py" "$R" --root-name)
LOCKS=3000 CHURNERS=4

mount_ws "$R" "$M"
me=$(status_of "$M" epoch)

# The farm: LOCKS flocks held (taken after the mount's, so that many of
# their lines come before its line), then CHURNERS processes that take
# and drop locks of their own as fast as they can.
cat > "$T/farm.py" <<-'PY'
import fcntl, os, sys
d, n = sys.argv[1], int(sys.argv[2])
fds = []
for i in range(n):
    fd = os.open(os.path.join(d, "held.%d" % i), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    fds.append(fd)
print("held", flush=True)
sys.stdin.readline()
PY
cat > "$T/churn.py" <<-'PY'
import fcntl, os, sys
d, k = sys.argv[1], sys.argv[2]
fds = [os.open(os.path.join(d, "churn.%s.%d" % (k, i)), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
       for i in range(16)]
print("churning", flush=True)
while True:
    for fd in fds:
        fcntl.flock(fd, fcntl.LOCK_EX)
    for fd in fds:
        fcntl.flock(fd, fcntl.LOCK_UN)
PY
coproc FARM { exec python3 -u "$T/farm.py" "$T/farm" "$LOCKS"; }
PIDS+=("$FARM_PID")
read -r -t 60 line <&"${FARM[0]}" || line="(nothing)"
[ "$line" = held ] || fail "farm: $line"
[ "$(wc -l </proc/locks)" -ge "$LOCKS" ] || fail "/proc/locks has $(wc -l </proc/locks) lines"
for k in $(seq 1 "$CHURNERS"); do
	python3 -u "$T/churn.py" "$T/farm" "$k" >"$T/churn.$k" 2>&1 &
	PIDS+=($!)
done
for k in $(seq 1 "$CHURNERS"); do
	wait_until 20 grep -q churning "$T/churn.$k" || fail "churner $k did not start: $(cat "$T/churn.$k")"
done

# The mount stops: every thread of its daemon.
daemon_stopped() {
	local s
	for s in /proc/"$DAEMON_PID"/task/*/stat; do
		[ "$(cut -d' ' -f3 "$s" 2>/dev/null)" = T ] || return 1
	done
}
kill -STOP "$DAEMON_PID"
wait_until 10 daemon_stopped || fail "the daemon did not stop"

rc=0; "$LEASEFS" lease revoke "$NAME" --timeout=5 >"$T/revoke.out" 2>&1 || rc=$?
grep -q "acknowledged (drained" "$T/revoke.out" &&
	fail "revoke of a stopped holder reported its acknowledgement (exit $rc): $(cat "$T/revoke.out")"
[ $rc -eq 3 ] || fail "revoke of a stopped holder: exit $rc ($(cat "$T/revoke.out"))"
has_line "^state: revoked" "$LEASEFS" lease show "$NAME" ||
	fail "the stopped holder is not seen as holding: $("$LEASEFS" lease show "$NAME")"
ok "revoke of a stopped mount under /proc/locks churn: not acknowledged (exit 3)"

# It runs again: it sees the bell, drains, lets go; a harness peer then
# gets the next epoch.
kill -CONT "$DAEMON_PID"
wait_until 20 has_line '^lost$' status_of "$M" state || fail "the mount did not see the revoke: $(status_of "$M" state)"
out=$(timeout 30 python3 "$HERE/fsstore_peer.py" "$S" "$NAME" wait </dev/null) || true
case "$out" in "granted $((me + 1))"*) ;; *) fail "peer after the mount let go: $out" ;; esac
"$LEASEFS" umount "$M"
ok "running again, the mount lets go; the peer gets epoch $((me + 1))"

# A harness holder has no record of ours: who holds it is read from the
# processes' open files when /proc/locks may have passed its line over.
# Every look says held, with its pid; a revoke cannot tell it (exit 3).
peer_start python3 "$HERE/fsstore_peer.py" "$S" "$NAME" hold
peer_says '^granted '
for i in $(seq 1 40); do
	out=$("$LEASEFS" lease show "$NAME") || fail "show: $out"
	grep -q "^state: held" <<<"$out" || fail "look $i at a held lease under churn: $out"
	grep -q "^pid: *$PEER_PID\$" <<<"$out" || fail "look $i names another holder: $out"
done
rc=0; "$LEASEFS" lease revoke "$NAME" --timeout=2 >"$T/revoke.out" 2>&1 || rc=$?
[ $rc -eq 3 ] || fail "revoke of a harness holder under churn: exit $rc ($(cat "$T/revoke.out"))"
grep -q "not a leasefs mount" "$T/revoke.out" || fail "revoke: $(cat "$T/revoke.out")"
peer_release
has_line "^state: free" "$LEASEFS" lease show "$NAME" || fail "not free once the peer left"
ok "a harness holder under churn: 40 looks say held by it; revoke exits 3"
echo PASS
