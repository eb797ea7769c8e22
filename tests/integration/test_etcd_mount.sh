#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Daemon-level etcd tests (issue 5), against a real etcd started by
# tests/etcd-harness.sh (which stops it by pid), TTL 3 s:
#  (a) kill -9 of the holding daemon: a second mount with --wait acquires
#      within TTL + 2 s with a higher epoch (reclaim time printed);
#  (b) stale holder: daemon A SIGSTOPped past its TTL; a mount on A's host
#      is refused (A's host lock); mount B on a second host (a mount
#      namespace with its own /run/leasefs) acquires and writes, A is
#      SIGCONTed: every mutation through A is EROFS and the backing root
#      holds only B's writes (times printed);
#  (c) etcd SIGSTOPped: the holder turns EROFS within TTL + 1 s of the stop
#      (time printed); after SIGCONT no write lands through that mount;
#  (d) operator revoke of a SIGSTOPped holder with writes queued: no
#      successor until the fence entry expired (revoke says "expired"),
#      and none of the queued writes lands after the successor started;
#  (e) a new store (max_ttl=3): a mount is told busy, naming the store's
#      marker and the time left; a --wait mount is granted once the marker
#      is max_ttl and a third old; then etcd is killed -9 and started
#      again at once without its data (as another cluster) while that
#      mount writes: it turns read-only, and a mount on host B waiting for
#      the root is granted no sooner than max_ttl and a third after the
#      kill, after the old holder's last record.
# A stopped daemon's mount point is only ever touched through `timeout`;
# cleanup continues and kills stopped daemons and etcd before unmounting.
# bound: 120
if [ -z "${LEASEFS_ETCD_ENDPOINTS:-}" ]; then
	exec timeout -k 10 "${IT_TIMEOUT:-240}" \
		"$(dirname "$0")/../etcd-harness.sh" bash "$0" "$@"
fi
. "$(dirname "$0")/lib.sh"

TTL=3
U="etcd://$LEASEFS_ETCD_ENDPOINTS/leasefs-it-mount-$$"
etcd_settle "/leasefs-it-mount-$$/"
STOPPED=()  # daemons we SIGSTOPped (SIGCONT + SIGKILL at exit)
ETCD_STOPPED=

cleanup_etcd() {
	local rc=$? p
	set +e  # cleanup must run to the end
	for p in "${STOPPED[@]}"; do
		kill -CONT "$p" 2>/dev/null || true
		kill -9 "$p" 2>/dev/null || true
	done
	[ -z "$ETCD_STOPPED" ] || kill -CONT "$ETCD_PID" 2>/dev/null || true
	for p in "${STOPPED[@]}"; do wait_pid_gone "$p" 5 || true; done
	(exit $rc)  # lib.sh's cleanup exits with the status it finds in $?
	cleanup
}
trap cleanup_etcd EXIT

now_ms() { date +%s%3N; }
unstop() { # PID: SIGCONT and forget it
	local p=$1 i
	kill -CONT "$p"
	for i in "${!STOPPED[@]}"; do [ "${STOPPED[$i]}" != "$p" ] || unset "STOPPED[$i]"; done
}
# tstatus MNT KEY: status bounded (the daemon may have been stopped)
tstatus() { timeout 5 "$LEASEFS" status "$1" --json | json_get "$2"; }
state_is() { [ "$(tstatus "$1" state 2>/dev/null)" = "$2" ]; }
etcd_healthy() { has_line '"health":"true"' curl -s --max-time 1 "$ETCD_CLIENT_URL/health"; }

# ---------------------------------------------------------------- (a)
R=$T/ra M1=$T/ma1 M2=$T/ma2
mount_ws "$R" "$M1" --leases="$U" --ttl=$TTL
case "$(status_of "$M1" backend)" in etcd*) ;; *) false ;; esac || fail "(a) backend is $(status_of "$M1" backend)"
e1=$(status_of "$M1" epoch)
# TTL stores report their safe-until: ahead of now by at most the TTL.
vu=$("$LEASEFS" metrics "$M1" | awk '/^leasefs_lease_valid_until_seconds/ { print $2 }')
python3 -c 'import sys, time; v = float(sys.argv[1]); n = time.time(); sys.exit(not (n < v <= n + float(sys.argv[2])))' "$vu" "$TTL" ||
	fail "(a) valid_until $vu not within TTL of now"
echo first > "$M1/f"
pid1=$DAEMON_PID
kill -9 "$pid1"
t0=$(now_ms)
wait_pid_gone "$pid1" 10 || fail "(a) daemon survived kill -9"
mount_ws "$R" "$M2" --leases="$U" --ttl=$TTL --wait=10
t1=$(now_ms)
e2=$(status_of "$M2" epoch)
reclaim=$((t1 - t0))
echo "(a) measured: reclaim after kill -9 = ${reclaim} ms (TTL ${TTL} s), epoch $e1 -> $e2"
[ "$reclaim" -lt $(((TTL + 2) * 1000)) ] || fail "(a) reclaim took ${reclaim} ms >= TTL+2 s"
[ "$e2" -gt "$e1" ] || fail "(a) epoch $e2 not above $e1"
[ "$(status_of "$M2" state)" = held ] || fail "(a) second mount not held"
echo second >> "$M2/f"
[ "$(cat "$R/f")" = "$(printf 'first\nsecond')" ] || fail "(a) backing root: $(cat "$R/f")"
timeout 15 "$LEASEFS" umount "$M2" || fail "(a) umount of the second mount failed"
timeout 15 "$LEASEFS" umount "$M1" || fail "(a) umount of the dead mount failed"
ok "(a) kill -9: reclaimed in ${reclaim} ms < $(((TTL + 2) * 1000)) ms, epoch $e1 -> $e2"

# ---------------------------------------------------------------- (b)
R=$T/rb MA=$T/mba MB=$T/mbb
mount_ws "$R" "$MA" --leases="$U" --ttl=$TTL
pa=$DAEMON_PID
ea=$(status_of "$MA" epoch)
echo a-before > "$MA/a"
exec 3>>"$MA/a"   # opened for writing under the lease, written after loss
STOPPED+=("$pa")
kill -STOP "$pa"
t0=$(now_ms)

# On this host a second mount is refused for as long as A lives: A still
# holds the host lock, and a stopped holder may resume with a write it had
# admitted (lease/README.md, "No two writers").
mkdir -p "$T/mbsame"
rc=0; out=$(timeout 30 "$LEASEFS" mount --leases="$U" --ttl=$TTL "$R" "$T/mbsame" 2>&1) || rc=$?
MOUNTS+=("$T/mbsame")
[ $rc -eq 75 ] || fail "(b) a mount on A's host beside the stopped A: exit $rc ($out)"
# B on another host: once A's etcd lease expired, B gets the root although
# A is still alive (stopped) and still has its mount.
start_host_b
mkdir -p "$MB"
MOUNTS+=("$MB")
out=$(on_b timeout 30 "$LEASEFS" mount --leases="$U" --ttl=$TTL --wait=$((TTL + 4)) \
	"$R" "$MB" 2>&1) || fail "(b) mount B refused while A is stopped: $out"
tb=$(now_ms)
PB=$(on_b "$LEASEFS" status "$MB" --json | json_get pid); PIDS+=("$PB")
bx() { on_b timeout 10 "$@"; }
eb=$(bx "$LEASEFS" status "$MB" --json | json_get epoch)
echo "(b) measured: B acquired $((tb - t0)) ms after SIGSTOP of A (TTL ${TTL} s), epoch $ea -> $eb"
[ "$eb" -gt "$ea" ] || fail "(b) B's epoch $eb not above A's $ea"
bx sh -c "echo b-wrote > '$MB/a' && echo b-new > '$MB/b' && mkdir '$MB/bdir'" ||
	fail "(b) B cannot write"

unstop "$pa"
tc=$(now_ms)
# A is running again: every mutation must be EROFS at once.
expect_erofs timeout 5 bash -c 'echo a-late >&3' # write on a fd opened under the lease
exec 3>&-
expect_erofs timeout 5 bash -c "echo a-late >> '$MA/a'"   # write (open for writing)
expect_erofs timeout 5 bash -c "echo a-late > '$MA/newfile'" # create
expect_erofs timeout 5 mkdir "$MA/adir"
expect_erofs timeout 5 mv "$MA/a" "$MA/a-renamed"
expect_erofs timeout 5 rm "$MA/a"
expect_erofs timeout 5 rm -r "$MA/bdir"
terofs=$(now_ms)
wait_until 10 state_is "$MA" lost || fail "(b) A's status never turned lost: $(tstatus "$MA" state)"
tlost=$(now_ms)
echo "(b) measured: all mutations EROFS within $((terofs - tc)) ms of SIGCONT; status 'lost' after $((tlost - tc)) ms"
# The backing root holds only B's writes.
[ "$(cat "$R/a")" = b-wrote ] || fail "(b) $R/a: $(cat "$R/a")"
[ "$(cat "$R/b")" = b-new ] || fail "(b) $R/b: $(cat "$R/b")"
[ -d "$R/bdir" ] || fail "(b) B's directory gone"
listing=$(cd "$R" && ls -A | tr '\n' ' ')
[ "$listing" = "a b bdir " ] || fail "(b) backing root holds: $listing"
# ...and B still holds and writes.
bx sh -c "echo b-after >> '$MB/a'" || fail "(b) B cannot write after A resumed"
[ "$(cat "$R/a")" = "$(printf 'b-wrote\nb-after')" ] || fail "(b) $R/a: $(cat "$R/a")"
bx "$LEASEFS" umount "$MB" || fail "(b) umount B failed"
timeout 15 "$LEASEFS" umount "$MA" || fail "(b) umount A failed"
wait_pid_gone "$pa" 10 || fail "(b) A did not exit"
ok "(b) stale holder: every mutation EROFS, backing root holds only B's writes"

# ---------------------------------------------------------------- (c)
R=$T/rc MC=$T/mc
mount_ws "$R" "$MC" --leases="$U" --ttl=$TTL
ec=$(status_of "$MC" epoch)
echo c-before > "$MC/f"
ETCD_STOPPED=1
kill -STOP "$ETCD_PID"
t0=$(now_ms)
n=0 out=
deadline=$((t0 + (TTL + 5) * 1000))
while :; do
	if out=$(timeout 5 bash -c "echo c-$n >> '$MC/f'" 2>&1); then
		n=$((n + 1))
	else
		break
	fi
	[ "$(now_ms)" -lt "$deadline" ] || fail "(c) still writable $((TTL + 5)) s after etcd stopped"
	sleep 0.02
done
t1=$(now_ms)
case "$out" in *"Read-only file system"*) ;; *) fail "(c) want EROFS, got: $out" ;; esac
fence=$((t1 - t0))
echo "(c) measured: EROFS ${fence} ms after SIGSTOP of etcd (TTL ${TTL} s); $n writes succeeded before; state now $(tstatus "$MC" state)"
[ "$fence" -lt $(((TTL + 1) * 1000)) ] || fail "(c) fenced after ${fence} ms >= TTL+1 s"
snapshot=$(cat "$R/f")
[ "$(echo "$snapshot" | wc -l)" -eq $((n + 1)) ] || fail "(c) backing file has $(echo "$snapshot" | wc -l) lines, want $((n + 1))"
kill -CONT "$ETCD_PID"
ETCD_STOPPED=
tc=$(now_ms)
wait_until 15 etcd_healthy || fail "(c) etcd not healthy after SIGCONT"
th=$(now_ms)
wait_until 15 state_is "$MC" lost || fail "(c) status never turned lost: $(tstatus "$MC" state)"
tl=$(now_ms)
echo "(c) measured: etcd healthy $((th - tc)) ms after SIGCONT, mount 'lost' after $((tl - tc)) ms"
# Through at least two keepalive periods (TTL/3) after etcd answers again:
# no write lands through the stale mount.
end=$(($(now_ms) + 2 * TTL * 1000 / 3 + 500))
tries=0
while [ "$(now_ms)" -lt "$end" ]; do
	expect_erofs timeout 5 bash -c "echo c-late >> '$MC/f'"
	expect_erofs timeout 5 bash -c "echo c-late > '$MC/g'"
	tries=$((tries + 1))
	sleep 0.05
done
expect_erofs timeout 5 mkdir "$MC/d"
expect_erofs timeout 5 rm "$MC/f"
[ "$(cat "$R/f")" = "$snapshot" ] || fail "(c) a write landed after the fence"
[ "$(cd "$R" && ls -A)" = f ] || fail "(c) backing root holds: $(cd "$R" && ls -A)"
[ "$(tstatus "$MC" epoch)" = "$ec" ] || fail "(c) epoch changed"
echo "(c) measured: $tries write attempts after etcd resumed, all EROFS"
timeout 15 "$LEASEFS" umount "$MC" || fail "(c) umount failed"
ok "(c) etcd stopped: EROFS after ${fence} ms < $(((TTL + 1) * 1000)) ms; no write after SIGCONT"

# ---------------------------------------------------------------- (d)
R=$T/rd MA=$T/mda MB=$T/mdb
mount_ws "$R" "$MA" --leases="$U" --ttl=$TTL
pa=$DAEMON_PID
lease=$(status_of "$MA" lease)
echo start > "$R/q"
STOPPED+=("$pa")
kill -STOP "$pa"
(for i in $(seq 16); do { timeout 30 bash -c "echo w$i >> '$MA/q'"; } 2>/dev/null || true; done) &
wpid=$!
t0=$(now_ms)
"$LEASEFS" lease revoke --leases="$U" --timeout=$((TTL + 4)) "$lease" >"$T/revoke.out" 2>&1 &
rpid=$!
gone() { ! has_line '^state: *held' "$LEASEFS" lease show --leases="$U" "$lease"; }
wait_until 5 gone || fail "(d) the holder's key was not deleted"
mkdir -p "$MB"
MOUNTS+=("$MB")
rc=0; on_b timeout 10 "$LEASEFS" mount --leases="$U" --ttl=$TTL "$R" "$MB" 2>/dev/null || rc=$?
[ $rc -eq 75 ] || fail "(d) a successor mounted while the revoked holder was not fenced (rc $rc)"
wait "$rpid" || fail "(d) revoke exited $?: $(cat "$T/revoke.out")"
trev=$(now_ms)
grep -q "TTL has run out" "$T/revoke.out" || fail "(d) revoke did not report expiry: $(cat "$T/revoke.out")"
on_b timeout 30 "$LEASEFS" mount --leases="$U" --ttl=$TTL "$R" "$MB" || fail "(d) successor on host B"
PIDS+=("$(on_b "$LEASEFS" status "$MB" --json | json_get pid)")
tb=$(now_ms)
snap=$(cat "$R/q")
unstop "$pa"
wait_pid_gone "$wpid" 30 || fail "(d) queued writer still blocked"
[ "$(cat "$R/q")" = "$snap" ] || fail "(d) the revoked holder wrote after its successor started: $(cat "$R/q")"
on_b sh -c "echo b >> '$MB/q'" || fail "(d) successor cannot write"
echo "(d) measured: revoke reported expiry $((trev - t0)) ms after it started (TTL ${TTL} s + 1 s fence); successor held $((tb - t0)) ms after the revoke; $(grep -c '^w' "$R/q") of 16 queued writes landed, all before"
on_b timeout 15 "$LEASEFS" umount "$MB" || fail "(d) umount B failed"
timeout 15 "$LEASEFS" umount "$MA" || fail "(d) umount A failed"
ok "(d) revoke of a stopped holder: successor only after the fence expired; no late write"

# ---------------------------------------------------------------- (e)
etcd_up_or_gone() { ! alive "$ETCD_PID" || etcd_healthy; }
# etcd_restart_wiped: kill -9 the first member and start it again on its
# ports without its data, under another cluster token (another cluster).
etcd_restart_wiped() {
	local args=() unset=() a next=
	while IFS= read -r -d '' a; do
		[ -z "$next" ] || a=leasefs-wiped-$$
		next=
		[ "$a" != --initial-cluster-token ] || next=1
		args+=("$a")
	done <"/proc/$ETCD_PID/cmdline"
	kill -9 "$ETCD_PID"
	wait_pid_gone "$ETCD_PID" 10 || fail "(e) etcd survived kill -9"
	rm -rf "$ETCD_DATA_DIR"
	# etcd reads ETCD_* variables as flags: keep the harness's out.
	for a in $(compgen -e | grep '^ETCD_'); do unset+=(-u "$a"); done
	# Its threads may hold the ports a moment after the main one is gone:
	# a start that cannot bind exits, and is tried again.
	for _ in 1 2 3 4 5; do
		env "${unset[@]}" "${args[@]}" >>"$T/etcd-wiped.log" 2>&1 &
		ETCD_PID=$!
		PIDS+=("$ETCD_PID")
		wait_until 15 etcd_up_or_gone
		! etcd_healthy || return 0
		sleep 0.2
	done
	fail "(e) etcd did not come back: $(tail -5 "$T/etcd-wiped.log")"
}
R=$T/re M=$T/me MB=$T/meb
UW="etcd://$LEASEFS_ETCD_ENDPOINTS/leasefs-it-wipe-$$?max_ttl=$TTL"
GRACE_MS=$((TTL * 1000 + TTL * 1000 / 3))
mkdir -p "$R" "$M"
MOUNTS+=("$M")
rc=0; out=$(timeout 30 "$LEASEFS" mount --leases="$UW" --ttl=$TTL "$R" "$M" 2>&1) || rc=$?
[ $rc -eq 75 ] || fail "(e) a mount on a new store: exit $rc ($out)"
case "$out" in *'!store'*'s to go'*) ;; *) fail "(e) a mount on a new store says: $out" ;; esac
echo "(e) a mount on a new store: $out"
t0=$(now_ms)
mount_ws "$R" "$M" --leases="$UW" --ttl=$TTL --wait=20
t1=$(now_ms)
echo "(e) measured: a --wait mount on a new store granted $((t1 - t0)) ms after the refusal (max_ttl $TTL s)"
[ $((t1 - t0)) -ge $((GRACE_MS - 100)) ] || fail "(e) a new store granted after $((t1 - t0)) ms < ${GRACE_MS} ms"
start_host_b
mkdir -p "$MB"
: >"$R/log"
e=$(status_of "$M" epoch)
writer_start "$M" old "$e"
wait_until 10 bash -c "[ \$(wc -l < '$T/ack.old') -gt 20 ]" || fail "(e) the holder does not write"
tkill=$(now_ms)
etcd_restart_wiped
tup=$(now_ms)
MOUNTS+=("$MB")
on_b timeout 60 "$LEASEFS" mount --leases="$UW" --ttl=$TTL --wait=30 "$R" "$MB" >"$T/mount-eb.out" 2>&1 ||
	fail "(e) no successor after the wipe: $(cat "$T/mount-eb.out")"
tsucc=$(now_ms)
PIDS+=("$(on_b "$LEASEFS" status "$MB" --json | json_get pid)")
handover "$M" "$MB" "$R"
exec {wfd}< <(exec timeout 10 "$LEASEFS" watch "$M")   # its state now, as a line
wpid=$!
why=; read -r -t 5 -u "$wfd" why || true
kill "$wpid" 2>/dev/null || true; exec {wfd}<&-
echo "(e) measured: etcd back $((tup - tkill)) ms after the kill; the successor (epoch $HANDOVER_EPOCH) granted $((tsucc - tkill)) ms after it; the old holder (epoch $e): $(cat "$T/writer.old"); its state: $why"
[ $((tsucc - tkill)) -ge "$GRACE_MS" ] || fail "(e) the successor was granted $((tsucc - tkill)) ms after the wipe < ${GRACE_MS} ms"
# Lost at the new member's first answer (another cluster: store-failure)
# or at its safe-until, whichever came first (test_etcd's test_wipe waits
# for a keepalive before the kill, and finds store-failure).
case "$why" in *'"state":"lost"'*) ;; *) fail "(e) the old holder is not lost: $why" ;; esac
on_b timeout 15 "$LEASEFS" umount "$MB" || fail "(e) umount B failed"
timeout 15 "$LEASEFS" umount "$M" 2>/dev/null || true
ok "(e) wipe: the old holder lost; the successor granted $((tsucc - tkill)) ms >= ${GRACE_MS} ms after the kill, after the old holder's last record"
echo PASS
