#!/usr/bin/env bash
# The mount's owner (the caller of mount, or --owner=USER[:GROUP] given by
# root) may watch, status, metrics and umount it; anyone else is refused
# every verb (exit 77) and learns nothing of the mount.  Real users made
# here, removed at exit.
. "$(dirname "$0")/lib.sh"

UA=lfs-own-a UB=lfs-own-b G=lfs-own-g
chmod 755 "$T"
for u in "$UA" "$UB"; do userdel "$u" 2>/dev/null || true; done
groupdel "$G" 2>/dev/null || true
groupadd --system "$G"
at_exit "groupdel $G"
for u in "$UA" "$UB"; do
	useradd --system --no-create-home --shell /usr/sbin/nologin "$u"
	at_exit "userdel $u"
done
as() { local u=$1; shift; setpriv --reuid="$u" --regid="$(id -g "$u")" --init-groups "$@"; }

R=$T/root M=$T/mnt
mount_ws "$R" "$M" --owner="$UA"
lease=$(status_of "$M" lease) epoch=$(status_of "$M" epoch)

# The owner: status, metrics.
out=$(as "$UA" "$LEASEFS" status "$M" --json) || fail "owner's status refused"
[ "$(json_get epoch <<<"$out")" = "$epoch" ] || fail "owner's status: $out"
out=$(as "$UA" "$LEASEFS" metrics "$M") || fail "owner's metrics refused"
grep -q '^leasefs_lease_held{' <<<"$out" || fail "owner's metrics: $out"
ok "the owner reads status and metrics"

# Anyone else: every verb refused with exit 77, and nothing of the mount
# in what it is told.
for verb in status watch metrics umount; do
	rc=0; out=$(as "$UB" timeout 10 "$LEASEFS" "$verb" "$M" 2>&1) || rc=$?
	[ $rc -eq 77 ] || fail "$verb by another user: exit $rc ($out)"
	case "$out" in *"$lease"*|*"epoch"*|*"$R"*) fail "$verb told another user: $out" ;; esac
	# The epoch as a number of its own: its digits may stand in the
	# temp dir's random name, which the message names.
	if grep -Eq "(^|[^[:alnum:]])$epoch([^[:alnum:]]|\$)" <<<"$out"; then
		fail "$verb told another user the epoch: $out"
	fi
	grep -q "permission denied" <<<"$out" || fail "$verb: no clear error: $out"
done
findmnt -rn "$M" >/dev/null || fail "another user's umount unmounted it"
ok "another user is refused status, watch, metrics and umount (exit 77) and told nothing"

# The owner watches its loss: the line comes when root revokes.
coproc W { as "$UA" "$LEASEFS" watch "$M"; }
exec {wfd}<&"${W[0]}"
read -r -t 10 line <&$wfd || fail "the owner's watch said nothing"
"$LEASEFS" lease revoke "$lease" >/dev/null
read -r -t 10 line <&$wfd || fail "no loss line for the owner"
[ "$(json_get state <<<"$line")" = lost ] || fail "owner's watch line: $line"
ok "the owner's watch sees the loss"

# The owner unmounts.
as "$UA" "$LEASEFS" umount "$M" || fail "the owner's umount"
findmnt -rn "$M" >/dev/null && fail "still mounted after the owner's umount"
ok "the owner unmounts"

# A group: its members may, others may not; by default only the caller.
usermod -a -G "$G" "$UB"
mount_ws "$R" "$M" --owner="$UA:$G"
as "$UB" "$LEASEFS" status "$M" >/dev/null || fail "a member of the owner's group refused"
"$LEASEFS" umount "$M"
mount_ws "$R" "$M"
rc=0; as "$UA" "$LEASEFS" status "$M" >/dev/null 2>&1 || rc=$?
[ $rc -eq 77 ] || fail "root's own mount: another user got exit $rc"
rc=0; out=$(as "$UA" "$LEASEFS" mount --owner=root "$R" "$T/m2" 2>&1) || rc=$?
[ $rc -eq 77 ] || fail "a user giving --owner=root: exit $rc ($out)"
ok "the owner's group may; a mount by root is root's; a user cannot give its mount away"
"$LEASEFS" umount "$M"
echo PASS
