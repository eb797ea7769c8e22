#!/usr/bin/env bash
# Write-only opens served past the page cache (direct periods: iomode.c):
#  (a) on by default where the kernel lets a direct_io open be mapped
#      shared (FUSE_DIRECT_IO_ALLOW_MMAP, protocol 7.39), status saying
#      so; LEASEFS_DIRECT_WRITES=0 turns it off;
#  (b) what it saves: creating, writing and closing files sends the
#      kernel's GETXATTR of security.capability (one per file) with it off
#      and none with it on, the rest of the requests alike (counted with
#      the fuse:fuse_request_send tracepoint; root only);
#  (c) readers stay coherent with a direct writer, checked on the native
#      directory and on both mounts: a reader that opens while a writer
#      appends sees every byte at once, by read and by a shared mapping; a
#      second writer joins; a writer joins a reader's cached period; a
#      mapping whose descriptor was closed sees a direct write; the next
#      open after the period reads what was written;
#  (d) after loss: a direct writer's next write is EROFS and ROOT keeps its
#      bytes, while a reader that joined its period keeps reading.
. "$(dirname "$0")/lib.sh"

R=$T/root M=$T/mnt R0=$T/root0 M0=$T/mnt0 N=$T/native
mount_ws "$R" "$M"
LEASEFS_DIRECT_WRITES=0 mount_ws "$R0" "$M0"
mkdir -p "$N"

# --- (a) ------------------------------------------------------------------
minor=$(fuse_get "$M" kernel_minor)
if [ "$minor" -lt 39 ]; then
	[ "$(fuse_get "$M" direct_writes)" = False ] ||
		fail "direct writes on a kernel without FUSE_DIRECT_IO_ALLOW_MMAP (7.$minor)"
	echo "SKIP: the kernel cannot map direct_io opens (7.$minor < 7.39): writes stay cached"
	exit 77
fi
[ "$(fuse_get "$M" direct_writes)" = True ] || fail "direct writes not on by default"
[ "$(fuse_get "$M0" direct_writes)" = False ] || fail "LEASEFS_DIRECT_WRITES=0 ignored"
ok "direct writes on by default, off with LEASEFS_DIRECT_WRITES=0"

# --- (b) ------------------------------------------------------------------
# requests MNT DIR: the FUSE requests of creating, writing and closing 50
# files in DIR on MNT, by opcode ("LOOKUP=50 CREATE=50 ...").
TRACE=
trace_setup() {
	local tr=/sys/kernel/tracing
	[ -d "$tr/instances" ] || mount -t tracefs nodev "$tr" 2>/dev/null || return 1
	[ -d "$tr/events/fuse/fuse_request_send" ] || return 1
	TRACE=$tr/instances/leasefs-it-$$
	mkdir "$TRACE" 2>/dev/null || { TRACE=; return 1; }
	at_exit "rmdir '$TRACE'"
}
requests() {
	local mnt=$1 dir=$2 ev=$TRACE/events/fuse/fuse_request_send
	echo "connection == $(( $(stat -c %Hd "$mnt") << 20 | $(stat -c %Ld "$mnt") ))" >"$ev/filter"
	: >"$TRACE/trace"
	mkdir "$dir"
	echo 1 >"$ev/enable"
	python3 -c '
import os, sys
for i in range(50):
    fd = os.open(os.path.join(sys.argv[1], "f%d" % i), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, b"x" * 4096)
    os.close(fd)' "$dir"
	echo 0 >"$ev/enable"
	grep -v '^#' "$TRACE/trace" | grep -o '(FUSE_[A-Z0-9_]*)' | tr -d '()' | sed 's/^FUSE_//' |
		sort | uniq -c | awk '{ printf "%s=%d ", $2, $1 }'
}
count() { grep -o "$1=[0-9]*" <<<"$2" | cut -d= -f2 || true; }
if [ "$(id -u)" -eq 0 ] && trace_setup; then
	on=$(requests "$M" "$M/reqs") off=$(requests "$M0" "$M0/reqs")
	[ "$(count GETXATTR "$off")" = 50 ] || fail "off: expected 50 GETXATTRs: $off"
	[ -z "$(count GETXATTR "$on")" ] || fail "on: the kernel still asks for security.capability: $on"
	for op in LOOKUP CREATE WRITE RELEASE; do
		[ "$(count "$op" "$on")" = "$(count "$op" "$off")" ] || fail "$op differs: on $on, off $off"
	done
	ok "50 creates: on $on; off $off"
else
	echo "SKIP: (b) needs root and the fuse tracepoints"
fi

# --- (c) ------------------------------------------------------------------
cat >"$T/coherent.py" <<'PY'
import mmap, os, sys
p = os.path.join(sys.argv[1], "coherent")
# A write-only open of an idle file first: a reader joins, by read and map.
w = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
os.write(w, b"a" * 100)
r = os.open(p, os.O_RDONLY)
m = None
want = b"a" * 100
for i in range(300):
    chunk = b"%05d-" % i * 7
    os.write(w, chunk)
    want += chunk
    got = os.pread(r, len(want) + 10, 0)
    assert got == want, ("read", i, len(got), len(want))
    if m is None and len(want) > 4096:
        m = mmap.mmap(r, 0, mmap.MAP_SHARED, mmap.PROT_READ)
    if m is not None:
        assert m[:] == want[:len(m)], ("map", i)
os.close(w)
# A second writer joins while the reader and its mapping are open.
w = os.open(p, os.O_WRONLY)
os.pwrite(w, b"ZZZZ", 10)
want = want[:10] + b"ZZZZ" + want[14:]
assert m[:20] == want[:20], ("map after a joining writer", m[:20])
assert os.pread(r, 20, 0) == want[:20]
os.close(w); m.close(); os.close(r)
# A reader first (a cached period); a writer joins it.
r = os.open(p, os.O_RDONLY)
assert os.pread(r, len(want), 0) == want
w = os.open(p, os.O_WRONLY)
os.pwrite(w, b"YYYY", 0)
want = b"YYYY" + want[4:]
assert os.pread(r, len(want), 0) == want, "reader of a cached period"
os.close(w); os.close(r)
# A shared mapping whose descriptor is closed, and a direct write.
fd = os.open(p, os.O_RDWR)
mm = mmap.mmap(fd, 4096)
os.close(fd)
mm[0:4] = b"MMMM"; mm.flush()
w = os.open(p, os.O_WRONLY)
os.pwrite(w, b"WWWW", 8)
os.close(w)
want = b"MMMM" + want[4:8] + b"WWWW" + want[12:]
assert mm[0:12] == want[:12], ("closed mapping", mm[0:12])
mm.close()
# The next open, after the period.
r = os.open(p, os.O_RDONLY)
assert os.pread(r, len(want) + 1, 0) == want, "next open"
os.close(r)
PY
for d in "$N" "$M" "$M0"; do
	python3 "$T/coherent.py" "$d" || fail "readers and a direct writer on $d"
done
cmp "$R/coherent" "$N/coherent" || fail "ROOT differs from the native file"
ok "a writer's reads, maps, joins and closed mappings agree with the native directory (on and off)"

# --- (d) ------------------------------------------------------------------
printf 'kept\n' >"$R/lost"
coproc AFTER { exec python3 -u -c '
import os, sys
w = os.open(sys.argv[1], os.O_WRONLY)
r = os.open(sys.argv[1], os.O_RDONLY)
print("open", flush=True)
sys.stdin.readline()
try:
    os.pwrite(w, b"LATE", 0)
    print("wrote", flush=True)
except OSError as e:
    print("write:", e.strerror, flush=True)
print("read:", os.pread(r, 5, 0).decode().strip(), flush=True)
' "$M/lost"; }
PIDS+=("$AFTER_PID")
read -r -t 30 line <&"${AFTER[0]}" || line="(nothing)"
[ "$line" = open ] || fail "direct writer: $line"
"$LEASEFS" lease revoke "$(status_of "$M" lease)" >/dev/null
wait_until 10 has_line '^lost$' status_of "$M" state || fail "the mount did not turn lost"
echo go >&"${AFTER[1]}"
read -r -t 30 line <&"${AFTER[0]}" || line="(nothing)"
[ "$line" = "write: Read-only file system" ] || fail "a direct write after loss: $line"
read -r -t 30 line <&"${AFTER[0]}" || line="(nothing)"
[ "$line" = "read: kept" ] || fail "the joined reader after loss: $line"
wait "$AFTER_PID" 2>/dev/null || true
[ "$(cat "$R/lost")" = kept ] || fail "ROOT changed after loss: $(cat "$R/lost")"
ok "after loss: the direct writer gets EROFS, its joined reader reads, ROOT kept its bytes"
