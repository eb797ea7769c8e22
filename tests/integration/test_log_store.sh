#!/usr/bin/env bash
# The store's reachability in the daemon's log: a nats-server killed under
# a mount and started again (with its store) within the lease's TTL gives
# exactly one "store ... unreachable" warning and one "store ... reachable
# again after N s" notice, each with the mount point, root, lease and
# epoch (text and journal fields), whatever number of renewals failed
# meanwhile; the lease stays held throughout.  The journal is a listener
# of the test's own in a private mount namespace, as in test_log.sh.
if [ -z "${LEASEFS_NATS_URI:-}" ]; then
	exec "$(dirname "$0")/../nats-harness.sh" bash "$0" "$@"
fi
[ -n "${LEASEFS_IT_LOGNS:-}" ] ||
	LEASEFS_IT_LOGNS=1 exec unshare -m --propagation private bash "$0" "$@"
. "$(dirname "$0")/lib.sh"

. "$HERE/logns.sh"

# nats_restart: kill -9 the server, then start it again on its port with
# its store, once it is seen gone by the mount (the warning).
nats_kill() {
	kill -9 "$NATS_PID" 2>/dev/null || true
	wait_pid_gone "$NATS_PID" 10 || fail "nats-server did not stop"
}
nats_start() {
	local before
	before=$(grep -c "Server is ready" "$NATS_LOG" || true)
	"$NATS_BIN" -a 127.0.0.1 -p "$NATS_PORT" -js -sd "$NATS_STORE_DIR" >>"$NATS_LOG" 2>&1 &
	NATS_PID=$!
	PIDS+=("$NATS_PID")
	wait_until 10 bash -c "[ \$(grep -c 'Server is ready' '$NATS_LOG') -gt $before ]" ||
		fail "nats-server did not restart"
}

# TTL 6 s (safe-until about 5 s after a renewal, renewals every 2 s): an
# outage of a second or two is ridden out.  A new bucket is granted after
# max_ttl x 4/3 = 8 s: --wait.
TTL=6
export LEASEFS_LEASES="$LEASEFS_NATS_URI?max_ttl=$TTL"
R=$T/root M=$T/mnt
mkdir -p "$R"
R=$(realpath "$R")
start_listener journal="$J" syslog=/dev/log
mount_ws "$R" "$M" --ttl=$TTL --wait=20
lease=$(status_of "$M" lease) epoch=$(status_of "$M" epoch)
ctx=(SYSLOG_IDENTIFIER=leasefs "LEASEFS_MOUNTPOINT=$M" "LEASEFS_ROOT=$R"
     "LEASEFS_LEASE=$lease" "LEASEFS_EPOCH=$epoch")
expect 1 journal "${ctx[@]}" "MESSAGE~^$M: serving $R: lease $lease held at epoch $epoch"
[ "$(n journal "MESSAGE~store .*(unreachable|reachable again)")" -eq 0 ] ||
	fail "a reachability line while the store answered: $(tail -n 5 "$LOG")"

nats_kill
expect 1 journal "${ctx[@]}" PRIORITY=4 "MESSAGE~^$M: store nats://[^ ]* unreachable: lease $lease on $R at epoch $epoch is held until"
nats_start
expect 1 journal "${ctx[@]}" PRIORITY=5 "MESSAGE~^$M: store nats://[^ ]* reachable again after [0-9]+\\.[0-9] s: lease $lease on $R at epoch $epoch$"
[ "$(status_of "$M" state)" = held ] || fail "the lease was lost over a short outage: $(status_of "$M" state)"
echo ok >"$M/f" || fail "the mount refused a write after the store came back"
ok "store killed and restarted: unreachable once, reachable again once, with root, lease and epoch; still held"

# The next renewals answer: nothing more is said, and an unmount says no
# more of the store either.
"$LEASEFS" umount "$M"
wait_pid_gone "$DAEMON_PID" 20 || fail "daemon still there after umount"
barrier journal "$J"
[ "$(n journal "MESSAGE~store .*unreachable")" -eq 1 ] &&
	[ "$(n journal "MESSAGE~store .*reachable again")" -eq 1 ] ||
	fail "reachability said more than once per transition: $(grep -c store "$LOG")"
ok "one line per transition, none per failed renewal"
echo PASS
