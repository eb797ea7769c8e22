#!/bin/bash
# SPDX-License-Identifier: MIT
#
# 3-member etcd cluster on loopback, TTL 5 s: killing the leader under a
# live holder keeps the lease; killing the holder too lets it be reclaimed
# (the time is printed).  Runs the lease library's etcd test binary in its
# "cluster" mode (etcd-suite.sh).
# bound: 90
set -u
ETCD_MEMBERS=3 exec "$(dirname "$0")/etcd-suite.sh" cluster
