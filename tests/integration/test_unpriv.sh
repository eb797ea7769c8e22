#!/usr/bin/env bash
# An unprivileged user uses the mount under the kernel's permission checks;
# what it creates is owned by it in the backing root.
. "$(dirname "$0")/lib.sh"

R=$T/root M=$T/mnt
mkdir -p "$R"
chmod 755 "$T" "$R"
mount_ws "$R" "$M"
mkdir "$M/pub" "$M/priv"
chmod 1777 "$M/pub"
chmod 700 "$M/priv"
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
as_nobody bash -c "echo hi > '$M/pub/mine' && mkdir '$M/pub/dir' && ln -s mine '$M/pub/sl' && mkfifo '$M/pub/fifo'" || fail "nobody cannot create"
for f in mine dir sl fifo; do
	o=$(stat -c %u:%g "$R/pub/$f")
	[ "$o" = 65534:65534 ] || fail "$f owned by $o in the backing root"
done
ok "created files owned by 65534"
if as_nobody bash -c "echo x > '$M/priv/f'" 2>/dev/null; then fail "wrote into a 0700 root dir"; fi
if as_nobody ls "$M/priv" >/dev/null 2>&1; then fail "listed a 0700 root dir"; fi
echo rootfile > "$M/rootfile"
if as_nobody bash -c "echo x >> '$M/rootfile'" 2>/dev/null; then fail "wrote root's 0644 file"; fi
ok "permission denied where the kernel denies"
umask 022
as_nobody bash -c "umask 077; echo x > '$M/pub/masked'"
[ "$(stat -c %a "$R/pub/masked")" = 600 ] || fail "umask not honoured: $(stat -c %a "$R/pub/masked")"
ok "umask honoured"
mkdir "$M/sg" && chgrp 100 "$M/sg" && chmod 2777 "$M/sg"
as_nobody bash -c "echo x > '$M/sg/f'"
[ "$(stat -c %g "$R/sg/f")" = 100 ] || fail "setgid dir inheritance"
ok "setgid directory inheritance"
echo PASS
