#!/bin/bash
# SPDX-License-Identifier: MIT
#
# etcd-suite.sh MODE: run the lease library's etcd test binary in MODE under
# tests/etcd-harness.sh (which stops every etcd member by pid).  The
# harness reads ETCD_MEMBERS and ETCD_TLS from the caller's environment.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${LEASEFS_BIN:-$root/build/leasefs}
testbin=$(dirname "$bin")/tests/test_etcd
if [ ! -x "$testbin" ]; then
	echo "etcd-suite $1: $testbin not built" >&2
	exit 1
fi
exec "$root/tests/etcd-harness.sh" "$testbin" "$1"
