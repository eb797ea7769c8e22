/* SPDX-License-Identifier: MIT */
/* The pause between tries of something nothing announces the return of
 * (a store, the arbiter, a busy root): backing off, bounded. */
#ifndef LEASEFS_BACKOFF_H
#define LEASEFS_BACKOFF_H

#include <stdint.h>

/* Sleep *pause_ms, never past `deadline` (absolute CLOCK_MONOTONIC ns,
 * lease.h), then double *pause_ms for the next time, up to max_ms. */
void ws_backoff(int *pause_ms, int max_ms, int64_t deadline);

#endif
