#!/usr/bin/env bash
# A harness session and a leasefs mount share one fsstore lease, in both
# directions, with one epoch sequence.  The harness is played by
# fsstore_peer.py, written from the store's facts with Python's own flock.
. "$(dirname "$0")/lib.sh"

S=$T/store R=$T/root M=$T/mnt
PEER=$HERE/fsstore_peer.py
export LEASEFS_LEASES="fsstore:$S"
mkdir -p "$R" "$M"
NAME=$(python3 "$PEER" "$R" --root-name)

start_peer() { peer_start python3 "$PEER" "$S" "$NAME" "$1"; } # MODE

# 1. The peer holds the root: the mount is busy, naming the peer's epoch.
start_peer hold
peer_says '^granted '
pe=$(peer_epoch)
rc=0; out=$(timeout 30 "$LEASEFS" mount "$R" "$M" 2>&1) || rc=$?
[ $rc -eq 75 ] || fail "mount while the peer holds: exit $rc ($out)"
case "$out" in *"held at epoch $pe"*) ;; *) fail "busy message lacks the peer's epoch $pe: $out" ;; esac
findmnt -rn "$M" >/dev/null && fail "something mounted"
[ -z "$(ls -A "$R")" ] || fail "root touched by the refused mount"
ok "peer holds at epoch $pe: mount exits 75 naming it"

# 2. The peer releases: the mount gets epoch + 1; the peer is refused
#    with the mount's epoch.
peer_release
mount_ws "$R" "$M"
me=$(status_of "$M" epoch)
[ "$me" -eq $((pe + 1)) ] || fail "mount epoch $me, want $((pe + 1))"
[ "$(cat "$S/leases/$NAME.lock")" = "$me" ] || fail "lock file says $(cat "$S/leases/$NAME.lock"), not $me"
out=$(python3 "$PEER" "$S" "$NAME" try)
[ "$out" = "busy $me" ] || fail "peer while the mount holds: '$out', want 'busy $me'"
ok "mount holds at epoch $me (the peer's + 1); the peer is refused with it"

# 3. Revoke of the mount: the peer, waiting in flock, is granted only once
#    the mount is read-only (its first write through the mount is EROFS).
echo before > "$M/f"
exec 7>>"$M/f"   # a writer, so the read-only remount must wait for it
WRITE_PROBE=$M/after start_peer wait
"$LEASEFS" lease revoke "$NAME" >"$T/revoke.out" 2>&1 || fail "revoke: $(cat "$T/revoke.out")"
grep -q "acknowledged" "$T/revoke.out" || fail "revoke did not see the ack: $(cat "$T/revoke.out")"
peer_says '^probe: '
grep -q '^probe: EROFS' "$PEER_OUT" || fail "the peer was granted while the mount still wrote: $(cat "$PEER_OUT")"
ge=$(peer_epoch)
[ "$ge" -eq $((me + 1)) ] || fail "peer granted at $ge, want $((me + 1))"
expect_erofs bash -c "echo more >&7"
[ ! -e "$R/after" ] || fail "a write reached the root"
exec 7>&-
ok "revoke: the peer is granted epoch $ge only after the mount turned read-only"
"$LEASEFS" umount "$M"
peer_release

# 4. A revoke of the peer cannot tell it: exit 3, it keeps the name.
start_peer hold
peer_says '^granted '
pe=$(peer_epoch)
rc=0; "$LEASEFS" lease revoke "$NAME" --timeout=2 >"$T/revoke.out" 2>&1 || rc=$?
[ $rc -eq 3 ] || fail "revoke of a harness holder: exit $rc ($(cat "$T/revoke.out"))"
grep -q "not a leasefs mount" "$T/revoke.out" || fail "revoke did not say why: $(cat "$T/revoke.out")"
out=$(python3 "$PEER" "$S" "$NAME" try)
[ "$out" = "busy $pe" ] || fail "after the revoke another peer got '$out', want 'busy $pe'"
ok "revoke of a harness holder exits 3 and says it cannot be told; it keeps the name"

# 5. kill -9 of the holding peer: the kernel drops its flock; the mount
#    gets the next epoch at once.
kill -9 "$PEER_PID"; wait "$PEER_PID" 2>/dev/null || true
mount_ws "$R" "$M"
[ "$(status_of "$M" epoch)" -eq $((pe + 1)) ] || fail "after the peer's kill -9: epoch $(status_of "$M" epoch)"
ok "peer killed -9: the mount gets epoch $((pe + 1))"

# 6. kill -9 of the mount's daemon: the peer, waiting, gets the next one.
me=$(status_of "$M" epoch)
start_peer wait
kill -9 "$DAEMON_PID"
peer_says '^granted '
[ "$(peer_epoch)" -eq $((me + 1)) ] || fail "peer after the daemon's kill -9: $(cat "$PEER_OUT")"
ok "daemon killed -9: the waiting peer gets epoch $((me + 1))"
peer_release
"$LEASEFS" umount "$M" 2>/dev/null || true

# 7. Nested: a mount of ROOT/inner keeps a harness acquirer of ROOT out.
mkdir -p "$R/inner"
mount_ws "$R/inner" "$M"
out=$(python3 "$PEER" "$S" "$NAME" try)
case "$out" in busy*) ;; *) fail "peer got the enclosing root of a held workspace: $out" ;; esac
"$LEASEFS" umount "$M"
out=$(python3 "$PEER" "$S" "$NAME" try)
case "$out" in granted*) ;; *) fail "peer refused the root after the inner mount ended: $out" ;; esac
ok "a mount inside ROOT keeps a harness acquirer of ROOT out, and lets it in after"
echo PASS
