#!/usr/bin/env bash
# What the daemon tells its service manager (sd_notify(3)'s protocol, read
# from a socket the test listens on, as systemd would): run as a
# Type=notify unit runs it (`leasefs mount -f`), READY=1 comes once the
# mount serves, STATUS= on every state change (held; lost with reason and
# epoch; acknowledged; shutting down), STOPPING=1 at shutdown, each sent
# by the daemon itself.  Forked into the background the daemon that stays
# sends READY=1 with MAINPID= (to an abstract socket here).  A refusal at
# start says why (STATUS=, ERRNO=); --wait extends the start timeout.
. "$(dirname "$0")/lib.sh"

LISTEN=$HERE/dgram_listen.py
LOG=$T/notify.jsonl
NS=$T/notify.sock
coproc LSN { exec python3 -u "$LISTEN" path="$NS" abstract="@leasefs-it-notify-$$"; }
PIDS+=("$LSN_PID")
exec {lfd}<&"${LSN[0]}"
read -r -t 10 line <&$lfd && [ "$line" = ready ] || fail "listener: $line"
cat <&$lfd >>"$LOG" &
PIDS+=($!)
disown "$LSN_PID" $!

n() { python3 "$LISTEN" --count "$LOG" "$@"; }
count_is() { local want=$1; shift; [ "$(n "$@")" -eq "$want" ]; }
# expect N LABEL FILTER...: that many datagrams match, awaited (20 s).
expect() {
	local want=$1; shift
	wait_until 20 count_is "$want" "$@" ||
		fail "$(n "$@") datagrams on $1 match ${*:2}, want $want: $(tail -n 5 "$LOG")"
}

R=$T/root M=$T/mnt
mkdir -p "$R" "$M"
R=$(realpath "$R")
MOUNTS+=("$M")

# 1. As a Type=notify unit: in the foreground, READY=1 once serving.
NOTIFY_SOCKET=$NS "$LEASEFS" mount -f "$R" "$M" 2>"$T/fg.err" &
fg=$!; PIDS+=("$fg")
expect 1 path "READY=1" "STATUS~^held: lease workspace-roots/[0-9a-f]{64} at epoch [0-9]+, serving $R\$"
# Serving when it says so: nothing was awaited but READY=1.
findmnt -n -o FSTYPE "$M" | grep -qx fuse.leasefs || fail "READY=1 before the mount: $(findmnt "$M")"
echo x >"$M/f" && [ "$(cat "$R/f")" = x ] || fail "READY=1, but the mount does not serve"
lease=$(status_of "$M" lease) epoch=$(status_of "$M" epoch)
[ "$(n path READY=1 "pid=$fg" "STATUS~lease $lease at epoch $epoch,")" -eq 1 ] ||
	fail "READY=1 not from the daemon $fg, or naming another lease: $(cat "$LOG")"
[ "$(n path "MAINPID~.")" -eq 0 ] || fail "MAINPID from a daemon systemd started itself"
ok "foreground: READY=1 from the daemon once it serves, STATUS held at epoch $epoch"

"$LEASEFS" lease revoke "$lease" >/dev/null
expect 1 path "STATUS~^lost \\(revoked\\) at epoch $epoch: read-only; acknowledging"
expect 1 path "STATUS=lost (revoked) at epoch $epoch: read-only; the loss is acknowledged"
kill -TERM "$fg"
rc=0; wait "$fg" || rc=$?
[ $rc -eq 0 ] || fail "the foreground daemon exited $rc after SIGTERM: $(cat "$T/fg.err")"
expect 1 path "STOPPING=1" "STATUS~^shutting down \\(SIGTERM\\): "
[ "$(n path)" -eq 4 ] || fail "$(n path) datagrams, want 4: $(cat "$LOG")"
ok "loss: STATUS lost (revoked) at epoch $epoch, then acknowledged; SIGTERM: STOPPING=1; nothing else"

# 2. Forked: the daemon that stays says READY=1 with MAINPID (abstract socket).
NOTIFY_SOCKET=@leasefs-it-notify-$$ mount_ws "$R" "$M"
expect 1 abstract "READY=1" "MAINPID=$DAEMON_PID" "pid=$DAEMON_PID"
[ "$(n path)" -eq 4 ] || fail "the background mount notified the foreground one's socket"
"$LEASEFS" umount "$M"
expect 1 abstract "STOPPING=1" "STATUS~^shutting down \\(leasefs umount\\)"
ok "background: READY=1 and MAINPID=$DAEMON_PID from the daemon that stays; umount: STOPPING=1"

# 3. A refusal at start says why; --wait says what it waits for and
#    extends the start timeout by the wait and 30 s.
mount_ws "$R" "$M"
mkdir -p "$T/mnt2"
rc=0; NOTIFY_SOCKET=$NS "$LEASEFS" mount -f "$R" "$T/mnt2" 2>/dev/null || rc=$?
[ $rc -eq 75 ] || fail "a busy root in the foreground: exit $rc"
expect 1 path "STATUS~^failed: workspace busy: $R held at epoch" "ERRNO~^[1-9][0-9]*\$"
MOUNTS+=("$T/mnt2")
NOTIFY_SOCKET=$NS "$LEASEFS" mount -f --wait=60 "$R" "$T/mnt2" 2>/dev/null &
w=$!; PIDS+=("$w")
expect 1 path "EXTEND_TIMEOUT_USEC=90000000" "STATUS~^waiting up to 60 s: workspace busy: $R held at epoch"
"$LEASEFS" umount "$M"
expect 2 path "READY=1"
kill -TERM "$w"; wait "$w" || fail "the waiting mount exited $?"
ok "refused: STATUS failed and ERRNO; --wait: STATUS waiting and EXTEND_TIMEOUT_USEC, then READY=1"

# 4. A root whose name holds a newline and an assignment adds none.
E="$T/evil"$'\n'"MAINPID=1"
mkdir -p "$E" "$T/mnt3"
MOUNTS+=("$T/mnt3")
NOTIFY_SOCKET=$NS "$LEASEFS" mount -f "$E" "$T/mnt3" 2>/dev/null &
e=$!; PIDS+=("$e")
expect 1 path READY=1 "pid=$e" "STATUS~serving $T/evil\\?MAINPID=1\$"
[ "$(n path "MAINPID~.")" -eq 0 ] || fail "a root's name set MAINPID: $(grep MAINPID "$LOG")"
kill -TERM "$e"; wait "$e" || fail "the daemon of the evil root exited $?"
ok "a newline in ROOT adds no assignment to STATUS"
echo PASS
