#!/usr/bin/env bash
# mount(8)'s conventions: the source of a leasefs mount is ROOT itself
# (fstype fuse.leasefs), so `mount -a` finds an fstab line mounted and
# leaves it (exit 0, one mount, one daemon), for a root with a space and a
# comma in its name, one named through a symlink, and session placement
# too; `findmnt` and `df` name ROOT; plain `umount MOUNTPOINT` ends the
# daemon in order and `mount -a` mounts again.  mount(8) runs the helper
# without the caller's PATH (mount.fuse3 runs `leasefs` with /bin/sh's
# default one): leasefs is bound into /usr/local/sbin, as an installed one
# sits in /usr/local/bin or /usr/bin.  Runs in a mount namespace of its own.
[ -n "${LEASEFS_IT_FSTABNS:-}" ] ||
	LEASEFS_IT_FSTABNS=1 exec unshare -m --propagation private bash "$0" "$@"
. "$(dirname "$0")/lib.sh"

mkdir -p "$T/sbin"
ln -s "$LEASEFS" "$T/sbin/leasefs"
mount --bind "$T/sbin" /usr/local/sbin
L=${LEASEFS_LEASES#file:}

R1=$T/plain R2="$T/a root, spaced" R3=$T/via-link R4=$T/sess
mkdir -p "$R1" "$R2" "$T/real" "$R4" "$T/m1" "$T/m2" "$T/m3" "$T/m4"
ln -s "$T/real" "$R3"
MOUNTS+=("$T/m1" "$T/m2" "$T/m3" "$T/m4")
# fstab(5) escapes a space as \040.
{
	printf '%s %s fuse.leasefs leases=file:%s 0 0\n' "$R1" "$T/m1" "$L"
	printf '%s %s fuse.leasefs leases=file:%s 0 0\n' "${R2// /\\040}" "$T/m2" "$L"
	printf '%s %s fuse.leasefs leases=file:%s 0 0\n' "$R3" "$T/m3" "$L"
	printf '%s %s fuse.leasefs leases=file:%s,placement=session 0 0\n' "$R4" "$T/m4" "$L"
} >"$T/fstab"

daemons() { pgrep -f -c -- "^leasefs .*$T/m[0-9]" || true; }
mount -a -T "$T/fstab" || fail "mount -a: exit $?"
for i in 1 2 3 4; do PIDS+=("$(status_of "$T/m$i" pid)"); done
[ "$(findmnt -rn -t fuse.leasefs | grep -c " ")" -ge 4 ] || fail "mounts: $(findmnt -t fuse.leasefs)"
rc=0; out=$(mount -a -T "$T/fstab" 2>&1) || rc=$?
[ $rc -eq 0 ] || fail "mount -a, again: exit $rc: $out"
[ -z "$out" ] || fail "mount -a, again, said: $out"
for i in 1 2 3 4; do
	[ "$(findmnt -rn -o TARGET "$T/m$i" | wc -l)" -eq 1 ] || fail "m$i mounted twice: $(findmnt "$T/m$i")"
done
[ "$(daemons)" -eq 4 ] || fail "$(daemons) daemons, want 4"
ok "mount -a twice: exit 0, nothing said, each line mounted once, 4 daemons"

src() { findmnt -n -o SOURCE "$1"; }
[ "$(src "$T/m1")" = "$R1" ] || fail "findmnt source: $(src "$T/m1")"
[ "$(src "$T/m2")" = "$R2" ] || fail "findmnt source of a spaced root: $(src "$T/m2")"
[ "$(src "$T/m3")" = "$T/real" ] || fail "findmnt source through a link: $(src "$T/m3")"
[ "$(src "$T/m4")" = "$R4" ] || fail "findmnt source of a session mount: $(src "$T/m4")"
[ "$(findmnt -n -o FSTYPE "$T/m1")" = fuse.leasefs ] || fail "fstype $(findmnt -n -o FSTYPE "$T/m1")"
grep -qF "${R2// /\\040} $T/m2 fuse.leasefs " /proc/mounts || fail "/proc/mounts: $(grep m2 /proc/mounts)"
[ "$(df --output=source "$T/m1" | tail -n 1)" = "$R1" ] || fail "df: $(df "$T/m1")"
ok "findmnt and df name ROOT (canonical; escaped in /proc/mounts), type fuse.leasefs"

pid=$(status_of "$T/m1" pid) lease=$(status_of "$T/m1" lease)
umount "$T/m1"
wait_pid_gone "$pid" 20 || fail "daemon $pid still there after umount"
[ "$("$LEASEFS" lease show "$lease" | awk '/^state:/ {print $2}')" = free ] ||
	fail "umount left the root lease: $("$LEASEFS" lease show "$lease")"
mount -a -T "$T/fstab" || fail "mount -a after umount: exit $?"
PIDS+=("$(status_of "$T/m1" pid)")
[ "$(status_of "$T/m1" state)" = held ] || fail "m1 after mount -a: $(status_of "$T/m1" state)"
[ "$(daemons)" -eq 4 ] || fail "$(daemons) daemons after the remount, want 4"
for i in 1 2 3 4; do umount "$T/m$i"; done
ok "umount MOUNTPOINT: the daemon exits and the lease is free; mount -a mounts that line again, only it"
echo PASS
