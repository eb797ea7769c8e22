#!/usr/bin/env bash
# The handle-only inode path: with an fd budget of 16 (LEASEFS_INODE_FDS),
# almost every inode the kernel holds is a file handle reopened per use
# (open_by_handle_at), not an O_PATH fd.  Everything still works through
# it, the daemon's fds stay bounded, and a handle whose object was
# deleted and whose inode number was reused never serves the new object.
. "$(dirname "$0")/lib.sh"

R=$T/root M=$T/mnt
export LEASEFS_INODE_FDS=16
mount_ws "$R" "$M"
unset LEASEFS_INODE_FDS
for d in $(seq 10); do
	mkdir "$M/d$d"
	for f in $(seq 20); do echo "$d-$f" > "$M/d$d/f$f"; done
done
# Every name is looked up (and kept) by the kernel: 210 inodes.
[ "$(find "$M" -type f | wc -l)" -eq 200 ] || fail "find does not see 200 files"
# 16 inode fds beside the daemon's own (42-44: the store, the control
# socket, the FUSE device and its queues, passthrough's clone of ROOT's
# mount), against 210 if every inode kept one.
fds=$(ls "/proc/$DAEMON_PID/fd" | wc -l)
[ "$fds" -lt 64 ] || fail "daemon holds $fds fds for 210 inodes: no handles in use"
ok "210 inodes held with $fds daemon fds"

for d in $(seq 10); do
	for f in $(seq 20); do
		[ "$(cat "$M/d$d/f$f")" = "$d-$f" ] || fail "d$d/f$f reads $(cat "$M/d$d/f$f")"
	done
done
echo more >> "$M/d3/f7"
chmod 600 "$M/d4/f2"
mv "$M/d5/f1" "$M/d6/moved"
rm "$M/d7/f9"
ln "$M/d8/f8" "$M/d8/hard"
python3 -c 'import os,sys; os.setxattr(sys.argv[1], "user.k", b"v")' "$M/d9/f3"
[ "$(cat "$R/d3/f7")" = "$(printf '3-7\nmore')" ] || fail "append through a handle"
[ "$(stat -c %a "$R/d4/f2")" = 600 ] || fail "chmod through a handle"
[ "$(cat "$R/d6/moved")" = 5-1 ] && [ ! -e "$R/d5/f1" ] || fail "rename through a handle"
[ ! -e "$R/d7/f9" ] || fail "unlink through a handle"
[ "$(stat -c %h "$R/d8/f8")" = 2 ] || fail "link through a handle"
python3 -c 'import os,sys; assert os.getxattr(sys.argv[1], "user.k") == b"v"' "$R/d9/f3" ||
	fail "setxattr through a handle"
ok "read, append, chmod, rename, unlink, link, xattr through handles"

# A deleted object's handle goes stale; its inode number may be reused by
# a new file made behind the daemon's back: the old name must not serve it.
stat "$M/d10/f20" >/dev/null
ino=$(stat -c %i "$R/d10/f20")
rm "$R/d10/f20"
reused=
for i in $(seq 200); do
	echo "new-$i" > "$R/d10/n$i"
	if [ "$(stat -c %i "$R/d10/n$i")" = "$ino" ]; then reused=n$i; break; fi
done
if out=$(cat "$M/d10/f20" 2>&1); then fail "deleted file still reads: $out"; fi
if [ -n "$reused" ]; then
	[ "$(cat "$M/d10/$reused")" = "new-${reused#n}" ] || fail "reused inode served stale"
	ok "inode $ino reused by $reused: the new name serves the new file, the old one is gone"
else
	ok "deleted file gone (inode number not reused in 200 tries)"
fi
"$LEASEFS" umount "$M"
echo PASS
