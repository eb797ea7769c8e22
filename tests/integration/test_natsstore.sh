#!/usr/bin/env bash
# A harness session and a leasefs mount share one natsstore lease (a
# private nats-server with JetStream), in both directions, with one epoch
# sequence.  The harness is played by natspeer/peer.mjs, which follows
# the harness's Go code; natspeer/tool.mjs is an operator changing the
# bucket.  Then the faults an outside campaign found:
#   - a bucket whose maximum age is below the TTL (a live entry dropped
#     between renewals), lowered under a holder, and the epoch after an
#     idle key aged out;
#   - a holder whose clock is 1 s slow or fast, cut off from the server:
#     its successor's first record comes after its last;
#   - a server restarted without its store under a holder: the holder
#     turns read-only and no successor is granted while it can write;
#   - a holder's release that arrives after its successor's grant leaves
#     the successor's record alone.
# SECTIONS (default all): a space-separated subset of
#   config contend restart battery maxttl lower idle skew wipe late
# bound: 240
if [ -z "${LEASEFS_NATS_URI:-}" ]; then
	exec "$(dirname "$0")/../nats-harness.sh" bash "$0" "$@"
fi
. "$(dirname "$0")/lib.sh"
[ -z "${NATS_IT_TRACE:-}" ] || set -x
PEER=$HERE/natspeer/peer.mjs
TOOL=$HERE/natspeer/tool.mjs
[ -d "$HERE/natspeer/node_modules/nats" ] ||
	fail "the peer's nats client is not installed (scripts/setup runs npm ci in tests/integration/natspeer)"

R=$T/root M=$T/mnt
TTL=3
# No holder of this server uses a TTL above 3 s (the peer is given 3 s):
# a new bucket is granted from after 4 s.  (NATS_IT_PARAMS='' runs the
# test against a leasefs that knows no max_ttl.)
P=${NATS_IT_PARAMS-?max_ttl=3}
U=$LEASEFS_NATS_URI$P
export LEASEFS_LEASES=$U
mkdir -p "$R" "$M"
NAME=$(python3 "$HERE/fsstore_peer.py" "$R" --root-name)
KEY=$(echo "$NAME" | sed 's/_/_u/g; s/\./_d/g; s,/,_s,g')
SECTIONS=${SECTIONS:-config contend restart battery maxttl lower idle skew wipe late}
want() { case " $SECTIONS " in *" $1 "*) return 0 ;; esac; return 1; }

start_peer() { peer_start node "$PEER" "$LEASEFS_NATS_URI" "$NAME" "$1" "${2:-$TTL}"; } # MODE [TTL]
peer_try() { node "$PEER" "$LEASEFS_NATS_URI" "$NAME" try "$TTL"; }
tool() { (cd "$HERE/natspeer" && node "$TOOL" "$LEASEFS_NATS_URI" "$@"); }
now_ms() { date +%s%3N; }
FAKETIME_LIB=/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1

# nats_restart [fresh]: kill -9 the server and start it again on its port,
# with its store, or (fresh) without it.
nats_restart() {
	local before
	kill -9 "$NATS_PID" 2>/dev/null || true
	wait_pid_gone "$NATS_PID" 10 || fail "nats-server did not stop"
	[ "${1:-}" != fresh ] || rm -rf "$NATS_STORE_DIR"
	before=$(grep -c "Server is ready" "$NATS_LOG" || true)
	"$NATS_BIN" -a 127.0.0.1 -p "$NATS_PORT" -js -sd "$NATS_STORE_DIR" >>"$NATS_LOG" 2>&1 &
	NATS_PID=$!
	PIDS+=("$NATS_PID")
	wait_until 10 bash -c "[ \$(grep -c 'Server is ready' '$NATS_LOG') -gt $before ]" ||
		fail "nats-server did not restart"
}

# settle: a bucket is granted only once it is older than max_ttl + a
# third; a throwaway root's mount waits for that (--wait) and goes.
settle() {
	mkdir -p "$T/settle" "$T/settle-m"
	mount_ws "$T/settle" "$T/settle-m" --ttl=$TTL --wait=20
	"$LEASEFS" umount "$T/settle-m"
}

# A writer of fsync-acknowledged records through mount MNT (records.py).
# Sets WRITER_PID; its output in $T/writer.TAG.
# ------------------------------------------------------------- config
# leasefs makes the bucket exactly as the harness does: the harness's
# CreateOrUpdate on it changes nothing.
if want config; then
	"$LEASEFS" lease list >/dev/null || fail "leasefs cannot open the store"
	c1=$(tool config)
	echo "$c1" | grep -q '"max_age":3600000000000' || fail "the bucket leasefs made: $c1"
	out=$(node "$PEER" "$LEASEFS_NATS_URI" "$NAME" provision) || fail "peer provision: $out"
	c2=$(tool config)
	[ "$c1" = "$c2" ] || fail "the harness's CreateOrUpdate changed the bucket leasefs made:
  leasefs: $c1
  harness: $c2"
	ok "leasefs makes natsstore_leases as the harness does: its CreateOrUpdate leaves it as it is"
	for q in '?max_ttl=0' '?max_ttl=abc' '?ttl=3' '?max_ttl=3&x'; do
		rc=0; out=$("$LEASEFS" lease list --leases="$LEASEFS_NATS_URI$q" 2>&1) || rc=$?
		[ $rc -eq 64 ] || fail "store URI with $q: exit $rc ($out)"
	done
	ok "a bad store URI parameter is refused (exit 64)"
fi

settle

# ------------------------------------------------------------- contend
# 1.-2. A peer holding the root keeps the mount out; then the reverse (lib.sh).
if want contend || want restart || want battery; then
	harness_contend
	ok "mount holds at epoch $me (the peer's + 1); the peer is refused with it"
fi

# 3. The server restarts under the mount (its store kept): the mount
#    reconnects, renews and keeps the lease.
if want restart; then
	r0=$(tool entry "$KEY" | cut -d' ' -f2)
	[ -n "$r0" ] && [ "$r0" != none ] || fail "cannot read the key before the restart"
	kill -TERM "$NATS_PID"; wait_pid_gone "$NATS_PID" 10 || fail "nats-server did not stop"
	before=$(grep -c "Server is ready" "$NATS_LOG")
	"$NATS_BIN" -a 127.0.0.1 -p "$NATS_PORT" -js -sd "$NATS_STORE_DIR" >>"$NATS_LOG" 2>&1 &
	NATS_PID=$!
	PIDS+=("$NATS_PID")
	wait_until 10 bash -c "[ \$(grep -c 'Server is ready' '$NATS_LOG') -gt $before ]" || fail "nats-server did not restart"
	renewed_since() { local r; r=$(tool entry "$KEY" 2>/dev/null | cut -d' ' -f2); [ "$r" -gt "$1" ] 2>/dev/null; }
	wait_until $((TTL * 3)) renewed_since "$r0" || fail "no renewal after the restart"
	[ "$(status_of "$M" state)" = held ] || fail "the mount lost its lease over a restart: $(status_of "$M" state)"
	echo still > "$M/r" || fail "write after the restart"
	ok "server restart: the mount reconnects, renews and keeps epoch $me"
fi

# 4.-7. Revoke and kill -9 of either side (lib.sh).
if want battery; then
	RECORD=entry harness_expiry_battery
elif want contend || want restart; then
	"$LEASEFS" umount "$M"
fi

# ------------------------------------------------------------- maxage
if want maxttl; then
	# (a) The bucket's entries live 3 s after their last write; a mount
	#     renewing every TTL/3 = 6.7 s would lose its entry between
	#     renewals: it is refused at mount time, naming both values.
	tool max-age 3 >/dev/null || fail "cannot set the bucket's max age"
	rc=0; out=$(timeout 30 "$LEASEFS" mount --leases="$LEASEFS_NATS_URI" --ttl=20 "$R" "$M" 2>&1) || rc=$?
	if [ $rc -eq 0 ]; then
		# What follows: the server drops the entry between renewals, and
		# a harness session creates the name afresh while the mount holds.
		MOUNTS+=("$M")
		e=$(status_of "$M" epoch)
		gone() { [ "$(tool entry "$KEY")" = none ]; }
		wait_until 10 gone || fail "a TTL of 20 s was accepted over a bucket max age of 3 s (mount at epoch $e)"
		start_peer wait
		got=no
		wait_until 10 grep -q '^granted' "$PEER_OUT" && got=$(peer_epoch)
		fail "a TTL of 20 s was accepted over a bucket max age of 3 s: the mount holds epoch $e ($(status_of "$M" state)), its entry was dropped, and the peer was granted epoch $got"
	fi
	[ $rc -eq 64 ] || fail "mount --ttl=20 over a 3 s max age: exit $rc ($out)"
	case "$out" in *"20 s"*"max age"*"3 s"*|*"3 s"*"max age"*"20 s"*) ;;
	*) fail "the refusal does not name the TTL and the max age: $out" ;; esac
	echo "   refused: $out"
	# The harness's Open sets it back (its CreateOrUpdate, 1 h).
	node "$PEER" "$LEASEFS_NATS_URI" "$NAME" provision >/dev/null || fail "peer provision"
	tool config | grep -q '"max_age":3600000000000' || fail "the harness did not set the max age back"
	ok "maxage: a TTL of 20 s over a bucket max age of 3 s is refused at mount time, naming both"
fi
if want lower; then

	# (b) Lowered under a holder below its TTL: the holder turns read-only
	#     at once (the server may drop its entry while it believes).
	mount_ws "$R" "$M" --ttl=$TTL
	echo before > "$M/f" || fail "write before"
	t0=$(now_ms)
	tool max-age 2 >/dev/null || fail "cannot lower the bucket's max age"
	lost() { [ "$(status_of "$M" state)" != held ]; }
	wait_until 5 lost || fail "the mount still holds after the max age went below its TTL"
	dt=$(( $(now_ms) - t0 ))
	expect_erofs bash -c "echo after > '$M/f'"
	"$LEASEFS" umount "$M"
	tool max-age 3600 >/dev/null || fail "cannot restore the bucket's max age"
	ok "maxage: lowered below the TTL under a holder, it turns read-only (${dt} ms)"
fi
if want idle; then

	# (c) The key ages out while nobody holds it (max age 1 s): the next
	#     grant still comes above every epoch seen of the name, and the
	#     harness takes such an entry over with + 1.
	mount_ws "$R" "$M" --ttl=$TTL
	e1=$(status_of "$M" epoch)
	"$LEASEFS" umount "$M"
	tool max-age 1 >/dev/null || fail "cannot lower the bucket's max age"
	gone() { [ "$(tool entry "$KEY")" = none ]; }
	wait_until 15 gone || fail "the key did not age out: $(tool entry "$KEY")"
	tool max-age 3600 >/dev/null || fail "cannot restore the bucket's max age"
	mount_ws "$R" "$M" --ttl=$TTL
	e2=$(status_of "$M" epoch)
	[ "$e2" -gt "$e1" ] || fail "after the key aged out the mount was granted epoch $e2, not above $e1"
	out=$(peer_try)
	[ "$out" = "busy $e2" ] || fail "the peer read '$out' of the mount's entry, want 'busy $e2'"
	"$LEASEFS" umount "$M"
	out=$(peer_try)
	[ "$out" = "granted $((e2 + 1))" ] || fail "the peer after the mount: '$out', want 'granted $((e2 + 1))'"
	ok "maxage: the key aged out at epoch $e1; the mount is granted $e2, the harness then $((e2 + 1))"
	# A high-water mark that is not an epoch, or leaves no room above it,
	# grants nothing and says so.
	for bad in abc -1 18446744073709551615; do
		tool own-put "e.$KEY" "$bad" >/dev/null || fail "cannot write the mark"
		rc=0; out=$(timeout 30 "$LEASEFS" mount --ttl=$TTL "$R" "$M" 2>&1) || rc=$?
		[ $rc -ne 0 ] || { MOUNTS+=("$M"); fail "granted over a mark of '$bad': epoch $(status_of "$M" epoch)"; }
		case "$out" in *"nothing was granted"*) ;; *) fail "mark '$bad': exit $rc ($out)" ;; esac
	done
	tool own-put "e.$KEY" $((e2 + 1)) >/dev/null || fail "cannot write the mark"
	ok "a mark that is not an epoch, or has no room above it, grants nothing"
fi

# ------------------------------------------------------------- skew
# A holder whose clock is 1 s slow (then fast), TTL 3 s, cut off from the
# server while it writes; the successor, a harness session on the true
# clock, writes from its grant on.  No record of the holder after the
# successor's first.
skew_run() { # OFFSET TAG
	local off=$1 tag=$2 hole=$T/hole.$2 port e out
	port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	python3 -u "$HERE/tcpblackhole.py" "$port" "127.0.0.1:$NATS_PORT" "$hole" >"$T/hole.$tag.out" 2>&1 &
	PIDS+=("$!")
	wait_until 10 grep -q ready "$T/hole.$tag.out" || fail "proxy: $(cat "$T/hole.$tag.out")"
	: >"$R/log"
	# libfaketime preloaded into the daemon (not through faketime(1),
	# which waits for what it started: a daemon); ASan wants to come
	# first among the libraries, and is told not to mind.
	[ -e "$FAKETIME_LIB" ] || fail "libfaketime is not installed (scripts/setup installs faketime)"
	[ $(( $(LD_PRELOAD=$FAKETIME_LIB FAKETIME=$off date +%s) - $(date +%s) )) -eq "${off%s}" ] ||
		fail "libfaketime does not shift the clock by $off"
	ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 \
	LD_PRELOAD=$FAKETIME_LIB FAKETIME=$off FAKETIME_DONT_FAKE_MONOTONIC=1 \
		timeout 30 "$LEASEFS" mount --leases="nats://127.0.0.1:$port$P" \
		--ttl=$TTL "$R" "$M" || fail "mount with its clock $off"
	MOUNTS+=("$M")
	DAEMON_PID=$("$LEASEFS" status "$M" --json | json_get pid)
	PIDS+=("$DAEMON_PID")
	grep -q libfaketime "/proc/$DAEMON_PID/environ" || fail "the daemon does not run under faketime"
	e=$(status_of "$M" epoch)
	writer_start "$M" "mount$tag" "$e"
	touch "$hole"
	RECORDS=$R/log RECORDS_ACK=$T/ack.peer$tag RECORDS_TAG=peer$tag start_peer wait
	peer_says '^granted ' $((TTL * 4))
	wait_until $((TTL * 3)) grep -q stopped "$T/writer.mount$tag" ||
		fail "the holder's writer never stopped: $(cat "$T/writer.mount$tag")"
	wait_until 10 bash -c "[ \$(grep -c peer$tag '$R/log') -gt 20 ]" || fail "the peer does not write"
	peer_release
	out=$(python3 "$HERE/records.py" check "$R/log" "$T/ack.mount$tag" "$T/ack.peer$tag") ||
		fail "clock $off: $out"
	echo "   $out"
	rm -f "$hole"
	"$LEASEFS" umount "$M" || fail "umount after the clock $off"
}
if want skew; then
	skew_run -1s slow
	ok "skew: a holder 1 s slow wrote nothing after its successor's first record"
	skew_run +1s fast
	ok "skew: a holder 1 s fast wrote nothing after its successor's first record"
fi

# ------------------------------------------------------------- wipe
# The server is killed and started again without its store while a mount
# holds and writes.  A mount on another host waits to take the root: it
# is granted only once the old holder cannot write (it turned read-only
# when it found the bucket gone or made anew), and the old holder's last
# record comes before the successor's first.
if want wipe; then
	start_host_b
	MB=$T/mnt-b
	mkdir -p "$MB"
	: >"$R/log"
	mount_ws "$R" "$M" --ttl=$TTL
	e=$(status_of "$M" epoch)
	writer_start "$M" old "$e"
	wait_until 10 bash -c "[ \$(wc -l < '$T/ack.old') -gt 20 ]" || fail "the holder does not write"
	nats_restart fresh
	trestart=$(now_ms)
	MOUNTS+=("$MB")
	on_b timeout 60 "$LEASEFS" mount --ttl=$TTL --wait=30 "$R" "$MB" >"$T/mount-b.out" 2>&1 ||
		fail "no successor after the wipe: $(cat "$T/mount-b.out")"
	tsucc=$(now_ms)
	PIDS+=("$(on_b "$LEASEFS" status "$MB" --json | json_get pid)")
	handover "$M" "$MB" "$R"
	eb=$HANDOVER_EPOCH
	echo "   the successor (epoch $eb) was granted $((tsucc - trestart)) ms after the restart; the old holder: $(cat "$T/writer.old")"
	on_b timeout 15 "$LEASEFS" umount "$MB"
	"$LEASEFS" umount "$M" 2>/dev/null || true
	ok "wipe: the old holder turned read-only; the successor on host B was granted after, and wrote after its last record"
fi
# ------------------------------------------------------------- late
# A holder stopped past its TTL; a mount on host B takes the root; the old
# holder resumes, finds itself taken over and is unmounted: its release
# (of its record, its markers) comes after the successor's grant and must
# leave the successor's record exactly as it was, so a revoke still
# reaches the successor, who acknowledges it.
if want late; then
	start_host_b
	ML=$T/mnt-late
	mkdir -p "$ML"
	settle
	mount_ws "$R" "$M" --ttl=$TTL --wait=20
	old_pid=$DAEMON_PID
	kill -STOP "$old_pid"
	MOUNTS+=("$ML")
	on_b timeout 60 "$LEASEFS" mount --ttl=$TTL --wait=30 "$R" "$ML" >"$T/mount-late.out" 2>&1 || {
		kill -CONT "$old_pid"; fail "no successor while the holder was stopped: $(cat "$T/mount-late.out")"; }
	PIDS+=("$(on_b "$LEASEFS" status "$ML" --json | json_get pid)")
	eb=$(on_b "$LEASEFS" status "$ML" --json | json_get epoch)
	rec_b=$(tool own-get "h.$KEY")
	grep -Eq "\"epoch\": *$eb[, }]" <<<"$rec_b" || { kill -CONT "$old_pid"; fail "the successor's record: $rec_b"; }
	kill -CONT "$old_pid"
	old_not_held() { [ "$(status_of "$M" state)" != held ]; }
	wait_until 15 old_not_held || fail "the old holder still says held after its successor's grant"
	timeout 15 "$LEASEFS" umount "$M"
	wait_pid_gone "$old_pid" 10 || fail "the old holder did not exit"
	after=$(tool own-get "h.$KEY")
	[ "$after" = "$rec_b" ] || fail "the old holder's late release changed the successor's record: '$rec_b' -> '$after'"
	[ "$(on_b "$LEASEFS" status "$ML" --json | json_get state)" = held ] || fail "the successor lost its lease"
	out=$(timeout 30 "$LEASEFS" lease revoke "$NAME" 2>&1) || fail "revoke of the successor: $out"
	grep -q acknowledged <<<"$out" || fail "the successor was not told of its revoke: $out"
	on_b timeout 15 "$LEASEFS" umount "$ML"
	ok "late release: the successor's record (epoch $eb) survived the old holder's release; a revoke reached it"
fi
echo PASS
