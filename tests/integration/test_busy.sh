#!/usr/bin/env bash
# A second exclusive mount of one root, however spelled (plain, symlink,
# '..', bind mount), exits 75 with the busy message and mounts nothing.
. "$(dirname "$0")/lib.sh"

R=$T/root M=$T/mnt
mount_ws "$R" "$M"
epoch=$(status_of "$M" epoch)
ln -s "$R" "$T/link"
mkdir -p "$T/x" "$T/bind"
mount --bind "$R" "$T/bind"
MOUNTS+=("$T/bind")

try_second() {
	local spelling=$1 m2=$T/m2 out rc=0
	mkdir -p "$m2"
	MOUNTS+=("$m2")
	out=$(timeout 30 "$LEASEFS" mount "$spelling" "$m2" 2>&1) || rc=$?
	[ $rc -eq 75 ] || fail "$spelling: exit $rc, want 75 ($out)"
	case "$out" in
	*"workspace busy: "*" held at epoch $epoch"*) ;;
	*) fail "$spelling: message '$out' lacks busy/epoch $epoch" ;;
	esac
	if findmnt -rn "$m2" >/dev/null; then fail "$spelling: something mounted"; fi
	ok "busy via $spelling: $out"
}
try_second "$R"
try_second "$T/link"
try_second "$T/x/../root"
try_second "$R/./"
try_second "$T/bind"
[ -z "$(ls -A "$R")" ] || fail "root was touched"
echo PASS
