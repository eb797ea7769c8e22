/* SPDX-License-Identifier: MIT */
/*
 * Opening what a store's owner can write (lease/beneath.c): FIFOs answer
 * at once and are refused, symlinks anywhere in a path are never
 * followed, changes stay beneath the store, and a store directory whose
 * component became a symlink after realpath() is not opened.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "lease.h"

struct tree {
	char top[64];       /* the test's directory */
	char store[128];
	char outside[128];
	int dfd;            /* the store */
};

static int tree_setup(void **state)
{
	struct tree *t = calloc(1, sizeof(*t));

	snprintf(t->top, sizeof(t->top), "/tmp/leasefs-beneath-XXXXXX");
	if (!mkdtemp(t->top))
		return -1;
	snprintf(t->store, sizeof(t->store), "%s/store", t->top);
	snprintf(t->outside, sizeof(t->outside), "%s/outside", t->top);
	if (mkdir(t->store, 0700) < 0 || mkdir(t->outside, 0700) < 0)
		return -1;
	t->dfd = open(t->store, O_PATH | O_DIRECTORY | O_CLOEXEC);
	*state = t;
	return t->dfd < 0 ? -1 : 0;
}

static int tree_teardown(void **state)
{
	struct tree *t = *state;
	char cmd[128];

	close(t->dfd);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", t->top);
	if (system(cmd) != 0)
		return -1;
	free(t);
	return 0;
}

static void at(char *buf, const char *dir, const char *name)
{
	int n = snprintf(buf, PATH_MAX, "%s/%s", dir, name);

	assert_true(n > 0 && n < PATH_MAX);
}

/* A FIFO where a file goes: refused at once, for reading and writing. */
static void test_fifo_refused(void **state)
{
	struct tree *t = *state;
	char p[PATH_MAX];

	at(p, t->store, "x.lock");
	assert_int_equal(mkfifo(p, 0600), 0);
	assert_int_equal(lease_open_beneath(t->dfd, "x.lock", O_RDONLY, 0),
			 -LEASE_ENOTREG);
	assert_int_equal(lease_open_beneath(t->dfd, "x.lock", O_RDWR | O_CREAT, 0600),
			 -LEASE_ENOTREG);
	assert_int_equal(lease_open_beneath(t->dfd, "x.lock", O_WRONLY, 0), -ENXIO);
	assert_non_null(strstr(lease_strerror(-LEASE_ENOTREG), "not a regular file"));
}

/* A regular file opens, O_CLOEXEC; a directory only when asked for. */
static void test_regular_and_dirs(void **state)
{
	struct tree *t = *state;
	char p[PATH_MAX];
	int fd;

	at(p, t->store, "d");
	assert_int_equal(mkdir(p, 0700), 0);
	fd = lease_open_beneath(t->dfd, "d/f", O_RDWR | O_CREAT, 0600);
	assert_true(fd >= 0);
	assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	close(fd);
	assert_int_equal(lease_open_beneath(t->dfd, "d", O_RDONLY, 0), -LEASE_ENOTREG);
	fd = lease_open_beneath(t->dfd, "d", O_RDONLY | O_DIRECTORY, 0);
	assert_true(fd >= 0);
	close(fd);
	assert_true(lease_open_beneath(t->dfd, "../outside", O_RDONLY | O_DIRECTORY, 0) < 0);
}

/* A file with another hard link (fs.protected_hardlinks off lets a
 * store's owner link anything there): read, never written. */
static void test_hardlink_not_written(void **state)
{
	struct tree *t = *state;
	char p[PATH_MAX], q[PATH_MAX];
	int fd;

	at(p, t->outside, "shadow");
	at(q, t->store, "x.lock");
	fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(link(p, q), 0);
	assert_int_equal(lease_open_beneath(t->dfd, "x.lock", O_RDWR | O_CREAT, 0600),
			 -EMLINK);
	fd = lease_open_beneath(t->dfd, "x.lock", O_RDONLY, 0);
	assert_true(fd >= 0);
	close(fd);
}

/* A symlink as the first component of a path: nothing is opened, made,
 * removed or renamed where it points. */
static void test_symlink_in_the_middle(void **state)
{
	struct tree *t = *state;
	char p[PATH_MAX], q[PATH_MAX];
	struct stat st;
	int fd;

	at(p, t->store, "seg");
	assert_int_equal(symlink(t->outside, p), 0);
	at(q, t->outside, "victim.rec");
	fd = open(q, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	close(fd);
	assert_true(lease_open_beneath(t->dfd, "seg/victim.rec", O_RDONLY, 0) < 0);
	assert_true(lease_open_beneath(t->dfd, "seg/new.lock", O_RDWR | O_CREAT, 0600) < 0);
	assert_true(lease_mkdir_beneath(t->dfd, "seg/new.in", 0700) < 0);
	assert_true(lease_unlink_beneath(t->dfd, "seg/victim.rec", 0) < 0);
	fd = lease_open_beneath(t->dfd, "tmp", O_RDWR | O_CREAT, 0600);
	assert_true(fd >= 0);
	close(fd);
	assert_true(lease_rename_beneath(t->dfd, "tmp", "seg/victim.rec") < 0);
	assert_int_equal(stat(q, &st), 0);
	assert_int_equal(st.st_size, 0);
	at(q, t->outside, "new.lock");
	assert_int_equal(stat(q, &st), -1);
	at(q, t->outside, "new.in");
	assert_int_equal(stat(q, &st), -1);
}

/* The race: realpath() saw a real directory, then a component became a
 * symlink.  open(2) of the resolved path (what the stores did) lands
 * outside; lease_open_canonical_dir() refuses. */
static void test_canonical_swap(void **state)
{
	struct tree *t = *state;
	char real[PATH_MAX], moved[PATH_MAX];
	struct stat got, out;
	int fd;

	assert_non_null(realpath(t->store, real));
	fd = lease_open_canonical_dir(real, O_PATH);
	assert_true(fd >= 0);
	close(fd);
	at(moved, t->top, "store.moved");
	assert_int_equal(rename(t->store, moved), 0);
	assert_int_equal(symlink(t->outside, t->store), 0);
	assert_int_equal(lease_open_canonical_dir(real, O_PATH), -ELOOP);
	fd = open(real, O_PATH | O_DIRECTORY | O_CLOEXEC);  /* the old way */
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &got), 0);
	assert_int_equal(stat(t->outside, &out), 0);
	assert_true(got.st_ino == out.st_ino);  /* ... opened outside */
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_fifo_refused, tree_setup, tree_teardown),
		cmocka_unit_test_setup_teardown(test_regular_and_dirs, tree_setup, tree_teardown),
		cmocka_unit_test_setup_teardown(test_hardlink_not_written, tree_setup, tree_teardown),
		cmocka_unit_test_setup_teardown(test_symlink_in_the_middle, tree_setup, tree_teardown),
		cmocka_unit_test_setup_teardown(test_canonical_swap, tree_setup, tree_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
