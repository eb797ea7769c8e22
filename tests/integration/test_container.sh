#!/usr/bin/env bash
# Container pattern: a new mount namespace bind-mounts the mount point
# elsewhere; writes through the bind work and turn to EROFS on loss.
. "$(dirname "$0")/lib.sh"

R=$T/root M=$T/mnt
mount_ws "$R" "$M"
lease=$(status_of "$M" lease)
mkdir -p "$T/ctr"
unshare -m --propagation private bash -euo pipefail -c '
	mount --bind "$1" "$2"
	echo inside > "$2/from-container"
	"$3" lease revoke "$4" >/dev/null
	for i in $(seq 500); do
		if ! echo again 2>/dev/null >> "$2/from-container"; then break; fi
	done
	out=$(echo again 2>&1 >> "$2/from-container") && exit 3
	case "$out" in *"Read-only file system"*) exit 0 ;; *) echo "$out"; exit 4 ;; esac
' _ "$M" "$T/ctr" "$LEASEFS" "$lease" || fail "container bind: exit $?"
[ "$(head -n1 "$R/from-container")" = inside ] || fail "container write not in the root"
ok "bind mount in a new mount namespace: write works, EROFS after loss"

# A container still running at umount holds a copy of the mount: umount
# returns all the same, releases the leases, and the copy answers ENOTCONN.
R2=$T/root2 M2=$T/mnt2
mount_ws "$R2" "$M2"
lease2=$(status_of "$M2" lease)
unshare -m --propagation private sh -c "touch '$T/ctr.ready'; exec sleep 100000" &
ctr=$!
disown "$ctr"
PIDS+=("$ctr")
wait_until 10 test -e "$T/ctr.ready" || fail "container did not start"
nsenter -t "$ctr" -m sh -c "echo from-ctr > '$M2/c'" || fail "container cannot write through its copy"
timeout 15 "$LEASEFS" umount "$M2" || fail "umount with a container's copy alive: exit $?"
has_line '^state: *free' "$LEASEFS" lease show "$lease2" || fail "root lease not released: $("$LEASEFS" lease show "$lease2")"
out=$(nsenter -t "$ctr" -m timeout 5 stat "$M2" 2>&1) && fail "the container's copy still answers: $out"
case "$out" in *"not connected"*) ;; *) fail "container copy after umount: $out" ;; esac
[ "$(cat "$R2/c")" = from-ctr ] || fail "container's write lost"
ok "umount with a live container copy: returned, lease free, the copy answers ENOTCONN"
echo PASS
