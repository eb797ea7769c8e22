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
echo PASS
