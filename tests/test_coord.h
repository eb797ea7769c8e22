/* SPDX-License-Identifier: MIT */
/* The coordinator's suite: test_coord.c (the fixture, open, loss, main),
 * test_coord_end.c (shutdown, placements) and test_coord_wait.c (losses
 * and store failures while opening, the fence after a partial loss)
 * share this. */
#ifndef LEASEFS_TEST_COORD_H
#define LEASEFS_TEST_COORD_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>

#include "coord.h"
#include "lease.h"

#define SESSION_UUID "0b5c7f2e-1d3a-4e5f-8a9b-0c1d2e3f4a5b"

/* Per-test fixture: a fresh mem store, a temp root, loss and release logs. */
struct fx {
	struct lease_store *store;
	char *root;                /* as created */
	char canon[PATH_MAX];
	char root_name[81];
	struct coord_config cfg;

	/* mu protects loss_calls, loss_why, rel_n, rel_names, rel_deadline,
	 * rel_now; cv is signalled on each change. */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int loss_calls;
	enum lease_loss loss_why;
	int rel_n;
	char rel_names[8][LEASE_NAME_MAX + 1];
	int64_t rel_deadline[8];
	int64_t rel_now[8];
};

int fx_setup(void **state);
int fx_teardown(void **state);
/* coord_open() of f->cfg, which must succeed. */
struct coord *fx_open(struct fx *f);
/* The coordinator's callbacks, logged in f. */
void on_loss(void *ud, enum lease_loss why);
void observe_release(void *ud, const char *name, int64_t deadline);
/* Releases observed so far. */
int fx_rel_count(struct fx *f);
/* Whether a loss was reported within timeout_ms. */
bool wait_loss(struct fx *f, int timeout_ms);
enum lease_state fx_show_state(struct fx *f, const char *name,
			       uint64_t *epoch);
/* Entries in `dir` besides . and .. */
int count_entries(const char *dir);
struct held_count {
	int held;
	char last[LEASE_NAME_MAX + 1];
};
/* lease_list callback counting what is held. */
int count_held(const struct lease_info *info, void *ud);
/* Only the session lease (of f's session id) is held. */
void fx_assert_only_session_held(struct fx *f);

/* test_coord_end.c */
void test_shutdown_order_live_deadlines(void **state);
void test_close_admission_keeps_leases(void **state);
void test_shutdown_drains_first(void **state);
void test_concurrent_shutdowns_run_once(void **state);
void test_free_without_shutdown_is_orderly(void **state);
void test_session_placement(void **state);
void test_session_placement_not_a_dir(void **state);
void test_shared_placement(void **state);
void test_observer_placement(void **state);
void test_lease_dir_inside_root_refused(void **state);
void test_lease_dir_sibling_prefix_accepted(void **state);

/* test_coord_wait.c */
void test_session_lost_while_waiting_retries(void **state);
void test_session_revoked_while_waiting_fails(void **state);
void test_root_lost_after_grant(void **state);
void test_lost_during_hook(void **state);
void test_store_unreachable_retries(void **state);
void test_busy_said_once(void **state);
void test_fence_releases_root_after_session_loss(void **state);

#endif
