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

/* The next `n` tries to acquire `name` fail with `kind` (e.g.
 * LEASE_E_UNREACHABLE: a store out of reach), before anything is looked
 * at.  One name at a time; n = 0 clears it. */
int lease_mem_fail_next(struct lease_store *store, const char *name,
			enum lease_errkind kind, int n);

/* Block until at least `n` acquirers wait for `name` to be let go (in
 * the acquire retry), or `deadline`: 0, or -ETIMEDOUT. */
int lease_mem_await_waiters(struct lease_store *store, const char *name,
			    int n, int64_t deadline);

/* `fn` is called after every grant, from the granting thread, outside
 * the store's lock (it may force a loss); NULL clears it. */
typedef void (*lease_mem_grant_fn)(void *ud, struct lease_store *store,
				   const char *name);
void lease_mem_on_grant(struct lease_store *store, lease_mem_grant_fn fn,
			void *ud);

#endif
