#!/usr/bin/env bash
# The daemon under memcheck: a mount, a burst of mutations, a revoke, and an
# orderly umount must give no memcheck error and no definite leak.  Runs
# the non-sanitizer build (memcheck and ASan do not mix).
# bound: 90
. "$(dirname "$0")/lib.sh"

VG_BIN=$TOP/build/leasefs
[ -x "$VG_BIN" ] || fail "no $VG_BIN (run scripts/setup)"
command -v valgrind >/dev/null || fail "valgrind not installed"
R=$T/root M=$T/mnt
mkdir -p "$R" "$M"
MOUNTS+=("$M")
valgrind --quiet --error-exitcode=99 --leak-check=full \
	--errors-for-leak-kinds=definite --show-leak-kinds=definite \
	"$VG_BIN" mount -f "$R" "$M" 2>"$T/vg.log" &
pid=$!
PIDS+=("$pid")
wait_until 60 "$VG_BIN" status "$M" >/dev/null 2>&1 || fail "no mount under valgrind: $(cat "$T/vg.log")"
[ -z "${LEASEFS_IT_TRANSPORT:-}" ] || expect_transport "$M" "$LEASEFS_IT_TRANSPORT"
echo hi > "$M/a" && mkdir "$M/d" && mv "$M/a" "$M/d/b" && ln -s b "$M/d/l"
tar -C /usr/include -cf - linux | tar -C "$M" -xf -
rm -rf "$M/linux"
"$VG_BIN" lease revoke "$(status_of "$M" lease)" >/dev/null
wait_until 10 bash -c "! echo x 2>/dev/null > '$M/z'" || fail "no EROFS under valgrind"
[ "$(cat "$M/d/b")" = hi ] || fail "read after loss"
"$VG_BIN" umount "$M"
rc=0; wait "$pid" || rc=$?
grep -v 'unhandled amd64-linux syscall\|write your own handler\|README_MISSING\|Nevertheless we consider\|bug_reports' "$T/vg.log" || true
[ $rc -eq 0 ] || fail "daemon under memcheck exited $rc"
ok "daemon memcheck-clean over mount, mutations, revoke and umount"
echo PASS
