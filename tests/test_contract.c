/* SPDX-License-Identifier: MIT */
/*
 * Lease contract suite, backend-agnostic: `test_contract mem|file|etcd`.
 * Only the public lease.h API is used (plus lease_mem_force_loss for mem).
 * Each test gets a fresh, empty store.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "mem.h"
#include "testutil.h"

#define WAIT_MS 2000 /* bound for every awaited event */

static const char *backend = "mem";

struct ctx {
	struct lease_store *store;
	char *dir;
};

static int setup(void **state)
{
	struct ctx *c = calloc(1, sizeof(*c));

	assert_non_null(c);
	c->store = tu_open_store(backend, &c->dir);
	*state = c;
	return 0;
}

static int teardown(void **state)
{
	struct ctx *c = *state;

	lease_store_close(c->store);
	if (c->dir) {
		tu_rmrf(c->dir);
		free(c->dir);
	}
	free(c);
	return 0;
}

/* A fresh name under `tag`. */
static const char *mkname(char *buf, size_t sz, const char *tag)
{
	snprintf(buf, sz, "contract/%s-%s", tag, tu_unique());
	return buf;
}

static struct lease *must_acquire(struct lease_store *st, const char *name,
				  int64_t deadline)
{
	struct lease_err err = { 0 };
	struct lease *l = NULL;
	int r = lease_acquire(st, name, deadline, &l, &err);

	if (r < 0)
		fail_msg("acquire %s: %d %s: %s", name, r,
			 lease_errkind_str(err.kind), err.msg);
	assert_non_null(l);
	return l;
}

/* One try that must be refused as HELD; returns the reported holder epoch. */
static uint64_t must_be_held(struct lease_store *st, const char *name)
{
	struct lease_err err = { 0 };
	struct lease *l = NULL;
	int r = lease_acquire(st, name, 0, &l, &err);

	if (r == 0) {
		lease_free(l);
		fail_msg("acquire %s succeeded while held", name);
	}
	assert_int_equal(r, -EBUSY);
	assert_int_equal(err.kind, LEASE_E_HELD);
	assert_int_equal(err.code, -EBUSY);
	assert_string_equal(err.name, name);
	assert_null(l);
	return err.holder_epoch;
}

/* One try of `name` within `scope` (NULL: none) that must be refused as
 * HELD, naming `who`; returns the reported epoch. */
static uint64_t must_be_held_in(struct lease_store *st, const char *name,
				const char *scope, const char *who)
{
	const char *scopes[1] = { scope };
	struct lease_err err = { 0 };
	struct lease *l = NULL;
	int r = lease_acquire_in(st, name, scopes, scope ? 1 : 0, 0, &l, &err);

	if (r == 0) {
		lease_free(l);
		fail_msg("acquire %s within %s succeeded", name, scope ? scope : "-");
	}
	assert_int_equal(r, -EBUSY);
	assert_int_equal(err.kind, LEASE_E_HELD);
	assert_string_equal(err.name, who);
	assert_null(l);
	return err.holder_epoch;
}

static struct lease *must_acquire_in(struct lease_store *st, const char *name,
				     const char *scope)
{
	struct lease_err err = { 0 };
	struct lease *l = NULL;

	if (lease_acquire_in(st, name, &scope, 1, 0, &l, &err) < 0)
		fail_msg("acquire %s within %s: %s", name, scope, err.msg);
	return l;
}

/*
 * Scopes: a grant within a scope and a grant of the scope itself exclude
 * each other, either way, naming the holder in the way with its epoch;
 * grants within one scope do not; show counts what lives within a name.
 */
static void test_scopes_exclude(void **state)
{
	struct ctx *c = *state;
	char outer[128], in1[128], in2[128];
	struct lease_info info;
	struct lease *a, *b, *o;

	mkname(outer, sizeof(outer), "outer");
	mkname(in1, sizeof(in1), "in1");
	mkname(in2, sizeof(in2), "in2");
	a = must_acquire_in(c->store, in1, outer);
	assert_int_equal(must_be_held_in(c->store, outer, NULL, in1), lease_epoch(a));
	b = must_acquire_in(c->store, in2, outer);   /* a sibling */
	assert_int_equal(lease_show(c->store, outer, &info, NULL), 0);
	assert_int_equal(info.state, LEASE_STATE_FREE);
	assert_int_equal(info.within, 2);
	assert_true(strcmp(info.within_name, in1) == 0 ||
		    strcmp(info.within_name, in2) == 0);
	assert_int_equal(info.within_epoch, strcmp(info.within_name, in1) == 0 ?
			 lease_epoch(a) : lease_epoch(b));
	assert_int_equal(lease_release(a, lease_deadline_ms(WAIT_MS)), 0);
	assert_int_equal(must_be_held_in(c->store, outer, NULL, in2), lease_epoch(b));
	assert_int_equal(lease_release(b, lease_deadline_ms(WAIT_MS)), 0);
	assert_int_equal(lease_show(c->store, outer, &info, NULL), 0);
	assert_int_equal(info.within, 0);
	o = must_acquire(c->store, outer, 0);
	assert_int_equal(must_be_held_in(c->store, in1, outer, outer), lease_epoch(o));
	assert_int_equal(lease_show(c->store, in1, &info, NULL), 0);
	assert_int_equal(info.state, LEASE_STATE_FREE);
	lease_free(a);
	lease_free(b);
	lease_free(o);
}

/* A grant revoked but not yet released still keeps its scope shut (its
 * holder may still write inside it); its release lets the scope go. */
static void test_scope_fenced(void **state)
{
	struct ctx *c = *state;
	char outer[128], in[128];
	enum lease_fence fence = LEASE_FENCE_ACKED;
	struct lease *a, *o;

	mkname(outer, sizeof(outer), "fouter");
	mkname(in, sizeof(in), "fin");
	a = must_acquire_in(c->store, in, outer);
	assert_int_equal(lease_revoke(c->store, in, lease_deadline_ms(200),
				      &fence, NULL), 0);
	assert_int_equal(fence, LEASE_FENCE_PENDING);
	assert_true(tu_wait_readable(lease_loss_fd(a), WAIT_MS));
	must_be_held_in(c->store, outer, NULL, in);
	assert_int_equal(lease_release(a, lease_deadline_ms(WAIT_MS)), 0);
	o = must_acquire(c->store, outer, lease_deadline_ms(WAIT_MS));
	lease_free(a);
	lease_free(o);
}

/* A scope that is the name itself, or given twice, is a usage error. */
static void test_scope_usage(void **state)
{
	struct ctx *c = *state;
	char n[128];
	const char *same[1], *twice[2] = { "contract/x", "contract/x" };
	struct lease_err err = { 0 };
	struct lease *l = NULL;

	same[0] = mkname(n, sizeof(n), "self");
	assert_int_equal(lease_acquire_in(c->store, n, same, 1, 0, &l, &err),
			 -EINVAL);
	assert_int_equal(err.kind, LEASE_E_USAGE);
	assert_int_equal(lease_acquire_in(c->store, n, twice, 2, 0, &l, &err),
			 -EINVAL);
	assert_null(l);
}

static void test_acquire_free(void **state)
{
	struct ctx *c = *state;
	char name[128];
	struct lease *l = must_acquire(c->store, mkname(name, sizeof(name), "free"), 0);

	assert_true(lease_epoch(l) >= 1);
	assert_string_equal(lease_name(l), name);
	assert_ptr_equal(lease_store_of(l), c->store);
	assert_false(lease_is_lost(l));
	assert_int_equal(lease_loss_reason(l), LEASE_LOSS_NONE);
	assert_false(tu_wait_readable(lease_loss_fd(l), 0));
	lease_free(l);
}

static void test_held_carries_epoch(void **state)
{
	struct ctx *c = *state;
	char name[128];
	struct lease *l = must_acquire(c->store, mkname(name, sizeof(name), "held"), 0);

	assert_int_equal(must_be_held(c->store, name), lease_epoch(l));
	/* A bounded wait on a live holder ends in HELD too, not TIMEOUT. */
	struct lease_err err = { 0 };
	struct lease *l2 = NULL;
	int64_t t0 = lease_now_ns();
	int r = lease_acquire(c->store, name, lease_deadline_ms(100), &l2, &err);

	assert_int_equal(r, -EBUSY);
	assert_int_equal(err.kind, LEASE_E_HELD);
	assert_int_equal(err.holder_epoch, lease_epoch(l));
	assert_true(lease_now_ns() - t0 >= 100 * 1000000LL);
	assert_false(lease_is_lost(l));
	lease_free(l);
}

static void test_epochs_increase(void **state)
{
	struct ctx *c = *state;
	char name[128];
	uint64_t prev = 0;

	mkname(name, sizeof(name), "epochs");
	for (int i = 0; i < 6; i++) {
		struct lease *l = must_acquire(c->store, name, 0);

		assert_true(lease_epoch(l) > prev);
		prev = lease_epoch(l);
		assert_int_equal(lease_release(l, lease_deadline_ms(WAIT_MS)), 0);
		lease_free(l);
	}
}

static void test_independent_names(void **state)
{
	struct ctx *c = *state;
	char n1[128], n2[128];
	struct lease *a = must_acquire(c->store, mkname(n1, sizeof(n1), "ind"), 0);
	struct lease *b = must_acquire(c->store, mkname(n2, sizeof(n2), "ind"), 0);

	assert_int_equal(must_be_held(c->store, n1), lease_epoch(a));
	assert_int_equal(must_be_held(c->store, n2), lease_epoch(b));
	assert_int_equal(lease_release(a, lease_deadline_ms(WAIT_MS)), 0);
	assert_false(lease_is_lost(b));
	assert_false(tu_wait_readable(lease_loss_fd(b), 0));
	assert_int_equal(must_be_held(c->store, n2), lease_epoch(b));
	struct lease *a2 = must_acquire(c->store, n1, 0);
	lease_free(a2);
	lease_free(a);
	lease_free(b);
}

static void test_release_idempotent(void **state)
{
	struct ctx *c = *state;
	char name[128];
	struct lease *l = must_acquire(c->store, mkname(name, sizeof(name), "rel"), 0);
	uint64_t e = lease_epoch(l);

	assert_int_equal(lease_release(l, lease_deadline_ms(WAIT_MS)), 0);
	assert_true(tu_wait_readable(lease_loss_fd(l), 0));
	assert_true(lease_is_lost(l));
	assert_int_equal(lease_loss_reason(l), LEASE_LOSS_RELEASED);
	/* A repeat succeeds even with its deadline already passed. */
	assert_int_equal(lease_release(l, 0), 0);
	assert_int_equal(lease_release(l, lease_deadline_ms(WAIT_MS)), 0);
	assert_int_equal(lease_loss_reason(l), LEASE_LOSS_RELEASED);
	assert_true(tu_wait_readable(lease_loss_fd(l), 0));
	/* The entry was cleared: a successor gets it at once. */
	struct lease *l2 = must_acquire(c->store, name, 0);
	assert_true(lease_epoch(l2) > e);
	lease_free(l);
	lease_free(l2);
}

struct fencer {
	struct lease *l;
	int rc;
};

/* The holder's side of a revoke: it sees its loss, then releases. */
static void *release_on_loss(void *arg)
{
	struct fencer *f = arg;

	f->rc = tu_wait_readable(lease_loss_fd(f->l), WAIT_MS)
		? lease_release(f->l, lease_deadline_ms(WAIT_MS)) : -ETIMEDOUT;
	return NULL;
}

/*
 * Revoke waits for the holder's acknowledgement (its release after the
 * loss) and says so; only then is a successor granted, and a repeated
 * release by the old holder never frees the successor.
 */
static void test_fence_acked(void **state)
{
	struct ctx *c = *state;
	char name[128];
	struct lease_err err = { 0 };
	struct lease_info info;
	enum lease_fence fence = LEASE_FENCE_PENDING;
	struct fencer f = { .l = must_acquire(c->store,
				mkname(name, sizeof(name), "acked"), 0) };
	pthread_t t;

	assert_int_equal(pthread_create(&t, NULL, release_on_loss, &f), 0);
	if (lease_revoke(c->store, name, lease_deadline_ms(WAIT_MS), &fence,
			 &err) != 0)
		fail_msg("revoke: %s", err.msg);
	pthread_join(t, NULL);
	assert_int_equal(f.rc, 0);
	assert_int_equal(fence, LEASE_FENCE_ACKED);
	/* Acknowledged: the name is free again, for a placement that only
	 * looks (shared, session) as for one that acquires. */
	assert_int_equal(lease_show(c->store, name, &info, &err), 0);
	assert_int_equal(info.state, LEASE_STATE_FREE);
	struct lease *b = must_acquire(c->store, name, 0);
	assert_true(lease_epoch(b) > lease_epoch(f.l));
	assert_int_equal(lease_release(f.l, lease_deadline_ms(WAIT_MS)), 0);
	assert_false(lease_is_lost(b));
	assert_int_equal(must_be_held(c->store, name), lease_epoch(b));
	assert_int_equal(lease_show(c->store, name, &info, &err), 0);
	assert_int_equal(info.state, LEASE_STATE_HELD);
	assert_int_equal(info.epoch, lease_epoch(b));
	lease_free(f.l);
	lease_free(b);
}

/*
 * A revoked holder that does not answer keeps the name shut: revoke says
 * PENDING at its deadline, a successor is refused with the revoked epoch,
 * and the holder's late release lets the successor in.
 */
static void test_fence_pending(void **state)
{
	struct ctx *c = *state;
	char name[128];
	struct lease_err err = { 0 };
	struct lease_info info;
	enum lease_fence fence = LEASE_FENCE_ACKED;
	struct lease *a = must_acquire(c->store, mkname(name, sizeof(name), "pend"), 0);

	assert_int_equal(lease_revoke(c->store, name, lease_deadline_ms(300),
				      &fence, &err), 0);
	assert_int_equal(fence, LEASE_FENCE_PENDING);
	assert_true(lease_is_lost(a));
	assert_int_equal(must_be_held(c->store, name), lease_epoch(a));
	assert_int_equal(lease_show(c->store, name, &info, &err), 0);
	assert_int_equal(info.state, LEASE_STATE_REVOKED);
	assert_int_equal(lease_release(a, lease_deadline_ms(WAIT_MS)), 0);
	assert_int_equal(lease_show(c->store, name, &info, &err), 0);
	assert_int_equal(info.state, LEASE_STATE_FREE);
	struct lease *b = must_acquire(c->store, name, lease_deadline_ms(WAIT_MS));
	assert_true(lease_epoch(b) > lease_epoch(a));
	lease_free(a);
	lease_free(b);
}

struct cb_rec {
	pthread_mutex_t lock; /* protects calls and why */
	int calls;
	enum lease_loss why;
};

static void loss_cb(struct lease *l, enum lease_loss why, void *ud)
{
	struct cb_rec *r = ud;

	(void)l;
	pthread_mutex_lock(&r->lock);
	r->calls++;
	r->why = why;
	pthread_mutex_unlock(&r->lock);
}

static void test_revoke_fires_loss(void **state)
{
	struct ctx *c = *state;
	char name[128];
	struct lease_err err = { 0 };
	struct cb_rec rec = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct lease *l = must_acquire(c->store, mkname(name, sizeof(name), "revoke"), 0);
	uint64_t e = lease_epoch(l);

	lease_set_loss_cb(l, loss_cb, &rec);
	assert_int_equal(lease_revoke(c->store, name, lease_deadline_ms(WAIT_MS), NULL, &err), 0);
	assert_true(tu_wait_readable(lease_loss_fd(l), WAIT_MS));
	assert_int_equal(lease_loss_reason(l), LEASE_LOSS_REVOKED);
	/* Nothing is held any more: a second revoke is refused. */
	assert_int_equal(lease_revoke(c->store, name, lease_deadline_ms(WAIT_MS), NULL, &err),
			 -ENOENT);
	assert_int_equal(err.kind, LEASE_E_IO);
	assert_int_equal(lease_release(l, lease_deadline_ms(WAIT_MS)), 0);
	assert_int_equal(lease_loss_reason(l), LEASE_LOSS_REVOKED);
	pthread_mutex_lock(&rec.lock);
	assert_int_equal(rec.calls, 1);
	assert_int_equal(rec.why, LEASE_LOSS_REVOKED);
	pthread_mutex_unlock(&rec.lock);
	/* The revoked epoch is superseded: the next grant skips past it. */
	struct lease *l2 = must_acquire(c->store, name, lease_deadline_ms(WAIT_MS));
	assert_true(lease_epoch(l2) > e);
	lease_free(l2);
	lease_free(l);
}

static void test_revoke_free_name(void **state)
{
	struct ctx *c = *state;
	char name[128];
	struct lease_err err = { 0 };

	mkname(name, sizeof(name), "revfree");
	assert_int_equal(lease_revoke(c->store, name, lease_deadline_ms(WAIT_MS), NULL, &err),
			 -ENOENT);
	assert_int_equal(err.kind, LEASE_E_IO);
	struct lease *l = must_acquire(c->store, name, 0);
	assert_int_equal(lease_release(l, lease_deadline_ms(WAIT_MS)), 0);
	assert_int_equal(lease_revoke(c->store, name, lease_deadline_ms(WAIT_MS), NULL, &err),
			 -ENOENT);
	lease_free(l);
}

/*
 * On contention, acquire keeps trying until its deadline, and does so
 * whether or not the caller asked for the error (lease.h: err may be NULL).
 */
static void test_retries_until_deadline(void **state)
{
	struct ctx *c = *state;
	char name[128];
	struct lease_err err = { 0 };
	struct lease *l = must_acquire(c->store, mkname(name, sizeof(name), "wait"), 0);
	struct lease *l2 = NULL;

	for (int with_err = 0; with_err < 2; with_err++) {
		int64_t t0 = lease_now_ns();
		int r = lease_acquire(c->store, name, lease_deadline_ms(300), &l2,
				      with_err ? &err : NULL);

		assert_int_equal(r, -EBUSY);
		assert_null(l2);
		assert_true(lease_now_ns() - t0 >= 300 * 1000000LL);
	}
	assert_int_equal(err.kind, LEASE_E_HELD);
	assert_int_equal(err.holder_epoch, lease_epoch(l));
	lease_free(l);
}

#define NTHREADS 12

struct racer {
	struct lease_store *store;
	const char *name;
	pthread_barrier_t *start, *done;
	struct lease *won;
	int rc;
	struct lease_err err;
};

static void *race(void *arg)
{
	struct racer *r = arg;

	pthread_barrier_wait(r->start);
	r->rc = lease_acquire(r->store, r->name, 0, &r->won, &r->err);
	/* Winners hold until every racer has tried. */
	pthread_barrier_wait(r->done);
	return NULL;
}

static void test_concurrent_threads(void **state)
{
	struct ctx *c = *state;
	char name[128];
	pthread_barrier_t start, done;
	struct racer rs[NTHREADS];
	pthread_t t[NTHREADS];
	struct lease *winner = NULL;
	int wins = 0;

	mkname(name, sizeof(name), "threads");
	pthread_barrier_init(&start, NULL, NTHREADS);
	pthread_barrier_init(&done, NULL, NTHREADS);
	for (int i = 0; i < NTHREADS; i++) {
		rs[i] = (struct racer){ c->store, name, &start, &done, NULL, 0, { 0 } };
		assert_int_equal(pthread_create(&t[i], NULL, race, &rs[i]), 0);
	}
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < NTHREADS; i++) {
		if (rs[i].rc == 0) {
			wins++;
			winner = rs[i].won;
			continue;
		}
		if (rs[i].rc != -EBUSY || rs[i].err.kind != LEASE_E_HELD)
			fail_msg("racer %d: %d %s", i, rs[i].rc, rs[i].err.msg);
	}
	assert_int_equal(wins, 1);
	for (int i = 0; i < NTHREADS; i++)
		if (rs[i].rc != 0)
			assert_int_equal(rs[i].err.holder_epoch, lease_epoch(winner));
	for (int i = 0; i < NTHREADS; i++)
		lease_free(rs[i].won);
	pthread_barrier_destroy(&start);
	pthread_barrier_destroy(&done);
}

static void test_bad_name(void **state)
{
	struct ctx *c = *state;
	struct lease_err err = { 0 };
	struct lease *l = NULL;

	assert_int_equal(lease_acquire(c->store, "Bad//Name", 0, &l, &err), -EINVAL);
	assert_int_equal(err.kind, LEASE_E_BADNAME);
	assert_null(l);
}

struct seen {
	const char *held, *freed;
	struct lease_info held_info, free_info;
	int held_n, free_n;
};

static int list_cb(const struct lease_info *info, void *ud)
{
	struct seen *s = ud;

	if (strcmp(info->name, s->held) == 0) {
		s->held_info = *info;
		s->held_n++;
	} else if (strcmp(info->name, s->freed) == 0) {
		s->free_info = *info;
		s->free_n++;
	}
	return 0;
}

static void test_show_list(void **state)
{
	struct ctx *c = *state;
	char n1[128], n2[128];
	struct lease_err err = { 0 };
	struct lease_info info;
	struct lease *h = must_acquire(c->store, mkname(n1, sizeof(n1), "show"), 0);
	struct lease *f = must_acquire(c->store, mkname(n2, sizeof(n2), "show"), 0);
	struct seen s = { .held = n1, .freed = n2 };

	assert_int_equal(lease_release(f, lease_deadline_ms(WAIT_MS)), 0);
	assert_int_equal(lease_show(c->store, n1, &info, &err), 0);
	assert_string_equal(info.name, n1);
	assert_int_equal(info.state, LEASE_STATE_HELD);
	assert_int_equal(info.epoch, lease_epoch(h));
	assert_true(info.holder_pid == 0 || info.holder_pid == getpid());
	assert_int_equal(lease_show(c->store, n2, &info, &err), 0);
	assert_int_equal(info.state, LEASE_STATE_FREE);
	assert_int_equal(info.epoch, lease_epoch(f));
	assert_int_equal(lease_list(c->store, list_cb, &s, &err), 0);
	assert_int_equal(s.held_n, 1);
	assert_int_equal(s.free_n, 1);
	assert_int_equal(s.held_info.state, LEASE_STATE_HELD);
	assert_int_equal(s.held_info.epoch, lease_epoch(h));
	assert_int_equal(s.free_info.state, LEASE_STATE_FREE);
	assert_int_equal(s.free_info.epoch, lease_epoch(f));
	assert_int_equal(lease_show(c->store, "Bad//Name", &info, &err), -EINVAL);
	assert_int_equal(err.kind, LEASE_E_BADNAME);
	lease_free(h);
	lease_free(f);
}

static int stop_cb(const struct lease_info *info, void *ud)
{
	(void)info;
	++*(int *)ud;
	return 7;
}

static void test_list_stops(void **state)
{
	struct ctx *c = *state;
	char n1[128], n2[128];
	struct lease *a = must_acquire(c->store, mkname(n1, sizeof(n1), "stop"), 0);
	struct lease *b = must_acquire(c->store, mkname(n2, sizeof(n2), "stop"), 0);
	int calls = 0;

	assert_int_equal(lease_list(c->store, stop_cb, &calls, NULL), 7);
	assert_int_equal(calls, 1);
	lease_free(a);
	lease_free(b);
}

static void test_mem_force_loss(void **state)
{
	struct ctx *c = *state;
	char name[128];

	struct lease *l = must_acquire(c->store, mkname(name, sizeof(name), "force"), 0);
	uint64_t e = lease_epoch(l);

	assert_int_equal(lease_mem_force_loss(c->store, name, LEASE_LOSS_EXPIRED), 0);
	assert_true(tu_wait_readable(lease_loss_fd(l), 0));
	assert_int_equal(lease_loss_reason(l), LEASE_LOSS_EXPIRED);
	assert_int_equal(lease_mem_force_loss(c->store, name, LEASE_LOSS_EXPIRED), -ENOENT);
	struct lease *l2 = must_acquire(c->store, name, 0);
	assert_true(lease_epoch(l2) > e);
	assert_int_equal(lease_mem_force_loss(c->store, name, LEASE_LOSS_TAKEOVER), 0);
	assert_int_equal(lease_loss_reason(l2), LEASE_LOSS_TAKEOVER);
	assert_int_equal(must_be_held(c->store, name), lease_epoch(l2) + 1);
	/* Stale releases of either lease leave the phantom holder in place. */
	lease_free(l);
	lease_free(l2);
	assert_int_equal(must_be_held(c->store, name), e + 2);
}

/* Every backend. */
static const struct CMUnitTest contract_tests[] = {
	cmocka_unit_test_setup_teardown(test_acquire_free, setup, teardown),
	cmocka_unit_test_setup_teardown(test_held_carries_epoch, setup, teardown),
	cmocka_unit_test_setup_teardown(test_epochs_increase, setup, teardown),
	cmocka_unit_test_setup_teardown(test_independent_names, setup, teardown),
	cmocka_unit_test_setup_teardown(test_release_idempotent, setup, teardown),
	cmocka_unit_test_setup_teardown(test_fence_acked, setup, teardown),
	cmocka_unit_test_setup_teardown(test_fence_pending, setup, teardown),
	cmocka_unit_test_setup_teardown(test_revoke_fires_loss, setup, teardown),
	cmocka_unit_test_setup_teardown(test_revoke_free_name, setup, teardown),
	cmocka_unit_test_setup_teardown(test_retries_until_deadline, setup, teardown),
	cmocka_unit_test_setup_teardown(test_concurrent_threads, setup, teardown),
	cmocka_unit_test_setup_teardown(test_bad_name, setup, teardown),
	cmocka_unit_test_setup_teardown(test_show_list, setup, teardown),
	cmocka_unit_test_setup_teardown(test_list_stops, setup, teardown),
	cmocka_unit_test_setup_teardown(test_scopes_exclude, setup, teardown),
	cmocka_unit_test_setup_teardown(test_scope_fenced, setup, teardown),
	cmocka_unit_test_setup_teardown(test_scope_usage, setup, teardown),
};

/* The mem backend's test hook. */
static const struct CMUnitTest mem_tests[] = {
	cmocka_unit_test_setup_teardown(test_mem_force_loss, setup, teardown),
};

#define NTESTS(a) (sizeof(a) / sizeof((a)[0]))

int main(int argc, char **argv)
{
	struct CMUnitTest tests[NTESTS(contract_tests) + NTESTS(mem_tests)];
	size_t n = 0;
	char group[64];

	if (argc > 1)
		backend = argv[1];
	if (strcmp(backend, "mem") && strcmp(backend, "file") &&
	    strcmp(backend, "fsstore") && strcmp(backend, "etcd") &&
	    strcmp(backend, "pg") && strcmp(backend, "nats")) {
		fprintf(stderr, "usage: %s mem|file|fsstore|etcd|pg|nats\n", argv[0]);
		return 2;
	}
	for (size_t i = 0; i < NTESTS(contract_tests); i++)
		tests[n++] = contract_tests[i];
	for (size_t i = 0; strcmp(backend, "mem") == 0 && i < NTESTS(mem_tests); i++)
		tests[n++] = mem_tests[i];
	snprintf(group, sizeof(group), "contract-%s", backend);
	return _cmocka_run_group_tests(group, tests, n, NULL, NULL);
}
