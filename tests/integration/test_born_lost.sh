#!/usr/bin/env bash
# A lease lost between the coordinator's open and the kernel's INIT never
# gives a mount born lost: `leasefs mount` fails (exit 1, naming the loss),
# nothing stays mounted and every lease is released, so the next mount is
# granted at once.  The window is widened with LEASEFS_TEST_SERVE_DELAY_MS
# (a test build's hook: the daemon sleeps after opening its leases and the
# FUSE session, before it serves).
. "$(dirname "$0")/lib.sh"

R=$T/root M=$T/mnt
mkdir -p "$R" "$M"
NAME=$(python3 "$HERE/fsstore_peer.py" "$R" --root-name)
MOUNTS+=("$M")
LEASEFS_TEST_SERVE_DELAY_MS=5000 timeout 60 "$LEASEFS" mount "$R" "$M" >"$T/mount.out" 2>&1 &
MOUNT_PID=$!
wait_until 20 has_line "^state: held" "$LEASEFS" lease show "$NAME" ||
	fail "the root lease was never held: $(cat "$T/mount.out")"
held_pid=$("$LEASEFS" lease show "$NAME" | awk '/^pid:/ {print $2}')
[ -n "$held_pid" ] && [ "$held_pid" != 0 ] && PIDS+=("$held_pid")
out=$(timeout 30 "$LEASEFS" lease revoke "$NAME" 2>&1) || fail "revoke: $out"
rc=0; wait "$MOUNT_PID" || rc=$?
[ $rc -eq 1 ] || fail "a mount whose lease was lost before it served exited $rc: $(cat "$T/mount.out")"
grep -q "was lost (revoked) at epoch .* before the mount served" "$T/mount.out" ||
	fail "the refusal does not name the loss: $(cat "$T/mount.out")"
! mountpoint -q "$M" || fail "$M is still mounted"
[ -z "$held_pid" ] || wait_pid_gone "$held_pid" 10 || fail "the daemon did not exit"
! has_line "^state: \(held\|revoked\)" "$LEASEFS" lease show "$NAME" ||
	fail "the root lease was not released: $("$LEASEFS" lease show "$NAME")"
! has_line "held\|revoked" "$LEASEFS" lease list || fail "a lease is still held: $("$LEASEFS" lease list)"
ok "a revoke before INIT: mount exits 1 naming the loss, nothing mounted, every lease released"

mount_ws "$R" "$M"
[ "$(status_of "$M" state)" = held ] || fail "the next mount is not held"
"$LEASEFS" umount "$M"
ok "the next mount is granted at once"
echo PASS
