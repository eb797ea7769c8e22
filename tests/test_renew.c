/* SPDX-License-Identifier: MIT */
/*
 * The renewal engine (lease/renew.h) over a fake wire: the schedule, the
 * safe-until, loss on a renewal that failed or was refused, a revoke, the
 * reachability it reports, a store's own rules, and the revoker's wait for
 * a fence.  Rounds are
 * run by hand (no thread) except where the thread itself is the point.
 */
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lease.h"
#include "mem.h"
#include "renew.h"
#include "testutil.h"

#define TTL_MS 3000
#define THIRD_NS ((int64_t)TTL_MS / 3 * 1000000)
#define RETRY_NS ((int64_t)1000 * 1000000)

/* The fake wire: what the next renewals answer, and what they saw. */
struct wire {
	enum lease_renew_status status;
	int64_t safe_until;           /* TAKEN: this */
	bool revoked;                 /* TAKEN: says revoked */
	bool revoked_after;           /* renewed(): says revoked */
	enum lease_loss why;          /* REFUSED: this */
	bool expire_during;           /* the safe-until passes in the renewal */
	int renews;                   /* how many renewals were sent */
	int64_t last_sent;            /* the send time the engine gave */
	int reach_calls;              /* on_reach transitions */
	bool last_reach;
};

static enum lease_renew_status fake_renew(void *ctx, struct lease_renewal *g,
					  int64_t sent,
					  struct lease_renew_result *res)
{
	struct wire *w = ctx;

	w->renews++;
	if (w->expire_during)
		lease_set_safe_until(g->lease, lease_now_ns() - 1);
	w->last_sent = sent;
	res->safe_until = w->safe_until;
	res->revoked = w->revoked;
	res->why = w->why;
	return w->status;
}

static bool fake_renewed(void *ctx, struct lease_renewal *g)
{
	(void)g;
	return ((struct wire *)ctx)->revoked_after;
}

static const struct lease_renew_ops fake_ops = {
	.renew = fake_renew,
	.renewed = fake_renewed,
};

static void on_reach(bool reachable, int64_t away_ms, void *ud)
{
	struct wire *w = ud;

	(void)away_ms;
	w->reach_calls++;
	w->last_reach = reachable;
}

/* A store, a lease of it, an engine over the fake wire with the grant on
 * its list (not yet due), and the engine's lock. */
struct fixture {
	struct wire w;
	struct lease_store *st;
	struct lease *l;
	pthread_mutex_t lock;
	struct lease_renewer rn;
	struct lease_renewal g;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct lease_store_opts o = { .on_reach = on_reach };
	struct lease_err err = { 0 };

	assert_non_null(f);
	o.reach_userdata = &f->w;
	assert_int_equal(lease_backend_add(&lease_backend_mem), 0);
	assert_int_equal(lease_store_open("mem:", &o, &f->st, &err), 0);
	assert_int_equal(lease_acquire(f->st, "renew/test", 0, &f->l, &err), 0);
	pthread_mutex_init(&f->lock, NULL);
	lease_renew_init(&f->rn, &f->lock, &fake_ops, &f->w, TTL_MS);
	f->g = (struct lease_renewal){ .lease = f->l, .renewing = true,
				       .next_renew = lease_deadline_ms(60000) };
	f->rn.grants = &f->g;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	lease_renew_stop(&f->rn);
	lease_release(f->l, lease_deadline_ms(1000));
	lease_free(f->l);
	lease_store_close(f->st);
	pthread_mutex_destroy(&f->lock);
	free(f);
	return 0;
}

static void round_now(struct fixture *f)
{
	pthread_mutex_lock(&f->lock);
	f->g.next_renew = 0; /* due */
	lease_renew_round_locked(&f->rn);
	pthread_mutex_unlock(&f->lock);
}

/* Nothing due, nothing sent; the thread looks again within a second. */
static void test_not_due(void **state)
{
	struct fixture *f = *state;
	int ms;

	pthread_mutex_lock(&f->lock);
	ms = lease_renew_round_locked(&f->rn);
	pthread_mutex_unlock(&f->lock);
	assert_int_equal(f->w.renews, 0);
	assert_in_range(ms, 0, 1001);
}

/* Taken: the safe-until is the wire's, the next renewal TTL/3 after the
 * send time, nothing lost, the store answered. */
static void test_taken_schedules(void **state)
{
	struct fixture *f = *state;
	int64_t safe = lease_deadline_ms(2500);

	f->w.status = LEASE_RENEW_TAKEN;
	f->w.safe_until = safe;
	round_now(f);
	assert_int_equal(f->w.renews, 1);
	assert_int_equal(lease_safe_until(f->l), safe);
	assert_int_equal(f->g.next_renew, f->w.last_sent + THIRD_NS);
	assert_false(lease_is_lost(f->l));
	assert_true(f->g.renewing);
	assert_int_equal(f->w.reach_calls, 0); /* reachable all along */
	/* A later one may move it back: it is published as it is. */
	f->w.safe_until = safe - 1000000;
	round_now(f);
	assert_int_equal(lease_safe_until(f->l), safe - 1000000);
}

/* Out of reach before the safe-until: retried a second later, not lost;
 * out of reach past it: lost to the store, still renewed. */
static void test_unreachable(void **state)
{
	struct fixture *f = *state;
	int64_t before;

	lease_set_safe_until(f->l, lease_deadline_ms(60000));
	f->w.status = LEASE_RENEW_UNREACHABLE;
	before = lease_now_ns();
	round_now(f);
	assert_in_range(f->g.next_renew, before + RETRY_NS,
			lease_now_ns() + RETRY_NS);
	assert_false(lease_is_lost(f->l));
	assert_int_equal(f->w.reach_calls, 1);
	assert_false(f->w.last_reach);

	lease_set_safe_until(f->l, lease_now_ns() - 1);
	round_now(f);
	assert_true(lease_is_lost(f->l));
	assert_int_equal(lease_loss_reason(f->l), LEASE_LOSS_STORE);
	assert_true(f->g.renewing);

	/* Answered again: reported once. */
	f->w.status = LEASE_RENEW_TAKEN;
	round_now(f);
	assert_int_equal(f->w.reach_calls, 2);
	assert_true(f->w.last_reach);
}

/* A grant never given a safe-until (0) is not lost by a failed renewal. */
static void test_unreachable_no_safe_until(void **state)
{
	struct fixture *f = *state;

	lease_set_safe_until(f->l, 0);
	f->w.status = LEASE_RENEW_UNREACHABLE;
	round_now(f);
	assert_false(lease_is_lost(f->l));
}

/* Held back: retried as out of reach, lost past the safe-until, and
 * nothing said of reachability. */
static void test_held_back(void **state)
{
	struct fixture *f = *state;
	int64_t before;

	lease_set_safe_until(f->l, lease_deadline_ms(60000));
	f->w.status = LEASE_RENEW_UNREACHABLE;
	round_now(f);
	assert_int_equal(f->w.reach_calls, 1);
	lease_set_safe_until(f->l, lease_now_ns() - 1);
	f->w.status = LEASE_RENEW_HELD_BACK;
	before = lease_now_ns();
	round_now(f);
	assert_in_range(f->g.next_renew, before + RETRY_NS,
			lease_now_ns() + RETRY_NS);
	assert_int_equal(f->w.reach_calls, 1); /* still out of reach */
	assert_int_equal(lease_loss_reason(f->l), LEASE_LOSS_STORE);
}

/* Refused: lost for the wire's reason and never renewed again. */
static void test_refused(void **state)
{
	struct fixture *f = *state;

	lease_set_safe_until(f->l, lease_deadline_ms(60000));
	f->w.status = LEASE_RENEW_REFUSED;
	f->w.why = LEASE_LOSS_TAKEOVER;
	round_now(f);
	assert_int_equal(lease_loss_reason(f->l), LEASE_LOSS_TAKEOVER);
	assert_false(f->g.renewing);
	assert_int_equal(f->w.reach_calls, 0); /* it answered */
	round_now(f);
	assert_int_equal(f->w.renews, 1);
}

/* Revoked (by the renewal's answer, or by what renewed() read): lost,
 * and still renewed, with the new safe-until. */
static void test_revoked(void **state)
{
	struct fixture *f = *state;
	int64_t safe = lease_deadline_ms(2500);

	f->w.status = LEASE_RENEW_TAKEN;
	f->w.safe_until = safe;
	f->w.revoked_after = true;
	round_now(f);
	assert_int_equal(lease_loss_reason(f->l), LEASE_LOSS_REVOKED);
	assert_true(f->g.renewing);
	assert_int_equal(lease_safe_until(f->l), safe);
	assert_int_equal(f->g.next_renew, f->w.last_sent + THIRD_NS);
	round_now(f);
	assert_int_equal(f->w.renews, 2);
}

/* check_now: renewed at the next round though not due. */
static void test_check_now(void **state)
{
	struct fixture *f = *state;

	f->w.status = LEASE_RENEW_TAKEN;
	f->w.safe_until = lease_deadline_ms(2500);
	pthread_mutex_lock(&f->lock);
	lease_renew_check_locked(&f->rn, "renew/other");
	lease_renew_round_locked(&f->rn);
	assert_int_equal(f->w.renews, 0);
	lease_renew_check_locked(&f->rn, "renew/test");
	lease_renew_round_locked(&f->rn);
	pthread_mutex_unlock(&f->lock);
	assert_int_equal(f->w.renews, 1);
	assert_false(f->g.check_now);
}

/* Added: first due TTL/3 from then, with the thread running. */
static void test_add_schedules(void **state)
{
	struct fixture *f = *state;
	struct lease_renewal g = { .lease = f->l };
	struct lease_renewal seen;
	int64_t before, after;

	f->rn.grants = NULL;
	before = lease_now_ns();
	assert_int_equal(lease_renew_add(&f->rn, &g), 0);
	after = lease_now_ns();
	pthread_mutex_lock(&f->lock);
	seen = g;
	pthread_mutex_unlock(&f->lock);
	assert_in_range(seen.next_renew, before + THIRD_NS, after + THIRD_NS);
	assert_true(seen.renewing);
	assert_ptr_equal(f->rn.grants, &g);
	lease_renew_remove(&f->rn, &g);
	assert_null(f->rn.grants);
	assert_false(g.renewing);
}

/* ---- a store's own rules (etcd's) ------------------------------------ */

/* Caller's round with nothing due. */
static int round_not_due(struct fixture *f)
{
	int ms;

	pthread_mutex_lock(&f->lock);
	f->g.next_renew = lease_deadline_ms(60000);
	ms = lease_renew_round_locked(&f->rn);
	pthread_mutex_unlock(&f->lock);
	return ms;
}

/* The values pgstore and natsstore run with. */
static void test_rules_default(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(f->rn.rules.retry_ms, 1000);
	assert_false(f->rn.rules.expire_at_safe_until);
	assert_false(f->rn.rules.safe_until_forward);
	assert_false(f->rn.rules.stop_at_loss);
	/* Past the safe-until with no renewal due: not lost, not renewed. */
	lease_set_safe_until(f->l, lease_now_ns() - 1);
	round_not_due(f);
	assert_false(lease_is_lost(f->l));
	assert_int_equal(f->w.renews, 0);
}

/* retry_ms: an unanswered renewal is retried that much later. */
static void test_rule_retry(void **state)
{
	struct fixture *f = *state;
	int64_t before;

	f->rn.rules.retry_ms = 200;
	lease_set_safe_until(f->l, lease_deadline_ms(60000));
	f->w.status = LEASE_RENEW_UNREACHABLE;
	before = lease_now_ns();
	round_now(f);
	assert_in_range(f->g.next_renew, before + 200 * 1000000LL,
			lease_now_ns() + 200 * 1000000LL);
}

/* expire_at_safe_until: lost (expired) the moment the safe-until passes,
 * no renewal needed; the thread wakes for it; an unanswered renewal
 * before it is not loss. */
static void test_rule_expire(void **state)
{
	struct fixture *f = *state;
	int ms;

	f->rn.rules.expire_at_safe_until = true;
	lease_set_safe_until(f->l, lease_deadline_ms(50));
	ms = round_not_due(f);
	assert_in_range(ms, 0, 51);
	assert_false(lease_is_lost(f->l));
	f->w.status = LEASE_RENEW_UNREACHABLE;
	round_now(f);
	assert_false(lease_is_lost(f->l));
	lease_set_safe_until(f->l, lease_now_ns() - 1);
	f->w.renews = 0;
	round_not_due(f);
	assert_int_equal(f->w.renews, 0);
	assert_int_equal(lease_loss_reason(f->l), LEASE_LOSS_EXPIRED);
}

/* expire_at_safe_until: a safe-until that passes while an unanswered
 * renewal runs is expiry, not loss to the store. */
static void test_rule_expire_unanswered(void **state)
{
	struct fixture *f = *state;

	f->rn.rules.expire_at_safe_until = true;
	lease_set_safe_until(f->l, lease_deadline_ms(60000));
	f->w.status = LEASE_RENEW_UNREACHABLE;
	f->w.expire_during = true;
	round_now(f);
	assert_int_equal(lease_loss_reason(f->l), LEASE_LOSS_EXPIRED);
}

/* safe_until_forward: a taken renewal never moves the safe-until back. */
static void test_rule_forward(void **state)
{
	struct fixture *f = *state;
	int64_t safe = lease_deadline_ms(2500);

	f->rn.rules.safe_until_forward = true;
	f->w.status = LEASE_RENEW_TAKEN;
	f->w.safe_until = safe;
	round_now(f);
	assert_int_equal(lease_safe_until(f->l), safe);
	f->w.safe_until = safe - 1000000;
	round_now(f);
	assert_int_equal(lease_safe_until(f->l), safe);
	f->w.safe_until = safe + 1000000;
	round_now(f);
	assert_int_equal(lease_safe_until(f->l), safe + 1000000);
}

/* stop_at_loss: a loss the backend marks (etcd's watch) or a revoke the
 * renewal reports ends the renewals. */
static void test_rule_stop(void **state)
{
	struct fixture *f = *state;

	f->rn.rules.stop_at_loss = true;
	f->w.status = LEASE_RENEW_TAKEN;
	f->w.safe_until = lease_deadline_ms(2500);
	f->w.revoked = true;
	round_now(f);
	assert_int_equal(lease_loss_reason(f->l), LEASE_LOSS_REVOKED);
	assert_false(f->g.renewing);
	round_now(f);
	assert_int_equal(f->w.renews, 1);

	f->g.renewing = true; /* a fresh grant, lost by the backend */
	lease_mark_lost(f->l, LEASE_LOSS_TAKEOVER);
	round_now(f);
	assert_int_equal(f->w.renews, 1);
	assert_false(f->g.renewing);
}

/* ---- a renewal in flight (etcd's) ------------------------------------ */

static int forgotten;

static void fake_forget(void *ctx, struct lease_renewal *g)
{
	(void)ctx;
	(void)g;
	forgotten++;
}

/* Sent: not renewed again while in flight, the thread not spinning on it;
 * the answer applied at its coming with the send time; a grant removed in
 * flight is forgotten by the wire. */
static void test_in_flight(void **state)
{
	struct fixture *f = *state;
	struct lease_renew_ops ops = fake_ops;
	struct lease_renew_result res = { .safe_until = lease_deadline_ms(2500) };
	int64_t sent;
	int ms;

	ops.forget = fake_forget;
	f->rn.ops = &ops;
	f->g.ttl_ms = 6000;
	f->w.status = LEASE_RENEW_SENT;
	round_now(f);
	sent = f->w.last_sent;
	assert_true(f->g.in_flight);
	pthread_mutex_lock(&f->lock);
	ms = lease_renew_round_locked(&f->rn);
	pthread_mutex_unlock(&f->lock);
	assert_int_equal(f->w.renews, 1);
	assert_in_range(ms, 900, 1001);
	pthread_mutex_lock(&f->lock);
	lease_renew_answer_locked(&f->rn, &f->g, sent, LEASE_RENEW_TAKEN, &res);
	pthread_mutex_unlock(&f->lock);
	assert_false(f->g.in_flight);
	assert_int_equal(lease_safe_until(f->l), res.safe_until);
	assert_int_equal(f->g.next_renew, sent + 2000 * 1000000LL); /* its TTL */

	round_now(f);
	assert_true(f->g.in_flight);
	forgotten = 0;
	lease_renew_remove(&f->rn, &f->g);
	assert_int_equal(forgotten, 1);
	assert_false(f->g.in_flight);
}

/* ---- the revoker's wait ---------------------------------------------- */

struct fence_fake {
	int looks, fenced_at;  /* state() returns 1 at look fenced_at (0: never) */
	bool leasefs;
	int64_t ms;
};

static int fake_state(void *ctx, enum lease_fence *out, bool *leasefs,
		      int64_t *ms, struct lease_err *err)
{
	struct fence_fake *ff = ctx;

	(void)err;
	if (++ff->looks == ff->fenced_at) {
		*out = LEASE_FENCE_ACKED;
		return 1;
	}
	*leasefs = ff->leasefs;
	*ms = ff->ms;
	return 0;
}

/* Nothing tells of a change: the wait lasts until `until`. */
static void fake_wait(void *ctx, int64_t until)
{
	int64_t ms = (until - lease_now_ns()) / 1000000 + 1;

	(void)ctx;
	poll(NULL, 0, ms > 0 ? (int)ms : 0);
}

static void test_fence_acked(void **state)
{
	struct fence_fake ff = { .fenced_at = 3, .leasefs = true, .ms = 5 };
	const struct lease_fence_look fl = { .state = fake_state,
		.wait = fake_wait, .ctx = &ff, .slack_ms = 100, .untold = "x" };
	enum lease_fence out;
	struct lease_err err = { 0 };

	(void)state;
	assert_int_equal(lease_fence_wait(&fl, "n", 1, lease_deadline_ms(5000),
					  &out, &err), 0);
	assert_int_equal(out, LEASE_FENCE_ACKED);
	assert_int_equal(ff.looks, 3);
}

/* A harness holder that keeps renewing is given up on once its first
 * expiry and the slack passed, long before the deadline. */
static void test_fence_untold(void **state)
{
	struct fence_fake ff = { .leasefs = false, .ms = 20 };
	const struct lease_fence_look fl = { .state = fake_state,
		.wait = fake_wait, .ctx = &ff, .slack_ms = 50,
		.untold = "it stops" };
	enum lease_fence out;
	struct lease_err err = { 0 };
	int64_t start = lease_now_ns();

	(void)state;
	assert_int_equal(lease_fence_wait(&fl, "n", 1, lease_deadline_ms(10000),
					  &out, &err), 0);
	assert_int_equal(out, LEASE_FENCE_PENDING);
	assert_true(lease_now_ns() - start < (int64_t)5000 * 1000000);
	assert_true(lease_now_ns() - start >= (int64_t)70 * 1000000);
	assert_non_null(strstr(err.msg, "it stops"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_not_due, setup, teardown),
		cmocka_unit_test_setup_teardown(test_taken_schedules, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unreachable, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unreachable_no_safe_until,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_held_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_revoked, setup, teardown),
		cmocka_unit_test_setup_teardown(test_check_now, setup, teardown),
		cmocka_unit_test_setup_teardown(test_add_schedules, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rules_default, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rule_retry, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rule_expire, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rule_expire_unanswered, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_rule_forward, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rule_stop, setup, teardown),
		cmocka_unit_test_setup_teardown(test_in_flight, setup, teardown),
		cmocka_unit_test(test_fence_acked),
		cmocka_unit_test(test_fence_untold),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
