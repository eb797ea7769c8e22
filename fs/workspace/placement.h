/* SPDX-License-Identifier: MIT */
/*
 * Placements: the one table of what each one means.  Everything that
 * behaves differently by placement (the coordinator, the daemon's host
 * lock and cache policy, the CLI's checks) reads it here.
 */
#ifndef LEASEFS_PLACEMENT_H
#define LEASEFS_PLACEMENT_H

#include <stdbool.h>

#include "hostlock.h"
#include "lease.h"

enum placement_id {
	PLACEMENT_EXCLUSIVE, /* the root lease on ROOT */
	PLACEMENT_SESSION,   /* ROOT/<session uuid>, made 0700; no root lease */
	PLACEMENT_SHARED,    /* no root lease; never turns read-only */
	PLACEMENT_OBSERVER,  /* no root lease, no host lock; read-only */
	PLACEMENT_COUNT,
};

struct placement {
	const char *name;
	bool root_lease;        /* holds the root lease on what it serves */
	bool own_dir;           /* serves ROOT/<session id>, which it makes */
	bool fenced;            /* a loss turns it read-only (else the loss
				 * is only acknowledged: nothing gates it) */
	bool sole_writer;       /* nobody else writes what it serves: the
				 * kernel may cache names, attributes and
				 * pages for long */
	bool writes;            /* it may write what it serves; else it is
				 * mounted read-only and admits no mutation
				 * (EROFS at the gate): an observer */
	bool host_lock;         /* it takes `lock` on what it serves (an
				 * observer takes none: it keeps nobody out) */
	enum hostlock_mode lock; /* its host lock on what it serves */
};

const struct placement *placement_get(enum placement_id p);
/* By name ("exclusive", "session", "shared", "observer"): 0 or -EINVAL. */
int placement_parse(const char *s, enum placement_id *out);

/* The directory a session placement serves: `served`, created 0700 if
 * missing (*made says whether it was).  0, or LEASE_E_IO naming it. */
int placement_make_dir(const char *served, bool *made, struct lease_err *err);

#endif
