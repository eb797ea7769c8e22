#!/usr/bin/env bash
# SIGTERM (and `leasefs umount`) shut down in order: unmounted, root lease
# released, then the session lease; the daemon exits 0.
. "$(dirname "$0")/lib.sh"

R=$T/root M=$T/mnt
mkdir -p "$R" "$M"
MOUNTS+=("$M")
"$LEASEFS" mount -f "$R" "$M" 2>"$T/log" &
pid=$!
PIDS+=("$pid")
wait_until 20 mountpoint -q "$M" || fail "no mount"
wait_until 20 "$LEASEFS" status "$M" >/dev/null 2>&1 || fail "no status"
root_lease=$(status_of "$M" lease)
session=$(status_of "$M" session)
echo x > "$M/f"
# Watch the store itself: each release replaces NAME.rec by a rename, and
# one inotify queue over both directories orders those events.
leases_dir=${LEASEFS_LEASES#file:}
python3 - "$leases_dir" "$T/store-order" <<'PY' &
import ctypes, os, struct, sys, select
libc = ctypes.CDLL(None, use_errno=True)
IN_MOVED_TO, IN_CLOEXEC = 0x80, 0o2000000
fd = libc.inotify_init1(IN_CLOEXEC)
wds = {}
for sub in ("workspace-roots", "sessions"):
    wd = libc.inotify_add_watch(fd, os.path.join(sys.argv[1], sub).encode(), IN_MOVED_TO)
    assert wd >= 0, sub
    wds[wd] = sub
out = open(sys.argv[2], "w")
out.write("ready\n"); out.flush()
seen = 0
while seen < 2 and select.select([fd], [], [], 20)[0]:
    buf = os.read(fd, 65536)
    i = 0
    while i < len(buf):
        wd, mask, cookie, n = struct.unpack_from("iIII", buf, i)
        name = buf[i + 16:i + 16 + n].rstrip(b"\0").decode()
        i += 16 + n
        if name.endswith(".rec"):
            out.write("%s/%s\n" % (wds[wd], name[:-4])); out.flush()
            seen += 1
PY
watcher=$!
wait_until 10 grep -qs ready "$T/store-order" || fail "store watcher not ready"
kill -TERM "$pid"
rc=0; wait "$pid" || rc=$?
[ $rc -eq 0 ] || fail "daemon exit $rc"
mountpoint -q "$M" && fail "still mounted"
wait "$watcher" || fail "store watcher failed"
[ "$(sed -n 2p "$T/store-order")" = "$root_lease" ] || fail "store: first record rewritten: $(cat "$T/store-order")"
[ "$(sed -n 3p "$T/store-order")" = "sessions/$session" ] || fail "store: second record rewritten: $(cat "$T/store-order")"
ok "store: root record released before the session record"
grep '^leasefs: releasing' "$T/log" > "$T/order"
[ "$(sed -n 1p "$T/order")" = "leasefs: releasing $root_lease" ] || fail "first release: $(cat "$T/order")"
[ "$(sed -n 2p "$T/order")" = "leasefs: releasing sessions/$session" ] || fail "second release: $(cat "$T/order")"
for n in "$root_lease" "sessions/$session"; do
	has_line "^state: free" "$LEASEFS" lease show "$n" || fail "$n not free"
done
ok "SIGTERM: exit 0, root then session released, both free"

# SIGINT, to a daemon started as a background job (which the shell starts
# with SIGINT ignored).
"$LEASEFS" mount -f "$R" "$M" 2>"$T/log2" &
pid=$!
PIDS+=("$pid")
wait_until 20 "$LEASEFS" status "$M" >/dev/null 2>&1 || fail "no status (SIGINT round)"
kill -INT "$pid"
rc=0; timeout 30 tail --pid="$pid" -f /dev/null || fail "daemon ignored SIGINT"
wait "$pid" || rc=$?
[ $rc -eq 0 ] || fail "daemon exit $rc after SIGINT: $(cat "$T/log2")"
mountpoint -q "$M" && fail "still mounted after SIGINT"
has_line "^state: free" "$LEASEFS" lease show "$root_lease" || fail "root not free after SIGINT"
ok "SIGINT: exit 0, unmounted, root free"

mount_ws "$R" "$M"
pid=$DAEMON_PID
"$LEASEFS" umount "$M"
alive "$pid" && fail "daemon alive after umount returned"
mountpoint -q "$M" && fail "still mounted after umount"
has_line "^state: free" "$LEASEFS" lease show "$root_lease" || fail "root not free after umount"
ok "leasefs umount: daemon gone, root free"

mount_ws "$R" "$M"
pid=$DAEMON_PID
fusermount3 -u "$M"
wait_pid_gone "$pid" 20 || fail "daemon alive after fusermount3 -u"
has_line "^state: free" "$LEASEFS" lease show "$root_lease" || fail "root not free after fusermount3 -u"
ok "fusermount3 -u: daemon gone, root free"
echo PASS
