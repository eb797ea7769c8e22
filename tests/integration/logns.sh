# Sourced by the log tests after lib.sh, in a mount namespace of their own:
# a fresh /dev and /run there, the journal and syslog sockets the test's
# own listener binds, and the helpers that read what reached them.
# A /dev of tmpfs with the host's devices in it, moved over /dev; a fresh
# /run with the run directory leasefs needs.
stage=$(mktemp -d "$T/dev.XXXXXX")
mount -t tmpfs -o mode=0755,nosuid leasefs-it-dev "$stage"
for n in null zero full random urandom tty fuse; do
	[ -e "/dev/$n" ] || continue
	touch "$stage/$n"
	mount --bind "/dev/$n" "$stage/$n"
done
mkdir "$stage/pts" "$stage/shm"
mount --rbind /dev/pts "$stage/pts"
mount --rbind /dev/shm "$stage/shm"
ln -s /proc/self/fd "$stage/fd"
for i in 0 1 2; do ln -s "/proc/self/fd/$i" "$stage/$(echo stdin stdout stderr | cut -d' ' -f$((i + 1)))"; done
mount --move "$stage" /dev
mount -t tmpfs -o mode=0755 leasefs-it-run /run
mkdir -p /run/leasefs /run/systemd/journal

J=/run/systemd/journal/socket
LISTEN=$HERE/dgram_listen.py
LOG=$T/log.jsonl
start_listener() { # LABEL=ADDRESS...
	coproc LSN { exec python3 -u "$LISTEN" "$@"; }
	PIDS+=("$LSN_PID")
	exec {lfd}<&"${LSN[0]}"
	read -r -t 10 line <&$lfd && [ "$line" = ready ] || fail "listener: $line"
	cat <&$lfd >>"$LOG" &
	PIDS+=($!)
	disown "$LSN_PID" $!   # killed at exit without a word
}
stop_listener() { kill "$LSN_PID"; wait_pid_gone "$LSN_PID" 10 || fail "listener still there"; }
n() { python3 "$LISTEN" --count "$LOG" "$@"; }
# barrier LABEL ADDRESS: every datagram sent to ADDRESS before now is in
# the log (one socket's datagrams arrive in order).
barrier() {
	local mark="barrier $RANDOM$RANDOM"
	python3 -c 'import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.sendto(sys.argv[2].encode(), sys.argv[1])' "$2" "$mark"
	expect 1 "$1" "text=$mark"
}
# expect N LABEL FILTER...: that many records match, awaited (10 s).
count_is() { local want=$1; shift; [ "$(n "$@")" -eq "$want" ]; }
expect() {
	local want=$1; shift
	wait_until 10 count_is "$want" "$@" ||
		fail "$(n "$@") records on $1 match ${*:2}, want $want: $(tail -n 5 "$LOG")"
}
