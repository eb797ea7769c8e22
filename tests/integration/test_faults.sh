#!/usr/bin/env bash
# The fault campaign's most telling schedules (scripts/fault-campaign runs
# them all; method and results in scripts/fault-campaign.md): two hosts in
# network and mount namespaces of their own (a private /run/leasefs each)
# contend for one root, TTL 3 s, the holder writing fsync-acknowledged
# records while a fault strikes, its successor waiting with --wait:
#   pg    one-way partition (the holder's packets to the server dropped),
#         SIGSTOP of the holder's daemon past its TTL, revoke during a
#         both-ways partition, the server killed -9 for longer than the TTL
#         and restarted with its store (the successor's --wait outlives it)
#   nats  server killed -9 and restarted without its store (the bucket's
#         grace), the holder's clock 1 s slow while it is cut off, SIGSTOP
#   fs    revoke of a SIGSTOPped holder (twice): never "acknowledged"
# No acknowledged record of a holder may come after its successor's first
# (in the file or in time), and epochs rise.  Skips (77) only where network
# namespaces or nftables do not work.
# bound: 180
export IT_TIMEOUT=${IT_TIMEOUT:-180}
. "$(dirname "$0")/lib.sh"
. "$HERE/faults.sh"

why=$(fc_usable)
if [ -n "$why" ]; then
	echo "SKIP: $why"
	exit 77
fi
[ -e "$FAKETIME_LIB" ] || fail "libfaketime is not installed (scripts/setup installs faketime)"
command -v nats-server >/dev/null || fail "nats-server is not installed (scripts/setup installs it)"
"$PY" -c 'import psycopg2' 2>/dev/null || fail "python3-psycopg2 is not installed (scripts/setup installs it)"

fc_topology
: >"$T/runs"
run() { # STORE FAULT N
	local rc=0 line
	fc_run "$@" >"$T/line" || rc=$?   # not in a subshell: it keeps state (pids)
	line=$(cat "$T/line")
	echo "$line" >>"$T/runs"
	[ $rc -eq 0 ] || fail "$1 $2 run $3: $line"
	ok "$1 $2 run $3: $("$PY" -c 'import json, sys
r = json.loads(sys.argv[1])
print("%s; handover %s ms; %s" % (", ".join(r["holders"]), r["overlap_ms"], r["note"][:160]))' "$line")"
}

fc_store pg
run pg part-out 1
run pg sigstop 1
run pg revoke-part 1
run pg kill9 1
fc_store_stop

fc_store nats
run nats wipe 1
run nats skew-slow 1
run nats sigstop 1
fc_store_stop

fc_store fs
run fs revoke-stop 1
run fs revoke-stop 2

fc_table "$T/runs"
echo PASS
