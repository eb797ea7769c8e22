# shellcheck shell=bash
# Shared harness for the integration tests.  Each test sources this file,
# gets its own temp dir and lease store, and registers cleanup (lazy
# unmount, then kill by pid) before it waits for any mount.
set -euo pipefail

# The whole test runs under `timeout` (IT_TIMEOUT seconds, default 240):
# re-exec once under it; the EXIT trap below still cleans up on SIGTERM.
if [ -z "${LEASEFS_IT_BOUNDED:-}" ]; then
	export LEASEFS_IT_BOUNDED=1
	exec timeout -k 10 "${IT_TIMEOUT:-240}" bash "$0" "$@"
fi
trap 'exit 124' TERM

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TOP=$(cd "$HERE/../.." && pwd)
LEASEFS=$(realpath "${LEASEFS_BIN:-$TOP/build/leasefs}")
[ -x "$LEASEFS" ] || { echo "no leasefs binary at $LEASEFS" >&2; exit 1; }

T=$(mktemp -d /var/tmp/leasefs-it.XXXXXX)
export LEASEFS_LEASES="file:$T/leases"
MOUNTS=()   # mount points to detach at exit
PIDS=()     # daemon pids to kill at exit
AT_EXIT=()  # further commands, run last (e.g. userdel)

cleanup() {
	local rc=$? m p c
	for m in "${MOUNTS[@]}"; do
		fusermount3 -uz "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
	done
	for p in "${PIDS[@]}"; do
		kill -CONT "$p" 2>/dev/null || true
		kill -9 "$p" 2>/dev/null || true
	done
	rm -rf "$T"
	for c in "${AT_EXIT[@]}"; do
		eval "$c" >/dev/null 2>&1 || true
	done
	exit $rc
}

# at_exit CMD: run the shell command CMD at exit (after unmounting).
at_exit() { AT_EXIT+=("$1"); }
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok: $*"; }

# wait_until TIMEOUT_S CMD...: poll CMD (for conditions with no event).
wait_until() {
	local deadline=$((SECONDS + $1)); shift
	until "$@"; do
		[ $SECONDS -lt $deadline ] || return 1
		sleep 0.02
	done
}

# has_line REGEX CMD...: CMD's output has a line matching REGEX.  The output
# is taken whole first: `CMD | grep -q` under pipefail turns an early match
# into CMD's SIGPIPE, which reads as no match.
has_line() { local re=$1 out; shift; out=$("$@") || return 1; grep -q -- "$re" <<<"$out"; }

# The host lock arbiter (leasefs hostd), which users' mounts take their
# host locks from: this run directory's own (one already serving it is
# kept; ours then exits at once; a binary without one is tested as it is).
hostd_up() { [ -S /run/leasefs/hostd.sock ] || ! kill -0 "$HOSTD_PID" 2>/dev/null; }
start_hostd() {
	"$LEASEFS" hostd >/dev/null 2>&1 &
	HOSTD_PID=$!
	disown "$HOSTD_PID" 2>/dev/null || true
	PIDS+=("$HOSTD_PID")
	wait_until 20 hostd_up || fail "leasefs hostd did not come up"
}
[ "$(id -u)" != 0 ] || start_hostd

# json_get KEY: read a key of the status JSON on stdin.
json_get() { python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }

# mount_ws ROOT MNT [ARGS...]: mount in the background; cleanup is
# registered first.  Sets DAEMON_PID.
mount_ws() {
	local root=$1 mnt=$2; shift 2
	mkdir -p "$root"
	[ -d "$mnt" ] || mkdir "$mnt" 2>/dev/null || true  # a stale mount answers ENOTCONN
	MOUNTS+=("$mnt")
	timeout 30 "$LEASEFS" mount "$@" "$root" "$mnt"
	DAEMON_PID=$("$LEASEFS" status "$mnt" --json | json_get pid)
	PIDS+=("$DAEMON_PID")
	[ -z "${LEASEFS_IT_TRANSPORT:-}" ] || expect_transport "$mnt" "$LEASEFS_IT_TRANSPORT"
}

# stall_write_start FILE: a host process appends 10 bytes to FILE (a path
# on the backing store, not on a mount) from a buffer that is an mmap of a
# FUSE file whose daemon is then stopped.  Returns once that process sits
# in write(2), faulting on the FUSE page while it holds FILE's inode lock,
# so anything else writing FILE waits in the kernel until
# stall_write_finish.  Sets STALL_PID (the writer) and STALL_TRAP (the
# stopped daemon).  One stall at a time.
stall_write_start() {
	local file=$1 d=$T/stall-trap line
	mkdir -p "$d/r"
	head -c 65536 /dev/zero | tr "\\0" x > "$d/r/buf"   # text: tests read FILE back
	# With passthrough the fault would be served from the backing file,
	# without the daemon: the trap must go through it.
	LEASEFS_PASSTHROUGH=0 mount_ws "$d/r" "$d/m"
	STALL_TRAP=$DAEMON_PID
	[ "$(fuse_get "$d/m" passthrough)" = False ] || fail "the stall trap mount passes through"
	cat > "$d/stall.py" <<-'PY'
	import mmap, os, sys
	fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
	src = os.open(sys.argv[2], os.O_RDONLY | os.O_CLOEXEC)
	m = mmap.mmap(src, 65536, prot=mmap.PROT_READ)
	print("ready", flush=True)
	sys.stdin.readline()
	os.write(fd, memoryview(m)[:10])   # faults on the FUSE page under the inode lock
	print("written", flush=True)
	PY
	coproc STALLW { exec python3 -u "$d/stall.py" "$file" "$d/m/buf"; }
	STALL_PID=$STALLW_PID; PIDS+=("$STALL_PID")
	read -r -t 30 line <&"${STALLW[0]}" || line="(nothing)"
	[ "$line" = ready ] || fail "stall helper: $line"
	kill -STOP "$STALL_TRAP"
	wait_until 10 stall_trap_stopped || fail "the stall trap daemon $STALL_TRAP did not stop"
	echo go >&"${STALLW[1]}"
	wait_until 10 stall_in_write || fail "the stall helper is not blocked in write(2): $(stall_state)"
}

# Every thread of the trap daemon is stopped (kill -STOP is asynchronous).
stall_trap_stopped() {
	local s
	for s in /proc/"$STALL_TRAP"/task/*/stat; do
		[ "$(cut -d' ' -f3 "$s" 2>/dev/null)" = T ] || return 1
	done
}

# The helper is alive and inside write(2) (syscall number 1 on x86-64).
stall_in_write() {
	[ -d "/proc/$STALL_PID" ] || fail "the stall helper exited: $(stall_state)"
	[ "$(cut -d' ' -f1 "/proc/$STALL_PID/syscall" 2>/dev/null)" = 1 ]
}

# What the helper is doing, for a failure message.
stall_state() {
	local line
	if [ -d "/proc/$STALL_PID" ]; then
		echo "state $(cut -d' ' -f3 "/proc/$STALL_PID/stat") syscall $(cut -d' ' -f1 "/proc/$STALL_PID/syscall")" \
		     "wchan $(cat "/proc/$STALL_PID/wchan")"
	else
		read -r -t 1 line <&"${STALLW[0]}" || line="(no output)"
		echo "gone, it printed: $line"
	fi
}

# stall_write_finish: the trap daemon answers again; the stalled write lands.
stall_write_finish() {
	local line
	kill -CONT "$STALL_TRAP"
	read -r -t 30 line <&"${STALLW[0]}" || line="(nothing)"
	[ "$line" = written ] || fail "stall helper: $line"
}

# fuse_get MNT KEY: a key of the status JSON's "fuse" object.
fuse_get() {
	"$LEASEFS" status "$1" --json |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["fuse"].get(sys.argv[1], ""))' "$2"
}

# expect_transport MNT NAME: the mount serves through NAME (dev-fuse or
# io-uring); for io-uring, a request made now is served by the queues.
# scripts/test sets LEASEFS_IT_TRANSPORT to run a test on each transport.
expect_transport() {
	local mnt=$1 want=$2 before
	wait_until 5 has_line "^$want\$" fuse_get "$mnt" transport ||
		fail "$mnt serves through $(fuse_get "$mnt" transport), not $want ($(fuse_get "$mnt" io_uring_error))"
	[ "$want" = io-uring ] || return 0
	before=$(fuse_get "$mnt" io_uring_requests)
	ls -a "$mnt" >/dev/null
	[ "$(fuse_get "$mnt" io_uring_requests)" -gt "$before" ] ||
		fail "$mnt: a request did not come through the io_uring queues"
}

status_of() { "$LEASEFS" status "$1" --json | json_get "$2"; }

# pids_cgroup NAME: make a pids cgroup (v1 or v2) for this test, removed at
# exit with anything left in it, and print its path; fails where none can
# be made.  A task put in it and its threads count against its pids.max.
pids_cgroup() {
	local cg=
	if [ -w /sys/fs/cgroup/pids ]; then
		cg=/sys/fs/cgroup/pids/$1.$$
	elif grep -qw pids /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null; then
		cg=/sys/fs/cgroup/$1.$$
	fi
	[ -n "$cg" ] && mkdir "$cg" 2>/dev/null || return 1
	echo "$cg"
}

# pids_cgroup_cleanup CG: the at_exit command for pids_cgroup's cgroup.
pids_cgroup_cleanup() {
	echo "echo max > '$1/pids.max'; for p in \$(cat '$1/cgroup.procs'); do kill -9 \$p; done; rmdir '$1'"
}

# expect_erofs CMD...: CMD must fail with "Read-only file system".
expect_erofs() {
	local out
	if out=$("$@" 2>&1); then fail "succeeded after loss: $*"; fi
	case "$out" in
	*"Read-only file system"*) ;;
	*) fail "wrong error for $*: $out" ;;
	esac
}

# alive PID: running (a zombie is not: nobody may reap a daemonized child here)
alive() { [ -e "/proc/$1" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }
# wait_pid_gone PID TIMEOUT_S
wait_pid_gone() { wait_until "$2" bash -c "! { [ -e /proc/$1 ] && ! grep -q '^State:[[:space:]]*Z' /proc/$1/status 2>/dev/null; }"; }

# start_host_b: a second host for tests of what crosses hosts (etcd): a
# mount namespace of its own whose /run/leasefs (host locks, control
# sockets) is a fresh tmpfs, the rest of the filesystem shared with this
# host (mounts made here propagate there, not back).  Sets HOST_B_PID (a
# process holding the namespace, killed at exit); on_b CMD... runs CMD
# there.  A mount made there is seen and used only through on_b.
start_host_b() {
	local ready=$T/host-b.ready
	mkdir -p /run/leasefs
	unshare -m --propagation slave sh -c \
		"mount -t tmpfs -o mode=0700 leasefs-host-b /run/leasefs && touch '$ready' && exec sleep 100000" &
	HOST_B_PID=$!
	disown "$HOST_B_PID"
	PIDS+=("$HOST_B_PID")
	wait_until 10 test -e "$ready" || fail "host B did not start"
}
on_b() { nsenter -t "$HOST_B_PID" -m "$@"; }

# etcd_settle PREFIX: the etcd store under PREFIX (ending in /) is an old
# one: its marker there and no grace to wait out (lease/etcd/settle.c), as
# an etcd used long before; written through the harness's first member.
etcd_settle() {
	local k tls=()
	k=$(printf '%s!store' "$1" | base64 -w0)
	[ -z "${LEASEFS_ETCD_CA:-}" ] ||
		tls=(--cacert "$LEASEFS_ETCD_CA" --cert "$LEASEFS_ETCD_CERT" --key "$LEASEFS_ETCD_KEY")
	curl -sf "${tls[@]}" --max-time 5 -d "{\"key\":\"$k\"}" "$ETCD_CLIENT_URL/v3/kv/put" >/dev/null ||
		fail "cannot settle the etcd prefix $1"
}

# peer_start CMD...: a harness peer (tests/integration/*_peer*) in the
# background, killed at exit: its output in $PEER_OUT, its stdin on fd
# $PEER_IN (closing it releases what it holds).
peer_start() {
	local out
	out=$(mktemp -u "$T/peer.XXXXXX")
	mkfifo "$out.in"
	"$@" <"$out.in" >"$out" 2>&1 &
	PEER_PID=$!
	PIDS+=("$PEER_PID")
	exec {PEER_IN}>"$out.in"
	PEER_OUT=$out
}
# peer_says RE [TIMEOUT_S]: the peer printed a line matching RE.
peer_says() { wait_until "${2:-10}" grep -q "$1" "$PEER_OUT" || fail "peer did not say '$1': $(cat "$PEER_OUT")"; }
peer_release() { exec {PEER_IN}>&-; wait "$PEER_PID" 2>/dev/null || true; }
peer_epoch() { awk '/^granted/ {print $2}' "$PEER_OUT"; }

# The battery the harness stores with expiry share (test_pgstore,
# test_natsstore): revoke of the mount, revoke of a harness peer, kill -9 of
# either.  The test defines start_peer MODE and peer_try, and sets R, M,
# NAME, TTL and me (the mount's epoch); RECORD names what expires ("row",
# "entry").  Leaves me and pe (the last peer's epoch) set.
harness_expiry_battery() {
	local rc out t0 dt
	# 4. Revoke of the mount: the peer, trying all along, is granted only
	#    once the mount is read-only (its first write through it is EROFS).
	exec 7>>"$M/r"
	WRITE_PROBE=$M/after start_peer wait
	"$LEASEFS" lease revoke "$NAME" >"$T/revoke.out" 2>&1 || fail "revoke: $(cat "$T/revoke.out")"
	grep -q "acknowledged" "$T/revoke.out" || fail "revoke did not see the ack: $(cat "$T/revoke.out")"
	peer_says '^probe: '
	grep -q '^probe: EROFS' "$PEER_OUT" || fail "the peer was granted while the mount still wrote: $(cat "$PEER_OUT")"
	[ "$(peer_epoch)" -eq $((me + 1)) ] || fail "peer granted at $(peer_epoch), want $((me + 1))"
	expect_erofs bash -c "echo more >&7"
	[ ! -e "$R/after" ] || fail "a write reached the root"
	exec 7>&-
	ok "revoke: the peer is granted epoch $((me + 1)) only after the mount turned read-only"
	"$LEASEFS" umount "$M"

	# 5. A revoke of the peer cannot tell it: exit 3, and it keeps the
	#    name (it renews past its first expiry).
	pe=$(peer_epoch)
	rc=0; "$LEASEFS" lease revoke "$NAME" --timeout=$((TTL * 3)) >"$T/revoke.out" 2>&1 || rc=$?
	[ $rc -eq 3 ] || fail "revoke of a harness holder: exit $rc ($(cat "$T/revoke.out"))"
	grep -q "not a leasefs mount" "$T/revoke.out" || fail "revoke did not say why: $(cat "$T/revoke.out")"
	out=$(peer_try)
	[ "$out" = "busy $pe" ] || fail "after the revoke another peer got '$out', want 'busy $pe'"
	ok "revoke of a live harness holder exits 3 and says it cannot be told; it keeps the name"

	# 6. kill -9 of the holding peer: its $RECORD expires (on the store's
	#    clock); a mount waiting for it gets the next epoch then, not before.
	kill -9 "$PEER_PID"; wait "$PEER_PID" 2>/dev/null || true
	t0=$(date +%s%N)
	mount_ws "$R" "$M" --ttl=$TTL --wait=$((TTL * 3))
	dt=$(( ($(date +%s%N) - t0) / 1000000 ))
	[ "$(status_of "$M" epoch)" -eq $((pe + 1)) ] || fail "after the peer's kill -9: epoch $(status_of "$M" epoch)"
	ok "peer killed -9: the mount gets epoch $((pe + 1)) once the $RECORD expired (${dt} ms)"

	# 7. kill -9 of the mount's daemon: the peer gets the name only after
	#    the daemon's $RECORD expired.
	me=$(status_of "$M" epoch)
	kill -9 "$DAEMON_PID"
	start_peer wait
	peer_says '^granted ' $((TTL * 4))
	[ "$(peer_epoch)" -eq $((me + 1)) ] || fail "peer after the daemon's kill -9: $(cat "$PEER_OUT")"
	ok "daemon killed -9: the waiting peer gets epoch $((me + 1)) after its expiry"
	peer_release
	"$LEASEFS" umount "$M" 2>/dev/null || true
}

# The opening the harness stores share (test_pgstore, test_natsstore): a
# peer holding the root keeps the mount out (75, naming its epoch); once it
# releases, the mount gets the next epoch and the peer is refused with it.
# Uses start_peer and peer_try; sets pe and me.
harness_contend() {
	local rc out
	# 1. The peer holds the root: the mount is busy, naming the peer's epoch.
	start_peer hold
	peer_says '^granted '
	pe=$(peer_epoch)
	rc=0; out=$(timeout 30 "$LEASEFS" mount --ttl=$TTL "$R" "$M" 2>&1) || rc=$?
	[ $rc -eq 75 ] || fail "mount while the peer holds: exit $rc ($out)"
	case "$out" in *"held at epoch $pe"*) ;; *) fail "busy message lacks the peer's epoch $pe: $out" ;; esac
	findmnt -rn "$M" >/dev/null && fail "something mounted"
	ok "peer holds at epoch $pe: mount exits 75 naming it"

	# 2. The peer releases: the mount gets epoch + 1; the peer is refused
	#    with the mount's epoch.
	peer_release
	mount_ws "$R" "$M" --ttl=$TTL
	me=$(status_of "$M" epoch)
	[ "$me" -eq $((pe + 1)) ] || fail "mount epoch $me, want $((pe + 1))"
	out=$(peer_try)
	[ "$out" = "busy $me" ] || fail "peer while the mount holds: '$out', want 'busy $me'"
}

# writer_start MNT TAG EPOCH [on_b]: records.py appending fsync-acknowledged
# records to MNT/log as TAG at EPOCH (acknowledgements in $T/ack.TAG, its
# output in $T/writer.TAG), run by the optional prefix; returns once it
# writes.  WRITER_PID is its pid.
writer_start() {
	local mnt=$1 tag=$2 epoch=$3
	${4:-} python3 -u "$HERE/records.py" write "$mnt/log" "$tag" "$epoch" "$T/ack.$tag" \
		>"$T/writer.$tag" 2>&1 &
	WRITER_PID=$!
	PIDS+=("$WRITER_PID")
	wait_until 10 grep -q writing "$T/writer.$tag" || fail "writer $tag: $(cat "$T/writer.$tag")"
}

# handover OLD_MNT NEW_MNT ROOT: once a successor on host B (on_b) is
# granted, the old holder (writer "old") no longer says held, its writer
# stopped and a write there is EROFS; the successor writes (writer "new");
# records.py finds no old record after a newer one.  HANDOVER_EPOCH is the
# successor's epoch, HANDOVER_OLD the old holder's state.
handover() {
	local m=$1 mb=$2 r=$3 out
	HANDOVER_EPOCH=$(on_b "$LEASEFS" status "$mb" --json | json_get epoch)
	HANDOVER_OLD=$(status_of "$m" state)
	[ "$HANDOVER_OLD" != held ] || fail "the old holder still says held after its successor's grant"
	grep -q stopped "$T/writer.old" ||
		fail "the old holder's writer still writes after the successor's grant: $(cat "$T/writer.old")"
	expect_erofs bash -c "echo late >> '$m/f'"
	writer_start "$mb" new "$HANDOVER_EPOCH" on_b
	wait_until 10 bash -c "[ \$(wc -l < '$T/ack.new') -gt 20 ]" || fail "the successor does not write"
	kill "$WRITER_PID" 2>/dev/null || true
	out=$(python3 "$HERE/records.py" check "$r/log" "$T/ack.old" "$T/ack.new") || true
	echo "   $out"
	case "$out" in *"after a newer one"*) fail "wipe: $out" ;; esac
}
