#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The second adversarial pass against a real etcd (issue 22), each section
# a finding that held on 7c8f2bf:
#  (a) one host, one exclusive writer per root whatever the stores: a
#      file-store and an etcd mount of one root, two etcd prefixes (#9);
#  (b) nested roots across hosts on etcd, both ways (#1);
#  (c) the revoke fence gap: the revoker's link to etcd is slow and the
#      holder is cut off right after a keepalive that succeeded while the
#      revoke was under way; when the successor is granted, the holder must
#      already refuse every write (#3);
#  (d) a holder paused (all threads, by a debugger breakpoint on the
#      passthrough's write handler) after the gate admitted a write and
#      before the backing write, past its TTL: the write never lands once a
#      successor started (#4);
#  (e) a write the gate admitted stalled in the kernel at will by a host
#      user (it holds the file's inode lock in a write(2) whose buffer is
#      an mmap of a FUSE file that never answers): revoke cannot let a
#      successor in until the write landed and the holder drained (#8).
# Host B is a mount namespace with its own /run/leasefs (lib.sh).
# bound: 180
if [ -z "${LEASEFS_ETCD_ENDPOINTS:-}" ]; then
	exec timeout -k 10 "${IT_TIMEOUT:-300}" \
		"$(dirname "$0")/../etcd-harness.sh" bash "$0" "$@"
fi
IT_TIMEOUT=${IT_TIMEOUT:-300}
. "$(dirname "$0")/lib.sh"

EP=${LEASEFS_ETCD_ENDPOINTS%%,*}
U="etcd://$EP/leasefs-it-fence-$$"
UD="etcd://$EP/leasefs-it-gap-$$"
for p in fence-$$ fence-$$-p1 fence-$$-p2 gap-$$; do etcd_settle "/leasefs-it-$p/"; done
now_ms() { date +%s%3N; }
start_host_b

# expect_refused RC-WANT WANT-IN-MESSAGE CMD...
expect_refused() {
	local want=$1 msg=$2 rc=0 out; shift 2
	out=$("$@" 2>&1) || rc=$?
	[ $rc -eq "$want" ] || fail "$*: exit $rc, want $want ($out)"
	case "$out" in *"$msg"*) ;; *) fail "$*: message lacks '$msg': $out" ;; esac
	echo "   refused: $out"
}

# ---------------------------------------------------------------- (a)
sec_a() {
	R=$T/ra
	mkdir -p "$R" "$T/ma2" "$T/ra2" "$T/ma4"
	MOUNTS+=("$T/ma2" "$T/ma4")
	mount_ws "$R" "$T/ma1"
	e=$(status_of "$T/ma1" epoch)
	expect_refused 75 "held at epoch $e" timeout 30 "$LEASEFS" mount --leases="$U" "$R" "$T/ma2"
	"$LEASEFS" umount "$T/ma1"
	mount_ws "$T/ra2" "$T/ma3" --leases="$U-p1"
	expect_refused 75 "workspace busy: $T/ra2 held" timeout 30 "$LEASEFS" mount --leases="$U-p2" "$T/ra2" "$T/ma4"
	"$LEASEFS" umount "$T/ma3"
	ok "(a) file store and etcd, and two etcd prefixes, exclude each other on one host"
}

# ---------------------------------------------------------------- (b)
sec_b() {
	R=$T/rb S=$T/rb/sub
	mkdir -p "$S" "$T/mb2" "$T/mb3"
	MOUNTS+=("$T/mb2")
	mount_ws "$R" "$T/mb1" --leases="$U"
	e=$(status_of "$T/mb1" epoch)
	expect_refused 75 "is inside workspace $R, held at epoch $e" \
		on_b timeout 30 "$LEASEFS" mount --leases="$U" "$S" "$T/mb2"
	"$LEASEFS" umount "$T/mb1"
	on_b timeout 30 "$LEASEFS" mount --leases="$U" "$S" "$T/mb2" || fail "(b) host B cannot take $S"
	expect_refused 75 "contains workspace $S" timeout 30 "$LEASEFS" mount --leases="$U" "$R" "$T/mb3"
	MOUNTS+=("$T/mb3")
	on_b timeout 15 "$LEASEFS" umount "$T/mb2"
	ok "(b) across hosts on etcd: inside and around a held root refused both ways"
}

# ---------------------------------------------------------------- (c)
sec_c() {
	read -r PH PR < <(python3 -c 'import socket; s = [socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1", 0)) for x in s]; print(*[x.getsockname()[1] for x in s])')
	mkdir -p "$T/ph" "$T/pr"
	for p in "$PH:$T/ph" "$PR:$T/pr"; do
		python3 -u "$HERE/etcdproxy.py" "${p%%:*}" "$EP" "${p#*:}" >"${p#*:}.out" 2>&1 &
		PIDS+=("$!"); disown "$!"
		wait_until 10 grep -q ready "${p#*:}.out" || fail "(c) proxy: $(cat "${p#*:}.out")"
	done
	UH="etcd://127.0.0.1:$PH/leasefs-it-gap-$$" UR="etcd://127.0.0.1:$PR/leasefs-it-gap-$$"
	R=$T/rc MA=$T/mca MB=$T/mcb TTL=5
	mount_ws "$R" "$MA" --leases="$UH" --ttl=$TTL
	lease=$(status_of "$MA" lease)
	echo before > "$MA/f"
	touch "$T/ph/stall-watch"          # the holder hears nothing of the delete
	echo 3 > "$T/pr/delay"             # every request of the revoker: +3 s
	t0=$(now_ms)
	"$LEASEFS" lease revoke --leases="$UR" --timeout=60 "$lease" >"$T/revoke-c.out" 2>&1 &
	rpid=$!
	not_held() { ! has_line '^state: *held' "$LEASEFS" lease show --leases="$UD" "$lease"; }
	wait_until 40 not_held || fail "(c) the holder's key was never deleted"
	tdel=$(now_ms)
	touch "$T/ph/cut-after-ka"         # cut right after the next keepalive answer
	wait_until 10 test -e "$T/ph/cut" || fail "(c) no keepalive answer to cut after"
	tcut=$(now_ms)
	mkdir -p "$MB"; MOUNTS+=("$MB")
	on_b timeout 60 "$LEASEFS" mount --leases="$UD" --ttl=$TTL --wait=50 "$R" "$MB" ||
		fail "(c) no successor"
	tsucc=$(now_ms)
	PIDS+=("$(on_b "$LEASEFS" status "$MB" --json | json_get pid)")
	# The successor holds the root now: the holder must refuse at once.
	if timeout 5 bash -c "echo late >> '$MA/f'" 2>/dev/null; then
		fail "(c) the cut-off holder still wrote $(( $(now_ms) - tsucc )) ms after its successor was granted (key deleted at +$((tdel - t0)) ms, cut at +$((tcut - t0)) ms, successor at +$((tsucc - t0)) ms)"
	fi
	[ "$(cat "$R/f")" = before ] || fail "(c) root holds: $(cat "$R/f")"
	wait "$rpid" || fail "(c) revoke exited $?: $(cat "$T/revoke-c.out")"
	echo "(c) measured: key deleted +$((tdel - t0)) ms, holder cut +$((tcut - t0)) ms, successor +$((tsucc - t0)) ms after the revoke started; revoke said: $(cat "$T/revoke-c.out")"
	on_b timeout 15 "$LEASEFS" umount "$MB"
	ok "(c) slow revoker link, holder cut after a keepalive: no write of the holder once the successor held the root"
}

# ---------------------------------------------------------------- (d)
sec_d() {
	R=$T/rd MA=$T/mda MB=$T/mdb TTL=3
	mount_ws "$R" "$MA" --leases="$UD" --ttl=$TTL
	pa=$DAEMON_PID
	echo before > "$MA/f"
	cat > "$T/gdb.cmd" <<-EOF
	set pagination off
	set confirm off
	break lfs_write_buf
	commands
	  shell touch '$T/hit'
	  shell while [ ! -e '$T/go' ]; do sleep 0.05; done
	  delete
	  detach
	  quit
	end
	continue
	EOF
	gdb -q -batch -p "$pa" -x "$T/gdb.cmd" >"$T/gdb.log" 2>&1 &
	gpid=$!
	wait_until 20 grep -q "^Breakpoint 1 at" "$T/gdb.log" || fail "(d) gdb did not attach: $(cat "$T/gdb.log")"
	(rc=0; timeout 60 bash -c "echo late >> '$MA/f'" 2>"$T/w-d.err" || rc=$?; echo $rc >"$T/w-d.rc") &
	wait_until 20 test -e "$T/hit" || fail "(d) the write never reached the passthrough: $(cat "$T/gdb.log")"
	thit=$(now_ms)
	mkdir -p "$MB"; MOUNTS+=("$MB")
	on_b timeout 30 "$LEASEFS" mount --leases="$UD" --ttl=$TTL --wait=20 "$R" "$MB" ||
		fail "(d) no successor while the holder was paused"
	tsucc=$(now_ms)
	PIDS+=("$(on_b "$LEASEFS" status "$MB" --json | json_get pid)")
	on_b sh -c "echo successor >> '$MB/f'"
	touch "$T/go"
	wait_until 30 test -e "$T/w-d.rc" || fail "(d) the paused write never returned"
	wait "$gpid" 2>/dev/null || true
	[ "$(cat "$T/w-d.rc")" != 0 ] || fail "(d) the admitted write succeeded after the successor started"
	grep -q "Read-only file system" "$T/w-d.err" || fail "(d) the write failed with: $(cat "$T/w-d.err")"
	[ "$(cat "$R/f")" = "$(printf 'before\nsuccessor')" ] || fail "(d) root holds: $(cat "$R/f")"
	echo "(d) measured: holder paused at the write handler; successor granted $((tsucc - thit)) ms later; the write then got EROFS"
	on_b timeout 15 "$LEASEFS" umount "$MB"
	ok "(d) a write admitted, then paused past the TTL, never lands after the successor started"
}

# ---------------------------------------------------------------- (e)
sec_e() {
	R=$T/re MA=$T/mea MB=$T/meb TTL=3
	mount_ws "$R" "$MA" --leases="$UD" --ttl=$TTL
	echo before > "$MA/f"
	lease=$(status_of "$MA" lease)
	stall_write_start "$R/f"
	(rc=0; timeout 60 bash -c "echo late >> '$MA/f'" || rc=$?; echo $rc >"$T/w-e.rc") &
	inflight() { [ "$("$LEASEFS" metrics "$MA" | awk '/^leasefs_mutations_in_flight/ { print $2 }')" = 1 ]; }
	wait_until 10 inflight || fail "(e) the write was not admitted"
	rc=0; out=$("$LEASEFS" lease revoke --leases="$UD" --timeout=$((TTL + 3)) "$lease" 2>&1) || rc=$?
	[ $rc -eq 3 ] || fail "(e) revoke with a stalled write exited $rc, want 3 (not fenced): $out"
	mkdir -p "$MB"; MOUNTS+=("$MB")
	rc=0; out=$(on_b timeout 30 "$LEASEFS" mount --leases="$UD" --ttl=$TTL "$R" "$MB" 2>&1) || rc=$?
	[ $rc -eq 75 ] || fail "(e) a successor mounted while a write was stalled (rc $rc: $out)"
	stall_write_finish
	wait_until 20 test -e "$T/w-e.rc" || fail "(e) the stalled write never returned"
	[ "$(cat "$T/w-e.rc")" = 0 ] || fail "(e) the stalled write, admitted before the loss, failed"
	on_b timeout 30 "$LEASEFS" mount --leases="$UD" --ttl=$TTL --wait=20 "$R" "$MB" ||
		fail "(e) no successor after the holder drained"
	PIDS+=("$(on_b "$LEASEFS" status "$MB" --json | json_get pid)")
	snap=$(cat "$R/f")
	grep -q late <<<"$snap" || fail "(e) the stalled write did not land: $snap"
	expect_erofs timeout 5 bash -c "echo after >> '$MA/f'"
	[ "$(cat "$R/f")" = "$snap" ] || fail "(e) root changed after the successor started"
	on_b timeout 15 "$LEASEFS" umount "$MB"
	ok "(e) a stalled write kept the name shut (revoke: not fenced, successor: busy) until it landed and the holder drained"
}

# FENCE_ONLY=LETTERS runs those sections (e.g. FENCE_ONLY=ce).
for s in a b c d e; do
	case "${FENCE_ONLY:-abcde}" in *$s*) "sec_$s" ;; esac
done
echo PASS
