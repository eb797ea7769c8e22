#!/usr/bin/env bash
# The host limits a busy host runs into, one mount at a time: a mount that
# cannot have the descriptors or the threads it needs fails with exit 1 and
# a message naming the resource and the knob, and leaves nothing mounted,
# no lease held and ROOT untouched.
#  (a) open files: RLIMIT_NOFILE below what a mount needs;
#  (b) threads: a pids cgroup (v1 or v2) with pids.max stepped from 2 up,
#      so that thread creation fails at each point of the start in turn,
#      until the mount succeeds (then it is unmounted and the next runs).
. "$(dirname "$0")/lib.sh"

R=$T/root M=$T/mnt
mkdir -p "$R" "$M"
MOUNTS+=("$M")
echo keep > "$R/keep"

nothing_left() {
	! grep -q " $M " /proc/mounts || fail "$1: left a mount"
	held=$("$LEASEFS" lease list | grep -c '^held' || true)
	[ "$held" -eq 0 ] || fail "$1: $held leases held"
	[ "$(ls -A "$R")" = keep ] && [ "$(cat "$R/keep")" = keep ] ||
		fail "$1: ROOT touched: $(ls -A "$R")"
}

# --- (a) open files -------------------------------------------------------
rc=0
out=$(ulimit -n 128 && "$LEASEFS" mount "$R" "$M" 2>&1) || rc=$?
[ "$rc" -eq 1 ] || fail "fd limit 128: exit $rc ($out)"
grep -q "RLIMIT_NOFILE" <<<"$out" || fail "fd limit: message names no knob: $out"
nothing_left "fd limit"
ok "open files limit 128: exit 1: $out"

# --- (b) threads ------------------------------------------------------------
if ! cg=$(pids_cgroup leasefs-it); then
	echo "SKIP: (b) no pids cgroup to limit threads with"
	echo PASS
	exit 0
fi
at_exit "$(pids_cgroup_cleanup "$cg")"
# LeakSanitizer needs a task of its own at exit, which the limit denies;
# leaks are checked by every other test.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
failed=0
for k in $(seq 2 16); do
	echo "$k" > "$cg/pids.max"
	rc=0
	out=$(sh -c 'echo $$ > "$1/cgroup.procs" && exec "$2" mount "$3" "$4"' \
		sh "$cg" "$LEASEFS" "$R" "$M" 2>&1) || rc=$?
	if [ "$rc" -eq 0 ]; then
		"$LEASEFS" umount "$M" || fail "umount after pids.max $k"
		wait_until 20 grep -qx 0 "$cg/pids.current" || fail "daemon left"
		ok "pids.max $k: mounted and unmounted"
		break
	fi
	# Every task of the failed attempt (the daemon's teardown included)
	# is gone before the next one: the count is the cgroup's.
	wait_until 20 grep -qx 0 "$cg/pids.current" || fail "pids.max $k: tasks left"
	[ "$rc" -eq 1 ] || fail "pids.max $k: exit $rc ($out)"
	grep -q "pids.max" <<<"$out" || fail "pids.max $k: message names no knob: $out"
	nothing_left "pids.max $k"
	failed=$((failed + 1))
	ok "pids.max $k: exit 1, nothing left: $out"
done
[ "$rc" -eq 0 ] || fail "no mount even with pids.max 16"
[ "$failed" -gt 0 ] || fail "pids.max 2 did not stop a mount: the limit was not applied"
echo PASS
