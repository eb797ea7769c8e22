/* SPDX-License-Identifier: MIT */
/*
 * Mem backend ("mem:"): a process-local lease table for tests.
 *
 * Each open is a new, independent store.  Semantics follow the file
 * backend: epochs are monotonic per name for the life of the store, a
 * revoke supersedes the holder's epoch (state revoked) and keeps the name
 * shut until the revoked holder releases (its fence acknowledgement), a
 * release clears the entry only if it still carries the releasing lease's
 * epoch.
 * lease_mem_force_loss() simulates expiry (frees the name) and takeover
 * (a phantom holder gets epoch+1); lease_mem_fail_next() a store out of
 * reach; lease_mem_on_grant() and lease_mem_await_waiters() let a test
 * act at a given point of an acquisition.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mem.h"

struct mem_entry {
	struct mem_entry *next;
	char name[LEASE_NAME_MAX + 1];
	uint64_t epoch;          /* high-water mark: last epoch granted */
	enum lease_state state;
	struct lease *holder;    /* live holder object; NULL if none or phantom */
	pid_t holder_pid;        /* 0 for a phantom holder */
	struct lease *fencing;   /* revoked holder that has not released yet */
	int waiters;             /* acquirers in await_change for it */
};

struct mem_store {
	/* lock protects entries and every field of every entry, and the
	 * test hooks below; released is broadcast whenever a holder lets go
	 * (release, forced loss), waiting whenever an acquirer starts to
	 * wait. */
	pthread_mutex_t lock;
	pthread_cond_t released;
	pthread_cond_t waiting;
	struct mem_entry *entries;
	char fail_name[LEASE_NAME_MAX + 1]; /* lease_mem_fail_next() */
	enum lease_errkind fail_kind;
	int fail_left;
	lease_mem_grant_fn on_grant;        /* lease_mem_on_grant() */
	void *on_grant_ud;
};

static struct mem_store *mem_of(const struct lease_store *store)
{
	return store->priv;
}

/* Caller holds ms->lock. */
static struct mem_entry *entry_find(struct mem_store *ms, const char *name)
{
	for (struct mem_entry *e = ms->entries; e; e = e->next)
		if (strcmp(e->name, name) == 0)
			return e;
	return NULL;
}

/* Caller holds ms->lock.  NULL on out of memory. */
static struct mem_entry *entry_get(struct mem_store *ms, const char *name)
{
	struct mem_entry *e = entry_find(ms, name);

	if (e)
		return e;
	e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	snprintf(e->name, sizeof(e->name), "%s", name);
	e->state = LEASE_STATE_FREE;
	e->next = ms->entries;
	ms->entries = e;
	return e;
}

static int mem_open(struct lease_store *store, const char *rest,
		    struct lease_err *err)
{
	struct mem_store *ms;

	if (rest && *rest)
		return lease_err_set(err, LEASE_E_USAGE, 0, NULL,
				     "mem store takes no argument (got 'mem:%s')",
				     rest);
	ms = calloc(1, sizeof(*ms));
	if (!ms)
		return lease_err_set(err, LEASE_E_IO, -ENOMEM, NULL,
				     "out of memory");
	pthread_mutex_init(&ms->lock, NULL);
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&ms->released, &ca);
	pthread_cond_init(&ms->waiting, &ca);
	pthread_condattr_destroy(&ca);
	store->priv = ms;
	return 0;
}

/* Leases of the store must have been freed before close. */
static void mem_close(struct lease_store *store)
{
	struct mem_store *ms = mem_of(store);
	struct mem_entry *e, *next;

	if (!ms)
		return;
	for (e = ms->entries; e; e = next) {
		next = e->next;
		free(e);
	}
	pthread_mutex_destroy(&ms->lock);
	pthread_cond_destroy(&ms->released);
	pthread_cond_destroy(&ms->waiting);
	free(ms);
	store->priv = NULL;
}

/* Caller holds ms->lock.  Whether lease l lives within `name`. */
static bool lives_within(const struct lease *l, const char *name)
{
	for (size_t i = 0; l && i < l->nscopes; i++)
		if (strcmp(l->scopes[i], name) == 0)
			return true;
	return false;
}

/* Caller holds ms->lock.  A grant (live or fenced) within `name`: its
 * entry, the number of them in *n; NULL if none. */
static struct mem_entry *within(struct mem_store *ms, const char *name,
				unsigned *n)
{
	struct mem_entry *first = NULL;

	*n = 0;
	for (struct mem_entry *e = ms->entries; e; e = e->next) {
		if (!lives_within(e->holder, name) && !lives_within(e->fencing, name))
			continue;
		++*n;
		if (!first)
			first = e;
	}
	return first;
}

/* Caller holds ms->lock.  LEASE_E_HELD if e refuses a grant (held, or
 * revoked and not yet released), else 0. */
static int entry_refuses(const struct mem_entry *e, struct lease_err *err)
{
	uint64_t held = 0;
	int r;

	if (e && e->state == LEASE_STATE_HELD)
		held = e->epoch;
	else if (e && e->fencing)
		held = e->fencing->epoch;
	else
		return 0;
	r = lease_err_set(err, LEASE_E_HELD, 0, e->name, "lease '%s' is %s "
			  "at epoch %llu", e->name, e->fencing ? "revoked and "
			  "not yet released" : "held", (unsigned long long)held);
	if (err)
		err->holder_epoch = held;
	return r;
}

/* Caller holds ms->lock.  What refuses a grant of `name` within sc. */
static int grant_refused(struct mem_store *ms, const char *name,
			 const struct lease_scopes *sc, struct lease_err *err)
{
	struct mem_entry *w;
	unsigned n;
	int r = entry_refuses(entry_find(ms, name), err);

	for (size_t i = 0; r == 0 && i < sc->n; i++)
		r = entry_refuses(entry_find(ms, sc->names[i]), err);
	if (r == 0 && (w = within(ms, name, &n)) != NULL)
		r = entry_refuses(w, err);
	return r;
}

/* Caller holds ms->lock: a failure lease_mem_fail_next() asked for. */
static int injected_failure(struct mem_store *ms, const char *name,
			    struct lease_err *err)
{
	if (ms->fail_left == 0 || strcmp(ms->fail_name, name) != 0)
		return 0;
	ms->fail_left--;
	return lease_err_set(err, ms->fail_kind, -EIO, name, "mem: injected "
			     "%s for '%s'", lease_errkind_str(ms->fail_kind),
			     name);
}

static int mem_try_acquire(struct lease_store *store, const char *name,
			   const struct lease_scopes *sc, int64_t deadline,
			   struct lease **out, struct lease_err *err)
{
	struct mem_store *ms = mem_of(store);
	struct mem_entry *e;
	struct lease *l = NULL;
	lease_mem_grant_fn on_grant;
	void *on_grant_ud;
	int r = 0;

	(void)deadline;
	pthread_mutex_lock(&ms->lock);
	r = injected_failure(ms, name, err);
	if (r < 0)
		goto out_unlock;
	e = entry_get(ms, name);
	if (!e) {
		r = lease_err_set(err, LEASE_E_IO, -ENOMEM, name, "out of memory");
		goto out_unlock;
	}
	r = grant_refused(ms, name, sc, err);
	if (r < 0)
		goto out_unlock;
	r = lease_alloc(store, name, e->epoch + 1, sc, &l);
	if (r < 0) {
		r = lease_err_set(err, LEASE_E_IO, r, name,
				  "cannot allocate lease: %s", strerror(-r));
		goto out_unlock;
	}
	e->epoch++;
	e->state = LEASE_STATE_HELD;
	e->holder = l;
	e->holder_pid = getpid();
	*out = l;
out_unlock:
	on_grant = r == 0 ? ms->on_grant : NULL;
	on_grant_ud = ms->on_grant_ud;
	pthread_mutex_unlock(&ms->lock);
	if (on_grant)
		on_grant(on_grant_ud, store, name);
	return r;
}

static int mem_release(struct lease *lease, int64_t deadline)
{
	struct mem_store *ms = mem_of(lease->store);
	struct mem_entry *e;

	(void)deadline;
	pthread_mutex_lock(&ms->lock);
	e = entry_find(ms, lease->name);
	if (e && e->holder == lease && e->epoch == lease->epoch &&
	    e->state == LEASE_STATE_HELD) {
		e->state = LEASE_STATE_FREE;
		e->holder = NULL;
		e->holder_pid = 0;
	}
	if (e && e->fencing == lease) {
		/* The revoke's acknowledgement: the name is free again. */
		e->fencing = NULL;
		if (e->state == LEASE_STATE_REVOKED)
			e->state = LEASE_STATE_FREE;
	}
	pthread_cond_broadcast(&ms->released);
	pthread_mutex_unlock(&ms->lock);
	return 0;
}

/* After release no entry points at the lease; nothing to free. */
static void mem_free_lease(struct lease *lease)
{
	(void)lease;
}

/* Caller holds ms->lock. */
static void entry_info(const struct mem_entry *e, struct lease_info *info)
{
	memset(info, 0, sizeof(*info));
	snprintf(info->name, sizeof(info->name), "%s", e->name);
	info->epoch = e->epoch;
	info->state = e->state;
	info->holder_pid = e->state == LEASE_STATE_HELD ? e->holder_pid : 0;
	if (e->state == LEASE_STATE_HELD)
		snprintf(info->holder, sizeof(info->holder), "%s",
			 e->holder ? "mem" : "mem (phantom)");
}

/*
 * The callback runs outside the lock on a snapshot, so it may call back
 * into the store.  Entries are never removed, but the table may grow, so
 * the snapshot is taken up front.
 */
static int mem_list(struct lease_store *store, lease_list_cb cb,
		    void *userdata, struct lease_err *err)
{
	struct mem_store *ms = mem_of(store);
	struct lease_info *infos = NULL;
	size_t n = 0, i = 0;
	int r = 0;

	pthread_mutex_lock(&ms->lock);
	for (struct mem_entry *e = ms->entries; e; e = e->next)
		n++;
	infos = n ? calloc(n, sizeof(*infos)) : NULL;
	if (n && !infos) {
		pthread_mutex_unlock(&ms->lock);
		return lease_err_set(err, LEASE_E_IO, -ENOMEM, NULL,
				     "out of memory");
	}
	for (struct mem_entry *e = ms->entries; e; e = e->next)
		entry_info(e, &infos[i++]);
	pthread_mutex_unlock(&ms->lock);
	for (i = 0; i < n && r == 0; i++)
		r = cb(&infos[i], userdata);
	free(infos);
	return r;
}

static int mem_show(struct lease_store *store, const char *name,
		    struct lease_info *info, struct lease_err *err)
{
	struct mem_store *ms = mem_of(store);
	struct mem_entry *e;

	(void)err;
	struct mem_entry *w;

	pthread_mutex_lock(&ms->lock);
	e = entry_find(ms, name);
	if (e) {
		entry_info(e, info);
	} else {
		memset(info, 0, sizeof(*info));
		snprintf(info->name, sizeof(info->name), "%s", name);
		info->state = LEASE_STATE_FREE;
	}
	w = within(ms, name, &info->within);
	if (w) {
		snprintf(info->within_name, sizeof(info->within_name), "%s", w->name);
		info->within_epoch = w->fencing ? w->fencing->epoch : w->epoch;
	}
	pthread_mutex_unlock(&ms->lock);
	return 0;
}

/*
 * Supersede the holder: the entry's epoch moves past the holder's, the
 * holder is fired with `why`, and the entry becomes `next`.  Caller holds
 * ms->lock; the loss callback must not block (lease.h contract).
 */
static void entry_supersede(struct mem_entry *e, enum lease_loss why,
			    enum lease_state next, bool bump)
{
	struct lease *holder = e->holder;

	if (bump)
		e->epoch++;
	e->state = next;
	e->holder = NULL;
	e->holder_pid = 0;
	if (holder)
		lease_mark_lost(holder, why);
}

static int mem_revoke(struct lease_store *store, const char *name,
		      int64_t deadline, uint64_t *epoch, struct lease_err *err)
{
	struct mem_store *ms = mem_of(store);
	struct mem_entry *e;
	int r = 0;

	(void)deadline;
	pthread_mutex_lock(&ms->lock);
	e = entry_find(ms, name);
	if (!e || e->state != LEASE_STATE_HELD) {
		r = lease_err_set(err, LEASE_E_IO, -ENOENT, name,
				  "cannot revoke '%s': not held", name);
		goto out_unlock;
	}
	*epoch = e->epoch;
	e->fencing = e->holder;
	entry_supersede(e, LEASE_LOSS_REVOKED, LEASE_STATE_REVOKED, true);
out_unlock:
	pthread_mutex_unlock(&ms->lock);
	return r;
}

/* Caller holds ms->lock: whether the holder revoked at `epoch` is still
 * unreleased. */
static bool still_fencing(struct mem_entry *e, uint64_t epoch)
{
	return e && e->fencing && e->fencing->epoch == epoch;
}

static void mem_await_change(struct lease_store *store, const char *name,
			     const struct lease_scopes *sc, int64_t deadline)
{
	struct mem_store *ms = mem_of(store);
	struct timespec ts = { deadline / 1000000000LL, deadline % 1000000000LL };

	struct mem_entry *e;

	pthread_mutex_lock(&ms->lock);
	e = entry_get(ms, name);
	if (e && grant_refused(ms, name, sc, NULL) < 0) {
		e->waiters++;
		pthread_cond_broadcast(&ms->waiting);
		pthread_cond_timedwait(&ms->released, &ms->lock, &ts);
		e->waiters--;
	}
	pthread_mutex_unlock(&ms->lock);
}

static int mem_await_fence(struct lease_store *store, const char *name,
			   uint64_t epoch, int64_t deadline,
			   enum lease_fence *out, struct lease_err *err)
{
	struct mem_store *ms = mem_of(store);
	struct timespec ts = { deadline / 1000000000LL, deadline % 1000000000LL };
	struct mem_entry *e;

	(void)err;
	pthread_mutex_lock(&ms->lock);
	e = entry_find(ms, name);
	while (still_fencing(e, epoch) &&
	       pthread_cond_timedwait(&ms->released, &ms->lock, &ts) == 0)
		;
	*out = still_fencing(e, epoch) ? LEASE_FENCE_PENDING : LEASE_FENCE_ACKED;
	pthread_mutex_unlock(&ms->lock);
	return 0;
}

int lease_mem_force_loss(struct lease_store *store, const char *name,
			 enum lease_loss why)
{
	struct mem_store *ms;
	struct mem_entry *e;
	int r = 0;

	if (!store || !name || store->be != &lease_backend_mem)
		return -EINVAL;
	if (why != LEASE_LOSS_EXPIRED && why != LEASE_LOSS_TAKEOVER)
		return -EINVAL;
	ms = mem_of(store);
	pthread_mutex_lock(&ms->lock);
	e = entry_find(ms, name);
	if (!e || e->state != LEASE_STATE_HELD) {
		r = -ENOENT;
		goto out_unlock;
	}
	if (why == LEASE_LOSS_EXPIRED)
		entry_supersede(e, why, LEASE_STATE_FREE, false);
	else
		entry_supersede(e, why, LEASE_STATE_HELD, true);
	pthread_cond_broadcast(&ms->released);
out_unlock:
	pthread_mutex_unlock(&ms->lock);
	return r;
}

/* The store of a "mem:" lease, or NULL for another backend's. */
static struct mem_store *mem_store_checked(struct lease_store *store)
{
	return store && store->be == &lease_backend_mem ? mem_of(store) : NULL;
}

int lease_mem_fail_next(struct lease_store *store, const char *name,
			enum lease_errkind kind, int n)
{
	struct mem_store *ms = mem_store_checked(store);

	if (!ms || !name || n < 0)
		return -EINVAL;
	pthread_mutex_lock(&ms->lock);
	snprintf(ms->fail_name, sizeof(ms->fail_name), "%s", name);
	ms->fail_kind = kind;
	ms->fail_left = n;
	pthread_mutex_unlock(&ms->lock);
	return 0;
}

int lease_mem_await_waiters(struct lease_store *store, const char *name,
			    int n, int64_t deadline)
{
	struct mem_store *ms = mem_store_checked(store);
	struct timespec ts = { deadline / 1000000000LL, deadline % 1000000000LL };
	struct mem_entry *e;
	bool there;

	if (!ms || !name)
		return -EINVAL;
	pthread_mutex_lock(&ms->lock);
	while (!(there = (e = entry_find(ms, name)) != NULL && e->waiters >= n) &&
	       pthread_cond_timedwait(&ms->waiting, &ms->lock, &ts) == 0)
		;
	there = (e = entry_find(ms, name)) != NULL && e->waiters >= n;
	pthread_mutex_unlock(&ms->lock);
	return there ? 0 : -ETIMEDOUT;
}

void lease_mem_on_grant(struct lease_store *store, lease_mem_grant_fn fn,
			void *ud)
{
	struct mem_store *ms = mem_store_checked(store);

	if (!ms)
		return;
	pthread_mutex_lock(&ms->lock);
	ms->on_grant = fn;
	ms->on_grant_ud = ud;
	pthread_mutex_unlock(&ms->lock);
}

const struct lease_backend lease_backend_mem = {
	.scheme = "mem",
	.open = mem_open,
	.close = mem_close,
	.try_acquire = mem_try_acquire,
	.release = mem_release,
	.free_lease = mem_free_lease,
	.list = mem_list,
	.show = mem_show,
	.revoke = mem_revoke,
	.await_fence = mem_await_fence,
	.await_change = mem_await_change,
	.local_dir = NULL,
};
