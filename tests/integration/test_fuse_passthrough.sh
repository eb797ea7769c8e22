#!/usr/bin/env bash
# FUSE passthrough of read-only opens, on a real mount:
#  (a) it is off by default, and LEASEFS_PASSTHROUGH=1 turns it on (kernel
#      protocol >= 7.40, a root daemon), status saying so;
#  (b) reads of a read-only open never reach the daemon (its read counter
#      stays), and return the file's bytes; with it off they do reach it;
#  (c) mixed opens stay correct: a writer that opens while a reader is in
#      passthrough, a reader that opens while a writer is open, mmaps of
#      both, an executable run from the mount;
#  (d) many processes opening the same files for reading and writing at
#      once never get an error (the kernel refuses a wrong io mode with
#      EIO; the daemon must never ask for one);
#  (e) after loss: a file opened before and one opened after keep reading,
#      writes are refused, and no atime moves in ROOT;
#  (f) a ROOT the kernel will not pass through (on overlayfs) is served
#      through the daemon, status saying why;
#  (g) why it is off by default: on a default mount, a shared writable
#      mapping of a file opened for writing while a reader has it open
#      writes nothing to ROOT after loss (with passthrough on the kernel
#      maps the backing file itself, and those stores would land: fs/README.md).
. "$(dirname "$0")/lib.sh"

R=$T/root M=$T/mnt R0=$T/root0 M0=$T/mnt0
LEASEFS_PASSTHROUGH=1 mount_ws "$R" "$M"
mount_ws "$R0" "$M0"

minor=$(fuse_get "$M" kernel_minor)
if [ "$minor" -lt 40 ]; then
	echo "SKIP: the kernel has no FUSE passthrough (7.$minor < 7.40)"
	exit 77
fi
revoke() { "$LEASEFS" lease revoke "$(status_of "$1" lease)" >/dev/null; }
reads_of() {
	"$LEASEFS" metrics "$1" | awk '/^leasefs_requests_total/ && /op="read"/ { print $2 }'
}

# --- (a) ------------------------------------------------------------------
[ "$(fuse_get "$M" passthrough)" = True ] ||
	fail "passthrough not on: $(fuse_get "$M" passthrough_error)"
[ "$(fuse_get "$M0" passthrough)" = False ] || fail "passthrough on by default"
ok "passthrough off by default, on with LEASEFS_PASSTHROUGH=1"

# --- (b) ------------------------------------------------------------------
head -c 8M /dev/urandom >"$R/data"
cp "$R/data" "$R0/data"
want=$(md5sum <"$R/data")
before=$(reads_of "$M") opens=$(fuse_get "$M" backing_opens)
[ "$(md5sum <"$M/data")" = "$want" ] || fail "passthrough read returned other bytes"
[ "$(reads_of "$M")" = "$before" ] || fail "reads reached the daemon: $before -> $(reads_of "$M")"
[ "$(fuse_get "$M" backing_opens)" -gt "$opens" ] || fail "no backing file registered"
wait_until 5 has_line '^0$' fuse_get "$M" backing_files || fail "backing file kept after close"
before=$(reads_of "$M0")
[ "$(md5sum <"$M0/data")" = "$want" ] || fail "read returned other bytes"
[ "$(reads_of "$M0")" -gt "$before" ] || fail "with passthrough off, no read reached the daemon"
ok "8 MiB read with no READ request to the daemon (off: $(($(reads_of "$M0") - before)) READs); backing file closed after the last close"

# --- (c) ------------------------------------------------------------------
python3 - "$M" <<'PY' || fail "mixed opens"
import mmap, os, sys
p = sys.argv[1] + "/mixed"
with open(p, "wb") as f:
    f.write(b"A" * 8192)
# A reader starts a passthrough period; a writer joins it.
r = os.open(p, os.O_RDONLY)
assert os.pread(r, 4, 0) == b"AAAA"
w = os.open(p, os.O_RDWR)
os.pwrite(w, b"BBBB", 0)
assert os.pread(r, 4, 0) == b"BBBB", "reader missed the writer's write"
m = mmap.mmap(r, 8192, prot=mmap.PROT_READ)
os.pwrite(w, b"CCCC", 4)
assert m[:8] == b"BBBBCCCC", m[:8]
m.close(); os.close(r); os.close(w)
# A writer starts a cached period; a reader joins it; a shared map writes.
w = os.open(p, os.O_RDWR)
r = os.open(p, os.O_RDONLY)
os.pwrite(w, b"DDDD", 0)
assert os.pread(r, 4, 0) == b"DDDD"
m = mmap.mmap(w, 8192)
m[8:12] = b"EEEE"; m.flush(); m.close()
os.close(r); os.close(w)
# A new passthrough period sees all of it.
r = os.open(p, os.O_RDONLY)
assert os.pread(r, 12, 0) == b"DDDDCCCCEEEE", os.pread(r, 12, 0)
os.close(r)
PY
[ "$(head -c 12 "$R/mixed")" = DDDDCCCCEEEE ] || fail "ROOT holds $(head -c 12 "$R/mixed")"
cp /bin/true "$M/mytrue" && "$M/mytrue" || fail "an executable from the mount did not run"
ok "reader then writer, writer then reader, mmaps of both, exec: consistent, and ROOT holds the bytes"

# --- (d) ------------------------------------------------------------------
python3 - "$M" <<'PY' || fail "concurrent opens"
import os, random, sys
d = sys.argv[1]
names = [d + "/c%d" % i for i in range(3)]
for n in names:
    with open(n, "wb") as f:
        f.write(b"x" * 4096)
kids = []
for k in range(4):
    pid = os.fork()
    if pid == 0:
        rnd = random.Random(k)
        try:
            for i in range(1500):
                n = rnd.choice(names)
                if rnd.random() < 0.7:
                    fd = os.open(n, os.O_RDONLY)
                    assert len(os.pread(fd, 4096, 0)) == 4096
                else:
                    fd = os.open(n, os.O_RDWR)
                    os.pwrite(fd, b"y" * 16, rnd.randrange(4000))
                os.close(fd)
        except Exception as e:
            print("child %d: %r" % (k, e), file=sys.stderr)
            os._exit(1)
        os._exit(0)
    kids.append(pid)
bad = sum(os.waitpid(p, 0)[1] != 0 for p in kids)
sys.exit(1 if bad else 0)
PY
ok "4 processes x 1500 opens (70% read-only, 30% read-write) of 3 files: no error"

# --- (e) ------------------------------------------------------------------
echo early >"$M/early" && echo late >"$M/late"
exec {held}<"$M/early"
opens=$(fuse_get "$M" backing_opens)
revoke "$M"
wait_until 5 bash -c "! echo x 2>/dev/null >> '$M/probe'" || fail "no EROFS after revoke"
for f in early late; do touch -a -d 2001-01-01 "$R/$f"; done
before=$(stat -c %X "$R/early" "$R/late" | tr '\n' ' ')
[ "$(cat <&$held)" = early ] || fail "the file opened before the loss did not read"
exec {held}<&-
[ "$(cat "$M/late")" = late ] || fail "a file opened after the loss did not read"
[ "$(fuse_get "$M" backing_opens)" -gt "$opens" ] || fail "the reads were not passthrough"
if echo x 2>/dev/null >>"$M/early"; then fail "a write after loss was accepted"; fi
after=$(stat -c %X "$R/early" "$R/late" | tr '\n' ' ')
[ "$before" = "$after" ] || fail "passthrough reads after loss moved atimes in ROOT: $before -> $after"
cat "$R/late" >/dev/null
[ "$(stat -c %X "$R/late")" != "$(stat -c %X "$R/early")" ] || fail "setup: the backing fs does not update atime"
ok "after loss: passthrough reads work, writes are refused, no atime moved"

# --- (f) ------------------------------------------------------------------
O=$T/ov
mkdir -p "$O/lower" "$O/upper" "$O/work" "$O/merged"
echo layered >"$O/lower/f"
MOUNTS+=("$O/merged")
if mount -t overlay overlay -o "lowerdir=$O/lower,upperdir=$O/upper,workdir=$O/work" "$O/merged" 2>/dev/null; then
	LEASEFS_PASSTHROUGH=1 mount_ws "$O/merged" "$T/movl"
	[ "$(cat "$T/movl/f")" = layered ] || fail "read on an overlayfs root"
	wait_until 5 has_line '^False$' fuse_get "$T/movl" passthrough ||
		fail "overlayfs root: passthrough still said on"
	why=$(fuse_get "$T/movl" passthrough_error)
	[ -n "$why" ] || fail "overlayfs root: no reason given"
	ok "overlayfs root: read through the daemon; status: passthrough off ($why)"
else
	echo "SKIP: (f) cannot mount overlayfs here"
fi

# --- (g) ------------------------------------------------------------------
echo AAAAAAAA >"$M0/shared"
python3 - "$M0/shared" "$LEASEFS" "$(status_of "$M0" lease)" <<'PY' || fail "(g) mapping after loss"
import errno, mmap, os, subprocess, sys, time
p, leasefs, lease = sys.argv[1:]
r = os.open(p, os.O_RDONLY | os.O_CLOEXEC)
w = os.open(p, os.O_RDWR | os.O_CLOEXEC)
m = mmap.mmap(w, 8)
subprocess.run([leasefs, "lease", "revoke", lease], check=True, stdout=subprocess.DEVNULL)
deadline = time.monotonic() + 5
while True:                      # the daemon hears of the loss
    try:
        os.close(os.open(os.path.dirname(p) + "/probe-g", os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644))
    except OSError as e:
        if e.errno != errno.EROFS:
            raise
        break
    assert time.monotonic() < deadline, "no EROFS after revoke"
    time.sleep(0.02)
m[0:4] = b"ZZZZ"
try:
    m.flush()
except OSError:
    pass                         # EROFS: the writeback was refused
PY
[ "$(cat "$R0/shared")" = AAAAAAAA ] || fail "(g) a mapping's store reached ROOT after loss: $(cat "$R0/shared")"
ok "(g) default mount: a shared writable mapping beside a reader writes nothing to ROOT after loss"
