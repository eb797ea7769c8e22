#!/usr/bin/env bash
# A ROOT on a layer leasefs cannot see through (issue 33, finding 5): on
# another leasefs mount it is busy (75), naming the holder beneath (mount
# point, pid, lease), however it is reached (the mount point, a directory
# in it, a bind mount of it); on bindfs or overlayfs it is refused (64)
# unless --allow-stacked-root (or -o allow_stacked_root) is given.
. "$(dirname "$0")/lib.sh"

# expect_refused RC WANT ARGS...: `leasefs mount ARGS` exits RC saying
# WANT, and mounts nothing on the mount point (the last argument).
expect_refused() {
	local want_rc=$1 want=$2 rc=0 out mnt; shift 2
	mnt=${!#}; mkdir -p "$mnt"; MOUNTS+=("$mnt")
	out=$(timeout 30 "$LEASEFS" mount "$@" 2>&1) || rc=$?
	[ $rc -eq "$want_rc" ] || fail "mount $*: exit $rc, want $want_rc ($out)"
	case "$out" in *"$want"*) ;; *) fail "mount $*: message lacks '$want': $out" ;; esac
	if findmnt -rn "$mnt" >/dev/null; then fail "mount $*: something mounted"; fi
	echo "   exit $rc: $out"
}

# 1. leasefs over leasefs: busy, naming M1, its daemon's pid and lease.
R1=$T/r1 M1=$T/m1
mkdir -p "$R1/sub"
mount_ws "$R1" "$M1"
pid=$(status_of "$M1" pid) lease=$(status_of "$M1" lease) epoch=$(status_of "$M1" epoch)
want="mount point $M1 (pid $pid, lease $lease at epoch $epoch)"
expect_refused 75 "$want" "$M1" "$T/m2"
expect_refused 75 "$want" "$M1/sub" "$T/m3"
mkdir -p "$T/b1"; mount --bind "$M1" "$T/b1"; MOUNTS+=("$T/b1")
expect_refused 75 "$want" "$T/b1/sub" "$T/m4"
expect_refused 75 "$want" --allow-stacked-root "$M1/sub" "$T/m5"
[ -z "$(ls -A "$R1/sub")" ] || fail "a refused mount touched $R1/sub"
ok "a ROOT on a leasefs mount (its mount point, a directory in it, a bind mount of it) is busy, naming $M1, pid $pid, lease $lease"

# 2. bindfs: refused unless asked for; asked for, it mounts (both spellings).
R2=$T/r2 B2=$T/bindfs
mkdir -p "$R2" "$B2"; echo data > "$R2/f"
bindfs "$R2" "$B2"; MOUNTS+=("$B2")
expect_refused 64 "--allow-stacked-root" "$B2" "$T/m6"
mount_ws "$B2" "$T/m7" --allow-stacked-root
[ "$(cat "$T/m7/f")" = data ] || fail "--allow-stacked-root: the bindfs root is not served"
"$LEASEFS" umount "$T/m7"
mkdir -p "$T/m8"; MOUNTS+=("$T/m8")
timeout 30 "$LEASEFS" "$B2" "$T/m8" -o allow_stacked_root
PIDS+=("$(status_of "$T/m8" pid)")
[ "$(cat "$T/m8/f")" = data ] || fail "-o allow_stacked_root: the bindfs root is not served"
"$LEASEFS" umount "$T/m8"
ok "a ROOT on bindfs: exit 64 naming --allow-stacked-root; served with --allow-stacked-root and with -o allow_stacked_root"

# 2b. Even asked for: a bindfs view of a held workspace (R1, or the
#     directory above it) is that workspace, busy, naming its holder.
B3=$T/bindfs-r1 B4=$T/bindfs-t
mkdir -p "$B3" "$B4"
bindfs "$R1" "$B3"; MOUNTS+=("$B3")
bindfs "$T" "$B4"; MOUNTS+=("$B4")
expect_refused 75 "$want" --allow-stacked-root "$B3" "$T/m11"
expect_refused 75 "$want" --allow-stacked-root "$B4" "$T/m12"
ok "--allow-stacked-root: a bindfs view of a held workspace, or of the directory above it, is busy naming its holder"

# 3. overlayfs: likewise.
O=$T/ov; mkdir -p "$O/lower" "$O/upper" "$O/work" "$O/merged"
mount -t overlay overlay -o "lowerdir=$O/lower,upperdir=$O/upper,workdir=$O/work" "$O/merged"
MOUNTS+=("$O/merged")
expect_refused 64 "overlayfs" "$O/merged" "$T/m9"
mount_ws "$O/merged" "$T/m10" --allow-stacked-root
echo x > "$T/m10/g" && [ "$(cat "$O/upper/g")" = x ] || fail "--allow-stacked-root: overlay root not served"
ok "a ROOT on overlayfs: exit 64; served with --allow-stacked-root"
O2=$T/ov2; mkdir -p "$O2/work" "$O2/merged" "$R1/upper"
mount -t overlay overlay -o "lowerdir=$O/lower,upperdir=$R1/upper,workdir=$O2/work" "$O2/merged"
MOUNTS+=("$O2/merged")
expect_refused 75 "$want" --allow-stacked-root "$O2/merged" "$T/m13"
ok "--allow-stacked-root: an overlay whose upper directory is in a held workspace is busy naming its holder"

# 4. --help says what leasefs cannot see through a stacked root.
"$LEASEFS" mount --help | grep -q "allow-stacked-root" || fail "--help lacks --allow-stacked-root"
"$LEASEFS" mount --help | grep -q "cannot see through" || fail "--help does not say what leasefs cannot see"
ok "--help describes --allow-stacked-root"
