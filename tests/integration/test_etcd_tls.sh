#!/bin/bash
# SPDX-License-Identifier: MIT
#
# etcds:// against an etcd serving TLS with client-certificate auth (a
# throwaway CA from tests/etcd-harness.sh): keepalives and the watch work
# over TLS, and a client without its certificate is refused.
set -u
ETCD_TLS=1 exec "$(dirname "$0")/etcd-suite.sh" tls
