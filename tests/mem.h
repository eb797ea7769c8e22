/* SPDX-License-Identifier: MIT */
/*
 * The tests' process-local lease store, "mem:" (mem.c): the lease
 * contract with no storage, and hooks to force what a real store cannot
 * be told to do on cue.  Not part of the product.
 */
#ifndef LEASEFS_TEST_MEM_H
#define LEASEFS_TEST_MEM_H

#include "backend.h"

extern const struct lease_backend lease_backend_mem;

/* Force loss of the current holder of `name` in a "mem:" store, with the
 * given reason (EXPIRED or TAKEOVER).  Takeover grants the name to a
 * phantom holder at epoch+1.  Returns -ENOENT if not held. */
int lease_mem_force_loss(struct lease_store *store, const char *name,
			 enum lease_loss why);

#endif
