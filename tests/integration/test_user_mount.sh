#!/usr/bin/env bash
# A user who is not root mounts a root of its own through fusermount3, with
# its own lease store: the same gate (EROFS at once on loss, every write
# path, reads keep working), no two writers against its own mounts, other
# users' or root's, a rootless container of the user fenced the same way,
# and clear refusals (a root it cannot write, no /dev/fuse, no
# fusermount3, allow_other that root did not allow).  Real users made
# here, removed at exit.
# serial: it opens /dev/fuse to other users (chmod 666) and restores it
. "$(dirname "$0")/lib.sh"

UA=lfs-usr-a UB=lfs-usr-b
chmod 755 "$T"
for u in "$UA" "$UB"; do
	userdel "$u" 2>/dev/null || true
	mkdir -p "$T/home-$u"
	useradd --system --home-dir "$T/home-$u" --shell /bin/bash "$u"
	at_exit "userdel $u"
	chown "$u:" "$T/home-$u"
	chmod 700 "$T/home-$u"
done
HA=$T/home-$UA HB=$T/home-$UB
# A user's own environment: its home, its default store (no LEASEFS_LEASES).
as() {
	local u=$1; shift
	setpriv --reuid="$u" --regid="$(id -g "$u")" --init-groups \
		env -u LEASEFS_LEASES -u XDG_STATE_HOME HOME="$T/home-$u" PATH=/usr/bin:/bin "$@"
}
# Where udev makes it 0666; this host may keep it root's.
fuse_mode=$(stat -c %a /dev/fuse)
at_exit "chmod $fuse_mode /dev/fuse"

# --- refusals before anything is taken ------------------------------------
mkdir -p "$HA/ws" "$HA/mnt" "$HA/mnt2" "$HA/ctr" "$HB/mnt"
chown -R "$UA:" "$HA"; chown -R "$UB:" "$HB"
chmod 600 /dev/fuse
rc=0; out=$(as "$UA" "$LEASEFS" mount "$HA/ws" "$HA/mnt" 2>&1) || rc=$?
[ $rc -eq 69 ] && grep -q "/dev/fuse" <<<"$out" || fail "no /dev/fuse for users: exit $rc ($out)"
chmod 666 /dev/fuse
rc=0; out=$(unshare -m bash -c "mount --bind /dev/null /usr/bin/fusermount3 &&
	$(declare -f as); T=$T; as $UA $LEASEFS mount $HA/ws $HA/mnt" 2>&1) || rc=$?
[ $rc -eq 69 ] && grep -q "fusermount3" <<<"$out" || fail "no fusermount3: exit $rc ($out)"
if ! grep -qx user_allow_other /etc/fuse.conf 2>/dev/null; then
	rc=0; out=$(as "$UA" "$LEASEFS" mount -o allow_other "$HA/ws" "$HA/mnt" 2>&1) || rc=$?
	[ $rc -eq 77 ] && grep -q user_allow_other <<<"$out" || fail "allow_other: exit $rc ($out)"
fi
rc=0; out=$(as "$UB" "$LEASEFS" mount "$HA/ws" "$HB/mnt" 2>&1) || rc=$?
[ $rc -eq 77 ] || fail "another user's root: exit $rc ($out)"
[ -z "$(ls -A "$HB/.local/state/leasefs/leases" 2>/dev/null)" ] || fail "a lease was taken for a refused root"
findmnt -rn "$HA/mnt" >/dev/null && fail "something mounted"
ok "refused before any lease: no /dev/fuse, no fusermount3 (exit 69), allow_other, another user's root (exit 77)"

# --- the mount -----------------------------------------------------------
MOUNTS+=("$HA/mnt")
as "$UA" "$LEASEFS" mount "$HA/ws" "$HA/mnt" || fail "the user's mount"
PIDS+=("$(status_of "$HA/mnt" pid)")
opts=$(findmnt -no OPTIONS "$HA/mnt")
for o in nosuid nodev "user_id=$(id -u "$UA")" default_permissions; do
	grep -q "\(^\|,\)$o\(,\|$\)" <<<"$opts" || fail "mount options lack $o: $opts"
done
grep -q allow_other <<<"$opts" && fail "a user's mount let others in: $opts"
[ "$(ps -o user= -p "$(status_of "$HA/mnt" pid)")" = "$UA" ] || fail "the daemon is not the user's"
st=$(as "$UA" "$LEASEFS" status "$HA/mnt" --json) || fail "the user's status"
[ "$(json_get backend <<<"$st")" = "file:$HA/.local/state/leasefs/leases" ] || fail "store: $st"
lease=$(json_get lease <<<"$st")
as "$UA" bash -c "echo keep > '$HA/mnt/keep' && echo src > '$HA/mnt/src' && : > '$HA/mnt/dst' && mkdir '$HA/mnt/d'" ||
	fail "the user cannot write its mount"
[ "$(stat -c %U "$HA/ws/keep")" = "$UA" ] || fail "created as $(stat -c %U "$HA/ws/keep")"
rc=0; as "$UB" "$LEASEFS" status "$HA/mnt" >/dev/null 2>&1 || rc=$?
[ $rc -eq 77 ] || fail "another user's status: exit $rc"
"$LEASEFS" status "$HA/mnt" >/dev/null || fail "root's status of a user's mount"
ok "mounted through fusermount3: nosuid,nodev, the user's daemon and store, no identity switch"

# --- the stores: the user's own, listed by root, closed to other users ----
store=file:$HA/.local/state/leasefs/leases
out=$(env -u LEASEFS_LEASES "$LEASEFS" lease list) || fail "root's lease list"
grep -q "^held .*$lease .*(user $UA)\$" <<<"$out" || fail "root's lease list lacks the user's lease: $out"
rc=0; out=$(as "$UB" "$LEASEFS" lease list --leases="$store" 2>&1) || rc=$?
[ $rc -ne 0 ] && ! grep -q "$lease" <<<"$out" || fail "another user read the user's store: $out"
rc=0; out=$(as "$UB" "$LEASEFS" lease revoke "$lease" --leases="$store" 2>&1) || rc=$?
[ $rc -ne 0 ] && [ "$(status_of "$HA/mnt" state)" = held ] || fail "another user revoked the user's lease: $out"
ok "root's lease list shows the user's leases; another user can neither read nor revoke them"

# --- no two writers ------------------------------------------------------
rc=0; out=$(as "$UA" "$LEASEFS" mount "$HA/ws" "$HA/mnt2" 2>&1) || rc=$?
[ $rc -eq 75 ] || fail "the user's second mount: exit $rc ($out)"
mkdir "$T/rootmnt"
for r in "$HA/ws" "$HA"; do
	rc=0; out=$("$LEASEFS" mount "$r" "$T/rootmnt" 2>&1) || rc=$?
	[ $rc -eq 75 ] || fail "root's mount of $r over a user's: exit $rc ($out)"
done
mkdir -p "$T/shared"; chown "$UA:" "$T/shared"
mount_ws "$T/shared" "$T/rootmnt2"
rc=0; out=$(as "$UA" "$LEASEFS" mount "$T/shared" "$HA/mnt2" 2>&1) || rc=$?
[ $rc -eq 75 ] || fail "the user's mount over root's: exit $rc ($out)"
"$LEASEFS" umount "$T/rootmnt2"
ok "busy (75) both ways between a user's and root's mounts, and for the user's second mount"

# --- a rootless container of the user ------------------------------------
ctr=
if as "$UA" unshare --user --map-root-user true 2>/dev/null; then
	cat >"$T/ctr.sh" <<'SH'
# In the container: bind the mount, write, ask its daemon through the
# bind (not found from there: said so, not called stale); on "go", write
# again and read.
mount --bind "$1" "$2" || exit 1
echo x > "$2/from-ctr" && echo written
out=$("$3" status "$2" 2>&1)
case $out in *"does not answer here"*) echo bind-said ;; *) echo "bind: ${out%%$'\n'*}" ;; esac
read -r go
if out=$( { echo y >> "$2/from-ctr"; } 2>&1 ); then echo wrote-after-loss
else case $out in *Read-only*) echo erofs ;; *) echo "other: $out" ;; esac; fi
cat "$2/keep"
SH
	coproc C { as "$UA" unshare --user --map-root-user --mount bash "$T/ctr.sh" "$HA/mnt" "$HA/ctr" "$LEASEFS" 2>&1; }
	exec {cin}>&"${C[1]}" {cout}<&"${C[0]}"
	read -r -t 10 line <&$cout || fail "the container said nothing"
	[ "$line" = written ] || fail "the container cannot write the bind mount: $line"
	read -r -t 10 line <&$cout || fail "the container said nothing of its status"
	[ "$line" = bind-said ] || fail "status through the container's bind: $line"
	ctr=1
else
	echo "SKIP: rootless container (unshare --user refused: user namespaces off)"
fi

# --- loss: the gate alone (a user cannot remount read-only) ---------------
# Opened and mapped for writing before the loss, written after it.
mkfifo "$T/pin" "$T/pout"
as "$UA" python3 -c '
import errno, mmap, os, sys
fd = os.open(sys.argv[1] + "/keep", os.O_RDWR)
mm = mmap.mmap(fd, 4)
print("ready", flush=True)
sys.stdin.readline()
out = []
for what, f in (("write on an fd opened before", lambda: os.pwrite(fd, b"W", 0)),
                ("msync of a map made before", lambda: (mm.__setitem__(slice(0, 1), b"M"), mm.flush()))):
    try:
        f(); out.append(what + ": succeeded")
    except OSError as e:
        if e.errno not in (errno.EROFS, errno.EIO):
            out.append("%s: %s" % (what, e))
print("; ".join(out) or "refused", flush=True)
' "$HA/mnt" <"$T/pin" >"$T/pout" 2>&1 &
exec {pin}>"$T/pin" {pout}<"$T/pout"
read -r -t 10 line <&$pout && [ "$line" = ready ] || fail "the mapper: $line"
as "$UA" "$LEASEFS" lease revoke "$lease" >/dev/null || fail "the user's revoke of its own lease"
[ "$(status_of "$HA/mnt" state)" = lost ] || fail "status does not say lost after the revoke returned"
echo go >&$pin
read -r -t 10 line <&$pout || fail "the mapper said nothing after loss"
[ "$line" = refused ] || fail "after loss: $line"
as "$UA" python3 - "$HA/mnt" <<'PY' || fail "a write path was not refused after loss"
import errno, mmap, os, sys
m = sys.argv[1]
bad = []
def refused(what, f, codes=(errno.EROFS,)):
    try:
        f()
    except OSError as e:
        if e.errno not in codes:
            bad.append("%s: %s" % (what, e))
        return
    bad.append(what + ": succeeded")
ro = os.open(m + "/src", os.O_RDONLY)
refused("write", lambda: os.write(os.open(m + "/keep", os.O_WRONLY | os.O_APPEND), b"x"))
refused("O_RDWR open", lambda: os.open(m + "/keep", os.O_RDWR))
refused("O_CREAT", lambda: os.open(m + "/new", os.O_WRONLY | os.O_CREAT, 0o644))
refused("truncate", lambda: os.truncate(m + "/keep", 0))
refused("fallocate", lambda: os.posix_fallocate(os.open(m + "/keep", os.O_RDONLY), 0, 8192),
        (errno.EROFS, errno.EBADF))
refused("copy_file_range", lambda: os.copy_file_range(ro, os.open(m + "/dst", os.O_WRONLY), 3))
refused("rename", lambda: os.rename(m + "/keep", m + "/keep2"))
refused("unlink", lambda: os.unlink(m + "/keep"))
refused("rmdir", lambda: os.rmdir(m + "/d"))
refused("mkdir", lambda: os.mkdir(m + "/d2"))
refused("symlink", lambda: os.symlink("keep", m + "/sl"))
refused("link", lambda: os.link(m + "/keep", m + "/hl"))
refused("chmod", lambda: os.chmod(m + "/keep", 0o600))
refused("setxattr", lambda: os.setxattr(m + "/keep", "user.k", b"v"))
refused("utimens", lambda: os.utime(m + "/keep", (1, 1)))
# A shared writable map made now: its pages can never reach ROOT.
def mmap_msync():
    fd = os.open(m + "/keep", os.O_RDWR)
    mm = mmap.mmap(fd, 4)
    mm[0:1] = b"X"; mm.flush()
refused("mmap+msync", mmap_msync)
if bad:
    sys.exit("; ".join(bad))
assert open(m + "/keep").read() == "keep\n"
os.listdir(m); os.stat(m + "/keep")  # reads keep working
PY
[ "$(cat "$HA/ws/keep")" = keep ] || fail "the backing file changed: $(cat "$HA/ws/keep")"
[ ! -e "$HA/ws/new" ] && [ ! -e "$HA/ws/keep2" ] && [ -d "$HA/ws/d" ] || fail "ROOT changed after loss"
ok "after loss every write path is refused with EROFS as the user; reads work; ROOT unchanged"

if [ -n "$ctr" ]; then
	echo go >&$cin
	read -r -t 10 line <&$cout || fail "the container said nothing after loss"
	[ "$line" = erofs ] || fail "the container after loss: $line"
	read -r -t 10 line <&$cout || fail "the container could not read after loss"
	[ "$line" = keep ] || fail "the container's read after loss: $line"
	ok "a rootless container (unshare --user --map-root-user) of the user: writes, status through its bind says the daemon does not answer there (not stale), EROFS on loss, reads work"
fi

# --- the user unmounts ---------------------------------------------------
# From its own user namespace where it has one (its root is the user):
# the mount's uid reads as 0 there, its daemon's socket is the user's.
if [ -n "$ctr" ]; then
	out=$(as "$UA" unshare --user --map-root-user "$LEASEFS" status "$HA/mnt" 2>&1) ||
		fail "the user's status from its user namespace: $out"
	as "$UA" unshare --user --map-root-user "$LEASEFS" umount "$HA/mnt" ||
		fail "the user's umount from its user namespace"
else
	as "$UA" "$LEASEFS" umount "$HA/mnt" || fail "the user's umount"
fi
findmnt -rn "$HA/mnt" >/dev/null && fail "still mounted"
as "$UA" "$LEASEFS" mount "$HA/ws" "$HA/mnt" || fail "the user's mount after its umount"
[ "$(status_of "$HA/mnt" epoch)" -gt 1 ] || fail "the epoch did not grow"
"$LEASEFS" lease revoke "$(status_of "$HA/mnt" lease)" --leases="$store" >/dev/null || fail "root's revoke of a user's lease"
[ "$(status_of "$HA/mnt" state)" = lost ] || fail "root's revoke did not fence the user's mount"
[ -z "$(find "$HA/.local/state" ! -user "$UA")" ] || fail "root left files of its own in the user's store"
as "$UA" "$LEASEFS" umount "$HA/mnt" || fail "umount after root's revoke"
as "$UA" "$LEASEFS" mount "$HA/ws" "$HA/mnt" || fail "the user's mount after root's revoke"
pid=$(status_of "$HA/mnt" pid); PIDS+=("$pid")
kill -9 "$pid"
wait_pid_gone "$pid" 10 || fail "the daemon outlived SIGKILL"
as "$UA" "$LEASEFS" umount "$HA/mnt" || fail "the user's umount of its crashed daemon's mount"
findmnt -rn "$HA/mnt" >/dev/null && fail "the stale mount stayed"
ok "the user unmounts${ctr:+ (status and umount from its user namespace)}, mounts again at a higher epoch, root revokes it as the store's owner, the user detaches its crashed daemon's mount"
echo PASS
