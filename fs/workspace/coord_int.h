/* SPDX-License-Identifier: MIT */
/* The coordinator's state, shared by coord.c and coord_open.c alone. */
#ifndef LEASEFS_COORD_INT_H
#define LEASEFS_COORD_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "coord.h"

#define DEFAULT_RELEASE_TIMEOUT_MS 5000

/*
 * The state word packs the coordinator state (low byte) and the latched
 * loss reason (next byte), so that HELD -> LOST and the reason latch in
 * one compare-and-swap.
 */
#define WORD(st, why) ((unsigned)(st) | ((unsigned)(why) << 8))
/* The state inside coord_open(), before the coordinator is handed out:
 * no caller ever reads it, so it is not one of enum coord_state's. */
#define COORD_OPENING ((enum coord_state)0xff)
#define WORD_STATE(w) ((enum coord_state)((w) & 0xffu))
#define WORD_LOSS(w) ((enum lease_loss)((w) >> 8))

typedef void (*coord_release_observer)(void *ud, const char *lease_name,
				       int64_t deadline);

struct coord {
	/* Fixed by coord_open(); read-only afterwards. */
	const struct placement *pl;  /* what its placement means */
	struct lease_store *store;
	struct lease *root_lease;    /* NULL unless exclusive */
	struct lease *session_lease;
	/* Claimed (exchange to true) by whoever releases the lease. */
	atomic_bool root_released;
	atomic_bool session_released;
	int64_t release_timeout_ms;
	void (*on_loss)(void *userdata, enum lease_loss why);
	void *on_loss_userdata;
	void (*log)(void *userdata, const char *msg);
	void *log_userdata;
	char root[PATH_MAX];
	bool made_session_dir;       /* its own directory was made by it
				      * (by any attempt of coord_open) */
	char session_id[37];
	char root_name[LEASE_NAME_MAX + 1];
	char session_name[LEASE_NAME_MAX + 1];
	/* Exclusive, while coord_open() acquires: the root names of the
	 * directories above the root, the scopes its lease lives within,
	 * and those directories. */
	char (*scopes)[LEASE_NAME_MAX + 1];
	const char **scope_names;    /* scopes[i], as lease_acquire_in takes them */
	char (*scope_paths)[PATH_MAX];
	size_t nscopes;

	/* Set before coord_shutdown() starts; read only by the teardown. */
	coord_release_observer observer;
	void *observer_ud;

	_Atomic unsigned word; /* WORD(state, loss reason) */
	int state_fd;          /* eventfd, written on every state change */
	_Atomic long inflight; /* admitted mutations not yet exited */

	/*
	 * lock protects shutdown_running, shutdown_done and shutdown_result,
	 * and is the mutex of both condition variables.  It is never taken
	 * on the healthy()/enter() fast path.
	 *  drained: signalled when inflight reaches 0 after admission closed
	 *           (CLOCK_MONOTONIC, the drain wait is timed);
	 *  done:    broadcast when a teardown attempt has ended.
	 */
	pthread_mutex_t lock;
	pthread_cond_t drained;
	pthread_cond_t done;
	bool shutdown_running;   /* an attempt is under way */
	bool shutdown_done;      /* the leases are released: final */
	int shutdown_result;     /* of the last attempt */
};


/* coord.c */
/* Why lease `l` is gone: lost (the callback may not have run yet), or
 * its safe-until passed (EXPIRED); LEASE_LOSS_NONE for NULL or a live
 * one.  `now` (0: not yet read) is read at most once, lazily. */
enum lease_loss coord_lease_gone(const struct lease *l, int64_t *now);
/* The lease callback: latch the loss (fenced placements) or pass it on;
 * while opening, only note it in the word. */
void coord_on_lease_loss(struct lease *lease, enum lease_loss why,
			 void *userdata);
/* Release one lease, bounded by the release timeout; failures are said. */
void coord_release_one(struct coord *c, struct lease *l);
/* The placement's own directory goes if we made it and it is empty (and
 * nothing was lost: a successor may be using it). */
void coord_remove_own_dir(struct coord *c);

#endif
