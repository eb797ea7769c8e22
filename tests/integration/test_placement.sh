#!/usr/bin/env bash
# Session placement serves BASE/<uuid> and holds no root lease; shared
# placement holds no root lease and never turns read-only.
. "$(dirname "$0")/lib.sh"

B=$T/base M=$T/mnt
uuid=0b5c7f2e-1d3a-4e5f-8a9b-0c1d2e3f4a5b
mount_ws "$B" "$M" --placement=session --session=$uuid
[ -d "$B/$uuid" ] || fail "BASE/<uuid> not created"
[ "$(stat -c %a "$B/$uuid")" = 700 ] || fail "BASE/<uuid> not 0700"
echo s > "$M/f"
[ "$(cat "$B/$uuid/f")" = s ] || fail "session mount does not serve BASE/<uuid>"
! has_line workspace-roots "$LEASEFS" lease list || fail "session placement holds a root lease"
[ "$(status_of "$M" placement)" = session ] || fail "status placement"
ok "session placement"
"$LEASEFS" umount "$M"

S=$T/shared M2=$T/mnt2
mount_ws "$S" "$M2" --placement=shared
! has_line workspace-roots "$LEASEFS" lease list || fail "shared placement holds a root lease"
session=$(status_of "$M2" session)
"$LEASEFS" lease revoke "sessions/$session" >/dev/null
echo still > "$M2/g" || fail "shared placement turned read-only"
[ "$(status_of "$M2" state)" = held ] || fail "shared state"
# a second shared mount of the same root is allowed
mount_ws "$S" "$T/mnt3" --placement=shared
echo both > "$T/mnt3/h"
ok "shared placement: no root lease, writable after session revoke, two mounts"
# An exclusive mount's root lease revoked, acknowledged (the holder drained
# and released), the holder then gone: ROOT is free again for every
# placement, and an exclusive mount after them gets a higher epoch.
X=$T/excl M4=$T/mnt4
mount_ws "$X" "$M4"
root_lease=$(status_of "$M4" lease) epoch=$(status_of "$M4" epoch)
out=$("$LEASEFS" lease revoke "$root_lease" 2>&1) || fail "revoke: $out"
grep -q "acknowledged" <<<"$out" || fail "revoke not acknowledged: $out"
"$LEASEFS" umount "$M4"
has_line "^state: free" "$LEASEFS" lease show "$root_lease" ||
	fail "root lease not free after an acknowledged revoke: $("$LEASEFS" lease show "$root_lease")"
rc=0; out=$(timeout 30 "$LEASEFS" mount --placement=shared "$X" "$M4" 2>&1) || rc=$?
[ $rc -eq 0 ] || fail "shared mount after an acknowledged revoke: exit $rc: $out"
MOUNTS+=("$M4"); PIDS+=("$(status_of "$M4" pid)")
"$LEASEFS" umount "$M4"
mount_ws "$X" "$M4" --placement=session
"$LEASEFS" umount "$M4"
mount_ws "$X" "$M4"
[ "$(status_of "$M4" epoch)" -gt "$epoch" ] || fail "epoch $(status_of "$M4" epoch) not above $epoch"
"$LEASEFS" umount "$M4"
ok "revoked, acknowledged and gone: ROOT free for shared, session, and exclusive at a higher epoch"
echo PASS
