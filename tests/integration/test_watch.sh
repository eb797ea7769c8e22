#!/usr/bin/env bash
# leasefs watch: the state at once, then each change as the daemon pushes
# it.  Three watchers of one mount all get the loss (reason, epoch, time)
# and exit 0; a watcher of a mount that is unmounted, or whose daemon is
# killed, gets a "gone" line and exits 4.  Revoke -> loss line latency is
# printed (scripts/bench-watch measures it over many mounts).
. "$(dirname "$0")/lib.sh"

R=$T/root M=$T/mnt
mount_ws "$R" "$M"
epoch=$(status_of "$M" epoch)
lease=$(status_of "$M" lease)
state_of_line() { json_get state <<<"$1"; }

pids=()
for i in 1 2 3; do
	mkfifo "$T/w$i"
	"$LEASEFS" watch "$M" >"$T/w$i" &
	pids+=($!)
	exec {fd}<"$T/w$i"
	fds[$i]=$fd
	read -r -t 10 line <&"${fds[$i]}" || fail "watcher $i said nothing"
	[ "$(state_of_line "$line")" = held ] || fail "watcher $i first line: $line"
done
ok "3 watchers see held"
"$LEASEFS" lease revoke "$lease" >/dev/null
for i in 1 2 3; do
	read -r -t 10 line <&"${fds[$i]}" || fail "watcher $i: no loss line"
	[ "$(state_of_line "$line")" = lost ] || fail "watcher $i: $line"
	[ "$(json_get reason <<<"$line")" = revoked ] || fail "watcher $i reason: $line"
	[ "$(json_get epoch <<<"$line")" = "$epoch" ] || fail "watcher $i epoch: $line"
	json_get time <<<"$line" | grep -Eq '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z$' ||
		fail "watcher $i time: $line"
	rc=0; wait "${pids[$((i - 1))]}" || rc=$?
	[ $rc -eq 0 ] || fail "watcher $i exited $rc after the loss"
done
ok "every watcher got the loss (revoked, epoch $epoch) and exited 0"
"$LEASEFS" umount "$M"

# umount of a held mount: shutting-down, then gone (exit 4).
mount_ws "$R" "$M"
coproc W { "$LEASEFS" watch "$M"; }
wpid=$W_PID
read -r -t 10 line <&"${W[0]}" || fail "umount watcher said nothing"
[ "$(state_of_line "$line")" = held ] || fail "umount watcher: $line"
exec {wfd}<&"${W[0]}"
"$LEASEFS" umount "$M"
lines=$(timeout 10 cat <&$wfd)
rc=0; wait "$wpid" || rc=$?
[ $rc -eq 4 ] || fail "watcher of an unmounted mount exited $rc, not 4"
[ "$(state_of_line "$(tail -n 1 <<<"$lines")")" = gone ] || fail "no gone line: $lines"
ok "umount: watcher saw $(head -n 1 <<<"$lines" | json_get state), then gone, exit 4"

# kill -9 of the daemon: gone (exit 4).
mount_ws "$R" "$M"
coproc K { "$LEASEFS" watch "$M"; }
kpid=$K_PID
read -r -t 10 line <&"${K[0]}" || fail "kill watcher said nothing"
exec {kfd}<&"${K[0]}"
kill -9 "$DAEMON_PID"
lines=$(timeout 10 cat <&$kfd)
rc=0; wait "$kpid" || rc=$?
[ $rc -eq 4 ] || fail "watcher of a killed daemon exited $rc, not 4"
[ "$(state_of_line "$lines")" = gone ] || fail "kill: $lines"
ok "kill -9: gone, exit 4"

# No daemon at all: an error, exit 1.
rc=0; "$LEASEFS" watch "$T" 2>/dev/null || rc=$?
[ $rc -eq 1 ] || fail "watch of a plain directory exited $rc"
echo PASS
