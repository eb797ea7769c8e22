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
kill -TERM "$pid"
rc=0; wait "$pid" || rc=$?
[ $rc -eq 0 ] || fail "daemon exit $rc"
mountpoint -q "$M" && fail "still mounted"
grep '^leasefs: releasing' "$T/log" > "$T/order"
[ "$(sed -n 1p "$T/order")" = "leasefs: releasing $root_lease" ] || fail "first release: $(cat "$T/order")"
[ "$(sed -n 2p "$T/order")" = "leasefs: releasing sessions/$session" ] || fail "second release: $(cat "$T/order")"
for n in "$root_lease" "sessions/$session"; do
	"$LEASEFS" lease show "$n" | grep -q '^state: free' || fail "$n not free"
done
ok "SIGTERM: exit 0, root then session released, both free"

mount_ws "$R" "$M"
pid=$DAEMON_PID
"$LEASEFS" umount "$M"
alive "$pid" && fail "daemon alive after umount returned"
mountpoint -q "$M" && fail "still mounted after umount"
"$LEASEFS" lease show "$root_lease" | grep -q '^state: free' || fail "root not free after umount"
ok "leasefs umount: daemon gone, root free"

mount_ws "$R" "$M"
pid=$DAEMON_PID
fusermount3 -u "$M"
wait_pid_gone "$pid" 20 || fail "daemon alive after fusermount3 -u"
"$LEASEFS" lease show "$root_lease" | grep -q '^state: free' || fail "root not free after fusermount3 -u"
ok "fusermount3 -u: daemon gone, root free"
echo PASS
