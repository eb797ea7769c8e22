/* SPDX-License-Identifier: MIT */
/*
 * The renewal engine of the TTL stores that renew every grant from one
 * thread per store (etcd, pgstore, natsstore).  Only lease/ includes this.
 *
 * The engine owns the rules; a backend brings its wire calls
 * (struct lease_renew_ops).  The rules, for each grant added:
 *
 * - Schedule: the first renewal TTL/3 after the grant was added, then
 *   TTL/3 after the send time of the last renewal the store took; a
 *   renewal that could not reach the store is retried retry_ms later
 *   (also "now", at the owner's asking: lease_renew_check_locked()).
 * - Safe-until: what the wire computed for a renewal the store took is
 *   published as it is (it may move back: a store may shorten it); with
 *   safe_until_forward only if it is later than the one published.
 * - Loss: a renewal the store refused (the grant is no longer ours) is
 *   loss with the reason the wire gives, and the grant is not renewed
 *   again; a renewal that could not reach the store is loss
 *   (LEASE_LOSS_STORE) once the safe-until read before it has passed (a
 *   grant never given one, 0, is not lost so); a renewal that says
 *   revoked is loss (LEASE_LOSS_REVOKED) and the grant is still renewed,
 *   so that a holder draining its writes keeps every successor out.
 *   With expire_at_safe_until, a grant is lost (LEASE_LOSS_EXPIRED) the
 *   moment its safe-until (not 0) passes, with no renewal needed, and an
 *   unanswered renewal is not loss by itself.  With stop_at_loss, any
 *   loss (the engine's or the backend's own) ends the grant's renewals.
 * - Rules (struct lease_renew_rules): lease_renew_init() sets the values
 *   above that pgstore and natsstore use (retry_ms 1000, the three
 *   switches off); a store that wants others sets rn->rules before it
 *   adds a grant.
 * - Reachability (lease_store_reach()): a renewal that was sent says
 *   whether the store answered; one the wire held back says nothing.
 * - In flight: a wire may send a renewal and give its answer later
 *   (LEASE_RENEW_SENT, then lease_renew_answer_locked()); the grant is
 *   not renewed again meanwhile, and the answer is applied as above at
 *   its coming, with the send time and the safe-until read before the
 *   send; an answer for a grant no longer renewed is dropped.
 *
 * Threads and locks: the engine shares its owner's lock (`lock`), which
 * protects the grant list, each grant's fields and the worker's state.
 * The thread holds it through a round (the wire's calls run under it) and
 * waits without it, on its kick and on the wire's descriptor if any (or
 * in the wire's own wait).
 */
#ifndef LEASEFS_RENEW_H
#define LEASEFS_RENEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"

/* One grant the engine renews, embedded in the backend's per-grant state. */
struct lease_renewal {
	struct lease *lease;         /* immutable once added */
	int64_t ttl_ms;              /* immutable once added; 0: the engine's */
	int64_t next_renew;          /* lock: monotonic ns */
	bool in_flight;              /* lock: sent, its answer not yet in */
	int64_t sent_until;          /* lock: in flight: safe-until at send */
	bool check_now;              /* lock: renew at the next round */
	bool renewing;               /* lock: still renewed */
	struct lease_renewal *next;  /* lock */
};

/* What one renewal found. */
enum lease_renew_status {
	LEASE_RENEW_TAKEN,        /* the store took it: safe_until, revoked */
	LEASE_RENEW_UNREACHABLE,  /* not answered: retried */
	LEASE_RENEW_HELD_BACK,    /* not sent (the wire looks first): retried */
	LEASE_RENEW_REFUSED,      /* no longer ours: lost for good, `why` */
	LEASE_RENEW_SENT,         /* in flight: lease_renew_answer_locked() */
};

struct lease_renew_result {
	int64_t safe_until;       /* TAKEN: the new safe-until */
	bool revoked;             /* TAKEN: the store says revoked */
	enum lease_loss why;      /* REFUSED: the reason */
};

struct lease_renew_ops {
	/* Caller holds the lock.  One renewal of `g`, whose send time is
	 * `sent` (monotonic ns): what it found, and *res. */
	enum lease_renew_status (*renew)(void *ctx, struct lease_renewal *g,
					 int64_t sent,
					 struct lease_renew_result *res);
	/* Optional, caller holds the lock: after a renewal the store took,
	 * its safe-until published: renew what goes with the grant; true if
	 * the store says it is revoked. */
	bool (*renewed)(void *ctx, struct lease_renewal *g);
	/* Optional, caller holds the lock: a round starts, ends; `g` is
	 * looked at in the round (before its renewal, if due). */
	void (*round_begin)(void *ctx);
	void (*look)(void *ctx, struct lease_renewal *g);
	void (*round_end)(void *ctx);
	/* Optional, caller holds the lock: a descriptor the thread also
	 * waits on (-1: none), and what to do when it is readable. */
	int (*wait_fd)(void *ctx);
	void (*readable)(void *ctx);
	/* Optional, instead of wait_fd: the thread's wait, lock not held,
	 * until `kick_fd` (an eventfd, to be read) is readable, something of
	 * the wire's is, or `timeout_ms`; readable() follows each. */
	void (*wait)(void *ctx, int kick_fd, int timeout_ms);
	/* Optional, caller holds the lock: `g`, in flight, is removed: its
	 * answer must not come. */
	void (*forget)(void *ctx, struct lease_renewal *g);
};

/* A store's rules (see the top of this file); immutable once a grant
 * was added. */
struct lease_renew_rules {
	int64_t retry_ms;           /* an unanswered renewal retried after */
	bool expire_at_safe_until;  /* lost the moment safe-until passes */
	bool safe_until_forward;    /* safe-until never moves back */
	bool stop_at_loss;          /* no renewal after any loss */
};

struct lease_renewer {
	pthread_mutex_t *lock;           /* the owner's */
	struct lease_renew_rules rules;
	const struct lease_renew_ops *ops;
	void *ctx;
	int64_t ttl_ms;
	struct lease_renewal *grants;    /* lock */
	struct lease_worker worker;      /* running, stopping: lock */
};

/* Before first use: nothing held, no thread. */
void lease_renew_init(struct lease_renewer *rn, pthread_mutex_t *lock,
		      const struct lease_renew_ops *ops, void *ctx,
		      int64_t ttl_ms);
/* Caller holds the lock: the thread runs.  0 or -errno. */
int lease_renew_start_locked(struct lease_renewer *rn);
/* Renew `g` (its lease set) from now on, first TTL/3 from now; the
 * thread started if it was not.  Takes the lock.  0 or -errno. */
int lease_renew_add(struct lease_renewer *rn, struct lease_renewal *g);
/* The same, first TTL/3 from `from` (monotonic ns: the grant's send). */
int lease_renew_add_from(struct lease_renewer *rn, struct lease_renewal *g,
			 int64_t from);
/* Caller holds the lock: the answer to `g`'s renewal in flight, sent at
 * `sent` (st not LEASE_RENEW_SENT). */
void lease_renew_answer_locked(struct lease_renewer *rn,
			       struct lease_renewal *g, int64_t sent,
			       enum lease_renew_status st,
			       const struct lease_renew_result *res);
/* No more renewals of `g` (whether or not it was added).  Takes the lock. */
void lease_renew_remove(struct lease_renewer *rn, struct lease_renewal *g);
/* Stop and join the thread (once every grant was removed).  Takes the
 * lock. */
void lease_renew_stop(struct lease_renewer *rn);
/* Caller holds the lock: renew every grant of `name` at once. */
void lease_renew_check_locked(struct lease_renewer *rn, const char *name);
/* Caller holds the lock: `g` is lost for `why`; with `for_good`, no
 * longer renewed (the store's entry is not ours to write). */
void lease_renew_lost_locked(struct lease_renewal *g, enum lease_loss why,
			     bool for_good);
/* Wake the thread for a round (any thread, no lock). */
void lease_renew_kick(struct lease_renewer *rn);
/* Caller holds the lock: one round (what the thread does each time it
 * wakes; the unit tests call it with no thread): ms until the next. */
int lease_renew_round_locked(struct lease_renewer *rn);

/*
 * The revoker's wait for a fence (backend.h's await_fence) on a store
 * whose holder may be a harness session with no loss channel.
 * `state` says where the holder revoked at the epoch stands: 1 fenced
 * (*out set), 0 not yet (*leasefs whether it is a leasefs holder, *ms to
 * its expiry), or -errno.  `wait` returns at a change the store tells
 * of, or at `until` (monotonic ns).  Looks again at least every 500 ms,
 * and 1 ms past an expiry due sooner.  A harness holder is given up on
 * (LEASE_FENCE_PENDING, and `untold` as the error's reason) once its
 * first expiry seen plus `slack_ms` has passed: it renewed.
 */
struct lease_fence_look {
	int (*state)(void *ctx, enum lease_fence *out, bool *leasefs,
		     int64_t *ms, struct lease_err *err);
	void (*wait)(void *ctx, int64_t until);
	void *ctx;
	int64_t slack_ms;
	const char *untold;
};
int lease_fence_wait(const struct lease_fence_look *fl, const char *name,
		     uint64_t epoch, int64_t deadline, enum lease_fence *out,
		     struct lease_err *err);

#endif
