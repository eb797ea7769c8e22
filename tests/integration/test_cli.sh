#!/usr/bin/env bash
# The command line's contract: exit codes (64 usage, 75 busy, 1 other),
# a refused or failed mount leaves nothing mounted and nothing in ROOT,
# --wait takes the root once its holder lets go, status/umount of a mount
# point nobody serves fail with exit 1.
. "$(dirname "$0")/lib.sh"

R=$T/root M=$T/mnt
mkdir -p "$R" "$M" "$T/m2"
MOUNTS+=("$M" "$T/m2")

# expect_exit CODE CMD...: CMD exits with CODE and says why on stderr (kept in OUT).
expect_exit() {
	local want=$1 rc=0; shift
	OUT=$(timeout 30 "$@" 2>&1) || rc=$?
	[ $rc -eq "$want" ] || fail "exit $rc, want $want: $* ($OUT)"
	[ -n "$OUT" ] || fail "no message from: $*"
	ok "exit $want: $* -> $(head -n1 <<<"$OUT")"
}

# A syntax error shows the usage; a refused operand names the path and does not.
expect_usage() { grep -q '^usage: ' <<<"$OUT" || fail "no usage text for a syntax error: $OUT"; }
expect_names() {
	grep -qF -- "$1" <<<"$OUT" || fail "message does not name $1: $OUT"
	grep -q '^usage: ' <<<"$OUT" && fail "usage text for a refused operand: $OUT"
	true
}

# --- refused before anything is touched -------------------------------
expect_exit 64 "$LEASEFS"
expect_exit 64 "$LEASEFS" mount "$R"
expect_usage
expect_exit 64 "$LEASEFS" mount --placement=bogus "$R" "$M"
expect_usage
expect_exit 64 "$LEASEFS" mount "$T/no-such-root" "$M"
expect_names "$T/no-such-root"
expect_exit 64 "$LEASEFS" mount --session=NOT-A-UUID "$R" "$M"
expect_exit 64 "$LEASEFS" mount --wait=-1 "$R" "$M"
expect_exit 64 "$LEASEFS" mount --leases=bogus: "$R" "$M"
expect_exit 64 "$LEASEFS" mount --leases="file:$R/leases" "$R" "$M"
mkdir "$R/inner"
expect_exit 64 "$LEASEFS" mount "$R" "$R/inner"
rmdir "$R/inner"
expect_exit 64 "$LEASEFS" mount "$R" "$R"
expect_names "$(realpath "$R")"
expect_exit 64 "$LEASEFS" lease frobnicate
expect_exit 64 "$LEASEFS" lease show 'Bad//Name'
expect_exit 1 "$LEASEFS" status "$M"
expect_exit 1 "$LEASEFS" umount "$M"
expect_exit 1 "$LEASEFS" lease revoke workspace-roots/nothing-held-here
[ -z "$(ls -A "$R")" ] || fail "a refused mount touched ROOT: $(ls -A "$R")"
findmnt -rn "$M" >/dev/null && fail "a refused mount left a mount"
ok "refusals touched nothing"

# --- busy, then --wait ------------------------------------------------------
mount_ws "$R" "$M"
epoch=$(status_of "$M" epoch)
expect_exit 75 "$LEASEFS" mount "$R" "$T/m2"
findmnt -rn "$T/m2" >/dev/null && fail "busy mount left a mount"
# A waiting mount gets the root once the holder unmounts: the holder goes
# only after the waiter said it waits.
coproc WAITER { "$LEASEFS" mount --wait=20 "$R" "$T/m2" 2>&1; }
waiter=$WAITER_PID
read -r -t 20 line <&"${WAITER[0]}" || fail "--wait mount said nothing"
case "$line" in *"waiting up to 20 s"*) ;; *) fail "--wait mount: $line" ;; esac
"$LEASEFS" umount "$M"
rc=0; wait "$waiter" || rc=$?
[ $rc -eq 0 ] || fail "--wait mount exit $rc"
PIDS+=("$(status_of "$T/m2" pid)")
e2=$(status_of "$T/m2" epoch)
[ "$e2" -gt "$epoch" ] || fail "--wait mount epoch $e2 not above $epoch"
echo w > "$T/m2/f"
[ "$(cat "$R/f")" = w ] || fail "--wait mount does not serve ROOT"
ok "--wait: mounted once the holder let go, epoch $epoch -> $e2"

# --- status output ----------------------------------------------------------
has_line '^state *held' "$LEASEFS" status "$T/m2" || fail "status table lacks state held"
for k in root placement session lease epoch state backend pid; do
	"$LEASEFS" status "$T/m2" --json | python3 -c '
import json, sys; d = json.load(sys.stdin); sys.exit(sys.argv[1] not in d)' "$k" ||
		fail "status --json lacks $k"
done
[ "$(status_of "$T/m2" root)" = "$(realpath "$R")" ] || fail "status root not canonical"
# Which FUSE transport serves, and on /dev/fuse why (test_io_uring.sh checks
# each reason the kernel can be made to give).
if [ "${LEASEFS_IO_URING:-}" = 0 ]; then
	has_line '^transport  dev-fuse (turned off by LEASEFS_IO_URING=0)$' "$LEASEFS" status "$T/m2" ||
		fail "status table: $("$LEASEFS" status "$T/m2" | grep ^transport)"
else
	has_line '^transport  \(io-uring\|dev-fuse (.*)\)$' "$LEASEFS" status "$T/m2" ||
		fail "status table: $("$LEASEFS" status "$T/m2" | grep ^transport)"
fi
ok "status table and JSON keys"
"$LEASEFS" umount "$T/m2"

# --- mount(8)'s form: any number of options, every documented option -------
# Many options in one -o (the old code overflowed its argument vector at
# six): a mount, or a clear refusal naming the option.
many=$(printf 'x-opt%d,' $(seq 200))
timeout 30 "$LEASEFS" "$R" "$M" -o "${many}rw,noexec,defaults,nofail,leases=$LEASEFS_LEASES" ||
	fail "fstab form with 205 options did not mount"
PIDS+=("$(status_of "$M" pid)")
case ",$(findmnt -n -o OPTIONS "$M")," in *,noexec,*) ;; *) fail "noexec lost: $(findmnt -n -o OPTIONS "$M")" ;; esac
"$LEASEFS" umount "$M"
expect_exit 64 "$LEASEFS" "$R" "$M" -o "a,b,c,d,e,f,g,h,i,j"
grep -q "mount option 'a' is not allowed" <<<"$OUT" || fail "refusal does not name the option: $OUT"
expect_exit 64 "$LEASEFS" "$R" "$M" -o "$(printf 'bogus%d,' $(seq 100))bogus"
findmnt -rn "$M" >/dev/null && fail "a refused fstab mount left a mount"
ok "fstab form: 205 options mount; 10 and 101 bad ones refused by name"

# Every documented option mounts and does what it says (findmnt's view).
check_opt() { # OPTION WANT-WORD|!UNWANTED-WORD...
	local opt=$1 w have; shift
	timeout 30 "$LEASEFS" mount -o "$opt" "$R" "$M" || fail "-o $opt did not mount"
	PIDS+=("$(status_of "$M" pid)")
	have=",$(findmnt -n -o OPTIONS "$M"),"
	for w in "$@"; do
		case "$w" in
		!*) case "$have" in *",${w#!},"*) fail "-o $opt: ${w#!} in $have" ;; esac ;;
		*) case "$have" in *",$w,"*) ;; *) fail "-o $opt: no $w in $have" ;; esac ;;
		esac
	done
	"$LEASEFS" umount "$M"
}
check_opt ro ro
check_opt rw rw
check_opt noexec noexec
check_opt exec '!noexec'
check_opt sync sync
check_opt async '!sync'
check_opt dirsync dirsync
check_opt noatime noatime
check_opt atime relatime
check_opt relatime relatime
check_opt norelatime '!relatime' '!noatime'
check_opt strictatime '!relatime' '!noatime'
check_opt nostrictatime relatime
check_opt nodiratime nodiratime
check_opt diratime '!nodiratime'
check_opt lazytime lazytime
check_opt nolazytime '!lazytime'
check_opt max_read=65536 max_read=65536
check_opt nosuid,nodev,allow_other,default_permissions nosuid nodev
check_opt suid,dev nosuid nodev
expect_exit 64 "$LEASEFS" mount -o max_read=bad "$R" "$M"
ok "every documented -o option mounts with its effect"
echo PASS
