#!/usr/bin/env bash
# kill -9 of the daemon: the mount answers ENOTCONN and never falls through
# to the backing root; the next mount on the same mount point cleans the
# stale mount and gets a higher epoch at once.
. "$(dirname "$0")/lib.sh"

R=$T/root M=$T/mnt
mount_ws "$R" "$M"
echo before > "$M/f"
epoch=$(status_of "$M" epoch)
kill -9 "$DAEMON_PID"
wait_pid_gone "$DAEMON_PID" 10 || fail "daemon survived kill -9"
# A request caught in flight while the daemon exits gets ECONNABORTED;
# once the connection is gone, every request gets ENOTCONN.
dead_answer() { out=$(ls "$M" 2>&1) && fail "dead mount still answers: $out"; echo "$out"; }
wait_until 5 bash -c "ls '$M' 2>&1 | grep -q 'Transport endpoint is not connected'" ||
	fail "want ENOTCONN, got: $(dead_answer)"
ok "dead mount answers ENOTCONN"
if echo x > "$M/g" 2>/dev/null; then fail "write fell through"; fi
[ ! -e "$R/g" ] && [ "$(cat "$R/f")" = before ] || fail "backing root touched"
ok "backing root untouched"
mount_ws "$R" "$M"
e2=$(status_of "$M" epoch)
[ "$e2" -gt "$epoch" ] || fail "epoch $e2 not above $epoch"
echo after >> "$M/f"
ok "remount on the stale mount point: epoch $epoch -> $e2"

# `leasefs umount` of a crashed daemon's mount detaches it.
kill -9 "$DAEMON_PID"
wait_pid_gone "$DAEMON_PID" 10 || fail "daemon survived kill -9"
# Root's detach walks the path it is given without following a symbolic
# link (whoever owns a component could point it at another mount).
ln -s "$T" "$T/link"
rc=0; out=$("$LEASEFS" umount "$T/link/mnt" 2>&1) || rc=$?
[ $rc -ne 0 ] && findmnt -rn "$M" >/dev/null || fail "a stale mount detached through a symbolic link: exit $rc: $out"
grep -q "symbolic link" <<<"$out" || fail "the refusal does not say why: $out"
ok "root's detach follows no symbolic link: $out"
"$LEASEFS" umount "$M" || fail "umount of a stale mount failed"
mountpoint -q "$M" && fail "stale mount still there after leasefs umount"
[ "$(cat "$R/f")" = "$(printf 'before\nafter')" ] || fail "backing root changed: $(cat "$R/f")"
ok "leasefs umount detaches a stale mount"
echo PASS
