#!/usr/bin/env bash
# Writers hammer the mount while the lease is revoked.  Afterwards every
# write that returned success is in the backing file, and nothing landed
# after the loss: each backing file ends exactly at its last acknowledged
# record.
. "$(dirname "$0")/lib.sh"

R=$T/root M=$T/mnt
mount_ws "$R" "$M"
lease=$(status_of "$M" lease)
nw=4 writers=()
for i in $(seq $nw); do
	python3 - "$M/w$i" "$T/ack$i" "$T/go" <<'PY' &
import errno, os, sys, time
path, ackpath, go = sys.argv[1:4]
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
ack = open(ackpath, "w")
seq = 0
t0 = time.monotonic()
while time.monotonic() - t0 < 30:
    rec = b"%08d:%s\n" % (seq, b"x" * 54)   # 64 bytes
    try:
        n = os.write(fd, rec)
    except OSError as e:
        if e.errno != errno.EROFS: raise
        break
    assert n == len(rec)
    ack.write("%d\n" % seq); ack.flush()
    seq += 1
    if seq == 200: open(go + "." + str(os.getpid()), "w").close()
print(seq, file=sys.stderr)
PY
	PIDS+=($!) writers+=($!)
done
# revoke once every writer has written 200 records
wait_until 30 bash -c "[ \$(ls $T/go.* 2>/dev/null | wc -l) -ge $nw ]" || fail "writers did not start"
"$LEASEFS" lease revoke "$lease" >/dev/null
for p in "${writers[@]}"; do wait "$p" || fail "writer $p failed"; done
for i in $(seq $nw); do
	acked=$(wc -l < "$T/ack$i")
	size=$(stat -c %s "$R/w$i")
	[ "$size" -eq $((acked * 64)) ] || fail "w$i: $acked acked records but $size bytes on disk"
	last=$(tail -n1 "$R/w$i" | cut -d: -f1)
	[ $((10#$last)) -eq $((acked - 1)) ] || fail "w$i: last record $last, acked $acked"
	ok "w$i: $acked acknowledged records, all on disk, nothing after loss"
done
echo PASS
