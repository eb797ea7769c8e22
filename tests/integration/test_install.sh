#!/usr/bin/env bash
# `meson install` puts exactly the binary, the store client modules (etcd,
# PostgreSQL, NATS), leasefs(8), the systemd templates (system and user)
# and tmpfiles.d/leasefs.conf in place; the installed binary loads
# the module from LIBDIR/leasefs; the man page lints clean and documents every command,
# option and variable; the unit verifies; and the installed tree mounts
# through mount(8) and fstab (mount.fuse3), with `umount` giving the
# ordered release.  The installed tree is bound over /usr/local inside a
# private mount namespace (unshare -m), so the host is untouched.
. "$(dirname "$0")/lib.sh"

BUILDDIR=$(dirname "$LEASEFS")
D=$T/dest
meson install -C "$BUILDDIR" --destdir "$D" --no-rebuild --quiet >/dev/null
files=$(cd "$D" && find . -type f | sort | tr '\n' ' ')
libdir=$(meson introspect "$BUILDDIR" --buildoptions | python3 -c '
import json, sys
print([o["value"] for o in json.load(sys.stdin) if o["name"] == "libdir"][0])')
want="./usr/local/bin/leasefs ./usr/local/lib/modprobe.d/leasefs.conf ./usr/local/lib/systemd/system/leasefs-hostd.service ./usr/local/lib/systemd/system/leasefs-hostd.socket ./usr/local/lib/systemd/system/leasefs@.service ./usr/local/lib/systemd/user/leasefs@.service ./usr/local/lib/tmpfiles.d/leasefs-fuse.conf ./usr/local/lib/tmpfiles.d/leasefs.conf ./usr/local/$libdir/leasefs/leasefs-etcd.so ./usr/local/$libdir/leasefs/leasefs-nats.so ./usr/local/$libdir/leasefs/leasefs-pg.so ./usr/local/share/man/man8/leasefs.8 "
[ "$files" = "$want" ] || fail "installed: $files"
ok "installed exactly: $files"

# The kernel's FUSE over io_uring, on at boot: tmpfiles.d writes Y where the
# parameter exists and leaves a kernel without it alone, without an error
# (run under --root on a stand-in /sys: the host's parameter is untouched).
for has in yes no; do
	S=$T/sysroot-$has
	mkdir -p "$S/usr/lib/tmpfiles.d"
	cp "$D/usr/local/lib/tmpfiles.d/leasefs-fuse.conf" "$S/usr/lib/tmpfiles.d/"
	if [ $has = yes ]; then
		mkdir -p "$S/sys/module/fuse/parameters"
		echo N >"$S/sys/module/fuse/parameters/enable_uring"
	fi
	out=$(systemd-tmpfiles --root="$S" --create leasefs-fuse.conf 2>&1) ||
		fail "tmpfiles.d/leasefs-fuse.conf, parameter $has: $out"
	[ -z "$out" ] || fail "tmpfiles.d/leasefs-fuse.conf, parameter $has, said: $out"
done
[ "$(cat "$T/sysroot-yes/sys/module/fuse/parameters/enable_uring")" = Y ] ||
	fail "tmpfiles.d/leasefs-fuse.conf did not turn enable_uring on"
[ ! -e "$T/sysroot-no/sys/module/fuse" ] || fail "tmpfiles.d/leasefs-fuse.conf made the parameter"
grep -qx 'options fuse enable_uring=1' "$D/usr/local/lib/modprobe.d/leasefs.conf" ||
	fail "modprobe.d/leasefs.conf: $(cat "$D/usr/local/lib/modprobe.d/leasefs.conf")"
grep -q '^After=.*systemd-tmpfiles-setup.service' "$D/usr/local/lib/systemd/system/leasefs@.service" ||
	fail "the unit is not ordered after systemd-tmpfiles-setup.service"
ok "tmpfiles.d/leasefs-fuse.conf turns enable_uring on where it exists, silently skips it where not; modprobe.d sets it for a later load; the unit runs after tmpfiles"

MAN=$D/usr/local/share/man/man8/leasefs.8
out=$(mandoc -T lint -W warning "$MAN" 2>&1) || fail "mandoc lint: $out"
[ -z "$out" ] || fail "mandoc lint: $out"
text=$(MANWIDTH=100 man -l "$MAN" 2>/dev/null)
for w in "leasefs mount" "leasefs status" "leasefs watch" "leasefs umount" \
	 "lease list" "lease show" "lease revoke" --placement --leases --session \
	 --wait --ttl --json --timeout --metrics-dir "leasefs metrics" \
	 leasefs_requests_total " -o " " -f" " -d" LEASEFS_LEASES \
	 LEASEFS_ETCD_CA LEASEFS_ETCD_CERT LEASEFS_ETCD_KEY LEASEFS_INODE_FDS \
	 "EXIT STATUS" FILES fstab "fuse.leasefs" 75 64 77 --owner fsstore: \
	 postgresql:// nats:// LEASEFS_NATS_CREDS PGPASSFILE fusermount3 69 \
	 user_allow_other XDG_STATE_HOME "systemctl --user" tmpfiles.d \
	 --log-level log_level syslog journal NOTIFY_SOCKET JOURNAL_STREAM \
	 /usr/local/bin mount.fuse3 "mount -a"; do
	grep -qF -- "$w" <<<"$text" || fail "leasefs(8) does not mention $w"
done
ok "leasefs(8) renders, lints clean, names every command, option and variable"

UNIT=$D/usr/local/lib/systemd/system/leasefs@.service
# The check below can fail: a broken copy of the unit does not verify.
grep -qx 'Type=notify' "$UNIT" && grep -q '^ExecStart=.*/leasefs mount -f ' "$UNIT" ||
	fail "the unit is not Type=notify with leasefs mount -f: $(grep -E '^(Type|ExecStart)=' "$UNIT")"
sed 's/^Type=notify/Type=notfy/' "$UNIT" >"$T/broken@.service"
if out=$(systemd-analyze verify "$T/broken@.service" 2>&1) && [ -z "$out" ]; then
	fail "systemd-analyze verify accepts a broken unit"
fi

R=$T/root M=$T/mnt L=$T/leases
mkdir -p "$R" "$M"
MOUNTS+=("$M")
at_exit "[ -s '$T/pids' ] && xargs -r kill -9 < '$T/pids'"
printf '%s %s fuse.leasefs leases=file:%s,noauto 0 0\n' "$R" "$M" "$L" >"$T/fstab"
export R M L T
unshare -m --propagation private bash -euo pipefail -c '
	mount --bind "$T/dest/usr/local" /usr/local
	fail() { echo "FAIL: $*" >&2; exit 1; }
	for unit in /usr/local/lib/systemd/system/leasefs@.service leasefs@ws.service \
		    /usr/local/lib/systemd/system/leasefs-hostd.socket \
		    /usr/local/lib/systemd/system/leasefs-hostd.service; do
		out=$(SYSTEMD_UNIT_PATH=/usr/local/lib/systemd/system: \
		      systemd-analyze verify "$unit" 2>&1) || fail "verify $unit: $out"
		[ -z "$out" ] || fail "verify $unit: $out"
	done
	echo "ok: systemd-analyze verify: template and instance clean"
	mkdir -m 700 "$T/xdg"
	for unit in /usr/local/lib/systemd/user/leasefs@.service leasefs@ws.service; do
		out=$(XDG_RUNTIME_DIR=$T/xdg SYSTEMD_UNIT_PATH=/usr/local/lib/systemd/user: \
		      systemd-analyze --user verify "$unit" 2>&1) || fail "verify --user $unit: $out"
		[ -z "$out" ] || fail "verify --user $unit: $out"
	done
	echo "ok: systemd-analyze --user verify: the user template and instance clean"
	# Nothing listens on port 9: the module loaded if the store is what fails.
	out=$(/usr/local/bin/leasefs lease list --leases=etcd://127.0.0.1:9 2>&1) &&
		fail "etcd on a closed port: accepted"
	grep -q "module" <<<"$out" && fail "installed binary: $out"
	grep -qi "127.0.0.1:9" <<<"$out" || fail "installed binary, etcd: $out"
	echo "ok: the installed binary loads its etcd module: $out"
	for uri in postgresql://leasefs@127.0.0.1:9/x nats://127.0.0.1:9; do
		out=$(/usr/local/bin/leasefs lease list --leases=$uri 2>&1) &&
			fail "$uri on a closed port: accepted"
		grep -q "module" <<<"$out" && fail "installed binary: $out"
		grep -qi "127.0.0.1:9" <<<"$out" || fail "installed binary, $uri: $out"
		echo "ok: the installed binary loads the module for $uri: $out"
	done
	lease_state() { /usr/local/bin/leasefs lease show --leases="file:$L" "$1" |
			awk "/^state:/ { print \$2 }"; }
	for how in mount8 fstab; do
		if [ $how = mount8 ]; then
			mount -t fuse.leasefs -o "leases=file:$L,placement=exclusive" "$R" "$M"
		else
			mount -T "$T/fstab" "$M"
		fi
		st=$(/usr/local/bin/leasefs status "$M" --json)
		python3 -c "import json,sys; d=json.loads(sys.argv[1]); assert d[\"state\"]==\"held\" and d[\"backend\"]==\"file:$L\", d" "$st" ||
			fail "$how: status $st"
		pid=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])[\"pid\"])" "$st")
		echo "$pid" >>"$T/pids"
		lease=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])[\"lease\"])" "$st")
		echo "$how" > "$M/via"
		[ "$(cat "$R/via")" = "$how" ] || fail "$how: write did not reach ROOT"
		grep -q " $M fuse.leasefs .*nosuid,nodev" /proc/mounts || fail "$how: flags"
		exec {pfd}< <(python3 -c "
import os, select, sys
fd = os.pidfd_open(int(sys.argv[1]))
print(\"ready\", flush=True)
sys.exit(0 if select.select([fd], [], [], 20)[0] else 1)" "$pid"; echo "exit $?")
		read -r line <&$pfd   # the pidfd is open: the exit cannot be missed
		umount "$M"
		read -r line <&$pfd
		[ "$line" = "exit 0" ] || fail "$how: daemon still running 20 s after umount"
		[ "$(lease_state "$lease")" = free ] || fail "$how: root lease not released"
		echo "ok: $how: mounted through mount.fuse3, umount released the root"
	done
	# At boot: the run directory as tmpfiles.d makes it is what users need
	# (a fresh /run/leasefs here, in this namespace alone).
	mount -t tmpfs tmpfs /run/leasefs
	systemd-tmpfiles --create /usr/local/lib/tmpfiles.d/leasefs.conf
	got=$(stat -c "%n %a %U" /run/leasefs /run/leasefs/roots /run/leasefs/holders /run/leasefs/ctl | tr "\n" " ")
	[ "$got" = "/run/leasefs 755 root /run/leasefs/roots 700 root /run/leasefs/holders 700 root /run/leasefs/ctl 711 root " ] ||
		fail "tmpfiles.d made: $got"
	mount -t fuse.leasefs -o "leases=file:$L" "$R" "$M"
	umount "$M"
	got2=$(stat -c "%n %a %U" /run/leasefs /run/leasefs/roots /run/leasefs/holders /run/leasefs/ctl | tr "\n" " ")
	[ "$got2" = "$got" ] || fail "a mount changed the run directory tmpfiles.d made: $got2"
	echo "ok: tmpfiles.d/leasefs.conf makes the run directory a mount keeps as it is"
'
echo PASS
