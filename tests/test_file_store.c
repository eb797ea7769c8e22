/* SPDX-License-Identifier: MIT */
/*
 * File backend specifics, on disk: corrupt and hand-edited records, crash
 * leftovers, losses noticed without a ring, the directory layout.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sched.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <inttypes.h>
#include <openssl/evp.h>

#include "testutil.h"
#include "test_file.h"

/* ---- corrupt records ------------------------------------------------ */

static char *rec_path(struct ctx *c, const char *name, const char *sfx)
{
	char *p;

	assert_true(asprintf(&p, "%s/%s%s", c->dir, name, sfx) > 0);
	return p;
}

static size_t slurp(const char *path, char *buf, size_t sz)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	assert_true(fd >= 0);
	n = read(fd, buf, sz);
	close(fd);
	assert_true(n >= 0);
	return (size_t)n;
}

static void spit(const char *path, const char *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, buf, len), (ssize_t)len);
	close(fd);
}

enum damage { TRUNCATE_EMPTY, TRUNCATE_HALF, GARBAGE, BAD_CHECKSUM };

static size_t damage(char *buf, size_t len, enum damage how)
{
	char *ep;

	switch (how) {
	case TRUNCATE_EMPTY:
		return 0;
	case TRUNCATE_HALF:
		return len / 2;
	case GARBAGE:
		memset(buf, 'x', len);
		return len;
	case BAD_CHECKSUM:
		/* Change the epoch digit, keep the old checksum. */
		ep = strstr(buf, "\nepoch ");
		assert_non_null(ep);
		ep[7] = ep[7] == '9' ? '8' : (char)(ep[7] + 1);
		return len;
	}
	return len;
}

static void check_corrupt(struct ctx *c, const char *name, enum damage how)
{
	char orig[4096], bad[4096], now[4096];
	struct lease_err err = { 0 };
	struct lease_info info;
	struct lease *l = NULL;
	char *path = rec_path(c, name, ".rec");
	uint64_t e = fx_acquire_release(c->store, name);
	size_t olen = slurp(path, orig, sizeof(orig) - 1), blen;

	orig[olen] = '\0';
	memcpy(bad, orig, olen + 1);
	blen = damage(bad, olen, how);
	spit(path, bad, blen);

	assert_int_equal(lease_acquire(c->store, name, 0, &l, &err), -EUCLEAN);
	assert_int_equal(err.kind, LEASE_E_CORRUPT);
	assert_null(l);
	assert_non_null(strstr(err.msg, path));
	print_message("corrupt (%d): %s\n", (int)how, err.msg);
	/* A one-try acquire with a deadline also fails at once, not HELD. */
	assert_int_equal(lease_acquire(c->store, name, lease_deadline_ms(200), &l, &err),
			 -EUCLEAN);
	assert_int_equal(lease_show(c->store, name, &info, &err), -EUCLEAN);
	assert_int_equal(lease_revoke(c->store, name, lease_deadline_ms(WAIT_MS), NULL, &err),
			 -ENOENT); /* not held: the lock is free */
	/* Nothing was written. */
	assert_int_equal(slurp(path, now, sizeof(now)), blen);
	assert_memory_equal(now, bad, blen);
	/* Restored, the epoch continues from the old value. */
	spit(path, orig, olen);
	l = fx_must_acquire(c->store, name, 0);
	uint64_t got = lease_epoch(l);
	lease_free(l);
	assert_true(got > e); /* continued, not reset */
	free(path);
}

static bool file_exists(struct ctx *c, const char *name, const char *sfx)
{
	char *p = rec_path(c, name, sfx);
	bool e = access(p, F_OK) == 0;

	free(p);
	return e;
}

/*
 * A forgotten name leaves no files, and its next grant still gets a higher
 * epoch; a forget that comes after someone else took the name keeps it.
 */
void test_forget_keeps_epochs(void **state)
{
	struct ctx *c = *state;
	const char *name = "sessions/forget";
	struct lease *a = fx_must_acquire(c->store, name, 0), *b;
	uint64_t ea = lease_epoch(a);

	assert_int_equal(lease_release_forget(a, lease_deadline_ms(WAIT_MS)), 0);
	assert_false(file_exists(c, name, ".rec"));
	assert_false(file_exists(c, name, ".lock"));
	lease_free(a);
	a = fx_must_acquire(c->store, name, 0);
	assert_true(lease_epoch(a) > ea);
	assert_int_equal(lease_release(a, lease_deadline_ms(WAIT_MS)), 0);
	b = fx_must_acquire(c->store, name, 0);
	assert_int_equal(lease_release_forget(a, lease_deadline_ms(WAIT_MS)), 0);
	assert_true(file_exists(c, name, ".rec"));
	assert_false(lease_is_lost(b));
	assert_int_equal(lease_release_forget(b, lease_deadline_ms(WAIT_MS)), 0);
	assert_false(file_exists(c, name, ".rec"));
	lease_free(a);
	a = fx_must_acquire(c->store, name, 0);
	assert_true(lease_epoch(a) > lease_epoch(b));
	lease_free(a);
	lease_free(b);
}

/* The record text for `epoch` with a valid checksum (the format of
 * lease/file.c, written out independently). */
static size_t valid_record(char *buf, size_t sz, const char *name,
			   uint64_t epoch)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	int n = snprintf(buf, sz, "leasefs-lease-record v1\nname %s\nepoch %"
			 PRIu64 "\nstate free\npid 0\nholder \n", name, epoch);

	assert_true(n > 0 && (size_t)n < sz);
	assert_int_equal(EVP_Digest(buf, (size_t)n, md, &mdlen, EVP_sha256(),
				    NULL), 1);
	n += snprintf(buf + n, sz - (size_t)n, "sha256 ");
	for (unsigned i = 0; i < mdlen; i++)
		n += snprintf(buf + n, sz - (size_t)n, "%02x", md[i]);
	n += snprintf(buf + n, sz - (size_t)n, "\n");
	return (size_t)n;
}

/* An epoch at 2^64-1 is refused, never wrapped to 0 and reused. */
void test_epoch_exhausted(void **state)
{
	struct ctx *c = *state;
	const char *name = "exhausted";
	char *path = rec_path(c, name, ".rec"), rec[1024], now[1024];
	struct lease_err err = { 0 };
	struct lease *l = NULL;
	size_t len;

	fx_acquire_release(c->store, name);
	len = valid_record(rec, sizeof(rec), name, UINT64_MAX - 1);
	spit(path, rec, len);
	l = fx_must_acquire(c->store, name, 0);
	assert_true(lease_epoch(l) == UINT64_MAX);
	lease_free(l);
	l = NULL;
	assert_int_equal(lease_acquire(c->store, name, 0, &l, &err), -EUCLEAN);
	assert_int_equal(err.kind, LEASE_E_CORRUPT);
	assert_non_null(strstr(err.msg, "2^64-1"));
	assert_null(l);
	len = slurp(path, now, sizeof(now) - 1);
	now[len] = '\0';
	assert_non_null(strstr(now, "\nepoch 18446744073709551615\n"));
	free(path);
}

void test_corrupt_truncated_empty(void **state)
{
	check_corrupt(*state, "corrupt/empty", TRUNCATE_EMPTY);
}

void test_corrupt_truncated_half(void **state)
{
	check_corrupt(*state, "corrupt/half", TRUNCATE_HALF);
}

void test_corrupt_garbage(void **state)
{
	check_corrupt(*state, "corrupt/garbage", GARBAGE);
}

void test_corrupt_bad_checksum(void **state)
{
	check_corrupt(*state, "corrupt/checksum", BAD_CHECKSUM);
}

/* A record for another name copied over ours is corrupt, not adopted. */
void test_corrupt_wrong_name(void **state)
{
	struct ctx *c = *state;
	char buf[4096];
	struct lease_err err = { 0 };
	struct lease *l = NULL;
	char *a = rec_path(c, "swap/a", ".rec"), *b = rec_path(c, "swap/b", ".rec");

	fx_acquire_release(c->store, "swap/a");
	fx_acquire_release(c->store, "swap/b");
	spit(b, buf, slurp(a, buf, sizeof(buf)));
	assert_int_equal(lease_acquire(c->store, "swap/b", 0, &l, &err), -EUCLEAN);
	assert_int_equal(err.kind, LEASE_E_CORRUPT);
	free(a);
	free(b);
}

/* ---- crash leftovers ------------------------------------------------ */

void test_leftover_tmp_ignored(void **state)
{
	struct ctx *c = *state;
	const char *name = "crash/tmp";
	char buf[4096];
	char *rec = rec_path(c, name, ".rec"), *tmp = rec_path(c, name, ".rec.tmp");
	struct stat sb;
	uint64_t e = fx_acquire_release(c->store, name);
	size_t n = slurp(rec, buf, sizeof(buf));

	/* A crash mid-write leaves a partial tmp file next to the record. */
	spit(tmp, buf, n / 3);
	struct lease *l = fx_must_acquire(c->store, name, 0);
	uint64_t got = lease_epoch(l);
	lease_free(l);
	assert_true(got > e); /* continued, not reset */
	/* A complete but never renamed tmp (crash before rename) is ignored too. */
	fx_acquire_release(c->store, name);
	n = slurp(rec, buf, sizeof(buf));
	spit(tmp, buf, n);
	spit(rec, "", 0);
	assert_int_equal(stat(tmp, &sb), 0);
	struct lease_err err = { 0 };
	assert_int_equal(lease_acquire(c->store, name, 0, &l, &err), -EUCLEAN);
	spit(rec, buf, n);
	l = fx_must_acquire(c->store, name, 0);
	got = lease_epoch(l);
	lease_free(l);
	assert_int_equal(got, e + 3);
	/* A grant is never left behind as a tmp file. */
	assert_int_equal(stat(tmp, &sb), -1);
	free(rec);
	free(tmp);
}

/* ---- loss without a ring -------------------------------------------- */

/* A record damaged or removed by hand (nobody rings) is noticed by the
 * holder's sweep. */
static void check_hand_edit(struct ctx *c, const char *name, bool remove)
{
	struct lease *l = fx_must_acquire(c->store, name, 0);
	char *path = rec_path(c, name, ".rec");

	if (remove)
		assert_int_equal(unlink(path), 0);
	else
		spit(path, "garbage\n", 8);
	if (!tu_wait_readable(lease_loss_fd(l), WAIT_MS))
		fail_msg("%s record: loss did not fire", remove ? "removed" : "damaged");
	assert_int_equal(lease_loss_reason(l), LEASE_LOSS_STORE);
	lease_free(l);
	free(path);
}

void test_hand_edits_noticed(void **state)
{
	check_hand_edit(*state, "hand/damaged", false);
	check_hand_edit(*state, "hand/removed", true);
}

/*
 * Steps of no_inotify_child(); its exit code is the step that failed.
 * 77: no user namespace to be had here.
 */
enum { NI_OK, NI_LIMIT, NI_OPEN, NI_ACQUIRE, NI_REVOKE, NI_LOSS, NI_SLOW,
       NI_WAITER, NI_REACQUIRE, NI_SKIP = 77 };

static int deny_inotify(void)
{
	int fd;

	if (unshare(CLONE_NEWUSER) < 0)
		return NI_SKIP;
	if (tu_write_file("/proc/self/setgroups", "deny") < 0 ||
	    tu_write_file("/proc/self/uid_map", "0 0 1") < 0 ||
	    tu_write_file("/proc/self/gid_map", "0 0 1") < 0 ||
	    tu_write_file("/proc/sys/user/max_inotify_instances", "0") < 0)
		return NI_SKIP;
	fd = inotify_init1(IN_CLOEXEC);
	if (fd >= 0 || errno != EMFILE)
		return NI_LIMIT;
	return NI_OK;
}

static void *release_soon(void *arg)
{
	struct lease *l = arg;

	lease_release(l, lease_deadline_ms(WAIT_MS));
	return NULL;
}

/* A holder that acknowledges loss: released once its loss fires. */
static void *release_on_loss(void *arg)
{
	struct lease *l = arg;

	if (tu_wait_readable(lease_loss_fd(l), WAIT_MS))
		lease_release(l, lease_deadline_ms(WAIT_MS));
	return NULL;
}

/* Grant, revoke (loss at once, through the bell), fence, and a waiting
 * acquire, all in a user namespace allowed no inotify instance. */
static int no_inotify_child(const char *uri)
{
	struct lease_store *a = NULL, *b = NULL;
	enum lease_fence fence = LEASE_FENCE_PENDING;
	struct lease *l = NULL, *w = NULL;
	int64_t t0;
	pthread_t thr;
	int r = deny_inotify();

	if (r != NI_OK)
		return r;
	if (lease_store_open(uri, NULL, &a, NULL) < 0 ||
	    lease_store_open(uri, NULL, &b, NULL) < 0)
		return NI_OPEN;
	if (lease_acquire(a, "noino/ws", 0, &l, NULL) < 0)
		return NI_ACQUIRE;
	t0 = lease_now_ns();
	if (lease_revoke(b, "noino/ws", lease_deadline_ms(WAIT_MS), NULL, NULL) < 0)
		return NI_REVOKE;
	if (!tu_wait_readable(lease_loss_fd(l), WAIT_MS) ||
	    lease_loss_reason(l) != LEASE_LOSS_REVOKED)
		return NI_LOSS;
	/* Well under the 1 s sweep: the bell rang. */
	if (lease_now_ns() - t0 > 500 * 1000000LL)
		return NI_SLOW;
	/* A successor waits (polling: no instance) until the holder lets go. */
	if (pthread_create(&thr, NULL, release_soon, l) != 0)
		return NI_WAITER;
	r = lease_acquire(b, "noino/ws", lease_deadline_ms(WAIT_MS), &w, NULL);
	pthread_join(thr, NULL);
	if (r < 0 || lease_epoch(w) != lease_epoch(l) + 2)
		return NI_REACQUIRE;
	/* The revoker's wait for the fence also works by polling. */
	if (pthread_create(&thr, NULL, release_on_loss, w) != 0)
		return NI_WAITER;
	r = lease_revoke(a, "noino/ws", lease_deadline_ms(WAIT_MS), &fence, NULL);
	pthread_join(thr, NULL);
	if (r < 0 || fence != LEASE_FENCE_ACKED)
		return NI_REVOKE;
	lease_free(w);
	lease_free(l);
	lease_store_close(a);
	lease_store_close(b);
	return NI_OK;
}

void test_without_inotify(void **state)
{
	struct ctx *c = *state;
	int st = 0;
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0)
		_exit(no_inotify_child(c->uri));
	c->kids[0] = pid;
	assert_true(fx_wait_child(pid, 4 * WAIT_MS, &st));
	c->kids[0] = 0;
	assert_true(WIFEXITED(st));
	if (WEXITSTATUS(st) == NI_SKIP)
		skip();
	if (WEXITSTATUS(st) != NI_OK)
		fail_msg("without inotify: step %d failed", WEXITSTATUS(st));
}

/* ---- layout --------------------------------------------------------- */

static int count_cb(const struct lease_info *info, void *ud)
{
	if (strcmp(info->name, "deep/a/b/c") == 0)
		++*(int *)ud;
	return 0;
}

void test_nested_names_and_files(void **state)
{
	struct ctx *c = *state;
	struct lease *l = fx_must_acquire(c->store, "deep/a/b/c", 0);
	char *lock = rec_path(c, "deep/a/b/c", ".lock"), *rec = rec_path(c, "deep/a/b/c", ".rec");
	struct stat sb, sd;
	int n = 0;

	assert_int_equal(stat(lock, &sb), 0);
	assert_int_equal(stat(rec, &sb), 0);
	assert_int_equal(stat(c->dir, &sd), 0);
	assert_int_equal(sd.st_mode & 0777, 0700);
	assert_int_equal(lease_list(c->store, count_cb, &n, NULL), 0);
	assert_int_equal(n, 1);
	ino_t ino;
	assert_int_equal(stat(lock, &sb), 0);
	ino = sb.st_ino;
	/* The holder's bell is a socket beside the record, gone at release. */
	char *bell = rec_path(c, "deep/a/b/c", ".bell");
	assert_int_equal(lstat(bell, &sb), 0);
	assert_true(S_ISSOCK(sb.st_mode));
	lease_free(l);
	assert_int_equal(lstat(bell, &sb), -1);
	free(bell);
	/* The lock file is never replaced or deleted. */
	assert_int_equal(stat(lock, &sb), 0);
	assert_int_equal(sb.st_ino, ino);
	free(lock);
	free(rec);
}

/* A store directory that cannot be created is UNREACHABLE. */
void test_bad_directory(void **state)
{
	struct ctx *c = *state;
	struct lease_store *st = NULL;
	struct lease_err err = { 0 };
	char *file = rec_path(c, "plainfile", ""), *uri;

	spit(file, "x", 1);
	assert_true(asprintf(&uri, "file:%s/sub", file) > 0);
	assert_int_equal(lease_store_open(uri, NULL, &st, &err), -EHOSTUNREACH);
	assert_int_equal(err.kind, LEASE_E_UNREACHABLE);
	assert_null(st);
	free(uri);
	free(file);
}
