/* SPDX-License-Identifier: MIT */
/* Coordinator: shutdown in order, placements, the lease directory. */
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

/* ---- shutdown ------------------------------------------------------------ */

static void assert_release_order(struct fx *f)
{
	assert_int_equal(fx_rel_count(f), 2);
	assert_string_equal(f->rel_names[0], f->root_name);
	assert_string_equal(f->rel_names[1], "sessions/" SESSION_UUID);
	for (int i = 0; i < 2; i++)
		if (f->rel_deadline[i] <= f->rel_now[i])
			fail_msg("release %d got a dead deadline (%lld <= %lld)",
				 i, (long long)f->rel_deadline[i],
				 (long long)f->rel_now[i]);
}

void test_shutdown_order_live_deadlines(void **state)
{
	struct fx *f = *state;
	struct coord *c;

	f->cfg.release_timeout_ms = 3000;
	c = fx_open(f);
	/* a mutation stays in flight and the caller allows no drain time:
	 * nothing is released while it may still land */
	assert_int_equal(coord_enter(c), 0);
	assert_int_equal(coord_shutdown(c, 0), -ETIMEDOUT);
	assert_int_equal(coord_shutdown(c, 50), -ETIMEDOUT);
	assert_int_equal(fx_rel_count(f), 0);
	assert_int_equal(fx_show_state(f, f->root_name, NULL), LEASE_STATE_HELD);
	assert_int_equal(coord_enter(c), -ESHUTDOWN);
	assert_int_equal(coord_state(c), COORD_SHUTTING_DOWN);
	/* once it finished, the next call releases, in order */
	coord_exit(c);
	assert_int_equal(coord_shutdown(c, 0), 0);
	assert_release_order(f);
	for (int i = 0; i < 2; i++)
		assert_true(f->rel_deadline[i] - f->rel_now[i] >
			    2000 * 1000000LL);
	assert_int_equal(fx_show_state(f, f->root_name, NULL), LEASE_STATE_FREE);
	assert_int_equal(fx_show_state(f, "sessions/" SESSION_UUID, NULL),
			 LEASE_STATE_FREE);
	assert_int_equal(coord_healthy(c), -ESHUTDOWN);
	assert_int_equal(coord_enter(c), -ESHUTDOWN);
	assert_int_equal(coord_state(c), COORD_CLOSED);
	/* repeated shutdown joins the same result and releases nothing more */
	assert_int_equal(coord_shutdown(c, 1000), 0);
	assert_int_equal(fx_rel_count(f), 2);
	assert_int_equal(f->loss_calls, 0);
	coord_free(c);
	assert_int_equal(fx_rel_count(f), 2);
}

/* Closing admission stops new mutations but keeps both leases held
 * until shutdown proper, which then releases them in order. */
void test_close_admission_keeps_leases(void **state)
{
	struct fx *f = *state;
	struct coord *c = fx_open(f);

	assert_int_equal(coord_close_admission(c, 1000), 0);
	assert_int_equal(coord_enter(c), -ESHUTDOWN);
	assert_int_equal(coord_healthy(c), -ESHUTDOWN);
	assert_int_equal(coord_state(c), COORD_SHUTTING_DOWN);
	assert_int_equal(fx_rel_count(f), 0);
	assert_int_equal(fx_show_state(f, f->root_name, NULL), LEASE_STATE_HELD);
	assert_int_equal(fx_show_state(f, "sessions/" SESSION_UUID, NULL),
			 LEASE_STATE_HELD);
	assert_int_equal(coord_close_admission(c, 0), 0);
	assert_int_equal(coord_shutdown(c, 1000), 0);
	assert_release_order(f);
	assert_int_equal(f->loss_calls, 0);
	coord_free(c);
}

struct shut_arg {
	struct coord *c;
	int64_t drain_ms;
	pthread_barrier_t *barrier;
	int result;
};

static void *shut_thread(void *p)
{
	struct shut_arg *a = p;

	if (a->barrier)
		pthread_barrier_wait(a->barrier);
	a->result = coord_shutdown(a->c, a->drain_ms);
	return NULL;
}

/* Bounded wait for a state change driven by another thread, on the
 * coordinator's state fd. */
static bool wait_state(struct coord *c, enum coord_state st, int timeout_ms)
{
	int64_t deadline = lease_deadline_ms(timeout_ms);
	struct pollfd p = { .fd = coord_state_fd(c), .events = POLLIN };
	uint64_t v;

	while (coord_state(c) != st) {
		int64_t left = (deadline - lease_now_ns()) / 1000000;

		if (left <= 0 || poll(&p, 1, (int)left + 1) <= 0)
			return false;
		if (read(p.fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
			return false;
	}
	return true;
}

void test_shutdown_drains_first(void **state)
{
	struct fx *f = *state;
	struct coord *c = fx_open(f);
	struct shut_arg a = { .c = c, .drain_ms = 10000 };
	pthread_t t;

	assert_int_equal(coord_enter(c), 0);
	assert_int_equal(pthread_create(&t, NULL, shut_thread, &a), 0);
	assert_true(wait_state(c, COORD_SHUTTING_DOWN, 5000));
	assert_int_equal(coord_enter(c), -ESHUTDOWN);
	/* still draining: nothing released while the mutation runs */
	assert_int_equal(fx_rel_count(f), 0);
	assert_int_equal(fx_show_state(f, f->root_name, NULL), LEASE_STATE_HELD);
	coord_exit(c);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(a.result, 0);
	assert_release_order(f);
	assert_int_equal(f->loss_calls, 0);
	coord_free(c);
}

void test_concurrent_shutdowns_run_once(void **state)
{
	struct fx *f = *state;
	struct coord *c = fx_open(f);
	pthread_barrier_t barrier;
	struct shut_arg a[4];
	pthread_t t[4];

	assert_int_equal(coord_enter(c), 0); /* makes the teardown take a while */
	pthread_barrier_init(&barrier, NULL, 4);
	for (int i = 0; i < 4; i++) {
		a[i] = (struct shut_arg){ .c = c, .drain_ms = 200,
					  .barrier = &barrier };
		assert_int_equal(pthread_create(&t[i], NULL, shut_thread, &a[i]),
				 0);
	}
	for (int i = 0; i < 4; i++)
		assert_int_equal(pthread_join(t[i], NULL), 0);
	pthread_barrier_destroy(&barrier);
	for (int i = 0; i < 4; i++)
		assert_int_equal(a[i].result, -ETIMEDOUT);
	assert_int_equal(fx_rel_count(f), 0); /* never while in flight */
	coord_exit(c);
	for (int i = 0; i < 4; i++) {
		a[i].result = 1;
		a[i].barrier = NULL;
		assert_int_equal(pthread_create(&t[i], NULL, shut_thread, &a[i]),
				 0);
	}
	for (int i = 0; i < 4; i++)
		assert_int_equal(pthread_join(t[i], NULL), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(a[i].result, 0);
	assert_release_order(f);
	assert_int_equal(f->loss_calls, 0);
	coord_free(c);
	assert_int_equal(fx_rel_count(f), 2);
}

void test_free_without_shutdown_is_orderly(void **state)
{
	struct fx *f = *state;
	struct coord *c = fx_open(f);

	coord_free(c);
	assert_release_order(f);
	assert_int_equal(f->loss_calls, 0);
	assert_int_equal(fx_show_state(f, f->root_name, NULL), LEASE_STATE_FREE);
}

/* ---- placements ---------------------------------------------------------- */

void test_session_placement(void **state)
{
	struct fx *f = *state;
	char want[PATH_MAX + 64];
	struct coord *c;
	struct stat st;

	f->cfg.placement = PLACEMENT_SESSION;
	c = fx_open(f);
	snprintf(want, sizeof(want), "%s/%s", f->canon, SESSION_UUID);
	assert_string_equal(coord_root(c), want);
	assert_int_equal(stat(want, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0700);
	assert_string_equal(coord_root_lease_name(c), "");
	assert_int_equal(coord_root_epoch(c), 0);
	fx_assert_only_session_held(f);
	assert_int_equal(coord_healthy(c), 0);

	/* losing the session lease latches loss here */
	assert_int_equal(lease_mem_force_loss(f->store, "sessions/" SESSION_UUID,
					      LEASE_LOSS_TAKEOVER), 0);
	assert_int_equal(coord_healthy(c), -ENOLINK);
	assert_int_equal(coord_shutdown(c, 1000), 0);
	assert_int_equal(fx_rel_count(f), 1);
	assert_string_equal(f->rel_names[0], "sessions/" SESSION_UUID);
	coord_free(c);
}

void test_session_placement_not_a_dir(void **state)
{
	struct fx *f = *state;
	struct lease_err err = { 0 };
	struct coord *c = NULL;
	char path[PATH_MAX + 64];
	int fd;

	f->cfg.placement = PLACEMENT_SESSION;
	snprintf(path, sizeof(path), "%s/%s", f->root, SESSION_UUID);
	fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(coord_open(&f->cfg, &c, &err), -ENOTDIR);
	assert_null(c);
	assert_int_equal(fx_show_state(f, "sessions/" SESSION_UUID, NULL),
			 LEASE_STATE_FREE);
}

void test_shared_placement(void **state)
{
	struct fx *f = *state;
	struct coord *c;

	f->cfg.placement = PLACEMENT_SHARED;
	c = fx_open(f);
	assert_string_equal(coord_root(c), f->canon);
	assert_string_equal(coord_root_lease_name(c), "");
	fx_assert_only_session_held(f);
	assert_int_equal(coord_healthy(c), 0);
	assert_int_equal(lease_mem_force_loss(f->store, "sessions/" SESSION_UUID,
					      LEASE_LOSS_TAKEOVER), 0);
	for (int i = 0; i < 10; i++) {
		assert_int_equal(coord_healthy(c), 0);
		assert_int_equal(coord_enter(c), 0);
		coord_exit(c);
	}
	/* Told, so that it can acknowledge; nothing latched. */
	assert_int_equal(f->loss_calls, 1);
	assert_int_equal(coord_state(c), COORD_HELD);
	assert_int_equal(coord_fence(c, 0), 0);
	assert_int_equal(coord_healthy(c), 0);
	assert_int_equal(coord_shutdown(c, 1000), 0);
	assert_int_equal(coord_healthy(c), -ESHUTDOWN);
	coord_free(c);
}

/* Observer placement: only its session lease; no mutation is ever admitted
 * (the gate answers EROFS), while healthy and after a loss alike, and a
 * writer takes the root lease beside it. */
void test_observer_placement(void **state)
{
	struct fx *f = *state;
	struct lease_err err = { 0 };
	struct lease *root = NULL;
	char name[LEASE_NAME_MAX + 1];
	struct coord *c;

	f->cfg.placement = PLACEMENT_OBSERVER;
	c = fx_open(f);
	assert_string_equal(coord_root_lease_name(c), "");
	fx_assert_only_session_held(f);
	assert_int_equal(coord_healthy(c), 0);
	assert_int_equal(coord_enter(c), -EROFS);
	assert_int_equal(coord_inflight(c), 0);
	assert_int_equal(ws_root_name(f->canon, name, sizeof(name)), 0);
	assert_int_equal(lease_acquire(f->store, name, 0, &root, &err), 0);
	assert_int_equal(coord_enter(c), -EROFS);
	assert_int_equal(lease_mem_force_loss(f->store, "sessions/" SESSION_UUID,
					      LEASE_LOSS_TAKEOVER), 0);
	assert_int_equal(coord_enter(c), -EROFS);
	assert_int_equal(coord_fence(c, 0), 0);
	assert_int_equal(coord_shutdown(c, 1000), 0);
	coord_free(c);
	assert_int_equal(lease_release(root, lease_deadline_ms(1000)), 0);
	lease_free(root);
}

/* ---- lease directory inside the root (file backend) ----------------------- */

static void open_file_store(struct fx *f, const char *dir)
{
	char uri[PATH_MAX + 8];
	struct lease_err err = { 0 };

	lease_store_close(f->store);
	f->store = NULL;
	snprintf(uri, sizeof(uri), "file:%s", dir);
	if (lease_store_open(uri, NULL, &f->store, &err) != 0)
		fail_msg("open %s: %s", uri, err.msg);
	f->cfg.store = f->store;
}

void test_lease_dir_inside_root_refused(void **state)
{
	struct fx *f = *state;
	struct lease_err err = { 0 };
	struct held_count h = { 0 };
	struct coord *c = NULL;
	char dir[PATH_MAX + 64];

	snprintf(dir, sizeof(dir), "%s/sub/leases", f->root);
	open_file_store(f, dir);
	assert_int_equal(coord_open(&f->cfg, &c, &err), -EINVAL);
	assert_null(c);
	assert_int_equal(err.kind, LEASE_E_USAGE);
	assert_non_null(strstr(err.msg, "inside"));
	assert_int_equal(lease_list(f->store, count_held, &h, &err), 0);
	assert_int_equal(h.held, 0);

	/* equal to the root, spelled differently */
	snprintf(dir, sizeof(dir), "%s/./sub/..", f->root);
	open_file_store(f, dir);
	assert_int_equal(coord_open(&f->cfg, &c, &err), -EINVAL);
	assert_int_equal(err.kind, LEASE_E_USAGE);
	assert_non_null(strstr(err.msg, "equal"));
}

void test_lease_dir_sibling_prefix_accepted(void **state)
{
	struct fx *f = *state;
	struct coord *c;
	char dir[PATH_MAX + 64];

	/* shares the root's string prefix but is not inside it */
	snprintf(dir, sizeof(dir), "%s-leases", f->root);
	open_file_store(f, dir);
	c = fx_open(f);
	assert_int_equal(coord_healthy(c), 0);
	coord_free(c);
	tu_rmrf(dir);
}
