#!/usr/bin/env bash
# FUSE over io_uring (fs/fuse/compat/ring.c): negotiated when the kernel has it enabled
# and the daemon wants it, one queue per possible CPU; data through the
# queues intact both ways (large writes in the payload, read replies read
# into the ring buffer in place, at any offset and size, up to and past
# the end of the file, large readdir replies); loss turns writes EROFS while reads keep
# coming through the queues; umount and kill -9 end as with /dev/fuse; and
# it falls back to /dev/fuse when disabled on either side.  Enables the
# fuse module's enable_uring for the test and restores it; SKIP where the
# kernel has no such parameter or it cannot be set.
# serial: it switches the fuse module's enable_uring, which is host-wide
. "$(dirname "$0")/lib.sh"
unset LEASEFS_IT_TRANSPORT   # this test chooses each mount's transport

param=/sys/module/fuse/parameters/enable_uring
[ -e "$param" ] || { echo "SKIP: the kernel has no FUSE over io_uring ($param)"; exit 77; }
was=$(cat "$param")
at_exit "echo $was > $param"
echo Y >"$param" 2>/dev/null || { echo "SKIP: cannot set $param"; exit 77; }

R=$T/root M=$T/mnt
export LEASEFS_IO_URING=1
mount_ws "$R" "$M"
expect_transport "$M" io-uring
[ -z "$(fuse_get "$M" transport_reason)" ] || fail "a reason while on io_uring"
has_line '^transport  io-uring$' "$LEASEFS" status "$M" || fail "status table lacks transport io-uring"
possible=$(python3 - <<'PY'
n = 0
for part in open("/sys/devices/system/cpu/possible").read().strip().split(","):
    a, _, b = part.partition("-")
    n += int(b or a) - int(a) + 1
print(n)
PY
)
[ "$(fuse_get "$M" io_uring_queues)" = "$possible" ] ||
	fail "queues $(fuse_get "$M" io_uring_queues), possible CPUs $possible"
ok "io_uring negotiated: $possible queues"

# --- data both ways ---------------------------------------------------------
head -c 8M /dev/urandom >"$R/in"          # never cached by the mount
[ "$(md5sum <"$M/in")" = "$(md5sum <"$R/in")" ] || fail "read through the queues differs"
head -c 8M /dev/urandom >"$T/src"
dd if="$T/src" of="$M/out" bs=1M status=none conv=fsync
[ "$(md5sum <"$R/out")" = "$(md5sum <"$T/src")" ] || fail "1 MiB writes through the queues differ"
mkdir "$M/many"
(cd "$M/many" && seq 1 3000 | xargs touch)
[ "$(ls "$M/many" | wc -l)" = 3000 ] || fail "readdir of 3000 entries"
[ "$(ls "$R/many" | wc -l)" = 3000 ] || fail "3000 creates"
ok "8 MiB read, 8 MiB written, 3000 entries created and listed"

# Reads at random offsets and sizes (1 byte to 3 MiB, some past the end),
# the mount's cache of the file dropped between batches so that they reach
# the queues; and files of 5 and 0 bytes.
printf short >"$R/five"
: >"$R/zero"
python3 - "$R" "$M" <<'PY' || fail "reads at random offsets through the queues differ"
import os, random, sys
root, mnt = sys.argv[1:]
want = open(f"{root}/in", "rb").read()
rnd, bad = random.Random(21), 0
fd = os.open(f"{mnt}/in", os.O_RDONLY)
for i in range(600):
    if i % 50 == 0:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    off = rnd.randrange(0, len(want) + 8192)
    n = rnd.choice([1, 7, 4095, 4096, 4097, 65536, 131072, 1 << 20, 3 << 20])
    bad += os.pread(fd, n, off) != want[off:off + n]
os.close(fd)
for name, data in (("five", b"short"), ("zero", b"")):
    with open(f"{mnt}/{name}", "rb") as f:
        bad += f.read() != data
sys.exit(1 if bad else 0)
PY
ok "600 reads at random offsets and sizes, and files of 5 and 0 bytes, intact"

# --- loss: EROFS, reads keep working through the queues --------------------
before=$(fuse_get "$M" io_uring_requests)
"$LEASEFS" lease revoke "$(status_of "$M" lease)" >/dev/null
wait_until 5 bash -c "! echo x 2>/dev/null >> '$M/out'" || fail "no EROFS within 5 s of revoke"
expect_erofs bash -c "echo x > '$M/new'"
expect_erofs mkdir "$M/d"
expect_erofs rm "$M/in"
[ "$(md5sum <"$M/in")" = "$(md5sum <"$R/in")" ] || fail "read after loss"
[ "$(fuse_get "$M" io_uring_requests)" -gt "$before" ] || fail "no request through the queues after loss"
[ "$(fuse_get "$M" transport)" = io-uring ] || fail "transport changed on loss"
ok "after loss: writes EROFS, reads intact, still through the queues"

# --- umount: clean -----------------------------------------------------------
pid=$DAEMON_PID
timeout 10 "$LEASEFS" umount "$M" || fail "umount"
wait_pid_gone "$pid" 10 || fail "daemon still running after umount"
! grep -q " $M " /proc/mounts || fail "still mounted after umount"
ok "umount: daemon gone, nothing mounted"

# --- kill -9: ENOTCONN, as with /dev/fuse -------------------------------------
mount_ws "$R" "$M"
expect_transport "$M" io-uring
kill -9 "$DAEMON_PID"
wait_pid_gone "$DAEMON_PID" 10 || fail "daemon survived kill -9"
wait_until 5 bash -c "timeout 2 ls '$M' 2>&1 | grep -q 'Transport endpoint is not connected'" ||
	fail "want ENOTCONN after kill -9, got: $(timeout 2 ls "$M" 2>&1)"
if timeout 2 bash -c "echo x > '$M/g'" 2>/dev/null; then fail "write fell through"; fi
[ ! -e "$R/g" ] || fail "backing root touched"
timeout 10 "$LEASEFS" umount "$M" 2>/dev/null || fail "umount of the dead mount"
ok "kill -9: ENOTCONN, root untouched, detached"

# --- fallbacks ---------------------------------------------------------------
# expect_reason MNT TEXT: status says the mount serves on /dev/fuse, and why,
# in the JSON and in the table.
expect_reason() {
	local got
	got=$(fuse_get "$1" transport_reason)
	[ "$got" = "$2" ] || fail "transport_reason '$got', want '$2'"
	has_line "^transport  dev-fuse ($2)\$" "$LEASEFS" status "$1" ||
		fail "status table: $("$LEASEFS" status "$1" | grep ^transport)"
}

LEASEFS_IO_URING=0 mount_ws "$R" "$M"
expect_transport "$M" dev-fuse
[ "$(fuse_get "$M" io_uring_offered)" = True ] || fail "kernel offer not seen"
expect_reason "$M" "turned off by LEASEFS_IO_URING=0"
echo x >> "$M/out" || fail "write on /dev/fuse"
timeout 10 "$LEASEFS" umount "$M"
echo N >"$param"
mount_ws "$R" "$M"
expect_transport "$M" dev-fuse
[ "$(fuse_get "$M" io_uring_offered)" = False ] || fail "offer seen with enable_uring=N"
expect_reason "$M" "turned off (enable_uring=N)"
echo x >> "$M/out" || fail "write with io_uring disabled in the kernel"
timeout 10 "$LEASEFS" umount "$M"
ok "falls back to /dev/fuse, and status says why: daemon opt-out (LEASEFS_IO_URING=0), kernel not enabled"

# --- no threads for the queues: /dev/fuse, and the status says why ------------
# The mount needs fewer threads than the queues add: at the smallest pids.max
# that mounts, the queues cannot start and the mount must serve on /dev/fuse.
echo Y >"$param"
if ! cg=$(pids_cgroup leasefs-uring); then
	echo "SKIP: no pids cgroup to deny the queues' threads with"
	echo PASS
	exit 0
fi
at_exit "$(pids_cgroup_cleanup "$cg")"
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"  # LSan needs a task at exit
mounted=
for k in $(seq 2 16); do
	echo "$k" > "$cg/pids.max"
	if sh -c 'echo $$ > "$1/cgroup.procs" && exec "$2" mount "$3" "$4"' \
		sh "$cg" "$LEASEFS" "$R" "$M" >/dev/null 2>&1; then
		mounted=$k
		break
	fi
	wait_until 20 grep -qx 0 "$cg/pids.current" || fail "pids.max $k: tasks left"
done
[ -n "$mounted" ] || fail "no mount under pids.max up to 16"
expect_transport "$M" dev-fuse
why=$(fuse_get "$M" io_uring_error)
[ "$why" = "Resource temporarily unavailable" ] || fail "io_uring_error: '$why'"
expect_reason "$M" "refused by the kernel at INIT"
echo y >> "$M/out" || fail "write on the fallback"
timeout 10 "$LEASEFS" umount "$M"
wait_until 20 grep -qx 0 "$cg/pids.current" || fail "daemon left after umount"
ok "pids.max $mounted: mounted on /dev/fuse, io_uring_error: $why"
echo PASS
