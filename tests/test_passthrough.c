/* SPDX-License-Identifier: MIT */
/*
 * The passthrough's INIT, without a mount: whatever the kernel offers, it
 * asks only for offered capability bits (libfuse 3.14 fails INIT on a
 * wanted bit the kernel lacks), takes the ones it relies on when offered,
 * and never the writeback cache (an acknowledged write must have passed
 * the gate).
 */
#include <errno.h>
#include <grp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmocka.h>

#include "fs.h"
#include "ring.h"
#include "testutil.h"

struct fx {
	char *root;
	struct lfs *fs;
	struct lfs_session sess;
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	struct lfs_config cfg = { .entry_timeout = 1, .attr_timeout = 1,
				  .keep_cache = true };

	assert_non_null(f);
	/* As the daemon's process setup does: a privileged passthrough
	 * refuses to run with supplementary groups of its own. */
	if (geteuid() == 0)
		assert_int_equal(setgroups(0, NULL), 0);
	f->root = tu_mkdtemp("pt");
	cfg.root = f->root;
	assert_int_equal(lfs_new(&cfg, &f->fs), 0);
	f->sess.fs = f->fs;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	lfs_free(f->fs);
	tu_rmrf(f->root);
	free(f->root);
	free(f);
	return 0;
}

static struct fuse_conn_info init_with(struct fx *f, unsigned capable)
{
	struct fuse_conn_info conn = { .capable = capable };

	lfs_ops()->init(&f->sess, &conn);
	return conn;
}

static void test_wants_only_offered_bits(void **state)
{
	static const unsigned offers[] = {
		0,
		FUSE_CAP_SPLICE_READ,
		FUSE_CAP_SPLICE_WRITE | FUSE_CAP_READDIRPLUS,
		FUSE_CAP_POSIX_ACL,
		FUSE_CAP_DONT_MASK | FUSE_CAP_ASYNC_READ,
		FUSE_CAP_WRITEBACK_CACHE | FUSE_CAP_HANDLE_KILLPRIV,
		~0u,
	};
	struct fx *f = *state;

	for (size_t i = 0; i < sizeof(offers) / sizeof(offers[0]); i++) {
		struct fuse_conn_info c = init_with(f, offers[i]);

		if (c.want & ~c.capable)
			fail_msg("offered %#x, wanted %#x: asks for %#x not offered",
				 c.capable, c.want, c.want & ~c.capable);
		assert_false(c.want & FUSE_CAP_WRITEBACK_CACHE);
		assert_false(c.want & FUSE_CAP_HANDLE_KILLPRIV);
	}
}

static void test_takes_what_it_relies_on(void **state)
{
	struct fx *f = *state;
	struct fuse_conn_info c = init_with(f, ~0u);
	unsigned need = FUSE_CAP_POSIX_ACL | FUSE_CAP_DONT_MASK |
			FUSE_CAP_ATOMIC_O_TRUNC | FUSE_CAP_READDIRPLUS |
			FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE;

	assert_int_equal(c.want & need, need);
	c = init_with(f, FUSE_CAP_SPLICE_READ);
	assert_int_equal(c.want, FUSE_CAP_SPLICE_READ);
}

/* The io_uring queues must number exactly the kernel's possible CPUs: a
 * list it prints in /sys/devices/system/cpu/possible. */
static void test_ring_cpu_count(void **state)
{
	(void)state;
	assert_int_equal(ring_cpu_count("0\n"), 1);
	assert_int_equal(ring_cpu_count("0-1\n"), 2);
	assert_int_equal(ring_cpu_count("0-3,8-11"), 8);
	assert_int_equal(ring_cpu_count("0,2,4-5\n"), 4);
	assert_int_equal(ring_cpu_count("0-255\n"), 256);
	assert_int_equal(ring_cpu_count(""), -EINVAL);
	assert_int_equal(ring_cpu_count("3-1"), -EINVAL);
	assert_int_equal(ring_cpu_count("0-"), -EINVAL);
	assert_int_equal(ring_cpu_count("0,,1"), -EINVAL);
	assert_int_equal(ring_cpu_count("x"), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_wants_only_offered_bits, setup, teardown),
		cmocka_unit_test_setup_teardown(test_takes_what_it_relies_on, setup, teardown),
		cmocka_unit_test(test_ring_cpu_count),
	};

	return cmocka_run_group_tests_name("passthrough", tests, NULL, NULL);
}
