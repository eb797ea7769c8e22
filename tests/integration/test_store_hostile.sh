#!/usr/bin/env bash
# What a store's owner plants in a store root reads or writes (issue 33,
# finding 6): FIFOs where lock, record, marker and acquire files go, and
# symlinks in the middle of a store path.  Root's `leasefs lease
# list/show/revoke` and a root mount using the store return within a bound
# with an error naming the path, and nothing is made or read outside the
# store.  (A user, created here, owns the stores; removed at exit.)
. "$(dirname "$0")/lib.sh"

UA=lfs-hostile-a UB=lfs-hostile-b
for u in "$UA" "$UB"; do
	userdel "$u" >/dev/null 2>&1 || true
	useradd --system --no-create-home --home-dir "$T/home-${u##*-}" --shell /usr/sbin/nologin "$u"
	at_exit "userdel $u"
done
as() { local u=$1; shift; setpriv --reuid="$u" --regid="$(id -g "$u")" --init-groups "$@"; }
hex() { printf '%s' "$1" | sha256sum | cut -c1-64; }
chmod 755 "$T"

# bounded SECS WANT CMD...: CMD returns within SECS (not killed by the
# outer timeout of SECS + 20), exits non-zero, and says WANT.
bounded() {
	local secs=$1 want=$2 rc=0 out t0=$SECONDS; shift 2
	out=$(timeout $((secs + 20)) "$@" 2>&1) || rc=$?
	[ $rc -ne 124 ] || fail "$*: hung (killed after $((secs + 20)) s)"
	[ $((SECONDS - t0)) -le "$secs" ] || fail "$*: took $((SECONDS - t0)) s, bound $secs s"
	[ $rc -ne 0 ] || fail "$*: exit 0 ($out)"
	case "$out" in *"$want"*) ;; *) fail "$*: exit $rc, message lacks '$want': $out" ;; esac
	echo "   exit $rc in $((SECONDS - t0)) s: $out" | head -3
}

# 1. An fsstore directory of the user's, with a FIFO as a name's lock file,
#    as a marker of a grant within it and as its holder record.
S=$T/fss; mkdir -p "$S"; chown "$UA:" "$S"
N=proj H=$(hex proj)
as "$UA" mkdir -p "$S/leases" "$S/leasefs/holders" "$S/leasefs/within/$H"
as "$UA" mkfifo "$S/leases/$N.lock" "$S/leasefs/within/$H/m" "$S/leasefs/holders/$H.holder"
for verb in show revoke; do
	bounded 10 "$S/leases/$N.lock: not a regular file" "$LEASEFS" lease $verb "$N" --leases="fsstore:$S"
done
bounded 10 "$S/leases/$N.lock: not a regular file" "$LEASEFS" lease list --leases="fsstore:$S"
ok "fsstore: FIFOs as lock, marker and holder files: lease show/revoke/list return at once naming the lock file"

# 2. A root mount on that store: a FIFO as the acquire file refuses the
#    mount at once; the owner holding a real acquire file's flock makes the
#    mount busy within its --wait, never hangs it.
R=$T/root; M=$T/mnt; mkdir -p "$R" "$M"
RN=$(python3 "$HERE/fsstore_peer.py" "$R" --root-name); RH=$(hex "$RN")
as "$UA" mkfifo "$S/leasefs/holders/$RH.acq"
MOUNTS+=("$M")
bounded 20 "not a regular file" "$LEASEFS" mount --leases="fsstore:$S" "$R" "$M"
rm -f "$S/leasefs/holders/$RH.acq"
as "$UA" touch "$S/leasefs/holders/$RH.acq"
coproc HOLD { as "$UA" /usr/bin/python3 -c '
import fcntl, sys
f = open(sys.argv[1], "r+"); fcntl.flock(f, fcntl.LOCK_EX); print("locked", flush=True); sys.stdin.readline()' \
	"$S/leasefs/holders/$RH.acq"; }
PIDS+=("$HOLD_PID")
read -r l <&"${HOLD[0]}" && [ "$l" = locked ] || fail "the owner did not lock the acquire file"
bounded 20 "busy" "$LEASEFS" mount --wait=2 --leases="fsstore:$S" "$R" "$M"
findmnt -rn "$M" >/dev/null && fail "mounted while the owner holds the acquire file"
echo done >&"${HOLD[1]}"; wait "$HOLD_PID" 2>/dev/null || true
ok "fsstore: a FIFO as the acquire file refuses a root mount; its flock held by the owner makes it busy within --wait"

# 3. A symlink in the middle of a lock file's path (SEG -> a root-only
#    directory): a root mount creates nothing there, on both local stores
#    (the file store's lock file is DIR/SEG/HASH.lock; fsstore's
#    DIR/leases/SEG/HASH.lock).
O=$T/outside; mkdir -m 700 "$O"
seg=${RN%%/*}
rm -rf "${S:?}/leases/$seg"
as "$UA" ln -s "$O" "$S/leases/$seg"
F=$T/fstore; mkdir -p "$F"; chown "$UA:" "$F"
as "$UA" ln -s "$O" "$F/$seg"
for uri in "fsstore:$S" "file:$F"; do
	rc=0; out=$(timeout 30 "$LEASEFS" mount --leases="$uri" "$R" "$M" 2>&1) || rc=$?
	[ $rc -ne 0 ] || { PIDS+=("$(status_of "$M" pid)"); fail "$uri: mounted with a symlink in the lock file's path; $O has: $(ls -A "$O")"; }
	[ -z "$(ls -A "$O")" ] || fail "$uri: root made $(ls -A "$O") in $O through the store's symlink"
	echo "   $uri: exit $rc: $out"
done
ok "a symlink in a lock file's path (fsstore, file store): mount refused, nothing made outside the store"

# 4. The user's default store, read by root's `leasefs lease list`: FIFOs
#    as a name's lock file beside its record and as a marker of a grant
#    within it.  Another user's store, sound, is listed all the same, and
#    the list fails (exit 1) for the one it could not read.
record() { # NAME: a record of NAME held by pid 1 (no lock: the file store says free)
	python3 -c '
import hashlib, sys
b = "leasefs-lease-record v1\nname %s\nepoch 1\nstate held\npid 1\nholder x\n" % sys.argv[1]
sys.stdout.write(b + "sha256 %s\n" % hashlib.sha256(b.encode()).hexdigest())' "$1"
}
U=$T/home-a/.local/state/leasefs/leases UBS=$T/home-b/.local/state/leasefs/leases
mkdir -p "$T/home-a" "$T/home-b"; chown "$UA:" "$T/home-a"; chown "$UB:" "$T/home-b"
as "$UA" mkdir -p "$U"
as "$UB" mkdir -p "$UBS"
record "$N" | as "$UA" tee "$U/$N.rec" >/dev/null
record sound | as "$UB" tee "$UBS/sound.rec" >/dev/null
as "$UA" mkdir "$U/$N.in"
as "$UA" mkfifo "$U/$N.lock" "$U/$N.in/marker"
t0=$SECONDS rc=0
out=$(unset LEASEFS_LEASES; timeout 40 "$LEASEFS" lease list 2>&1) || rc=$?
[ $rc -ne 124 ] || fail "root's lease list hung on $UA's store"
[ $((SECONDS - t0)) -le 20 ] || fail "root's lease list took $((SECONDS - t0)) s"
echo "   exit $rc in $((SECONDS - t0)) s: $(grep "$UA" <<<"$out" | head -2)"
case "$out" in *"$U/$N.lock: not a regular file"*) ;; *) fail "root's lease list does not name $U/$N.lock: $out" ;; esac
grep -q " sound .*(user $UB)$" <<<"$out" || fail "root's lease list skipped $UB's sound store: $out"
[ $rc -eq 1 ] || fail "root's lease list exit $rc with $UA's store unread: $out"
ok "root's lease list returns within its bound over a user's store with a FIFO lock file, naming it; lists the other users' stores; exit 1"
