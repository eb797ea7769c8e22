/* SPDX-License-Identifier: MIT */
/*
 * One mount's status, taken once and rendered three ways: the JSON of
 * `leasefs status --json` and of each watch line, and the Prometheus text
 * of `leasefs metrics` and of the node_exporter textfile.  Every renderer
 * reads the same snapshot, so the three never disagree about one moment.
 */
#ifndef LEASEFS_STATUS_H
#define LEASEFS_STATUS_H

#include <stdbool.h>
#include <stdint.h>

#include "ops.h"
#include "transport.h"

struct coord;
struct gate;

/* What a status is taken from; all borrowed. */
struct status_source {
	struct coord *coord;
	const struct gate *gate;            /* request counters */
	const struct transport *transport;  /* negotiated FUSE features */
	const char *backend;                /* store URI */
	const char *mountpoint;
};

struct status {
	const char *root, *placement, *session, *lease, *backend, *mountpoint;
	const char *state;       /* held, lost or shutting-down */
	const char *reason;      /* a loss latched: why; else NULL */
	uint64_t epoch;          /* of the gating lease (root, else session) */
	bool held;               /* held, and no loss latched */
	double valid_until;      /* Unix time of the safe-until; 0: no TTL */
	long inflight;           /* mutations admitted, not yet finished */
	int pid;
	char time[64];           /* when taken: RFC 3339 UTC, milliseconds */
	bool has_fuse;           /* fuse is INIT's outcome */
	struct transport_state fuse;
	uint64_t requests[LFS_NOPS];
	uint64_t refused[LFS_NOPS];
};

/* The public name of a coordinator state (what watchers see change). */
const char *status_state_name(struct coord *c);

void status_take(const struct status_source *src, struct status *st);

/* One line of JSON with its newline, malloc'ed (NULL: out of memory).  A
 * watch line carries the time and, once lost, the reason; a status reply
 * carries the FUSE features instead. */
char *status_json(const struct status *st, bool watch_line);
/* The Prometheus text exposition, malloc'ed (NULL: out of memory). */
char *status_prometheus(const struct status *st);

/* Why a mount serves on /dev/fuse rather than FUSE over io_uring, in
 * words ("turned off (enable_uring=N)"); NULL when it serves on io_uring. */
const char *status_transport_reason(const struct transport_state *t);

/* Now, as RFC 3339 UTC with milliseconds; buf of 64 bytes. */
void status_time_now(char *buf, size_t sz);

#endif
