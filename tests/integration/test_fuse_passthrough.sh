#!/usr/bin/env bash
# FUSE passthrough of read-only opens of large files, on a real mount:
#  (a) it is on by default (kernel protocol >= 7.40, a root daemon), and
#      LEASEFS_PASSTHROUGH=0 or -o nopassthrough turns it off, status saying so;
#  (b) reads of a read-only open of a file of 1 MiB or more never reach
#      the daemon (its read counter stays), and return the file's bytes;
#      with it off they do reach it; a smaller file is read through the
#      daemon even with it on;
#  (c) mixed opens stay correct: a write-only open that joins a reader's
#      passthrough period, a read-write open refused with ETXTBSY while one
#      lasts (and the file's periods cached from then on), a reader that
#      opens while a writer is open, mmaps of both, an executable run from
#      the mount;
#  (d) many processes opening the same files for reading and writing at
#      once never get an error but ETXTBSY for a read-write open (the
#      kernel refuses a wrong io mode with EIO; the daemon must never ask
#      for one);
#  (e) after loss: a file opened before and one opened after keep reading,
#      writes are refused, and no atime moves in ROOT;
#  (f) a ROOT the kernel will not pass through (on overlayfs) is served
#      through the daemon, status saying why;
#  (g) the hazard it is guarded against: on a default mount, a read-write
#      open beside a passthrough reader, mapped shared and written after
#      loss, writes nothing to ROOT (the kernel would map the backing file
#      for it, past the gate: fs/fuse/iomode.c); the same with passthrough
#      off (the mapping's writeback gets EROFS).
# bound: 240
. "$(dirname "$0")/lib.sh"

R=$T/root M=$T/mnt R0=$T/root0 M0=$T/mnt0 R1=$T/root1 M1=$T/mnt1
mount_ws "$R" "$M"
LEASEFS_PASSTHROUGH=0 mount_ws "$R0" "$M0"
# The mount option wins over the environment, both ways.
LEASEFS_PASSTHROUGH=1 mount_ws "$R1" "$M1" -o noatime,nopassthrough

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
[ "$(fuse_get "$M0" passthrough)" = False ] || fail "passthrough on with LEASEFS_PASSTHROUGH=0"
[ "$(fuse_get "$M1" passthrough)" = False ] || fail "passthrough on with -o nopassthrough"
"$LEASEFS" umount "$M1"
LEASEFS_PASSTHROUGH=0 mount_ws "$R1" "$M1" -o nopassthrough,passthrough
[ "$(fuse_get "$M1" passthrough)" = True ] || fail "passthrough off with -o passthrough last"
"$LEASEFS" umount "$M1"
ok "passthrough on by default, off with LEASEFS_PASSTHROUGH=0 or -o nopassthrough (which wins over it; the last of the two options wins)"

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
head -c 65536 /dev/urandom >"$R/small"
before=$(reads_of "$M") opens=$(fuse_get "$M" backing_opens)
cmp -s "$R/small" "$M/small" || fail "a small file read returned other bytes"
[ "$(reads_of "$M")" -gt "$before" ] || fail "a 64 KiB file was passed through"
[ "$(fuse_get "$M" backing_opens)" = "$opens" ] || fail "a 64 KiB file got a backing file"
ok "a 64 KiB file is read through the daemon"

# --- (c) ------------------------------------------------------------------
python3 - "$M" "$R" <<'PY' || fail "mixed opens"
import errno, mmap, os, sys
p, rp = sys.argv[1] + "/mixed", sys.argv[2] + "/mixed"
MiB = 1 << 20
with open(p, "wb") as f:
    f.write(b"A" * MiB)
# A reader starts a passthrough period; a write-only open joins it.
r = os.open(p, os.O_RDONLY)
assert os.pread(r, 4, 0) == b"AAAA"
w = os.open(p, os.O_WRONLY)
os.pwrite(w, b"BBBB", 0)
assert os.pread(r, 4, 0) == b"BBBB", "reader missed the writer's write"
m = mmap.mmap(r, MiB, prot=mmap.PROT_READ)
os.pwrite(w, b"CCCC", 4)
assert m[:8] == b"BBBBCCCC", m[:8]
# A read-write open could map the backing file: refused while it lasts.
try:
    os.close(os.open(p, os.O_RDWR))
    raise AssertionError("a read-write open joined a passthrough period")
except OSError as e:
    assert e.errno == errno.ETXTBSY, e
# ... refused before the backing open: an O_TRUNC one truncates nothing.
try:
    os.close(os.open(p, os.O_RDWR | os.O_TRUNC))
    raise AssertionError("a read-write O_TRUNC open joined a passthrough period")
except OSError as e:
    assert e.errno == errno.ETXTBSY, e
assert os.stat(rp).st_size == MiB, "a refused O_TRUNC open truncated ROOT's file"
m.close(); os.close(r); os.close(w)
PY
# The kernel sends the releases after close() returns: the daemon's
# period ends when it has them.
wait_until 5 has_line '^0$' fuse_get "$M" backing_files || fail "backing file kept after close"
python3 - "$M" "$R" <<'PY' || fail "mixed opens, after the refusal"
import mmap, os, sys
p, rp = sys.argv[1] + "/mixed", sys.argv[2] + "/mixed"
MiB = 1 << 20
# From then on the file's periods are cached: a reader, then a
# read-write open beside it, whose shared map writes.
r = os.open(p, os.O_RDONLY)
w = os.open(p, os.O_RDWR)
os.pwrite(w, b"DDDD", 0)
assert os.pread(r, 4, 0) == b"DDDD"
m = mmap.mmap(w, MiB)
m[8:12] = b"EEEE"; m.flush(); m.close()
os.close(r); os.close(w)
r = os.open(p, os.O_RDONLY)
assert os.pread(r, 12, 0) == b"DDDDCCCCEEEE", os.pread(r, 12, 0)
os.close(r)
with open(rp, "rb") as f:
    assert f.read(12) == b"DDDDCCCCEEEE", "ROOT holds other bytes"
PY
# An executable of more than 1 MiB: its exec's open is passed through.
{ cat /bin/true; head -c 1M /dev/zero; } >"$M/mytrue"
chmod +x "$M/mytrue"
opens=$(fuse_get "$M" backing_opens)
"$M/mytrue" || fail "an executable from the mount did not run"
[ "$(fuse_get "$M" backing_opens)" -gt "$opens" ] || fail "the executable was not passed through"
# A read-write open right after the last reader closed is not refused,
# though the reader's release may reach the daemon after it (on io_uring,
# from another CPU's queue): it waits for the period's releases.  The
# reader closes on one CPU, a second process opens on another at once.
python3 - "$M" <<'PY' || fail "a read-write open after the reader closed"
import errno, os, sys
cpus = sorted(os.sched_getaffinity(0))
names = ["%s/after%d" % (sys.argv[1], i) for i in range(200)]
for p in names:
    with open(p, "wb") as f:
        f.truncate(1 << 20)
go, done = os.pipe(), os.pipe()
pid = os.fork()
if pid == 0:
    os.sched_setaffinity(0, {cpus[-1]})
    busy = 0
    for p in names:
        os.read(go[0], 1)
        try:
            os.close(os.open(p, os.O_RDWR))
        except OSError as e:
            if e.errno != errno.ETXTBSY:
                raise
            busy += 1
        os.write(done[1], b"x")
    os._exit(1 if busy else 0)
os.sched_setaffinity(0, {cpus[0]})
for p in names:
    r = os.open(p, os.O_RDONLY)
    os.read(r, 1)
    os.close(r)
    os.write(go[1], b"x")
    os.read(done[0], 1)
sys.exit(1 if os.waitpid(pid, 0)[1] else 0)
PY
ok "reader then writer (read-write: ETXTBSY, then cached), mmaps of both, exec: consistent, and ROOT holds the bytes; a read-write open right after the reader's close succeeds"

# --- (d) ------------------------------------------------------------------
python3 - "$M" <<'PY' || fail "concurrent opens"
import errno, os, random, sys
d = sys.argv[1]
names = [d + "/c%d" % i for i in range(3)]
for n in names:
    with open(n, "wb") as f:
        f.write(b"x" * (1 << 20))
kids = []
for k in range(4):
    pid = os.fork()
    if pid == 0:
        rnd = random.Random(k)
        busy = 0
        try:
            for i in range(1500):
                n = rnd.choice(names)
                x = rnd.random()
                if x < 0.7:
                    fd = os.open(n, os.O_RDONLY)
                    assert len(os.pread(fd, 4096, 0)) == 4096
                else:
                    rw = x >= 0.9
                    try:
                        fd = os.open(n, os.O_RDWR if rw else os.O_WRONLY)
                    except OSError as e:
                        if not (rw and e.errno == errno.ETXTBSY):
                            raise
                        busy += 1
                        continue
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
ok "4 processes x 1500 opens (70% read-only, 20% write-only, 10% read-write) of 3 files: no error but ETXTBSY for read-write"

# --- (h) ------------------------------------------------------------------
# Another user's reader of a file it may read (0644) must not hold the
# owner's read-write opens off: only the owner or root starts a passthrough
# period, so that reader gets a cached one.
chmod 755 "$T"; mkdir -m 1777 "$T/rdy"
head -c $((2 << 20)) /dev/zero > "$M/owned"
chown 65533:65533 "$M/owned"; chmod 644 "$M/owned"
opens=$(fuse_get "$M" backing_opens)
setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/python3 -c '
import os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY); os.read(fd, 4096)
open(sys.argv[2], "w").close()
time.sleep(120)' "$M/owned" "$T/rdy/reader" &
reader=$!
at_exit "kill $reader 2>/dev/null"
wait_until 20 test -e "$T/rdy/reader" || fail "(h) the other user's reader did not start"
rc=0; out=$(setpriv --reuid=65533 --regid=65533 --clear-groups /usr/bin/python3 -c '
import os, sys
os.close(os.open(sys.argv[1], os.O_RDWR))' "$M/owned" 2>&1) || rc=$?
kill "$reader" 2>/dev/null
[ $rc -eq 0 ] || fail "(h) the owner's read-write open beside another user's reader: $out"
[ "$(fuse_get "$M" backing_opens)" = "$opens" ] || fail "(h) another user's read-only open was passed through"
ok "(h) another user's reader (uid 65534) of a 2 MiB file gets no passthrough period; the owner's read-write open beside it succeeds"

# --- (e) ------------------------------------------------------------------
for f in early late; do
	{ echo $f; head -c 1M /dev/zero; } >"$M/$f"
done
exec {held}<"$M/early"
opens=$(fuse_get "$M" backing_opens)
revoke "$M"
wait_until 5 bash -c "! echo x 2>/dev/null >> '$M/probe'" || fail "no EROFS after revoke"
for f in early late; do touch -a -d 2001-01-01 "$R/$f"; done
before=$(stat -c %X "$R/early" "$R/late" | tr '\n' ' ')
[ "$(head -n 1 <&$held)" = early ] || fail "the file opened before the loss did not read"
exec {held}<&-
[ "$(head -n 1 "$M/late")" = late ] || fail "a file opened after the loss did not read"
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
	mount_ws "$O/merged" "$T/movl" --allow-stacked-root
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
# map_after_loss MNT ROOT: a reader holds MNT/shared open, a read-write open
# beside it (if the mount allows one) is mapped shared, the lease is
# revoked, the mapping is written; ROOT must keep its bytes.
map_after_loss() {
	local m=$1 r=$2
	head -c 1M /dev/zero | tr '\0' A >"$m/shared"
	python3 - "$m/shared" "$LEASEFS" "$(status_of "$m" lease)" <<'PY'
import errno, mmap, os, subprocess, sys, time
p, leasefs, lease = sys.argv[1:]
r = os.open(p, os.O_RDONLY | os.O_CLOEXEC)
try:
    w = os.open(p, os.O_RDWR | os.O_CLOEXEC)
    m = mmap.mmap(w, 8)
    print("mapped")
except OSError as e:
    if e.errno != errno.ETXTBSY:
        raise
    m = None
    print("refused")
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
if m is not None:
    m[0:4] = b"ZZZZ"
    try:
        m.flush()
    except OSError:
        pass                     # EROFS: the writeback was refused
    m.close()
PY
	[ "$(head -c 8 "$r/shared")" = AAAAAAAA ] ||
		fail "(g) a mapping's store reached ROOT after loss: $(head -c 8 "$r/shared")"
}
R2=$T/root2 M2=$T/mnt2
mount_ws "$R2" "$M2"
[ "$(fuse_get "$M2" passthrough)" = True ] || fail "(g) passthrough not on by default"
how=$(map_after_loss "$M2" "$R2") || fail "(g) mapping after loss (passthrough on)"
[ "$how" = refused ] || fail "(g) a read-write open joined a passthrough period ($how)"
ok "(g) default mount: a read-write open beside a passthrough reader is refused (ETXTBSY); ROOT kept its bytes after loss"
how=$(map_after_loss "$M0" "$R0") || fail "(g) mapping after loss (passthrough off)"
[ "$how" = mapped ] || fail "(g) passthrough off: the read-write open was $how"
ok "(g) passthrough off: the shared writable mapping beside a reader writes nothing to ROOT after loss"
