#!/usr/bin/env bash
# Many workspaces on one host, default sysctls: SCALE_N exclusive mounts
# on one file store at once (default: 10 more than the inotify instances a
# user gets, fs.inotify.max_user_instances, 128 by default; at most 200).
# No daemon holds an inotify instance; revoking
# one mount turns it read-only and leaves every other one writable;
# unmounting all leaves no lease held, no mount and no daemon.
# scripts/bench-scale measures the same at 1000 (costs, latencies).
# bound: 180
# serial: its mounts count against the host-wide inotify and process limits it probes
. "$(dirname "$0")/lib.sh"

limit=$(cat /proc/sys/fs/inotify/max_user_instances)
N=${SCALE_N:-$((limit < 190 ? limit + 10 : 200))}
ok "fs.inotify.max_user_instances is $limit; mounting $N"

for i in $(seq "$N"); do
	mkdir -p "$T/r$i" "$T/m$i"
	MOUNTS+=("$T/m$i")  # registered before the mount
	out=$(timeout 30 "$LEASEFS" mount "$T/r$i" "$T/m$i" 2>&1) ||
		fail "mount $i of $N: $out"
done
pids=$(for i in $(seq "$N"); do status_of "$T/m$i" pid; done)
PIDS+=($pids)
[ "$(wc -w <<<"$pids")" -eq "$N" ] || fail "expected $N daemons"
[ "$(grep -c " $T/m[0-9]* fuse.leasefs " /proc/mounts)" -eq "$N" ] ||
	fail "not $N mounts"
ok "$N mounts live"

ino=0
for p in $pids; do
	n=$(find "/proc/$p/fd" -lname 'anon_inode:inotify' 2>/dev/null | wc -l)
	ino=$((ino + n))
done
[ "$ino" -eq 0 ] || fail "daemons hold $ino inotify instances"
ok "no daemon holds an inotify instance"

victim=$((N / 2))
lease=$(status_of "$T/m$victim" lease)
"$LEASEFS" lease revoke "$lease" >/dev/null
expect_erofs sh -c "echo x > '$T/m$victim/after'"
[ "$(status_of "$T/m$victim" state)" = lost ] || fail "victim not lost"
for i in $(seq "$N"); do
	[ "$i" -eq "$victim" ] && continue
	echo "$i" > "$T/m$i/after" || fail "mount $i not writable after revoking $victim"
	[ "$(cat "$T/r$i/after")" = "$i" ] || fail "mount $i: write did not reach ROOT"
done
ok "revoked mount $victim is read-only; the other $((N - 1)) took a write"

for i in $(seq "$N"); do
	"$LEASEFS" umount "$T/m$i" || fail "umount $i"
done
for p in $pids; do
	wait_pid_gone "$p" 20 || fail "daemon $p still running after umount"
done
held=$("$LEASEFS" lease list | grep -c '^held' || true)
[ "$held" -eq 0 ] || fail "$held leases still held after unmounting all"
! grep -q " $T/m[0-9]* " /proc/mounts || fail "mounts left"
ok "after unmounting all: no lease held, no mount, no daemon"
echo PASS
