/* SPDX-License-Identifier: MIT */
/*
 * Coordinator: a lease lost while opening, the store failing while
 * opening, the wait said once (coord_open's attempts), and what the
 * fence gives back after a partial loss.  The mem store is told when to
 * fail (lease_mem_fail_next), when to lose (lease_mem_on_grant, in the
 * hook) and says when an acquirer waits (lease_mem_await_waiters).
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "coord.h"
#include "lease.h"
#include "mem.h"
#include "test_coord.h"

#define SESSION_NAME "sessions/" SESSION_UUID

/* What the hooks saw, per test (single-threaded but for the opener). */
static struct {
	int waits;                 /* on_wait calls */
	enum lease_errkind wait_kind;
	int64_t wait_at;           /* when on_wait ran */
	int hooks, undos;          /* after_acquire, undo_acquire calls */
	const char *lose_in_hook;  /* the name the first hook call loses */
	const char *lose_on_grant; /* the name whose first grant is lost */
	enum lease_loss lose_why;
} seen;

static void on_wait(void *ud, const struct lease_err *why)
{
	(void)ud;
	seen.waits++;
	seen.wait_kind = why->kind;
	seen.wait_at = lease_now_ns();
}

static int hook(void *ud, const char *root, struct lease_err *err)
{
	struct fx *f = ud;

	(void)root;
	(void)err;
	if (seen.hooks++ == 0 && seen.lose_in_hook)
		assert_int_equal(lease_mem_force_loss(f->store, seen.lose_in_hook,
						      seen.lose_why), 0);
	return 0;
}

static void undo(void *ud)
{
	(void)ud;
	seen.undos++;
}

static void lose_first_grant(void *ud, struct lease_store *store,
			     const char *name)
{
	(void)ud;
	if (!seen.lose_on_grant || strcmp(name, seen.lose_on_grant) != 0)
		return;
	seen.lose_on_grant = NULL;
	assert_int_equal(lease_mem_force_loss(store, name, seen.lose_why), 0);
}

/* The fixture's config with the hooks above and `deadline_ms` (0: one
 * try). */
static void wait_setup(struct fx *f, int deadline_ms)
{
	memset(&seen, 0, sizeof(seen));
	f->cfg.on_wait = on_wait;
	f->cfg.after_acquire = hook;
	f->cfg.after_acquire_userdata = f;
	f->cfg.undo_acquire = undo;
	f->cfg.acquire_deadline = deadline_ms ? lease_deadline_ms(deadline_ms) : 0;
}

/* Nothing of ours is held: the session and the root are free (or shut
 * by a revoke we acknowledged), and both can be taken at once. */
static void assert_all_given_back(struct fx *f)
{
	struct lease_err err = { 0 };
	struct lease *s = NULL, *r = NULL;

	assert_int_not_equal(fx_show_state(f, SESSION_NAME, NULL),
			     LEASE_STATE_HELD);
	assert_int_not_equal(fx_show_state(f, f->root_name, NULL),
			     LEASE_STATE_HELD);
	assert_int_equal(lease_acquire(f->store, SESSION_NAME, 0, &s, &err), 0);
	assert_int_equal(lease_acquire(f->store, f->root_name, 0, &r, &err), 0);
	lease_free(r);
	lease_free(s);
}

/* A healthy coordinator holding both leases at these epochs. */
static void assert_opened(struct fx *f, struct coord *c, uint64_t session_epoch,
			  uint64_t root_epoch)
{
	uint64_t e = 0;

	assert_int_equal(coord_state(c), COORD_HELD);
	assert_int_equal(coord_healthy(c), 0);
	assert_int_equal(coord_session_epoch(c), session_epoch);
	assert_int_equal(coord_root_epoch(c), root_epoch);
	assert_int_equal(fx_show_state(f, f->root_name, &e), LEASE_STATE_HELD);
	assert_int_equal(e, root_epoch);
	assert_int_equal(fx_show_state(f, SESSION_NAME, &e), LEASE_STATE_HELD);
	assert_int_equal(e, session_epoch);
	assert_int_equal(f->loss_calls, 0);
}

/* ---- an opener in a thread, for losses while it waits ----------------- */

struct opener {
	struct fx *f;
	pthread_t thr;
	struct coord *c;
	struct lease_err err;
	int r;
};

static void *open_thread(void *p)
{
	struct opener *o = p;

	o->r = coord_open(&o->f->cfg, &o->c, &o->err);
	return NULL;
}

/* The root held by someone else; an opener started and waiting for it. */
static struct lease *start_waiting_opener(struct fx *f, struct opener *o)
{
	struct lease_err err = { 0 };
	struct lease *pre = NULL;

	assert_int_equal(lease_acquire(f->store, f->root_name, 0, &pre, &err), 0);
	o->f = f;
	assert_int_equal(pthread_create(&o->thr, NULL, open_thread, o), 0);
	assert_int_equal(lease_mem_await_waiters(f->store, f->root_name, 1,
						 lease_deadline_ms(10000)), 0);
	assert_int_equal(seen.waits, 1);
	assert_int_equal(seen.wait_kind, LEASE_E_HELD);
	return pre;
}

/* ---- a lease lost while opening ----------------------------------------- */

/* The session lease expires while the root is awaited: the root, once
 * granted, is given back with it, and the next attempt takes both anew. */
void test_session_lost_while_waiting_retries(void **state)
{
	struct fx *f = *state;
	struct opener o = { 0 };
	struct lease *pre;

	wait_setup(f, 20000);
	pre = start_waiting_opener(f, &o);
	assert_int_equal(lease_mem_force_loss(f->store, SESSION_NAME,
					      LEASE_LOSS_EXPIRED), 0);
	lease_free(pre);
	pthread_join(o.thr, NULL);
	if (o.r != 0)
		fail_msg("coord_open: %s", o.err.msg);
	/* the first attempt's one try took session epoch 1; the second
	 * waited with 2 (lost) and got the root at 2, given back; then 3 */
	assert_opened(f, o.c, 3, 3);
	assert_int_equal(seen.waits, 1);
	assert_int_equal(seen.hooks, 1); /* never with a dead session */
	assert_int_equal(seen.undos, 0);
	coord_free(o.c);
}

/* Revoked while the root is awaited: an operator's word, not retried;
 * open fails with everything given back. */
void test_session_revoked_while_waiting_fails(void **state)
{
	struct fx *f = *state;
	struct lease_err err = { 0 };
	struct opener o = { 0 };
	struct lease *pre;

	wait_setup(f, 20000);
	pre = start_waiting_opener(f, &o);
	assert_int_equal(lease_revoke(f->store, SESSION_NAME, 0, NULL, &err), 0);
	lease_free(pre);
	pthread_join(o.thr, NULL);
	assert_int_equal(o.r, -ENOLINK);
	assert_null(o.c);
	assert_int_equal(o.err.kind, LEASE_E_LOST);
	assert_non_null(strstr(o.err.msg, "session lease"));
	assert_non_null(strstr(o.err.msg, "revoked"));
	assert_int_equal(seen.hooks, 0);
	assert_int_equal(f->loss_calls, 0);
	assert_all_given_back(f);
}

/* The root lost right after its grant, before the hook. */
void test_root_lost_after_grant(void **state)
{
	struct fx *f = *state;
	struct lease_err err = { 0 };
	struct coord *c = NULL;

	/* one try: fails, everything given back, nobody told of a loss */
	wait_setup(f, 0);
	seen.lose_on_grant = f->root_name;
	seen.lose_why = LEASE_LOSS_EXPIRED;
	lease_mem_on_grant(f->store, lose_first_grant, NULL);
	assert_int_equal(coord_open(&f->cfg, &c, &err), -ENOLINK);
	assert_null(c);
	assert_int_equal(err.kind, LEASE_E_LOST);
	assert_non_null(strstr(err.msg, "root lease"));
	assert_non_null(strstr(err.msg, "expired"));
	assert_int_equal(seen.hooks, 0);
	assert_int_equal(seen.waits, 0);
	assert_int_equal(f->loss_calls, 0);
	assert_all_given_back(f);

	/* with a deadline: the next attempt.  Epochs so far: 1 (lost), 2
	 * (assert_all_given_back), 3 (lost again); so ours are 4 */
	wait_setup(f, 20000);
	seen.lose_on_grant = f->root_name;
	seen.lose_why = LEASE_LOSS_EXPIRED;
	assert_int_equal(coord_open(&f->cfg, &c, &err), 0);
	assert_opened(f, c, 4, 4);
	assert_int_equal(seen.waits, 1);
	assert_int_equal(seen.wait_kind, LEASE_E_LOST);
	assert_int_equal(seen.hooks, 1);
	lease_mem_on_grant(f->store, NULL, NULL);
	coord_free(c);
}

/* Either lease lost during the after-acquire hook: what it took is
 * undone before the leases go. */
void test_lost_during_hook(void **state)
{
	struct fx *f = *state;
	struct lease_err err = { 0 };
	struct coord *c = NULL;
	const char *const names[] = { SESSION_NAME, f->root_name };

	for (size_t i = 0; i < 2; i++) {
		wait_setup(f, 0);
		seen.lose_in_hook = names[i];
		seen.lose_why = LEASE_LOSS_EXPIRED;
		assert_int_equal(coord_open(&f->cfg, &c, &err), -ENOLINK);
		assert_null(c);
		assert_non_null(strstr(err.msg, i == 0 ? "session lease"
							: "root lease"));
		assert_non_null(strstr(err.msg, "after-acquire"));
		assert_int_equal(seen.hooks, 1);
		assert_int_equal(seen.undos, 1);
		assert_int_equal(f->loss_calls, 0);
		assert_all_given_back(f);
	}
	/* with a deadline: undone, then the hook runs again and holds */
	wait_setup(f, 20000);
	seen.lose_in_hook = f->root_name;
	seen.lose_why = LEASE_LOSS_EXPIRED;
	assert_int_equal(coord_open(&f->cfg, &c, &err), 0);
	assert_int_equal(seen.hooks, 2);
	assert_int_equal(seen.undos, 1);
	assert_int_equal(coord_healthy(c), 0);
	assert_int_equal(f->loss_calls, 0);
	coord_free(c);
}

/* ---- the store failing while opening ------------------------------------ */

void test_store_unreachable_retries(void **state)
{
	struct fx *f = *state;
	struct lease_err err = { 0 };
	struct coord *c = NULL;
	int64_t t0;

	/* one try: fails at once, the session given back */
	wait_setup(f, 0);
	assert_int_equal(lease_mem_fail_next(f->store, f->root_name,
					     LEASE_E_UNREACHABLE, 1), 0);
	assert_int_equal(coord_open(&f->cfg, &c, &err), -EHOSTUNREACH);
	assert_int_equal(err.kind, LEASE_E_UNREACHABLE);
	assert_int_equal(seen.waits, 0);
	assert_all_given_back(f);

	/* mid-acquisition, three times: each attempt gives its session
	 * back; said once, before the first pause; backing off */
	wait_setup(f, 20000);
	assert_int_equal(lease_mem_fail_next(f->store, f->root_name,
					     LEASE_E_UNREACHABLE, 3), 0);
	t0 = lease_now_ns();
	assert_int_equal(coord_open(&f->cfg, &c, &err), 0);
	assert_true(lease_now_ns() - t0 >= 700 * 1000000LL); /* 100+200+400 */
	assert_int_equal(seen.waits, 1);
	assert_int_equal(seen.wait_kind, LEASE_E_UNREACHABLE);
	assert_true(seen.wait_at - t0 < 500 * 1000000LL); /* not after them */
	assert_opened(f, c, 6, 2);
	coord_free(c);

	/* out of reach from the start until the deadline: its error */
	wait_setup(f, 400);
	assert_int_equal(lease_mem_fail_next(f->store, SESSION_NAME,
					     LEASE_E_UNREACHABLE, 1000), 0);
	t0 = lease_now_ns();
	assert_int_equal(coord_open(&f->cfg, &c, &err), -EHOSTUNREACH);
	assert_true(lease_now_ns() - t0 >= 400 * 1000000LL);
	assert_true(lease_now_ns() - t0 < 5000 * 1000000LL);
	assert_non_null(strstr(err.msg, "injected"));
	assert_int_equal(seen.waits, 1);
	assert_int_equal(lease_mem_fail_next(f->store, SESSION_NAME,
					     LEASE_E_UNREACHABLE, 0), 0);
}

/* A busy root is said once, before the wait, and fails at the deadline. */
void test_busy_said_once(void **state)
{
	struct fx *f = *state;
	struct lease_err err = { 0 };
	struct coord *c = NULL;
	struct lease *pre = NULL;
	int64_t t0;

	assert_int_equal(lease_acquire(f->store, f->root_name, 0, &pre, &err), 0);
	wait_setup(f, 300);
	t0 = lease_now_ns();
	assert_int_equal(coord_open(&f->cfg, &c, &err), -EBUSY);
	assert_true(lease_now_ns() - t0 >= 300 * 1000000LL);
	assert_int_equal(seen.waits, 1);
	assert_int_equal(seen.wait_kind, LEASE_E_HELD);
	assert_true(seen.wait_at - t0 < 250 * 1000000LL); /* before the wait */
	assert_int_equal(err.holder_epoch, lease_epoch(pre));
	assert_int_equal(seen.hooks, 0);
	lease_free(pre);
}

/* ---- partial loss after open: the survivor goes at the fence ----------- */

/* Only the session lease lost: the root is not kept (it would keep every
 * successor out for as long as the mount lives), but only once drained. */
void test_fence_releases_root_after_session_loss(void **state)
{
	struct fx *f = *state;
	struct lease_err err = { 0 };
	struct coord *c = fx_open(f);
	struct lease *succ = NULL;

	assert_int_equal(coord_enter(c), 0);
	assert_int_equal(lease_mem_force_loss(f->store, SESSION_NAME,
					      LEASE_LOSS_EXPIRED), 0);
	assert_true(wait_loss(f, 2000));
	assert_int_equal(coord_fence(c, 0), -ETIMEDOUT);
	assert_int_equal(fx_show_state(f, f->root_name, NULL), LEASE_STATE_HELD);
	coord_exit(c);
	assert_int_equal(coord_fence(c, 0), 0);
	assert_int_equal(fx_rel_count(f), 2);
	assert_string_equal(f->rel_names[0], f->root_name);
	assert_string_equal(f->rel_names[1], SESSION_NAME);
	assert_int_equal(lease_acquire(f->store, f->root_name, 0, &succ, &err), 0);
	/* shutdown releases nothing twice; the state stays lost till then */
	assert_int_equal(coord_state(c), COORD_LOST);
	assert_int_equal(coord_shutdown(c, 1000), 0);
	assert_int_equal(fx_rel_count(f), 2);
	assert_false(lease_is_lost(succ));
	lease_free(succ);
	coord_free(c);
}
