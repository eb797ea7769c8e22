#!/usr/bin/env bash
# What a root-run leasefs must never let anyone do: each section is an
# attack or a careless act from an adversarial review, run for real with
# users made here (useradd, removed at exit).  SEC_ONLY=NAME runs one
# section (names: see the list at the end).
# bound: 90
. "$(dirname "$0")/lib.sh"

UA=lfs-sec-a UB=lfs-sec-b
chmod 755 "$T"

make_user() {
	userdel "$1" >/dev/null 2>&1 || true
	useradd --system --no-create-home --shell /usr/sbin/nologin "$1"
	at_exit "userdel $1"
}
make_user "$UA"
make_user "$UB"
as() { local u=$1; shift; setpriv --reuid="$u" --regid="$(id -g "$u")" --init-groups "$@"; }
# A root that has no capabilities at all (a container's root, say).
as_capless_root() { setpriv --bounding-set=-all --inh-caps=-all "$@"; }
mount_opts() { awk -v m="$1" '$2 == m { print $4 }' /proc/mounts; }
has_opt() { case ",$(mount_opts "$1")," in *",$2,"*) return 0 ;; esac; return 1; }
revoke() { "$LEASEFS" lease revoke "$(status_of "$1" lease)" >/dev/null; }
wait_ro() { wait_until "${2:-10}" has_opt "$1" ro; }

# 1. Loss must not turn nosuid/nodev off: a setuid copy of id(1) made
#    before the loss still runs as its caller afterwards.
sec_flags_kept() {
	local R=$T/r1 M=$T/m1
	mount_ws "$R" "$M"
	has_opt "$M" nosuid && has_opt "$M" nodev || fail "mounted without nosuid,nodev: $(mount_opts "$M")"
	cp /usr/bin/id "$M/id" && chmod 4755 "$M/id"
	revoke "$M"
	wait_ro "$M" || fail "no read-only remount after loss: $(mount_opts "$M")"
	has_opt "$M" nosuid && has_opt "$M" nodev || fail "loss dropped nosuid/nodev: $(mount_opts "$M")"
	[ "$(as "$UA" "$M/id" -u)" = "$(id -u "$UA")" ] || fail "setuid binary ran as its owner after loss"
	ok "mount flags kept across the loss remount ($(mount_opts "$M"))"
}

# 2. A comma in ROOT is not an option separator.
sec_option_injection() {
	local R="$T/a,suid,dev" M=$T/m2
	mount_ws "$R" "$M"
	has_opt "$M" nosuid && has_opt "$M" nodev || fail "ROOT injected options: $(mount_opts "$M")"
	[ "$(awk -v m="$M" '$2 == m { print $1 }' /proc/mounts)" = "$(realpath "$R")" ] || fail "fsname mangled"
	# fstab's suid,dev are accepted and change nothing.
	mount_ws "$T/r2b" "$T/m2b" -o suid,dev
	has_opt "$T/m2b" nosuid && has_opt "$T/m2b" nodev ||
		fail "-o suid,dev weakened the mount: $(mount_opts "$T/m2b")"
	mkdir -p "$T/r2c" "$T/m2c"
	MOUNTS+=("$T/m2c")
	rc=0; "$LEASEFS" mount -o allow_root "$T/r2c" "$T/m2c" 2>/dev/null || rc=$?
	[ $rc -eq 64 ] || fail "a disallowed -o option was accepted (rc $rc)"
	ok "comma in ROOT escaped; -o suid,dev ignored; unknown -o options refused"
}

# 3. POSIX ACLs hold through the mount: denies and grants, and default ACL
#    inheritance exactly as on the backing filesystem.
sec_acls() {
	local R=$T/r3 M=$T/m3 N=$T/native3
	mount_ws "$R" "$M"
	chmod 755 "$R"
	echo secret > "$M/deny" && chmod 644 "$M/deny" && setfacl -m "u:$UA:---" "$M/deny"
	if as "$UA" cat "$M/deny" >/dev/null 2>&1; then fail "ACL deny ignored (read)"; fi
	if as "$UA" bash -c "echo x >> '$M/deny'" 2>/dev/null; then fail "ACL deny ignored (append)"; fi
	as "$UB" cat "$M/deny" >/dev/null || fail "ACL entry for another user blocked $UB"
	echo data > "$M/grant" && chmod 600 "$M/grant" && setfacl -m "u:$UA:rw" "$M/grant"
	as "$UA" cat "$M/grant" >/dev/null || fail "ACL grant ignored (read)"
	as "$UA" bash -c "echo more >> '$M/grant'" || fail "ACL grant ignored (append)"
	if as "$UB" cat "$M/grant" >/dev/null 2>&1; then fail "0600 file readable without a grant"; fi
	mkdir "$M/dd" && chmod 1777 "$M/dd" && touch "$M/dd/x" && chmod 666 "$M/dd/x"
	setfacl -m "u:$UA:---" "$M/dd"
	if as "$UA" ls "$M/dd" >/dev/null 2>&1; then fail "ACL deny on a directory ignored (list)"; fi
	if as "$UA" rm -f "$M/dd/x" 2>/dev/null; then fail "ACL deny on a directory ignored (remove)"; fi
	mkdir -p "$N/defacl" "$M/defacl"
	for d in "$N/defacl" "$M/defacl"; do
		setfacl -d -m "u:$UA:rwx" "$d"
		(umask 077 && echo x > "$d/f" && mkdir "$d/sub")
	done
	for f in f sub; do
		[ "$(getfacl -cp "$N/defacl/$f")" = "$(getfacl -cp "$R/defacl/$f")" ] ||
			fail "default ACL inheritance differs for $f: $(getfacl -cp "$R/defacl/$f" | tr '\n' ' ')"
		[ "$(stat -c %a "$N/defacl/$f")" = "$(stat -c %a "$R/defacl/$f")" ] || fail "mode differs for $f"
	done
	ok "ACL denies and grants enforced; default ACLs inherited as natively"
}

# 4. CREATE never follows a symlink out of ROOT, even when the kernel holds
#    a stale negative entry and the host put a symlink there; and the
#    daemon never lends its credentials: a host-side chmod takes effect.
sec_symlink_escape() {
	local R=$T/r4 M=$T/m4 O=$T/outside4
	mount_ws "$R" "$M"
	chmod 755 "$R"
	mkdir -p "$O" "$M/pub" && chmod 1777 "$M/pub"
	echo precious > "$O/victim" && chown "$UB" "$O/victim" && chmod 600 "$O/victim"
	stat "$M/pub/link" >/dev/null 2>&1 || true   # negative entry, cached
	ln -s "$O/victim" "$R/pub/link"               # behind the kernel's back
	as_capless_root bash -c "echo pwned > '$M/pub/link'" 2>/dev/null || true
	as "$UA" bash -c "echo pwned > '$M/pub/link'" 2>/dev/null || true
	[ "$(cat "$O/victim")" = precious ] || fail "a create through the mount wrote outside ROOT"
	if has_line victim ls -l "/proc/$DAEMON_PID/fd"; then fail "daemon holds a file outside ROOT open"; fi
	echo x > "$M/pub/open" && chmod 666 "$M/pub/open"
	as "$UA" cat "$M/pub/open" >/dev/null           # the kernel caches 0666
	chmod 600 "$R/pub/open"                           # host revokes access
	if as "$UA" bash -c "echo y >> '$M/pub/open'" 2>/dev/null; then fail "host-side chmod ignored (write)"; fi
	if as "$UA" cat "$M/pub/open" >/dev/null 2>&1; then fail "host-side chmod ignored (read)"; fi
	ok "no create followed a symlink out of ROOT; host-side chmod honoured at once"
}

# 5. No two writers: a revoke of a stopped holder says it was not
#    acknowledged, no successor gets the root until the holder fenced
#    itself, and none of the holder's queued writes lands after that.
sec_two_writers() {
	local R=$T/r5 M=$T/m5 M2=$T/m5b lease pid wpid rc=0 snap
	mount_ws "$R" "$M"
	lease=$(status_of "$M" lease) pid=$DAEMON_PID
	echo start > "$M/queued"
	kill -STOP "$pid"
	(for i in $(seq 16); do { echo "w$i" >> "$M/queued"; } 2>/dev/null || true; done) &
	wpid=$!
	"$LEASEFS" lease revoke --timeout=1 "$lease" >/dev/null 2>&1 || rc=$?
	[ $rc -eq 3 ] || fail "revoke of a stopped holder exited $rc, not 3 (unacknowledged)"
	mkdir -p "$M2"
	MOUNTS+=("$M2")
	rc=0; "$LEASEFS" mount "$R" "$M2" 2>/dev/null || rc=$?
	[ $rc -eq 75 ] || fail "a successor mounted while the revoked holder was stopped (rc $rc)"
	kill -CONT "$pid"
	mount_ws "$R" "$M2" --wait=20
	snap=$(cat "$R/queued")
	wait_pid_gone "$wpid" 20 || fail "queued writer still blocked"
	[ "$(cat "$R/queued")" = "$snap" ] || fail "the revoked holder wrote after its successor got the root"
	echo succ >> "$M2/queued" || fail "successor cannot write"
	ok "revoke reported the stopped holder unacknowledged; successor only after the fence ($(grep -c '^w' "$R/queued") queued writes landed before it)"
}

# 6. The control socket survives idle and rude clients.
sec_control_socket() {
	local R=$T/r6 M=$T/m6
	mount_ws "$R" "$M"
	python3 - "$(python3 -c 'import hashlib,sys; print(hashlib.sha256(sys.argv[1].encode()).hexdigest())' "$M")" "$LEASEFS" "$M" <<'PY'
import socket, struct, subprocess, sys
path = "/run/leasefs/ctl/%s.sock" % sys.argv[1]
idle = []
for _ in range(40):
    s = socket.socket(socket.AF_UNIX); s.connect(path); idle.append(s)
subprocess.run([sys.argv[2], "status", sys.argv[3]], check=True, timeout=3, stdout=subprocess.DEVNULL)
for _ in range(50):
    s = socket.socket(socket.AF_UNIX); s.connect(path)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.sendall(b"status\n"); s.close()
PY
	alive "$DAEMON_PID" || fail "daemon died from control socket clients"
	[ "$(status_of "$M" state)" = held ] || fail "status after rude clients"
	ok "control socket: 40 idle clients and 50 hang-ups, daemon alive and answering"
}

# 7. Exclusivity cannot be bypassed: no mem: store, no shared or session
#    mount over an exclusively held root, no exclusive over live shared.
sec_exclusivity() {
	local R=$T/r7 M=$T/m7 rc S=$T/s7
	mkdir -p "$R" "$T/mx"
	MOUNTS+=("$T/mx")   # cleaned up even if a broken build mounts it
	rc=0; "$LEASEFS" mount --leases=mem: "$R" "$T/mx" 2>/dev/null || rc=$?
	[ $rc -eq 64 ] || fail "--leases=mem: accepted (rc $rc)"
	mount_ws "$R" "$M"
	for p in shared session; do
		mkdir -p "$T/m7$p"
		MOUNTS+=("$T/m7$p")
		rc=0; "$LEASEFS" mount --placement=$p "$R" "$T/m7$p" 2>/dev/null || rc=$?
		[ $rc -eq 75 ] || fail "$p mount of an exclusively held root (rc $rc)"
	done
	[ "$(find "$R" -mindepth 1 | wc -l)" -eq 0 ] || fail "refused mounts touched ROOT"
	mount_ws "$S" "$T/m7s" --placement=shared
	mkdir -p "$T/m7x"
	MOUNTS+=("$T/m7x")
	rc=0; "$LEASEFS" mount "$S" "$T/m7x" 2>/dev/null || rc=$?
	[ $rc -eq 75 ] || fail "exclusive mount beside a live shared one (rc $rc)"
	ok "mem: refused; shared/session refused on an exclusive root and vice versa"
}

# 8. After loss, bytes that never reached ROOT are not served, and the
#    read-only remount waits for a writer that keeps a file open (> 10 s).
sec_after_loss() {
	local R=$T/r8 M=$T/m8
	mount_ws "$R" "$M"
	printf AAAAAAAA > "$M/mm"
	printf x > "$M/held"
	cat > "$T/mm.py" <<'PY'
import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDWR); m = mmap.mmap(fd, 8)
w = os.open(sys.argv[2], os.O_WRONLY)
print("ready"); sys.stdin.readline()
m[0:8] = b"BBBBBBBB"
try:
    m.flush(); print("flushed")
except OSError as e:
    print("refused", e.errno)
sys.stdin.readline(); m.close(); os.close(fd); os.close(w)
print("closed"); sys.stdin.readline()
PY
	coproc MM { python3 -u "$T/mm.py" "$M/mm" "$M/held"; }
	read -r line <&"${MM[0]}"; [ "$line" = ready ] || fail "mmap helper: $line"
	revoke "$M"
	wait_until 5 bash -c "! echo x 2>/dev/null >> '$M/keep'" || fail "no EROFS after revoke"
	echo go >&"${MM[1]}"; read -r flushed <&"${MM[0]}"
	[ "$(cat "$M/mm")" = AAAAAAAA ] || fail "readers see bytes that never reached ROOT ($flushed)"
	[ "$(cat "$R/mm")" = AAAAAAAA ] || fail "ROOT changed after loss"
	sleep 11   # the old code gave up on the remount after ~10 s of EBUSY
	has_opt "$M" ro && fail "read-only remount although a file is open for writing"
	echo go >&"${MM[1]}"; read -r line <&"${MM[0]}"
	wait_ro "$M" 10 || fail "read-only remount abandoned after a long-open writer"
	echo go >&"${MM[1]}"
	ok "mmap bytes after loss not served (msync: $flushed); read-only once the writer closed"
}

# 9. O_DIRECT works (databases, dd oflag=direct).
sec_odirect() {
	local R=$T/r9 M=$T/m9
	mount_ws "$R" "$M"
	dd if=/dev/urandom of="$T/src9" bs=4096 count=8 status=none
	dd if="$T/src9" of="$M/d" bs=4096 oflag=direct status=none || fail "O_DIRECT write"
	dd if="$M/d" of="$T/back9" bs=4096 iflag=direct status=none || fail "O_DIRECT read"
	cmp -s "$T/src9" "$R/d" && cmp -s "$T/src9" "$T/back9" || fail "O_DIRECT data differs"
	ok "O_DIRECT read and write"
}

# 11. A non-owner's O_TRUNC clears set-user-ID as on the backing fs.
sec_otrunc_suid() {
	local R=$T/r11 M=$T/m11 N=$T/native11
	mount_ws "$R" "$M"
	chmod 755 "$R"
	mkdir -p "$N" && chmod 755 "$N"
	for d in "$N" "$M"; do
		echo x > "$d/s" && chmod 4777 "$d/s"
		as "$UA" bash -c ": > '$d/s'"
	done
	[ "$(stat -c %a "$R/s")" = "$(stat -c %a "$N/s")" ] ||
		fail "O_TRUNC by non-owner: mode $(stat -c %a "$R/s"), natively $(stat -c %a "$N/s")"
	ok "O_TRUNC by a non-owner clears set-user-ID ($(stat -c %a "$R/s"))"
}

# 13. Callers with many groups: a group past the 64th still counts; a
#     daemon whose own user has many groups starts.
sec_many_groups() {
	local R=$T/r13 M=$T/m13 i gids=() last
	for i in $(seq 70); do
		groupdel "lfs-sec-g$i" >/dev/null 2>&1 || true
		groupadd --system "lfs-sec-g$i"
		at_exit "groupdel lfs-sec-g$i"
		gids+=("$(getent group "lfs-sec-g$i" | cut -d: -f3)")
	done
	usermod -a -G "$(printf 'lfs-sec-g%s,' $(seq 70) | sed 's/,$//')" "$UA"
	last=$(printf '%s\n' "${gids[@]}" | sort -n | tail -1)
	mkdir -p "$R"
	MOUNTS+=("$M"); mkdir -p "$M"
	setpriv --groups="$(IFS=,; echo "${gids[*]}")" "$LEASEFS" mount "$R" "$M" ||
		fail "a daemon with 70 supplementary groups did not start"
	DAEMON_PID=$(status_of "$M" pid); PIDS+=("$DAEMON_PID")
	chmod 755 "$R"
	mkdir "$M/g" && chgrp "$last" "$M/g" && chmod 2770 "$M/g"
	as "$UA" bash -c "echo x > '$M/g/f'" || fail "group $last (past the 64th) not honoured"
	ok "a caller's 70th group honoured; daemon with 70 groups started"
}

# 14. A second leasefs on a live leasefs mount point is refused.
sec_stacked() {
	local R=$T/r14 M=$T/m14 rc=0 pid
	mount_ws "$R" "$M"
	pid=$DAEMON_PID
	mkdir -p "$T/r14b"
	MOUNTS+=("$M")      # a broken build would stack a second mount here
	"$LEASEFS" mount "$T/r14b" "$M" 2>/dev/null || rc=$?
	[ $rc -eq 75 ] || fail "second mount on a live mount point (rc $rc, want 75: busy)"
	[ "$(status_of "$M" pid)" = "$pid" ] || fail "control socket taken over"
	ok "stacked mount refused; status still reaches the first daemon"
}

# 15. Bad roots and leftovers: /proc is no workspace; a failed session
#     mount leaves no ROOT/<uuid>.
sec_leftovers() {
	local B=$T/b15 rc=0
	mkdir -p "$T/m15" "$B"
	MOUNTS+=("$T/m15")
	"$LEASEFS" mount /proc "$T/m15" 2>/dev/null || rc=$?
	[ $rc -eq 64 ] || fail "/proc accepted as ROOT (rc $rc)"
	rc=0; "$LEASEFS" mount --placement=session -o max_read=bad "$B" "$T/m15" 2>/dev/null || rc=$?
	[ $rc -ne 0 ] || fail "a bad max_read was accepted"
	[ "$(find "$B" -mindepth 1 | wc -l)" -eq 0 ] || fail "failed session mount left $(ls "$B")"
	local ended=()
	for i in 1 2 3; do
		mount_ws "$T/r15" "$T/m15b"
		ended+=("$(status_of "$T/m15b" session)")
		"$LEASEFS" umount "$T/m15b"
	done
	for s in "${ended[@]}"; do
		[ ! -e "$T/leases/sessions/$s.rec" ] && [ ! -e "$T/leases/sessions/$s.lock" ] ||
			fail "ended session $s left lease files"
	done
	ok "/proc refused; failed session mount left nothing; ended sessions left no lease files"
}

SECTIONS=(flags_kept option_injection acls symlink_escape two_writers
	  control_socket exclusivity after_loss odirect otrunc_suid many_groups
	  stacked leftovers)
for s in "${SECTIONS[@]}"; do
	[ -z "${SEC_ONLY:-}" ] || [ "$SEC_ONLY" = "$s" ] || continue
	echo "== $s"
	"sec_$s"
done
echo PASS
