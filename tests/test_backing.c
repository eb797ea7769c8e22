/* SPDX-License-Identifier: MIT */
/*
 * The backing core alone, over a temp dir: its operations called directly
 * (core.h), with no FUSE request, reply or libfuse at all.  What acting as
 * a caller leaves on the thread (nothing) and the admission re-check are
 * tested here; what the FUSE front end adds (INIT, how opens are served,
 * the gate over its table) is test_passthrough's.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cmocka.h>

#include "core.h"
#include "testutil.h"

/* ---- fixture ------------------------------------------------------------- */

struct fx {
	char *root;
	struct lfs *fs;
	struct caller me;            /* the test process, umask 022 */
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	struct lfs_config cfg = { .entry_timeout = 1, .attr_timeout = 1 };

	assert_non_null(f);
	/* As the daemon's process setup does: a privileged core refuses to
	 * run with supplementary groups of its own. */
	if (geteuid() == 0)
		assert_int_equal(setgroups(0, NULL), 0);
	f->root = tu_mkdtemp("core");
	cfg.root = f->root;
	assert_int_equal(core_new(&cfg, &f->fs), 0);
	f->me = (struct caller){ .uid = geteuid(), .gid = getegid(),
				 .pid = getpid(), .umask = 022 };
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	core_free(f->fs);
	tu_rmrf(f->root);
	free(f->root);
	free(f);
	return 0;
}

static char *backing(struct fx *f, const char *name)
{
	static char p[PATH_MAX];

	snprintf(p, sizeof(p), "%s/%s", f->root, name);
	return p;
}

static void put_file(struct fx *f, const char *name, const char *text)
{
	FILE *fp = fopen(backing(f, name), "we");

	assert_non_null(fp);
	fputs(text, fp);
	assert_int_equal(fclose(fp), 0);
}

/* `name` in the root, looked up as the test process: its record. */
static struct lfs_inode *lookup(struct fx *f, const char *name)
{
	struct lfs_entry e;
	int rc = core_lookup(f->fs, &f->fs->root, name, &f->me, &e);

	if (rc < 0)
		fail_msg("lookup %s: %d", name, rc);
	return e.inode;
}

/* ---- names ---------------------------------------------------------------- */

/* A name resolves to its inode, twice to the same record; a missing name
 * is ENOENT; the dots are refused. */
static void test_lookup(void **state)
{
	struct fx *f = *state;
	struct lfs_entry e;
	struct stat st;
	struct lfs_inode *a;

	put_file(f, "f", "x");
	assert_int_equal(stat(backing(f, "f"), &st), 0);
	assert_int_equal(core_lookup(f->fs, &f->fs->root, "f", &f->me, &e), 0);
	assert_int_equal(e.st.st_ino, st.st_ino);
	a = e.inode;
	assert_ptr_equal(lookup(f, "f"), a);
	assert_int_equal(core_lookup(f->fs, &f->fs->root, "missing", &f->me, &e),
			 -ENOENT);
	assert_int_equal(core_lookup(f->fs, &f->fs->root, "..", &f->me, &e),
			 -EINVAL);
	assert_int_equal(table_unref(f->fs, a, 2), 0);
}

/* A create of a name the kernel thought absent but that exists (a file,
 * or a symlink planted out of ROOT) is ESTALE, and touches nothing; a new
 * name is created with the caller's umask and opened. */
static void test_create_estale(void **state)
{
	struct fx *f = *state;
	char outside[PATH_MAX];
	struct lfs_entry e;
	struct lfs_open o;
	struct stat st;

	put_file(f, "exists", "old");
	snprintf(outside, sizeof(outside), "%s.outside", f->root);
	assert_int_equal(symlink(outside, backing(f, "planted")), 0);
	assert_int_equal(core_create(f->fs, &f->fs->root, "exists", 0644,
				     O_WRONLY | O_CREAT, &f->me, NULL, &e, &o),
			 -ESTALE);
	assert_int_equal(core_create(f->fs, &f->fs->root, "planted", 0644,
				     O_WRONLY | O_CREAT, &f->me, NULL, &e, &o),
			 -ESTALE);
	assert_int_equal(lstat(outside, &st), -1); /* nothing made outside */
	assert_int_equal(core_create(f->fs, &f->fs->root, "exists", 0644,
				     O_WRONLY | O_CREAT | O_EXCL, &f->me, NULL,
				     &e, &o), -EEXIST);
	assert_int_equal(core_create(f->fs, &f->fs->root, "new", 0666,
				     O_WRONLY | O_CREAT, &f->me, NULL, &e, &o), 0);
	assert_int_equal(stat(backing(f, "new"), &st), 0);
	assert_int_equal(st.st_mode & 07777, 0644);
	assert_int_equal(e.st.st_ino, st.st_ino);
	core_release(f->fs, &o);
	table_unref(f->fs, e.inode, 1);
	/* Every failed create gave its place in the budget back. */
	assert_int_equal(f->fs->open_total, 0);
}

/* rename moves the backing name; NOREPLACE onto an existing name is
 * EEXIST, and flags the core does not know are EINVAL. */
static void test_rename(void **state)
{
	struct fx *f = *state;
	struct lfs_inode *r = &f->fs->root;
	struct stat st;

	put_file(f, "a", "1");
	put_file(f, "c", "3");
	assert_int_equal(core_rename(f->fs, r, "a", r, "b", 0, &f->me, NULL), 0);
	assert_int_equal(stat(backing(f, "a"), &st), -1);
	assert_int_equal(stat(backing(f, "b"), &st), 0);
	assert_int_equal(core_rename(f->fs, r, "b", r, "c", RENAME_NOREPLACE,
				     &f->me, NULL), -EEXIST);
	assert_int_equal(core_rename(f->fs, r, "b", r, "d", RENAME_WHITEOUT,
				     &f->me, NULL), -EINVAL);
	assert_int_equal(stat(backing(f, "b"), &st), 0);
	assert_int_equal(core_unlink(f->fs, r, "b", &f->me, NULL), 0);
	assert_int_equal(stat(backing(f, "b"), &st), -1);
}

/* ---- attributes ----------------------------------------------------------- */

/* setattr changes the backing file and answers its new attributes. */
static void test_setattr(void **state)
{
	struct fx *f = *state;
	struct stat want = { .st_mode = 0600, .st_size = 1 }, st, got;
	struct lfs_inode *ino;

	put_file(f, "s", "abcdef");
	ino = lookup(f, "s");
	assert_int_equal(core_setattr(f->fs, ino, -1, &want, SET_MODE | SET_SIZE,
				      false, &f->me, NULL, &got), 0);
	assert_int_equal(got.st_mode & 07777, 0600);
	assert_int_equal(got.st_size, 1);
	assert_int_equal(stat(backing(f, "s"), &st), 0);
	assert_int_equal(st.st_mode & 07777, 0600);
	assert_int_equal(st.st_size, 1);
	table_unref(f->fs, ino, 1);
}

/* ---- open files ----------------------------------------------------------- */

/* A write from memory and one from a pipe land at their offsets; the
 * kernel's write-back of mapped pages does too on an O_APPEND file. */
static void test_write(void **state)
{
	struct fx *f = *state;
	struct iovec iov = { .iov_base = "AB", .iov_len = 2 };
	struct write_src mem = { .iov = &iov, .iovcnt = 1, .pipe_fd = -1,
				 .len = 2 };
	struct write_src pipe_src = { .pipe_fd = -1, .len = 2 };
	struct lfs_inode *ino;
	struct lfs_open o;
	bool changed;
	char buf[16] = { 0 };
	int p[2];

	put_file(f, "w", "0123456789");
	ino = lookup(f, "w");
	assert_int_equal(core_open(f->fs, ino, O_WRONLY, false, &f->me, NULL, &o,
				   &changed), 0);
	assert_int_equal(core_write(f->fs, o.fd, &mem, 2, false, false, &f->me,
				    NULL, &changed), 2);
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	assert_int_equal(write(p[1], "cd", 2), 2);
	pipe_src.pipe_fd = p[0];
	assert_int_equal(core_write(f->fs, o.fd, &pipe_src, 6, false, false,
				    &f->me, NULL, &changed), 2);
	core_release(f->fs, &o);
	assert_int_equal(core_open(f->fs, ino, O_WRONLY | O_APPEND, false, &f->me,
				   NULL, &o, &changed), 0);
	assert_int_equal(write(p[1], "xy", 2), 2);
	assert_int_equal(core_write(f->fs, o.fd, &pipe_src, 0, true, false,
				    &f->me, NULL, &changed), 2);
	core_release(f->fs, &o);
	close(p[0]);
	close(p[1]);
	assert_int_equal(core_open(f->fs, ino, O_RDONLY, false, &f->me, NULL, &o,
				   &changed), 0);
	assert_int_equal(core_read(o.fd, buf, sizeof(buf), 0), 10);
	assert_memory_equal(buf, "xyAB45cd89", 10);
	core_release(f->fs, &o);
	table_unref(f->fs, ino, 1);
}

/* ---- directories and xattrs ----------------------------------------------- */

/* A listing that takes `room` entries per call. */
struct dir_sink {
	struct lfs *fs;
	int room, names, dots;
};

static int take(struct dir_sink *k, const struct dirent *de,
		const struct lfs_entry *e)
{
	if (k->room == 0) {
		if (e)
			table_unref(k->fs, e->inode, 1);
		return 1;
	}
	k->room--;
	if (is_dot(de->d_name)) {
		assert_null(e);
		k->dots++;
	} else {
		assert_non_null(e);
		table_unref(k->fs, e->inode, 1);
		k->names++;
	}
	return 0;
}

/* A stream lists every name once, two entries per call; readdirplus's
 * lookups skip the dots. */
static void test_readdir(void **state)
{
	struct fx *f = *state;
	struct dir_sink k = { .fs = f->fs };
	struct lfs_dir *d;
	int calls = 0;

	put_file(f, "one", "1");
	put_file(f, "two", "2");
	put_file(f, "three", "3");
	assert_int_equal(core_opendir(f->fs, &f->fs->root, &f->me, &d), 0);
	do {
		k.room = 2;
		assert_int_equal(core_readdir(f->fs, d, d->offset, true, &f->me,
					      take, &k), 0);
		calls++;
	} while (k.room == 0);
	assert_int_equal(k.names, 3);
	assert_int_equal(k.dots, 2);
	assert_int_equal(calls, 3);
	core_releasedir(f->fs, d);
	assert_int_equal(f->fs->open_total, 0);
}

/* An xattr set through the core reads back, its size first. */
static void test_xattr(void **state)
{
	struct fx *f = *state;
	struct lfs_inode *ino;
	char buf[8] = { 0 };
	ssize_t n;

	put_file(f, "x", "");
	ino = lookup(f, "x");
	n = core_setxattr(f->fs, ino, "user.k", "val", 3, 0, &f->me, NULL);
	if (n == -EOPNOTSUPP) {
		table_unref(f->fs, ino, 1);
		skip();
	}
	assert_int_equal(n, 0);
	assert_int_equal(core_getxattr(f->fs, ino, "user.k", NULL, 0, &f->me), 3);
	assert_int_equal(core_getxattr(f->fs, ino, "user.k", buf, sizeof(buf),
				       &f->me), 3);
	assert_string_equal(buf, "val");
	assert_int_equal(core_removexattr(f->fs, ino, "user.k", &f->me, NULL), 0);
	assert_int_equal(core_getxattr(f->fs, ino, "user.k", NULL, 0, &f->me),
			 -ENODATA);
	table_unref(f->fs, ino, 1);
}

/* ---- the admission ------------------------------------------------------- */

static int rechecks;
static int recheck_result;

static int fake_recheck(const struct gate *g)
{
	(void)g;
	rechecks++;
	return recheck_result;
}

/* A mutation whose admission no longer holds is refused right before its
 * backing call and changes nothing; one that holds is checked once. */
static void test_admission(void **state)
{
	struct fx *f = *state;
	struct admission adm = { .recheck = fake_recheck };
	struct lfs_inode *r = &f->fs->root;
	struct lfs_entry e;
	struct lfs_open o;
	struct stat st;

	put_file(f, "keep", "k");
	recheck_result = -EROFS;
	rechecks = 0;
	assert_int_equal(core_unlink(f->fs, r, "keep", &f->me, &adm), -EROFS);
	assert_int_equal(core_make(f->fs, r, "d", S_IFDIR | 0755, 0, NULL,
				   &f->me, &adm, &e), -EROFS);
	assert_int_equal(core_rename(f->fs, r, "keep", r, "k2", 0, &f->me, &adm),
			 -EROFS);
	assert_int_equal(core_create(f->fs, r, "c", 0644, O_WRONLY | O_CREAT,
				     &f->me, &adm, &e, &o), -EROFS);
	assert_int_equal(rechecks, 4);
	assert_int_equal(stat(backing(f, "keep"), &st), 0);
	assert_int_equal(stat(backing(f, "d"), &st), -1);
	assert_int_equal(stat(backing(f, "c"), &st), -1);
	assert_int_equal(f->fs->open_total, 0);

	recheck_result = 0;
	rechecks = 0;
	assert_int_equal(core_unlink(f->fs, r, "keep", &f->me, &adm), 0);
	assert_int_equal(rechecks, 1);
}

/* ---- acting as the caller ------------------------------------------------ */

/* A process with supplementary groups (4242, 4243) set, waiting until
 * the test closes *release: its pid. */
static pid_t grouped_child(int *release)
{
	static const gid_t groups[] = { 4242, 4243 };
	int go[2], ready[2];
	pid_t pid;
	char c;

	assert_int_equal(pipe2(go, O_CLOEXEC), 0);
	assert_int_equal(pipe2(ready, O_CLOEXEC), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(go[1]);
		close(ready[0]);
		if (setgroups(2, groups) < 0)
			_exit(1);
		close(ready[1]);
		(void)!read(go[0], &c, 1);
		_exit(0);
	}
	close(go[0]);
	close(ready[1]);
	/* EOF once the child set its groups (or died). */
	assert_int_equal(read(ready[0], &c, 1), 0);
	close(ready[0]);
	*release = go[1];
	return pid;
}

/* The thread's groups (the raw syscall: this thread's own). */
static long thread_groups_count(void)
{
	return syscall(SYS_getgroups, 0, NULL);
}

/*
 * A backing call made for a caller runs with its fsuid, fsgid and groups
 * (a directory only group 4243 may write, a file owned by the caller's
 * uid), and afterwards the thread is the daemon again: fsuid, fsgid,
 * groups and umask as before.
 */
static void test_identity_scoped(void **state)
{
	struct fx *f = *state;
	struct lfs_inode *dir;
	struct lfs_entry e;
	struct stat st;
	int release, status;
	pid_t child;
	mode_t um;

	if (geteuid() != 0)
		skip();
	child = grouped_child(&release);
	assert_int_equal(mkdir(backing(f, "g"), 0070), 0);
	assert_int_equal(chown(backing(f, "g"), 0, 4243), 0);
	assert_int_equal(chmod(backing(f, "g"), 0070), 0);
	dir = lookup(f, "g");
	struct caller them = { .uid = 65534, .gid = 65534, .pid = child,
			       .umask = 077 };

	um = umask(022);
	assert_int_equal(core_make(f->fs, dir, "made", S_IFREG | 0666, 0, NULL,
				   &them, NULL, &e), 0);
	assert_int_equal(stat(backing(f, "g/made"), &st), 0);
	assert_int_equal(st.st_uid, 65534);
	assert_int_equal(st.st_mode & 07777, 0600);   /* their umask */
	/* The daemon again. */
	assert_int_equal(setfsuid((uid_t)-1), 0);
	assert_int_equal(setfsgid((gid_t)-1), getegid());
	assert_int_equal(thread_groups_count(), 0);
	assert_int_equal(umask(um), 022);
	/* Without the groups, the same caller may not write there. */
	them.pid = getpid();
	assert_int_equal(core_make(f->fs, dir, "not", S_IFREG | 0666, 0, NULL,
				   &them, NULL, &e), -EACCES);
	table_unref(f->fs, dir, 1);
	close(release);
	assert_int_equal(waitpid(child, &status, 0), child);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_lookup, setup, teardown),
		cmocka_unit_test_setup_teardown(test_create_estale, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rename, setup, teardown),
		cmocka_unit_test_setup_teardown(test_setattr, setup, teardown),
		cmocka_unit_test_setup_teardown(test_write, setup, teardown),
		cmocka_unit_test_setup_teardown(test_readdir, setup, teardown),
		cmocka_unit_test_setup_teardown(test_xattr, setup, teardown),
		cmocka_unit_test_setup_teardown(test_admission, setup, teardown),
		cmocka_unit_test_setup_teardown(test_identity_scoped, setup, teardown),
	};

	return cmocka_run_group_tests_name("backing", tests, NULL, NULL);
}
