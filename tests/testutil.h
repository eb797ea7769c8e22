/* SPDX-License-Identifier: MIT */
/* Shared helpers for the cmocka suites.  Each test fails rather than hangs:
 * every wait here is bounded. */
#ifndef LEASEFS_TESTUTIL_H
#define LEASEFS_TESTUTIL_H

#include <stdbool.h>
#include <stdint.h>

#include "lease.h"

/* mkdtemp under $TMPDIR (or /tmp); aborts the test on failure. */
char *tu_mkdtemp(const char *tag);
/* rm -rf, best effort. */
void tu_rmrf(const char *path);
/* Wait for fd to become readable; true if it did within timeout_ms. */
bool tu_wait_readable(int fd, int timeout_ms);
/* Write `text` to an existing file (procfs knobs): 0 or -errno. */
int tu_write_file(const char *path, const char *text);
/*
 * Open a fresh, empty store of the given backend ("mem", "file", "etcd").
 * file: a new temp lease dir (returned in *dir_out, caller frees/removes).
 * etcd: $LEASEFS_ETCD_ENDPOINTS with a unique key prefix per call.
 */
struct lease_store *tu_open_store(const char *backend, char **dir_out);
/* URI that tu_open_store() used last (for child processes to reopen). */
const char *tu_last_uri(void);
/* Unique suffix for names: "<pid>-<counter>". */
const char *tu_unique(void);
/* The etcd store under `prefix` is an old one: its marker there and its
 * grace run out (lease/etcd/settle.c), as if it had been used long ago.
 * Written through the harness's first member ($ETCD_CLIENT_URL, TLS files
 * from $LEASEFS_ETCD_CA, _CERT, _KEY). */
void tu_etcd_settle(const char *prefix);

#endif
