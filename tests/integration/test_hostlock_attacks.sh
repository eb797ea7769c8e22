#!/usr/bin/env bash
# Issue 33: nothing an unprivileged user creates, locks, binds or mounts
# decides whether root's or another user's mount succeeds, and no user gets
# a second exclusive session by changing its user or mount namespace.
# Each section is an attack from the issue, run for real by users made here
# (useradd, removed at exit); ATK_ONLY=NAME runs one section.
# bound: 120
. "$(dirname "$0")/lib.sh"

UA=lfs-atk-a UB=lfs-atk-b
chmod 755 "$T"
for u in "$UA" "$UB"; do
	userdel "$u" >/dev/null 2>&1 || true
	mkdir -p "$T/home-$u"
	useradd --system --home-dir "$T/home-$u" --shell /bin/bash "$u"
	at_exit "userdel $u"
	chown "$u:" "$T/home-$u"
	chmod 700 "$T/home-$u"
done
HA=$T/home-$UA
as() {
	local u=$1; shift
	setpriv --reuid="$u" --regid="$(id -g "$u")" --init-groups \
		env -u LEASEFS_LEASES HOME="$T/home-$u" PATH=/usr/bin:/bin "$@"
}
fuse_mode=$(stat -c %a /dev/fuse)
at_exit "chmod $fuse_mode /dev/fuse"
chmod 666 /dev/fuse

# The run directory as a host has it after boot or root's first mount.
mount_ws "$T/first" "$T/firstm"
"$LEASEFS" umount "$T/firstm"

# The attacker's tool: the run directory's names as 841737d made them and
# as they are now, for the identities of PATH and every directory above it
# (from the attacker's own mountinfo), squatted every way a user can: a
# shared lock held on the file, a FIFO or a file of its own at the name.
# Prints what it managed, then "ready", then holds until killed.
cat >"$T/squat.py" <<'PY'
import fcntl, hashlib, os, sys
run = "/run/leasefs"
path = sys.argv[1]
mounts = []
for line in open("/proc/self/mountinfo"):
    f = line.split()
    mounts.append((f[2], f[3], f[4]))
def ident(p):
    best = None
    for dev, root, point in mounts:
        if p == point or p.startswith(point.rstrip("/") + "/"):
            if best is None or len(point) >= len(best[2]):
                best = (dev, root, point)
    dev, root, point = best
    rest = p[len(point):] if point != "/" else p
    return "%s:%s%s" % (dev, "" if root == "/" and rest else root, rest or "")
ids = set()
p = path
while True:
    i = ident(p)
    ids.add(i)
    d, fsp = i.split(":", 2)[:2], i.split(":", 2)[2]
    while fsp != "/":
        fsp = os.path.dirname(fsp)
        ids.add("%s:%s:%s" % (d[0], d[1], fsp))
    if p == "/":
        break
    p = os.path.dirname(p)
got, held = [], []
for n, i in enumerate(sorted(ids)):
    h = hashlib.sha256(i.encode()).hexdigest()
    for name in [h + ".lock"] + ["%s.%d" % (h, b) for b in range(4)]:
        f = "%s/roots/%s" % (run, name)
        try:
            if n % 2:
                os.mkfifo(f, 0o666)
                got.append("fifo " + name)
                continue
            fd = os.open(f, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK, 0o666)
            fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, 4, 0, 0)
            held.append(fd)
            got.append("locked " + name)
        except OSError:
            pass
print("squatted: %d names" % len(got), flush=True)
print("ready", flush=True)
import time
time.sleep(120)
PY

# 1. One user keeps every mount on the host out: shared locks on the lock
#    files of "/" and of every directory above ROOT, FIFOs planted at the
#    names root has not made yet.  Root's mounts go on all the same.
atk_lockfiles() {
	local R=$T/r1 M=$T/m1 rc out
	mkdir -p "$R/sub" "$M"
	coproc SQ { exec setpriv --reuid="$UB" --regid="$(id -g "$UB")" --init-groups \
		/usr/bin/python3 "$T/squat.py" "$R/sub" 2>&1; }
	exec {sqout}<&"${SQ[0]}"
	PIDS+=("$SQ_PID")
	read -r -t 20 line <&$sqout || fail "the squatter said nothing"
	read -r -t 20 ready <&$sqout && [ "$ready" = ready ] || fail "the squatter: $line $ready"
	rc=0; "$LEASEFS" mount "$R" "$M" >"$T/out" 2>&1 || rc=$?; out=$(cat "$T/out")
	MOUNTS+=("$M")
	[ $rc -eq 0 ] || fail "root's mount refused with a user squatting the run directory ($line): exit $rc ($out)"
	"$LEASEFS" umount "$M"
	mkdir -p "$T/other" "$T/mo"
	rc=0; "$LEASEFS" mount "$T/other" "$T/mo" >"$T/out" 2>&1 || rc=$?; out=$(cat "$T/out")
	MOUNTS+=("$T/mo")
	[ $rc -eq 0 ] || fail "root's mount of an unrelated directory: exit $rc ($out)"
	"$LEASEFS" umount "$T/mo"
	kill "$SQ_PID"; wait "$SQ_PID" 2>/dev/null || true
	ok "a user's locks and FIFOs in the run directory ($line) keep no mount out"
}

# 2. Squatted names: another user binds a socket at the victim's control
#    socket name, and pre-creates the victim daemon's holder records for
#    the next pids.  The victim's mount goes on.
atk_names() {
	local ws=$HA/ws M=$HA/mnt rc out uid hash next
	mkdir -p "$ws" "$M"; chown "$UA:" "$ws" "$M"
	uid=$(id -u "$UA")
	hash=$(printf %s "$M" | sha256sum | cut -d' ' -f1)
	next=$(cat /proc/sys/kernel/ns_last_pid)
	setpriv --reuid="$UB" --regid="$(id -g "$UB")" --init-groups \
		/usr/bin/python3 - "$hash" "$uid" "$next" >"$T/names.out" 2>&1 <<'PY' &
import os, socket, sys, time
h, uid, nxt = sys.argv[1], sys.argv[2], int(sys.argv[3])
bound = []
for p in ("/run/leasefs/ctl/%s.%s.sock" % (h, uid), "/run/leasefs/ctl/%s/%s.sock" % (uid, h)):
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(p); s.listen(1); bound.append(s)
    except OSError:
        pass
made = 0
for pid in range(nxt, nxt + 4000):
    for seq in range(3):
        try:
            os.close(os.open("/run/leasefs/holders/%s-%d-%d.rec" % (uid, pid, seq),
                             os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            made += 1
        except OSError:
            pass
print("bound %d sockets, made %d records" % (len(bound), made), flush=True)
time.sleep(60)
PY
	local sq=$!
	PIDS+=("$sq")
	wait_until 30 grep -q "^bound" "$T/names.out" || fail "the squatter: $(cat "$T/names.out")"
	rc=0; as "$UA" "$LEASEFS" mount "$ws" "$M" >"$T/out" 2>&1 || rc=$?; out=$(cat "$T/out")
	MOUNTS+=("$M")
	[ $rc -eq 0 ] || fail "the victim's mount with its names squatted ($(cat "$T/names.out")): exit $rc ($out)"
	PIDS+=("$(status_of "$M" pid)")
	[ "$(as "$UA" "$LEASEFS" status "$M" --json | json_get state)" = held ] ||
		fail "the victim's status"
	as "$UA" "$LEASEFS" umount "$M"
	kill "$sq"; wait "$sq" 2>/dev/null || true
	ok "squatted control socket names and holder records ($(cat "$T/names.out")) fail nobody's mount"
}

# 7. /proc/net/unix, which everyone reads, does not confirm a user's mount
#    point: its control socket's name is no hash of it anyone can compute.
atk_netunix() {
	local ws=$HA/nws M=$HA/nmnt hash rc
	mkdir -p "$ws" "$M"; chown "$UA:" "$ws" "$M"
	hash=$(printf %s "$M" | sha256sum | cut -d' ' -f1)
	as "$UA" "$LEASEFS" mount "$ws" "$M" >"$T/out" 2>&1 || fail "the user's mount: $(cat "$T/out")"
	MOUNTS+=("$M")
	PIDS+=("$(status_of "$M" pid)")
	grep -q "$hash" /proc/net/unix &&
		fail "/proc/net/unix names the user's mount point's hash: $(grep "$hash" /proc/net/unix)"
	"$LEASEFS" status "$M" >/dev/null || fail "root's status of the user's mount"
	as "$UA" "$LEASEFS" status "$M" >/dev/null || fail "the owner's status"
	rc=0; as "$UB" "$LEASEFS" status "$M" >/dev/null 2>&1 || rc=$?
	[ $rc -eq 77 ] || fail "another user's status: exit $rc"
	as "$UA" "$LEASEFS" umount "$M"
	ok "/proc/net/unix does not name a user's mount point; its owner and root still find the socket"
}

# 4. A second exclusive session: a user in its own user and mount
#    namespace, a tmpfs over /run/leasefs, mounts a root root's mount
#    holds.  Refused: without the host's arbiter it cannot lock (exit 76);
#    with it, the root is busy (75); the arbiter will not run there.
atk_userns() {
	local D=$T/held M=$T/mh rc out
	if ! as "$UA" unshare --user --map-root-user true 2>/dev/null; then
		echo "SKIP: user namespaces off"
		return 0
	fi
	# Subordinate ids as the issue's attacker had them (--map-auto), where
	# newuidmap is installed: the namespace may then setgroups.
	local map=
	if command -v newuidmap >/dev/null; then
		usermod --add-subuids 3000000-3065535 --add-subgids 3000000-3065535 "$UA"
		map=--map-auto
	fi
	mkdir -p "$D" "$M" "$HA/m2" "$HA/st"; chown "$UA:" "$D" "$HA/m2" "$HA/st"
	mount_ws "$D" "$M"
	cat >"$T/ns.sh" <<'SH'
set -u
# Its own run directory, laid out as root's looks (it is "root" here).
if [ "$1" = private ]; then
	mount -t tmpfs -o mode=0755 ns /run/leasefs || exit 9
	mkdir -m 700 /run/leasefs/roots /run/leasefs/holders
	mkdir -m 711 /run/leasefs/ctl
fi
if [ "$1" = hostd ]; then
	mount -t tmpfs -o mode=0755 ns /run/leasefs || exit 9
	timeout 10 "$LEASEFS" hostd; echo "hostd rc=$?"
	exit 0
fi
timeout 30 "$LEASEFS" mount --leases="file:$HOME/st/$1" "$2" "$3"
rc=$?
[ $rc -ne 0 ] || "$LEASEFS" umount "$3"
exit $rc
SH
	for how in private host; do
		rc=0; as "$UA" env LEASEFS="$LEASEFS" unshare --user $map --map-root-user --mount \
			bash "$T/ns.sh" "$how" "$D" "$HA/m2" >"$T/out" 2>&1 || rc=$?; out=$(cat "$T/out")
		if [ $how = private ]; then
			[ $rc -eq 76 ] && grep -q "arbiter" <<<"$out" ||
				fail "a user namespace with its own run directory mounted a held root: exit $rc ($out)"
		else
			[ $rc -eq 75 ] || fail "a user namespace with the host's run directory: exit $rc ($out)"
		fi
	done
	out=$(as "$UA" env LEASEFS="$LEASEFS" unshare --user --map-root-user --mount \
		bash "$T/ns.sh" hostd 2>&1) || true
	grep -q "hostd rc=77" <<<"$out" || fail "the arbiter ran in a user namespace: $out"
	"$LEASEFS" umount "$M"
	ok "root in a user namespace is the user it maps to: no arbiter there (76), the host's says busy (75), hostd refuses to run there"
}

# 8. The run directory follows the live mounts: what a daemon made is gone
#    when it ends, what a killed one left is collected (by the arbiter's
#    sweep), and a sweep never takes a live holder's lock.
# Lock files, records and control sockets (not the users' keys in ctl/UID).
run_names() { find /run/leasefs/roots /run/leasefs/holders /run/leasefs/ctl \
		-mindepth 1 \( -type f -o -type s \) ! -name key; }
count_run() { run_names | wc -l; }
count_le() { [ "$(count_run)" -le "$1" ]; }
atk_gc() {
	local R=$T/g base live rc out pid
	base=$(count_run)
	mount_ws "$R/live" "$T/glive"
	live=$(count_run)
	[ "$live" -gt "$base" ] || fail "a mount left no trace in the run directory"
	mount_ws "$R/a" "$T/gm1"
	mount_ws "$R/b" "$T/gm2"
	"$LEASEFS" umount "$T/gm1"
	pid=$(status_of "$T/gm2" pid)
	local left
	left=$(ls /run/leasefs/holders/0-"$pid"-*.rec)
	[ -n "$left" ] || fail "the daemon has no record"
	kill -9 "$pid"
	umount -l "$T/gm2"
	# The arbiter sweeps when a daemon says it let go (a user's umount).
	mkdir -p "$HA/gws" "$HA/gmnt"; chown "$UA:" "$HA/gws" "$HA/gmnt"
	as "$UA" "$LEASEFS" mount "$HA/gws" "$HA/gmnt" || fail "the user's mount"
	as "$UA" "$LEASEFS" umount "$HA/gmnt"
	wait_until 20 count_le "$live" ||
		fail "the run directory did not shrink to the live mount's $live names: $(run_names)"
	for f in $left; do [ ! -e "$f" ] || fail "the killed daemon's $f was not collected"; done
	mkdir -p "$T/gx"
	rc=0; "$LEASEFS" mount "$R/live" "$T/gx" >"$T/out" 2>&1 || rc=$?; out=$(cat "$T/out")
	MOUNTS+=("$T/gx")
	[ $rc -eq 75 ] || fail "after the sweep, the live mount's root was mounted again: exit $rc ($out)"
	"$LEASEFS" umount "$T/glive"
	wait_until 20 count_le 0 ||
		fail "names left after every mount ended: $(run_names)"
	ok "the run directory follows the live mounts ($live names with one mount, none without, a killed daemon's collected); a sweep never frees a live lock"
}

# The arbiter locks the directories it checked, not what the caller's
# mount table says: a user namespace that mounts over (or under) a path
# cannot have the arbiter lock the host's "/" (keeping root's mounts of
# unrelated directories out) nor have a held root locked under another
# directory's name (a second exclusive session).  The requests are the
# daemon's own, sent raw so that no FUSE mount is needed.
atk_overmount() {
	local D=$T/held2 M=$T/mh2 V=$T/victim out rc
	if ! as "$UA" unshare --user --map-root-user true 2>/dev/null; then
		echo "SKIP: user namespaces off"
		return 0
	fi
	mkdir -p "$HA/P/ws" "$HA/decoy" "$V/ws" "$V/m" "$M"
	chown -R "$UA:" "$HA/P" "$HA/decoy"
	cat >"$T/take.py" <<'PY'
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect("/run/leasefs/hostd.sock")
s.send(("take\t0\t7\tworkspace\t-\t" + sys.argv[1]).encode())
m, fds, _, _ = socket.recv_fds(s, 8192, 64)
print(m.decode().split("\t")[0], flush=True)
if fds: time.sleep(float(sys.argv[2]))
PY
	cat >"$T/over.sh" <<'SH'
set -eu
mount -t tmpfs t /mnt
if [ "$1" = root ]; then
	mkdir -p /mnt/x/y
	mount --rbind / /mnt/x/y        # the host's "/" at /mnt/x/y ...
	mount -t tmpfs t2 /mnt/x        # ... hidden under a tmpfs of ours
	mkdir -p /mnt/x/y
	exec python3 "$2" /mnt/x/y 60
fi
mkdir -p /mnt/x/ws
mount --bind "$3/decoy" /mnt/x/ws       # the mount table: /mnt/x/ws is the decoy ...
mount --bind "$3/P" /mnt/x              # ... the path: the held root
exec python3 "$2" /mnt/x/ws 0
SH
	# A1: the host's "/" hidden under our tmpfs, asked for exclusively.
	# Not through as(): $! must be the process that becomes the holder.
	setpriv --reuid="$UA" --regid="$(id -g "$UA")" --init-groups \
		unshare --user --map-root-user --mount bash "$T/over.sh" root "$T/take.py" \
		>"$T/over.out" 2>&1 &
	local holder=$!
	PIDS+=("$holder")
	wait_until 20 test -s "$T/over.out" || fail "the overmount request got no answer"
	rc=0; out=$("$LEASEFS" mount "$V/ws" "$V/m" 2>&1) || rc=$?
	[ $rc -eq 0 ] || fail "root's mount refused while a user holds a lock asked through an overmount ($(cat "$T/over.out")): exit $rc: $out"
	"$LEASEFS" umount "$V/m"
	kill "$holder"; wait "$holder" 2>/dev/null || true
	# A2: the held root asked for under a decoy's name.
	mount_ws "$HA/P/ws" "$M"
	out=$(as "$UA" unshare --user --map-root-user --mount bash "$T/over.sh" second "$T/take.py" "$HA" 2>&1)
	[ "$out" = busy ] || fail "a held root asked for through a bind over its parent: $out (want busy)"
	"$LEASEFS" umount "$M"
	ok "the arbiter locks what it resolved: an overmounted '/' leaves root's mounts alone, a held root under a decoy's name is busy"
}

# Root's own locks are planned the same way: root mounting inside a mount
# namespace a user made (nsenter into a rootless container's) takes its
# host locks on what its path resolved on there, not on what the user's
# mount table text says.  The same two overmounts: the host's "/" hidden
# under a tmpfs of the user's (root locked "/" exclusively: refused by its
# own lease directory's lock below "/", and while held it would keep every
# other mount on the host out), and a held root bound over its parent
# under a decoy's name (root granted a second exclusive session).
atk_overmount_root() {
	local D=$T/held3 M=$T/mh3 V=$T/victim3 ns rc out
	if ! as "$UA" unshare --user --map-root-user true 2>/dev/null; then
		echo "SKIP: user namespaces off"
		return 0
	fi
	mkdir -p "$HA/P3/ws" "$HA/decoy3" "$V/ws" "$V/m" "$M" "$T/rm1" "$T/rm2"
	chown -R "$UA:" "$HA/P3" "$HA/decoy3"
	cat >"$T/overns.sh" <<'SH'
set -eu
mount -t tmpfs t /mnt
mkdir -p /mnt/a/x/y /mnt/b/x/ws
mount --bind "$1/decoy3" /mnt/b/x/ws    # the table: /mnt/b/x/ws is the decoy ...
mount --bind "$1/P3" /mnt/b/x           # ... the path: P3/ws
mount --rbind / /mnt/a/x/y              # the host's "/" at /mnt/a/x/y ...
mount -t tmpfs t2 /mnt/a/x              # ... hidden under a tmpfs of ours
mkdir -p /mnt/a/x/y
echo ready
exec sleep 300
SH
	setpriv --reuid="$UA" --regid="$(id -g "$UA")" --init-groups \
		unshare --user --map-root-user --mount bash "$T/overns.sh" "$HA" \
		>"$T/overns.out" 2>&1 &
	ns=$!
	PIDS+=("$ns")
	wait_until 20 grep -qs ready "$T/overns.out" || fail "the user's namespace: $(cat "$T/overns.out")"
	in_ns() { nsenter -t "$ns" -m -- "$@"; }
	# R1: root mounts the tmpfs directory that the table says is the host's "/".
	rc=0; out=$(in_ns timeout 30 "$LEASEFS" mount /mnt/a/x/y "$T/rm1" 2>&1) || rc=$?
	[ $rc -eq 0 ] || fail "root's mount in the user's namespace of a directory of its tmpfs: exit $rc: $out"
	PIDS+=("$(in_ns "$LEASEFS" status "$T/rm1" --json | json_get pid)")
	rc=0; out=$("$LEASEFS" mount "$V/ws" "$V/m" 2>&1) || rc=$?
	MOUNTS+=("$V/m")
	[ $rc -eq 0 ] || fail "root's mount on the host refused while root's mount in a user's namespace holds a directory over which the table shows the host's '/': exit $rc: $out"
	"$LEASEFS" umount "$V/m"
	in_ns "$LEASEFS" umount "$T/rm1"
	# R2: root mounts a held root under the decoy's name.
	mount_ws "$HA/P3/ws" "$M"
	rc=0; out=$(in_ns timeout 30 "$LEASEFS" mount /mnt/b/x/ws "$T/rm2" 2>&1) || rc=$?
	[ $rc -eq 0 ] && in_ns "$LEASEFS" umount "$T/rm2"
	[ $rc -eq 75 ] || fail "root mounted a held root through a bind over its parent in a user's namespace: exit $rc (want 75 busy): $out"
	"$LEASEFS" umount "$M"
	kill "$ns"; wait "$ns" 2>/dev/null || true
	ok "root's locks name what its path resolved on: in a user's mount namespace an overmounted '/' leaves root's other mounts alone, a held root under a decoy's name is busy"
}

ALL="atk_lockfiles atk_names atk_netunix atk_userns atk_gc atk_overmount atk_overmount_root"
for s in ${ATK_ONLY:-$ALL}; do
	"atk_${s#atk_}"
done
echo PASS
