#!/usr/bin/env bash
# A mount that lost one of its two leases gives the other back too, once
# it has drained: the loss is latched for good, so the survivor could only
# keep every successor out for as long as the mount lives.
#  1. Its session lease revoked: the mount turns read-only, and the root
#     lease goes with it: a second mount of the root comes up at once.
#  2. Its root lease revoked: the session lease goes with it.
. "$(dirname "$0")/lib.sh"

R=$T/root MA=$T/ma MB=$T/mb
mkdir -p "$R" "$MB"
ROOT_NAME=$(python3 "$HERE/fsstore_peer.py" "$R" --root-name)

# 1. Only the session lease is lost.
mount_ws "$R" "$MA"
SA="sessions/$(status_of "$MA" session)"
echo before > "$MA/f"
"$LEASEFS" lease revoke "$SA" >"$T/revoke.out" 2>&1 ||
	fail "revoke of the session lease: $(cat "$T/revoke.out")"
grep -q "acknowledged" "$T/revoke.out" || fail "revoke: $(cat "$T/revoke.out")"
[ "$(status_of "$MA" state)" = lost ] || fail "A after its session's revoke: $(status_of "$MA" state)"
expect_erofs bash -c "echo more >> '$MA/f'"
has_line "^state: free" "$LEASEFS" lease show "$ROOT_NAME" ||
	fail "A kept the root lease after losing its session: $("$LEASEFS" lease show "$ROOT_NAME")"
rc=0; out=$(timeout 30 "$LEASEFS" mount "$R" "$MB" 2>&1) || rc=$?
MOUNTS+=("$MB")
[ $rc -eq 0 ] || fail "a successor after A's session loss: exit $rc ($out)"
PIDS+=("$(status_of "$MB" pid)")
[ "$(status_of "$MB" state)" = held ] || fail "B: $(status_of "$MB" state)"
echo after > "$MB/f" || fail "B cannot write"
[ "$(cat "$R/f")" = after ] || fail "root has $(cat "$R/f")"
[ "$(status_of "$MA" state)" = lost ] || fail "A recovered: $(status_of "$MA" state)"
"$LEASEFS" umount "$MA"
ok "session lease revoked: the root lease goes with it, a successor mounts at once"

# 2. Only the root lease is lost.
SB="sessions/$(status_of "$MB" session)"
has_line "^state: held" "$LEASEFS" lease show "$SB" || fail "B's session is not held"
"$LEASEFS" lease revoke "$ROOT_NAME" >"$T/revoke.out" 2>&1 ||
	fail "revoke of the root lease: $(cat "$T/revoke.out")"
[ "$(status_of "$MB" state)" = lost ] || fail "B after its root's revoke: $(status_of "$MB" state)"
# The fence released the root first, then the session, in one step.
has_line "^state: \(free\|revoked\)" "$LEASEFS" lease show "$SB" ||
	fail "B kept its session lease after losing the root: $("$LEASEFS" lease show "$SB")"
"$LEASEFS" umount "$MB"
ok "root lease revoked: the session lease goes with it"
echo PASS
