#!/bin/bash
# SPDX-License-Identifier: MIT
#
# etcds:// against an etcd serving TLS with client-certificate auth (a
# throwaway CA from tests/etcd-harness.sh): keepalives and the watch work
# over TLS, and a client without its certificate is refused.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${LEASEFS_BIN:-$root/build/leasefs}
testbin=$(dirname "$bin")/tests/test_etcd
if [ ! -x "$testbin" ]; then
	echo "test_etcd_tls: $testbin not built" >&2
	exit 1
fi
ETCD_TLS=1 exec "$root/tests/etcd-harness.sh" "$testbin" tls
