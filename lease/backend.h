/* SPDX-License-Identifier: MIT */
/*
 * Backend interface of the lease library.  Only lease/ includes this.
 *
 * The generic layer (lease.c) owns: name validation, the contention retry
 * loop, the lease object, the exactly-once loss notification, release
 * idempotence.  A backend implements single attempts and store I/O, and
 * reports loss it observes with lease_mark_lost().
 */
#ifndef LEASEFS_BACKEND_H
#define LEASEFS_BACKEND_H

#include <pthread.h>
#include <stdatomic.h>

#include "lease.h"

/* The names a grant lives within (lease_acquire_in()). */
struct lease_scopes {
	const char *const *names;
	size_t n;
};

struct lease_backend {
	const char *scheme; /* "file", "etcd", "etcds", or a test's */
	/* `rest` is the URI after "scheme:" (may be "").  Sets store->priv. */
	int (*open)(struct lease_store *store, const char *rest,
		    struct lease_err *err);
	void (*close)(struct lease_store *store);
	/*
	 * One attempt, I/O bounded by `deadline`, within `sc` (lease.h's
	 * lease_acquire_in()).  On success *out comes from lease_alloc()
	 * with priv set (the generic layer then records sc in it).
	 * Contention: LEASE_E_HELD with err->name and the holder's epoch;
	 * the generic layer retries until the deadline.
	 */
	int (*try_acquire)(struct lease_store *store, const char *name,
			   const struct lease_scopes *sc, int64_t deadline,
			   struct lease **out, struct lease_err *err);
	/* Return once what refused a try of `name` within `sc` may have let
	 * go, or at `deadline`: the acquire retry waits on this, never on a
	 * timer.  Spurious returns are fine; missed changes are not. */
	void (*await_change)(struct lease_store *store, const char *name,
			     const struct lease_scopes *sc, int64_t deadline);
	/* Clear the entry iff it still carries lease->epoch.  Called at most
	 * once per lease, after loss was fired.  Bounded by `deadline`. */
	int (*release)(struct lease *lease, int64_t deadline);
	/* Stop watchers and free lease->priv.  Called once, after release. */
	void (*free_lease)(struct lease *lease);
	int (*list)(struct lease_store *store, lease_list_cb cb, void *userdata,
		    struct lease_err *err);
	int (*show)(struct lease_store *store, const char *name,
		    struct lease_info *info, struct lease_err *err);
	/* Supersede the holder; *epoch = the revoked holder's epoch. */
	int (*revoke)(struct lease_store *store, const char *name,
		      int64_t deadline, uint64_t *epoch, struct lease_err *err);
	/* Wait until the holder revoked at `epoch` is fenced (lease.h's
	 * enum lease_fence), at most until `deadline` (then PENDING, 0). */
	int (*await_fence)(struct lease_store *store, const char *name,
			   uint64_t epoch, int64_t deadline,
			   enum lease_fence *out, struct lease_err *err);
	/* Optional: after release, remove the name's records if it is still
	 * free at lease->epoch, never letting a later epoch of it go lower. */
	int (*forget)(struct lease *lease, int64_t deadline);
	/* Optional: after loss, while the holder still drains, keep the
	 * name from successors (called often; a backend paces itself). */
	void (*hold_fence)(struct lease *lease);
	/* Optional: local directory of the store (for the inside-root check). */
	const char *(*local_dir)(const struct lease_store *store);
};

struct lease_store {
	const struct lease_backend *be;
	char *uri;
	struct lease_store_opts opts; /* strings owned (strdup'ed) */
	void *priv;
	_Atomic bool unreachable;         /* as last reported (lease_store_reach) */
	_Atomic int64_t unreachable_since; /* CLOCK_MONOTONIC ns */
};

struct lease {
	struct lease_store *store;
	char name[LEASE_NAME_MAX + 1];
	uint64_t epoch;
	int loss_fd;                  /* eventfd, written once on loss */
	_Atomic int loss;             /* enum lease_loss; NONE until lost */
	_Atomic int64_t safe_until;   /* 0 = none */
	_Atomic bool released;        /* release() entered */
	/* cb_lock protects cb, cb_userdata and cb_fired. */
	pthread_mutex_t cb_lock;
	lease_loss_cb cb;
	void *cb_userdata;
	bool cb_fired;
	char **scopes;                /* what it lives within; owned */
	size_t nscopes;
	void *priv;                   /* backend state */
};

/* New lease object (loss fd created, not lost) living within `sc` (may
 * be NULL: none).  -errno on failure. */
int lease_alloc(struct lease_store *store, const char *name, uint64_t epoch,
		const struct lease_scopes *sc, struct lease **out);
/* Dispose of a lease that was never handed out (backend acquire failed
 * after lease_alloc).  Does not call backend hooks. */
void lease_dispose(struct lease *lease);
/*
 * Report loss.  The first call wins: it latches `why`, makes loss_fd
 * readable and runs the callback; later calls return false and do nothing.
 */
bool lease_mark_lost(struct lease *lease, enum lease_loss why);
/*
 * What a renewal (keepalive) of a held lease found: the server answered
 * (`answered`, whatever it said) or could not be asked.  Calls the
 * store's on_reach hook on a transition only; any thread.
 */
void lease_store_reach(struct lease_store *store, bool answered);
static inline void lease_set_safe_until(struct lease *lease, int64_t t)
{
	atomic_store_explicit(&lease->safe_until, t, memory_order_release);
}

/*
 * A store's one thread (worker.c): it runs `fn`, which loops, under the
 * owner's lock, until it sees `stopping`, and waits for work with
 * lease_worker_wait() outside that lock.  running and stopping are
 * protected by the owner's lock.
 */
struct lease_worker {
	pthread_t thr;
	int kick_fd;     /* eventfd: something changed, or stop */
	bool running;
	bool stopping;
};
/* Caller holds the owner's lock: the thread runs (started if it was
 * not).  0 or -errno. */
int lease_worker_start_locked(struct lease_worker *w, void *(*fn)(void *),
			      void *arg);
/* Wake the thread (from any thread; no lock needed). */
void lease_worker_kick(struct lease_worker *w);
/* In the thread, without the owner's lock: until kicked, `fd` (if >= 0)
 * readable, or timeout_ms; the revents of `fd`. */
short lease_worker_wait(struct lease_worker *w, int fd, int timeout_ms);
/* Ask the thread to stop (taking `lock`) and join it; once. */
void lease_worker_stop(struct lease_worker *w, pthread_mutex_t *lock);

extern const struct lease_backend lease_backend_file;
extern const struct lease_backend lease_backend_fsstore;

/* One more backend for lease_store_open() (tests add their process-local
 * one this way; the product has only its own).  Up to 4; -ENOSPC. */
int lease_backend_add(const struct lease_backend *be);
#ifdef LEASEFS_HAVE_ETCD
extern const struct lease_backend lease_backend_etcd;
extern const struct lease_backend lease_backend_etcds;
#endif
#ifdef LEASEFS_HAVE_PG
extern const struct lease_backend lease_backend_pg;
extern const struct lease_backend lease_backend_pgql;
#endif
#ifdef LEASEFS_HAVE_NATS
extern const struct lease_backend lease_backend_nats;
extern const struct lease_backend lease_backend_natstls;
#endif

#endif
