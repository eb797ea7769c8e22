#!/bin/bash
# SPDX-License-Identifier: MIT
#
# 3-member etcd cluster on loopback, TTL 5 s: killing the leader under a
# live holder keeps the lease; killing the holder too lets it be reclaimed
# (the time is printed).  Runs the lease library's etcd test binary in its
# "cluster" mode under tests/etcd-harness.sh, which stops every member by pid.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${LEASEFS_BIN:-$root/build/leasefs}
testbin=$(dirname "$bin")/tests/test_etcd
if [ ! -x "$testbin" ]; then
	echo "test_etcd_cluster: $testbin not built" >&2
	exit 1
fi
ETCD_MEMBERS=3 exec "$root/tests/etcd-harness.sh" "$testbin" cluster
