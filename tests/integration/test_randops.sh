#!/usr/bin/env bash
# Differential random-operation stress (randops.py): seeded sequences of
# opens, writes, mmaps, truncates, renames, links, symlinks, chmods with
# set-ID bits and xattrs, each run side by side on a native directory and
# on the mount (ROOT on the same file system); every outcome and the trees
# must agree.  As root and as a user who is not.  RANDOPS_SEEDS and
# RANDOPS_OPS make it a soak (defaults: 12 seeds of 1500 operations).
. "$(dirname "$0")/lib.sh"

R=$T/root M=$T/mnt N=$T/native
mkdir -p "$N"
chmod 711 "$T"   # the user runs below reach their directories through it
mount_ws "$R" "$M"

# The case it found first: the kernel writes back a shared mmap's pages
# through any writable open, here one opened O_APPEND; the pages must land
# at their offset, not at the end of the file.
python3 - "$M/append" <<'PY' || fail "mmap write-back through an O_APPEND open went elsewhere"
import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
os.ftruncate(fd, 10000)
with mmap.mmap(fd, 10000, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE) as m:
    m[0:7] = b"mmapped"
    m.flush()
os.close(fd)
with open(sys.argv[1], "rb") as f:
    data = f.read()
sys.exit(0 if len(data) == 10000 and data[:7] == b"mmapped" else 1)
PY
ok "mmap write-back through an O_APPEND open lands at its offset"

U=leasefs-rnd$$
userdel "$U" >/dev/null 2>&1 || true
useradd --system --no-create-home --shell /usr/sbin/nologin "$U"
at_exit "userdel $U"
ID="$(id -u "$U"):$(id -g "$U")"

seeds=${RANDOPS_SEEDS:-12} ops=${RANDOPS_OPS:-1500}
for s in $(seq "$seeds"); do
	as=()
	[ $((s % 3)) -ne 0 ] || as=(--as "$ID")
	mkdir "$N/$s" "$M/$s"
	python3 "$HERE/randops.py" "$N/$s" "$M/$s" "$s" "$ops" "${as[@]}" ||
		fail "seed $s ${as[*]}: randops failed (above)"
done
ok "$seeds seeds of $ops operations (every third as uid ${ID%%:*}) agree with the native directory"
