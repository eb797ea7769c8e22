/* SPDX-License-Identifier: MIT */
/*
 * FUSE over io_uring's queue count: the kernel uses no queue until one per
 * possible CPU has registered, so the count must be the kernel's
 * num_possible_cpus(), read from the list it prints in
 * /sys/devices/system/cpu/possible.  (glibc's get_nprocs_conf() counts the
 * cpuN directories of present CPUs instead: fewer where CPUs can be
 * hot-added, as on many VMs.)
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ring.h"

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
		cmocka_unit_test(test_ring_cpu_count),
	};

	return cmocka_run_group_tests_name("ring", tests, NULL, NULL);
}
