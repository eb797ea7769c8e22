/* SPDX-License-Identifier: MIT */
/* Coordinator: open ordering, busy path, latching, admission (shutdown and
 * placements: test_coord_end.c). */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "coord.h"
#include "roots.h"
#include "lease.h"
#include "mem.h"
#include "testutil.h"
#include "test_coord.h"

void on_loss(void *ud, enum lease_loss why)
{
	struct fx *f = ud;

	pthread_mutex_lock(&f->mu);
	f->loss_calls++;
	f->loss_why = why;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
}

void observe_release(void *ud, const char *name, int64_t deadline)
{
	struct fx *f = ud;

	pthread_mutex_lock(&f->mu);
	if (f->rel_n < 8) {
		snprintf(f->rel_names[f->rel_n], sizeof(f->rel_names[0]), "%s",
			 name);
		f->rel_deadline[f->rel_n] = deadline;
		f->rel_now[f->rel_n] = lease_now_ns();
	}
	f->rel_n++;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
}

int fx_rel_count(struct fx *f)
{
	int n;

	pthread_mutex_lock(&f->mu);
	n = f->rel_n;
	pthread_mutex_unlock(&f->mu);
	return n;
}

/* Wait (bounded) until on_loss has run at least once. */
bool wait_loss(struct fx *f, int timeout_ms)
{
	int64_t deadline = lease_deadline_ms(timeout_ms);
	struct timespec ts;
	bool ok;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += timeout_ms / 1000 + 1;
	pthread_mutex_lock(&f->mu);
	while (f->loss_calls == 0 && !lease_deadline_passed(deadline))
		pthread_cond_timedwait(&f->cv, &f->mu, &ts);
	ok = f->loss_calls > 0;
	pthread_mutex_unlock(&f->mu);
	return ok;
}

int fx_setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	pthread_mutex_init(&f->mu, NULL);
	pthread_cond_init(&f->cv, NULL);
	f->store = tu_open_store("mem", NULL);
	f->root = tu_mkdtemp("coord");
	assert_int_equal(ws_canonical_root(f->root, f->canon,
					      sizeof(f->canon)), 0);
	assert_int_equal(ws_root_name(f->canon, f->root_name,
					 sizeof(f->root_name)), 0);
	f->cfg.placement = PLACEMENT_EXCLUSIVE;
	f->cfg.root = f->canon;
	f->cfg.session_id = SESSION_UUID;
	f->cfg.store = f->store;
	f->cfg.on_loss = on_loss;
	f->cfg.on_loss_userdata = f;
	*state = f;
	return 0;
}

int fx_teardown(void **state)
{
	struct fx *f = *state;

	lease_store_close(f->store);
	tu_rmrf(f->root);
	free(f->root);
	pthread_cond_destroy(&f->cv);
	pthread_mutex_destroy(&f->mu);
	free(f);
	return 0;
}

struct coord *fx_open(struct fx *f)
{
	struct lease_err err = { 0 };
	struct coord *c = NULL;

	if (coord_open(&f->cfg, &c, &err) != 0)
		fail_msg("coord_open: %s: %s", lease_errkind_str(err.kind),
			 err.msg);
	coord_set_release_observer(c, observe_release, f);
	return c;
}

enum lease_state fx_show_state(struct fx *f, const char *name,
				   uint64_t *epoch)
{
	struct lease_info info = { 0 };
	struct lease_err err = { 0 };

	if (lease_show(f->store, name, &info, &err) != 0)
		fail_msg("lease_show %s: %s", name, err.msg);
	if (epoch)
		*epoch = info.epoch;
	return info.state;
}

int count_entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	assert_non_null(d);
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			n++;
	closedir(d);
	return n;
}

int count_held(const struct lease_info *info, void *ud)
{
	struct held_count *h = ud;

	if (info->state == LEASE_STATE_HELD) {
		h->held++;
		snprintf(h->last, sizeof(h->last), "%s", info->name);
	}
	return 0;
}

/* The store holds exactly one lease: this coordinator's session lease. */
void fx_assert_only_session_held(struct fx *f)
{
	struct lease_err err = { 0 };
	struct held_count h = { 0 };

	assert_int_equal(lease_list(f->store, count_held, &h, &err), 0);
	assert_int_equal(h.held, 1);
	assert_string_equal(h.last, "sessions/" SESSION_UUID);
}

/* ---- open ------------------------------------------------------------ */

static void test_exclusive_holds_both(void **state)
{
	struct fx *f = *state;
	struct coord *c = fx_open(f);
	uint64_t e;

	assert_string_equal(coord_root(c), f->canon);
	assert_string_equal(coord_root_lease_name(c), f->root_name);
	assert_string_equal(coord_session_id(c), SESSION_UUID);
	assert_string_equal(coord_session_lease_name(c),
			    "sessions/" SESSION_UUID);
	assert_ptr_equal(coord_placement(c), placement_get(PLACEMENT_EXCLUSIVE));
	assert_int_equal(coord_state(c), COORD_HELD);
	assert_int_equal(coord_healthy(c), 0);

	assert_int_equal(fx_show_state(f, f->root_name, &e), LEASE_STATE_HELD);
	assert_int_equal(e, coord_root_epoch(c));
	assert_true(e >= 1);
	assert_int_equal(fx_show_state(f, coord_session_lease_name(c), &e),
			 LEASE_STATE_HELD);
	assert_int_equal(e, coord_session_epoch(c));

	assert_int_equal(coord_shutdown(c, 1000), 0);
	assert_int_equal(coord_state(c), COORD_CLOSED);
	assert_int_equal(fx_show_state(f, f->root_name, NULL), LEASE_STATE_FREE);
	assert_int_equal(fx_show_state(f, "sessions/" SESSION_UUID, NULL),
			 LEASE_STATE_FREE);
	assert_int_equal(f->loss_calls, 0);
	assert_int_equal(coord_loss_reason(c), LEASE_LOSS_NONE);
	coord_free(c);
}

static void test_random_session_id(void **state)
{
	struct fx *f = *state;
	struct coord *c;

	f->cfg.session_id = NULL;
	c = fx_open(f);
	assert_true(lease_uuid_valid(coord_session_id(c)));
	assert_int_equal(fx_show_state(f, coord_session_lease_name(c), NULL),
			 LEASE_STATE_HELD);
	coord_free(c);
}

static void assert_busy(struct fx *f, uint64_t holder_epoch)
{
	struct lease_err err = { 0 };
	struct coord *c = NULL;
	int r = coord_open(&f->cfg, &c, &err);

	assert_int_equal(r, -EBUSY);
	assert_null(c);
	assert_int_equal(err.kind, LEASE_E_HELD);
	assert_int_equal(err.holder_epoch, holder_epoch);
	assert_string_equal(err.name, f->canon);
	assert_non_null(strstr(err.msg, f->canon));
	/* the session lease was taken and given back, nothing was created */
	assert_int_equal(fx_show_state(f, "sessions/" SESSION_UUID, NULL),
			 LEASE_STATE_FREE);
	assert_int_equal(count_entries(f->root), 0);
}

static void test_busy_releases_session(void **state)
{
	struct fx *f = *state;
	struct lease_err err = { 0 };
	struct lease *pre = NULL;
	char link[PATH_MAX + 8], canon[PATH_MAX];
	int64_t t0;

	assert_int_equal(lease_acquire(f->store, f->root_name,
				       lease_deadline_ms(1000), &pre, &err), 0);
	assert_busy(f, lease_epoch(pre));

	/* a bounded wait still fails busy, after about the wait */
	f->cfg.acquire_deadline = lease_deadline_ms(150);
	t0 = lease_now_ns();
	assert_busy(f, lease_epoch(pre));
	assert_true(lease_now_ns() - t0 >= 100 * 1000000LL);

	/* the same root spelled through a symlink is the same lease, once
	 * the caller canonicalized it; a root it did not is refused */
	f->cfg.acquire_deadline = 0;
	snprintf(link, sizeof(link), "%s.lnk", f->root);
	assert_int_equal(symlink(f->root, link), 0);
	assert_int_equal(ws_canonical_root(link, canon, sizeof(canon)), 0);
	f->cfg.root = canon;
	assert_busy(f, lease_epoch(pre));
	unlink(link);
	f->cfg.root = f->canon;

	/* session placement dir is not created on a busy exclusive open */
	lease_free(pre);
	{
		struct coord *c = fx_open(f);

		assert_int_equal(count_entries(f->root), 0);
		coord_free(c);
	}
}

static int hook_calls;
static int hook_fail(void *ud, const char *root, struct lease_err *err)
{
	struct fx *f = ud;

	hook_calls++;
	assert_string_equal(root, f->canon);
	/* called with both leases held */
	assert_int_equal(fx_show_state(f, f->root_name, NULL), LEASE_STATE_HELD);
	assert_int_equal(fx_show_state(f, "sessions/" SESSION_UUID, NULL),
			 LEASE_STATE_HELD);
	return lease_err_set(err, LEASE_E_IO, -EPERM, root, "hook refused");
}

static void test_after_acquire_failure_releases(void **state)
{
	struct fx *f = *state;
	struct lease_err err = { 0 };
	struct coord *c = NULL;

	hook_calls = 0;
	f->cfg.after_acquire = hook_fail;
	f->cfg.after_acquire_userdata = f;
	assert_int_equal(coord_open(&f->cfg, &c, &err), -EPERM);
	assert_null(c);
	assert_int_equal(hook_calls, 1);
	assert_string_equal(err.msg, "hook refused");
	assert_int_equal(fx_show_state(f, f->root_name, NULL), LEASE_STATE_FREE);
	assert_int_equal(fx_show_state(f, "sessions/" SESSION_UUID, NULL),
			 LEASE_STATE_FREE);
	assert_int_equal(f->loss_calls, 0);
}

static void test_bad_config(void **state)
{
	struct fx *f = *state;
	struct lease_err err = { 0 };
	struct coord *c = NULL;
	struct held_count h = { 0 };

	f->cfg.session_id = "0B5C7F2E-1D3A-4E5F-8A9B-0C1D2E3F4A5B";
	assert_int_equal(coord_open(&f->cfg, &c, &err), -EINVAL);
	assert_int_equal(err.kind, LEASE_E_USAGE);
	f->cfg.session_id = SESSION_UUID;
	f->cfg.root = "";
	assert_int_equal(coord_open(&f->cfg, &c, &err), -EINVAL);
	assert_int_equal(err.kind, LEASE_E_USAGE);
	/* not canonical: relative, or not lexically clean */
	f->cfg.root = "relative/root";
	assert_int_equal(coord_open(&f->cfg, &c, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "not canonical"));
	f->cfg.root = "/tmp/../tmp/";
	assert_int_equal(coord_open(&f->cfg, &c, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "not canonical"));
	f->cfg.root = f->canon;
	f->cfg.store = NULL;
	assert_int_equal(coord_open(&f->cfg, &c, &err), -EINVAL);
	assert_int_equal(err.kind, LEASE_E_USAGE);
	f->cfg.store = f->store;
	f->cfg.placement = (enum placement_id)42;
	assert_int_equal(coord_open(&f->cfg, &c, &err), -EINVAL);
	assert_int_equal(err.kind, LEASE_E_USAGE);
	assert_null(c);
	assert_int_equal(lease_list(f->store, count_held, &h, &err), 0);
	assert_int_equal(h.held, 0);
}

static void test_placement_parse(void **state)
{
	enum placement_id p;

	(void)state;
	assert_int_equal(placement_parse("exclusive", &p), 0);
	assert_int_equal(p, PLACEMENT_EXCLUSIVE);
	assert_int_equal(placement_parse("session", &p), 0);
	assert_int_equal(p, PLACEMENT_SESSION);
	assert_int_equal(placement_parse("shared", &p), 0);
	assert_int_equal(p, PLACEMENT_SHARED);
	assert_int_equal(placement_parse("observer", &p), 0);
	assert_int_equal(p, PLACEMENT_OBSERVER);
	assert_int_equal(placement_get(p)->writes, false);
	assert_int_equal(placement_get(p)->root_lease, false);
	assert_int_equal(placement_get(p)->host_lock, false);
	assert_int_equal(placement_parse("Shared", &p), -EINVAL);
	assert_int_equal(placement_parse("", &p), -EINVAL);
	assert_string_equal(coord_state_str(COORD_SHUTTING_DOWN),
			    "shutting-down");
	assert_string_equal(coord_state_str(COORD_LOST), "lost");
	assert_string_equal(coord_state_str(COORD_HELD), "held");
}

/* ---- loss -------------------------------------------------------------- */

static void test_healthy_latches_on_takeover(void **state)
{
	struct fx *f = *state;
	struct coord *c = fx_open(f);

	assert_int_equal(coord_healthy(c), 0);
	assert_int_equal(lease_mem_force_loss(f->store, f->root_name,
					      LEASE_LOSS_TAKEOVER), 0);
	assert_int_equal(coord_healthy(c), -ENOLINK);
	assert_true(wait_loss(f, 2000));
	for (int i = 0; i < 100; i++)
		assert_int_equal(coord_healthy(c), -ENOLINK);
	assert_int_equal(coord_state(c), COORD_LOST);
	assert_int_equal(coord_loss_reason(c), LEASE_LOSS_TAKEOVER);
	assert_int_equal(f->loss_calls, 1);
	assert_int_equal(f->loss_why, LEASE_LOSS_TAKEOVER);

	/* shutdown after loss still releases both (no-op for the stale root)
	 * and is not reported as a second loss */
	assert_int_equal(coord_shutdown(c, 1000), 0);
	assert_int_equal(fx_rel_count(f), 2);
	assert_int_equal(f->loss_calls, 1);
	assert_int_equal(coord_loss_reason(c), LEASE_LOSS_TAKEOVER);
	assert_int_equal(coord_healthy(c), -ESHUTDOWN);
	/* the phantom taker still holds the root: our release did not free it */
	assert_int_equal(fx_show_state(f, f->root_name, NULL), LEASE_STATE_HELD);
	coord_free(c);
}

/*
 * A revoked coordinator acknowledges only once its admitted mutations have
 * drained: before that the store keeps the successor out; after it the
 * successor gets the root at once, the session lease goes with it (the
 * loss is for good), and shutdown releases neither a second time.
 */
static void test_fence_after_drain(void **state)
{
	struct fx *f = *state;
	struct coord *c = fx_open(f);
	struct lease_err err = { 0 };
	struct lease *succ = NULL;

	assert_int_equal(coord_fence(c, 0), -EINVAL);
	assert_int_equal(coord_enter(c), 0);
	assert_int_equal(lease_revoke(f->store, f->root_name, 0, NULL, &err), 0);
	assert_true(wait_loss(f, 2000));
	assert_int_equal(coord_fence(c, 0), -ETIMEDOUT);
	assert_int_equal(fx_rel_count(f), 0);
	assert_int_equal(lease_acquire(f->store, f->root_name, 0, &succ, &err),
			 -EBUSY);
	coord_exit(c);
	assert_int_equal(coord_fence(c, 0), 0);
	assert_int_equal(fx_rel_count(f), 2);
	assert_string_equal(f->rel_names[0], f->root_name);
	assert_string_equal(f->rel_names[1], "sessions/" SESSION_UUID);
	assert_int_equal(lease_acquire(f->store, f->root_name, 0, &succ, &err), 0);
	assert_int_equal(coord_fence(c, 0), 0);
	assert_int_equal(coord_shutdown(c, 1000), 0);
	assert_int_equal(fx_rel_count(f), 2);
	assert_false(lease_is_lost(succ));
	lease_free(succ);
	coord_free(c);
}

static void test_session_loss_latches(void **state)
{
	struct fx *f = *state;
	struct coord *c = fx_open(f);

	assert_int_equal(lease_mem_force_loss(f->store, "sessions/" SESSION_UUID,
					      LEASE_LOSS_EXPIRED), 0);
	assert_int_equal(coord_healthy(c), -ENOLINK);
	assert_true(wait_loss(f, 2000));
	assert_int_equal(coord_loss_reason(c), LEASE_LOSS_EXPIRED);
	assert_int_equal(coord_enter(c), -ENOLINK);
	coord_free(c);
	assert_int_equal(f->loss_calls, 1);
}

static void test_admission_closes_on_loss(void **state)
{
	struct fx *f = *state;
	struct coord *c = fx_open(f);

	assert_int_equal(coord_enter(c), 0);
	coord_exit(c);
	assert_int_equal(coord_enter(c), 0); /* stays in flight */
	assert_int_equal(lease_mem_force_loss(f->store, f->root_name,
					      LEASE_LOSS_TAKEOVER), 0);
	assert_true(wait_loss(f, 2000));
	assert_int_equal(coord_enter(c), -ENOLINK);
	assert_int_equal(coord_enter(c), -ENOLINK);
	coord_exit(c); /* the one admitted before loss completes */
	/* failed enters did not leak in-flight counts: drain finishes */
	assert_int_equal(coord_shutdown(c, 2000), 0);
	assert_int_equal(coord_enter(c), -ESHUTDOWN);
	coord_free(c);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_exclusive_holds_both),
		T(test_random_session_id),
		T(test_busy_releases_session),
		T(test_after_acquire_failure_releases),
		T(test_bad_config),
		cmocka_unit_test(test_placement_parse),
		T(test_healthy_latches_on_takeover),
		T(test_fence_after_drain),
		T(test_session_loss_latches),
		T(test_admission_closes_on_loss),
		T(test_shutdown_order_live_deadlines),
		T(test_shutdown_drains_first),
		T(test_close_admission_keeps_leases),
		T(test_concurrent_shutdowns_run_once),
		T(test_free_without_shutdown_is_orderly),
		T(test_session_placement),
		T(test_session_placement_not_a_dir),
		T(test_shared_placement),
		T(test_observer_placement),
		T(test_lease_dir_inside_root_refused),
		T(test_lease_dir_sibling_prefix_accepted),
		T(test_session_lost_while_waiting_retries),
		T(test_session_revoked_while_waiting_fails),
		T(test_root_lost_after_grant),
		T(test_lost_during_hook),
		T(test_store_unreachable_retries),
		T(test_busy_said_once),
		T(test_fence_releases_root_after_session_loss),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
