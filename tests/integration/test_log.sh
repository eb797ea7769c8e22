#!/usr/bin/env bash
# The daemon's log, read where it arrives: a listener of the test's own
# stands in for journald (/run/systemd/journal/socket) and for the syslog
# daemon (/dev/log).  A background mount logs, once each, with its mount
# point, root, lease and epoch: held, the loss (reason, epoch), its
# acknowledgement, the read-only remount, the shutdown and the end; a
# refusal at start; nothing per request.  The journal's native protocol
# where its socket is, syslog (facility daemon, ident leasefs) where not;
# --log-level and -o log_level= filter; in the foreground, stderr, unless
# stderr is the journal stream ($JOURNAL_STREAM).
#
# Runs in a mount namespace of its own whose /dev and /run are fresh
# tmpfs (with /dev's devices bound in), so that the two sockets are the
# test's: the host's /dev and /run are never written.
[ -n "${LEASEFS_IT_LOGNS:-}" ] ||
	LEASEFS_IT_LOGNS=1 exec unshare -m --propagation private bash "$0" "$@"
. "$(dirname "$0")/lib.sh"

. "$HERE/logns.sh"

R=$T/root M=$T/mnt
mkdir -p "$R"
R=$(realpath "$R")

# 1. The journal listens: a background mount logs there, with fields.
start_listener journal="$J" syslog=/dev/log
mount_ws "$R" "$M"
lease=$(status_of "$M" lease) epoch=$(status_of "$M" epoch)
ctx=(SYSLOG_IDENTIFIER=leasefs SYSLOG_FACILITY=3 "LEASEFS_MOUNTPOINT=$M"
     "LEASEFS_ROOT=$R" "LEASEFS_LEASE=$lease" "LEASEFS_EPOCH=$epoch")
expect 1 journal "${ctx[@]}" PRIORITY=6 "MESSAGE~^$M: serving $R: lease $lease held at epoch $epoch \\(exclusive placement"
ok "held: one journal record with mount point, root, lease and epoch"

before=$(n journal)
for i in $(seq 100); do echo "$i" >"$M/f$i"; cat "$M/f$i" >/dev/null; stat "$M/f$i" >/dev/null; done
rm "$M"/f*
exec 7>>"$M/open"   # the read-only remount waits for it: logged once
"$LEASEFS" lease revoke "$lease" >/dev/null
expect 1 journal "${ctx[@]}" PRIORITY=4 "MESSAGE~lease $lease on $R lost \\(revoked\\) at epoch $epoch; the mount is read-only now"
expect 1 journal "${ctx[@]}" PRIORITY=6 "MESSAGE=$M: releasing $lease"
expect 1 journal "${ctx[@]}" PRIORITY=6 "MESSAGE~^$M: releasing sessions/"
expect 1 journal "${ctx[@]}" PRIORITY=6 "MESSAGE~loss of lease $lease \\(epoch $epoch\\) acknowledged"
expect 1 journal "${ctx[@]}" PRIORITY=5 "MESSAGE~files are open for writing; the read-only remount waits"
exec 7>&-
expect 1 journal "${ctx[@]}" "MESSAGE~remounted read-only once the files open for writing closed"
barrier journal "$J"
after=$(n journal)
# The barrier is the seventh: whatever a request had logged would be here.
[ $((after - before)) -eq 7 ] || fail "$((after - before - 1)) records for 400 requests and a loss, want 6: $(tail -n 9 "$LOG")"
ok "400 requests logged nothing; the loss: lost (revoked, epoch $epoch), both leases released, acknowledged, remount waiting and done, once each"

umount "$M"
wait_pid_gone "$DAEMON_PID" 20 || fail "daemon still there after umount"
expect 1 journal "${ctx[@]}" "MESSAGE=$M: shutting down (unmounted)"
expect 1 journal "${ctx[@]}" "MESSAGE=$M: stopped: unmounted, the leases released"
barrier syslog /dev/log
[ "$(n syslog)" -eq 1 ] || fail "syslog got records while the journal listened: $(grep syslog "$LOG")"
ok "umount: shutting down and stopped in the journal; nothing went to syslog while the journal listened"

# A mount point whose name holds a newline and a field: one record, the
# name whole in its field (the protocol's binary form), '?' in MESSAGE.
E="$T/evil"$'\n'"PRIORITY=0"
mount_ws "$T/root-e" "$E"
expect 1 journal "LEASEFS_MOUNTPOINT=$E" PRIORITY=6 "MESSAGE~^$T/evil\\?PRIORITY=0: serving "
"$LEASEFS" umount "$E"
barrier journal "$J"
[ "$(n journal PRIORITY=0)" -eq 0 ] || fail "a path set a field: $(grep -a PRIORITY=0 "$LOG")"
ok "a newline in the mount point forges no field and no line"

# 2. A refusal at start: on the caller's stderr and in the log.
mount_ws "$R" "$M"
mkdir "$T/mnt2"
rc=0; out=$(timeout 30 "$LEASEFS" mount "$R" "$T/mnt2" 2>&1) || rc=$?
[ $rc -eq 75 ] || fail "a second mount of a held root: exit $rc ($out)"
grep -q "^leasefs: workspace busy: $R held at epoch" <<<"$out" || fail "busy on stderr: $out"
expect 1 journal PRIORITY=3 "LEASEFS_MOUNTPOINT=$T/mnt2" "MESSAGE~^$T/mnt2: workspace busy: $R held at epoch"
"$LEASEFS" umount "$M"
ok "a refusal at start: on stderr and in the journal (priority 3)"

# 3. No journal: syslog on /dev/log, facility daemon, ident leasefs.
stop_listener
rm -f "$J"
: >"$LOG"
start_listener syslog=/dev/log
mount_ws "$R" "$M"
lease=$(status_of "$M" lease) epoch=$(status_of "$M" epoch)
# <30>: facility daemon (3) * 8 + info (6).
expect 1 syslog "text~^<30>[A-Z][a-z]{2} [ 0-9]{2} [0-9:]{8} leasefs\\[$DAEMON_PID\\]: $M: serving $R: lease $lease held at epoch $epoch "
"$LEASEFS" lease revoke "$lease" >/dev/null
expect 1 syslog "text~^<28>.* leasefs\\[$DAEMON_PID\\]: $M: lease $lease on $R lost \\(revoked\\) at epoch $epoch;"
"$LEASEFS" umount "$M"
expect 1 syslog "text~^<30>.* leasefs\\[$DAEMON_PID\\]: $M: shutting down \\(leasefs umount\\)$"
expect 1 syslog "text~^<30>.* leasefs\\[$DAEMON_PID\\]: $M: stopped: "
ok "without a journal: syslog, facility daemon, ident leasefs[pid]: held, lost (revoked, epoch $epoch), shutting down, stopped"

# A shared mount's lost lease gates nothing: said, and acknowledged.  (A
# root of its own: a revoked root, though fenced, keeps shared mounts out.)
mount_ws "$T/shared-root" "$M" --placement=shared
"$LEASEFS" lease revoke "$(status_of "$M" lease)" >/dev/null
expect 1 syslog "text~^<28>.* leasefs\\[$DAEMON_PID\\]: $M: a lease was lost \\(revoked\\); shared placement: the mount stays writable$"
expect 1 syslog "text~^<30>.* leasefs\\[$DAEMON_PID\\]: $M: loss acknowledged to the store$"
echo more >"$M/shared" || fail "a shared mount refused a write after its lease was lost"
"$LEASEFS" umount "$M"
ok "shared placement: the loss said and acknowledged; the mount stays writable"

# 4. The level: -o log_level=warning (mount(8)'s form) keeps info out.
: >"$LOG"
MOUNTS+=("$M")
"$LEASEFS" "$R" "$M" -o "log_level=warning,leases=$LEASEFS_LEASES"
DAEMON_PID=$(status_of "$M" pid); PIDS+=("$DAEMON_PID")
"$LEASEFS" lease revoke "$(status_of "$M" lease)" >/dev/null
expect 1 syslog "text~^<28>.*: $M: lease .* lost \\(revoked\\)"
"$LEASEFS" umount "$M"
barrier syslog /dev/log
[ "$(n syslog "text~^<(29|30|31)>")" -eq 0 ] || fail "notice or info at log_level=warning: $(cat "$LOG")"
rc=0; out=$("$LEASEFS" mount --log-level=loud "$R" "$M" 2>&1) || rc=$?
[ $rc -eq 64 ] && grep -q "bad --log-level 'loud'" <<<"$out" || fail "--log-level=loud: exit $rc: $out"
ok "-o log_level=warning: the loss only; --log-level=loud refused (64)"

# 5. The foreground: stderr; but the journal where stderr is its stream.
stop_listener
: >"$LOG"
start_listener journal="$J"
"$LEASEFS" mount -f "$R" "$M" 2>"$T/fg.err" &
fg=$!; PIDS+=("$fg"); MOUNTS+=("$M")
wait_until 20 grep -q "serving $R" "$T/fg.err" || fail "foreground: $(cat "$T/fg.err")"
grep -q "^leasefs: serving $R: lease " "$T/fg.err" || fail "foreground stderr: $(cat "$T/fg.err")"
kill -TERM "$fg"; wait "$fg" || fail "foreground daemon exited $?"
grep -q "^leasefs: shutting down (SIGTERM)$" "$T/fg.err" || fail "foreground stderr: $(cat "$T/fg.err")"
barrier journal "$J"
[ "$(n journal)" -eq 1 ] || fail "a foreground mount logged to the journal: $(cat "$LOG")"
: >"$T/js.err"
JOURNAL_STREAM=$(stat -c '%d:%i' "$T/js.err") "$LEASEFS" mount -f "$R" "$M" 2>>"$T/js.err" &
fg=$!; PIDS+=("$fg")
expect 1 journal "LEASEFS_MOUNTPOINT=$M" "MESSAGE~^$M: serving $R: "
kill -TERM "$fg"; wait "$fg" || fail "foreground daemon (journal stream) exited $?"
expect 1 journal "MESSAGE=$M: shutting down (SIGTERM)"
[ ! -s "$T/js.err" ] || fail "logged to stderr as well: $(cat "$T/js.err")"
ok "foreground: stderr; with stderr the journal stream, the journal's protocol instead"
echo PASS
