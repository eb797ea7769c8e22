/* SPDX-License-Identifier: MIT */
/*
 * File backend specifics: epochs across restarts, process races, kill -9
 * reclaim, revoke-to-loss latency, corrupt records, crash leftovers.
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

#define WAIT_MS 5000 /* bound for every awaited event */

#define NPROC 12

/* Children still to be reaped; teardown kills them if a test failed. */
struct ctx {
	struct lease_store *store;
	char *dir;
	char uri[1100];
	pid_t kids[NPROC];
};

static void kill_child(pid_t pid);

static int setup(void **state)
{
	struct ctx *c = calloc(1, sizeof(*c));

	assert_non_null(c);
	c->store = tu_open_store("file", &c->dir);
	snprintf(c->uri, sizeof(c->uri), "%s", tu_last_uri());
	*state = c;
	return 0;
}

static int teardown(void **state)
{
	struct ctx *c = *state;

	for (int i = 0; i < NPROC; i++)
		kill_child(c->kids[i]);
	lease_store_close(c->store);
	tu_rmrf(c->dir);
	free(c->dir);
	free(c);
	return 0;
}

static struct lease_store *open_uri(const char *uri)
{
	struct lease_store *st = NULL;
	struct lease_err err = { 0 };

	if (lease_store_open(uri, NULL, &st, &err) < 0)
		fail_msg("open %s: %s", uri, err.msg);
	return st;
}

static struct lease *must_acquire(struct lease_store *st, const char *name,
				  int64_t deadline)
{
	struct lease_err err = { 0 };
	struct lease *l = NULL;

	if (lease_acquire(st, name, deadline, &l, &err) < 0)
		fail_msg("acquire %s: %s: %s", name, lease_errkind_str(err.kind),
			 err.msg);
	return l;
}

static uint64_t acquire_release(struct lease_store *st, const char *name)
{
	struct lease *l = must_acquire(st, name, 0);
	uint64_t e = lease_epoch(l);

	assert_int_equal(lease_release(l, lease_deadline_ms(WAIT_MS)), 0);
	lease_free(l);
	return e;
}

/* ---- child processes ------------------------------------------------ */

/* Wait up to timeout_ms for pid to exit; true with *status if it did. */
static bool wait_child(pid_t pid, int timeout_ms, int *status)
{
	int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
	pid_t r;

	if (pfd >= 0) {
		bool ready = tu_wait_readable(pfd, timeout_ms);

		close(pfd);
		if (!ready)
			return false;
		do
			r = waitpid(pid, status, 0);
		while (r < 0 && errno == EINTR);
		return r == pid;
	}
	/* No pidfd: bounded WNOHANG polling. */
	for (int64_t dl = lease_deadline_ms(timeout_ms);;) {
		r = waitpid(pid, status, WNOHANG);
		if (r == pid)
			return true;
		if (r < 0 || lease_deadline_passed(dl))
			return false;
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
}

static void kill_child(pid_t pid)
{
	int st;

	if (pid <= 0)
		return;
	kill(pid, SIGKILL);
	wait_child(pid, WAIT_MS, &st);
}

/* Read exactly len bytes within timeout_ms. */
static bool read_full(int fd, void *buf, size_t len, int timeout_ms)
{
	int64_t dl = lease_deadline_ms(timeout_ms);
	size_t n = 0;

	while (n < len) {
		int left = (int)((dl - lease_now_ns()) / 1000000);

		if (left <= 0 || !tu_wait_readable(fd, left))
			return false;
		ssize_t k = read(fd, (char *)buf + n, len - n);
		if (k <= 0)
			return false;
		n += (size_t)k;
	}
	return true;
}

/* ---- restart -------------------------------------------------------- */

static void test_epoch_survives_restart(void **state)
{
	struct ctx *c = *state;
	const char *name = "restart/ws";
	uint64_t e1 = acquire_release(c->store, name);
	uint64_t e2 = acquire_release(c->store, name);

	assert_true(e2 > e1);
	lease_store_close(c->store);
	c->store = open_uri(c->uri);
	uint64_t e3 = acquire_release(c->store, name);
	assert_true(e3 > e2);
	/* A holder that never released (store closed under it) also counts. */
	struct lease *l = must_acquire(c->store, name, 0);
	uint64_t e4 = lease_epoch(l);
	lease_free(l);
	lease_store_close(c->store);
	c->store = open_uri(c->uri);
	assert_true(acquire_release(c->store, name) > e4);
	assert_string_equal(lease_store_local_dir(c->store), c->dir);
}

/* ---- 12 processes --------------------------------------------------- */

struct result {
	int rc;
	int kind;
	uint64_t epoch; /* winner: its epoch; loser: the reported holder epoch */
};

/* Child: wait for the start signal, try once, report, winners hold until
 * the parent closes `hold`. */
static void racer_child(const char *uri, const char *name, int go, int res,
			int hold)
{
	struct lease_store *st = NULL;
	struct lease *l = NULL;
	struct lease_err err = { 0 };
	struct result out = { 0 };
	char b;

	if (read(go, &b, 1) < 0)
		_exit(3);
	if (lease_store_open(uri, NULL, &st, &err) < 0)
		_exit(4);
	out.rc = lease_acquire(st, name, 0, &l, &err);
	out.kind = out.rc ? (int)err.kind : 0;
	out.epoch = out.rc ? err.holder_epoch : lease_epoch(l);
	if (write(res, &out, sizeof(out)) != sizeof(out))
		_exit(5);
	if (read(hold, &b, 1) < 0)
		_exit(6);
	lease_free(l);
	lease_store_close(st);
	_exit(0);
}

static void test_concurrent_processes(void **state)
{
	struct ctx *c = *state;
	const char *name = "race/procs";
	int go[2], hold[2], res[NPROC][2];
	pid_t pids[NPROC] = { 0 };
	struct result r[NPROC];
	int wins = 0, winner = -1;

	assert_int_equal(pipe2(go, O_CLOEXEC), 0);
	assert_int_equal(pipe2(hold, O_CLOEXEC), 0);
	for (int i = 0; i < NPROC; i++) {
		assert_int_equal(pipe2(res[i], O_CLOEXEC), 0);
		pids[i] = fork();
		assert_true(pids[i] >= 0);
		c->kids[i] = pids[i];
		if (pids[i] == 0) {
			close(go[1]);
			close(hold[1]);
			racer_child(c->uri, name, go[0], res[i][1], hold[0]);
		}
		close(res[i][1]);
	}
	close(go[0]);
	close(hold[0]);
	close(go[1]); /* start everyone at once */
	for (int i = 0; i < NPROC; i++) {
		bool ok = read_full(res[i][0], &r[i], sizeof(r[i]), WAIT_MS);

		close(res[i][0]);
		if (!ok)
			fail_msg("racer %d reported nothing", i);
	}
	for (int i = 0; i < NPROC; i++) {
		if (r[i].rc == 0) {
			wins++;
			winner = i;
		} else if (r[i].rc != -EBUSY || r[i].kind != LEASE_E_HELD) {
			wins = -100;
		}
	}
	close(hold[1]); /* winner releases and everyone exits */
	for (int i = 0; i < NPROC; i++) {
		int st = 0;

		if (!wait_child(pids[i], WAIT_MS, &st))
			fail_msg("racer %d did not exit", i);
		c->kids[i] = 0;
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	assert_int_equal(wins, 1);
	for (int i = 0; i < NPROC; i++)
		if (i != winner)
			assert_int_equal(r[i].epoch, r[winner].epoch);
	assert_true(acquire_release(c->store, name) > r[winner].epoch);
}

/* ---- kill -9 -------------------------------------------------------- */

static void holder_child(const char *uri, const char *name, int res)
{
	struct lease_store *st = NULL;
	struct lease *l = NULL;
	struct lease_err err = { 0 };
	uint64_t e;

	if (lease_store_open(uri, NULL, &st, &err) < 0 ||
	    lease_acquire(st, name, 0, &l, &err) < 0)
		_exit(4);
	e = lease_epoch(l);
	if (write(res, &e, sizeof(e)) != sizeof(e))
		_exit(5);
	for (;;)
		pause();
}

static void test_kill9_reclaims_at_once(void **state)
{
	struct ctx *c = *state;
	const char *name = "crash/holder";
	struct lease_err err = { 0 };
	struct lease_info info;
	struct lease *l = NULL;
	uint64_t e = 0, before = acquire_release(c->store, name);
	int res[2], st = 0;
	pid_t pid;

	assert_int_equal(pipe2(res, O_CLOEXEC), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		holder_child(c->uri, name, res[1]);
	c->kids[0] = pid;
	close(res[1]);
	bool got = read_full(res[0], &e, sizeof(e), WAIT_MS);
	close(res[0]);
	if (!got)
		fail_msg("holder child did not report");
	assert_true(e > before);
	int r = lease_acquire(c->store, name, 0, &l, &err);
	if (r != -EBUSY || err.holder_epoch != e)
		fail_msg("expected HELD at %llu, got %d (%s) epoch %llu",
			 (unsigned long long)e, r, err.msg,
			 (unsigned long long)err.holder_epoch);
	assert_int_equal(lease_show(c->store, name, &info, &err), 0);
	assert_int_equal(info.state, LEASE_STATE_HELD);
	assert_int_equal(info.holder_pid, pid);
	assert_int_equal(kill(pid, SIGKILL), 0);
	if (!wait_child(pid, WAIT_MS, &st))
		fail_msg("holder child did not die");
	c->kids[0] = 0;
	assert_true(WIFSIGNALED(st));
	/* The record still says held, but the lock died with the holder. */
	assert_int_equal(lease_show(c->store, name, &info, &err), 0);
	assert_int_equal(info.state, LEASE_STATE_FREE);
	int64_t t0 = lease_now_ns();
	l = must_acquire(c->store, name, 0); /* one try */
	print_message("kill -9 reclaim: acquire took %.3f ms\n",
		      (lease_now_ns() - t0) / 1e6);
	assert_true(lease_epoch(l) > e);
	lease_free(l);
}

/* ---- revoke latency ------------------------------------------------- */

#define LAT_RUNS 200

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return x < y ? -1 : x > y;
}

/* Loss callback: the instant the loss notification fired. */
static void stamp_cb(struct lease *l, enum lease_loss why, void *ud)
{
	(void)l;
	(void)why;
	*(int64_t *)ud = lease_now_ns();
}

static void print_stats(const char *what, int64_t *v, int n)
{
	qsort(v, (size_t)n, sizeof(v[0]), cmp_i64);
	print_message("%s over %d runs: median %.3f ms, p99 %.3f ms, max %.3f ms\n",
		      what, n, v[n / 2] / 1e6, v[n * 99 / 100] / 1e6,
		      v[n - 1] / 1e6);
}

/*
 * The holder is in this process, the operator revokes through a second
 * store handle.  Measured: from revoke returning to the loss fd being
 * readable (the contract: < 50 ms), and from revoke being called to the
 * loss firing (includes the record's fsyncs).
 */
static void test_revoke_latency(void **state)
{
	struct ctx *c = *state;
	const char *name = "latency/ws";
	struct lease_store *op = open_uri(c->uri);
	static int64_t after_return[LAT_RUNS], from_call[LAT_RUNS];
	struct lease_err err = { 0 };

	for (int i = 0; i < LAT_RUNS; i++) {
		struct lease *l = must_acquire(c->store, name, lease_deadline_ms(WAIT_MS));
		int64_t lost_at = 0;

		lease_set_loss_cb(l, stamp_cb, &lost_at);
		int64_t called = lease_now_ns();
		if (lease_revoke(op, name, lease_deadline_ms(WAIT_MS), NULL, &err) < 0)
			fail_msg("revoke run %d: %s", i, err.msg);
		int64_t returned = lease_now_ns();
		if (!tu_wait_readable(lease_loss_fd(l), WAIT_MS))
			fail_msg("run %d: loss did not fire", i);
		int64_t readable = lease_now_ns();
		assert_int_equal(lease_loss_reason(l), LEASE_LOSS_REVOKED);
		lease_free(l); /* joins the watcher: lost_at is final */
		assert_true(lost_at >= called);
		after_return[i] = lost_at > returned ? readable - returned : 0;
		from_call[i] = lost_at - called;
		if (after_return[i] >= 50 * 1000000LL)
			fail_msg("run %d: revoke-to-loss %.3f ms >= 50 ms", i,
				 after_return[i] / 1e6);
	}
	print_stats("revoke return -> loss fd readable", after_return, LAT_RUNS);
	print_stats("revoke call -> loss fired", from_call, LAT_RUNS);
	lease_store_close(op);
}

/* Revoke from another process: the holder's watcher sees the event. */
static void test_revoke_from_process(void **state)
{
	struct ctx *c = *state;
	const char *name = "latency/proc";
	struct lease *l = must_acquire(c->store, name, 0);
	int res[2], st = 0;
	int64_t done_at = 0;
	pid_t pid;

	assert_int_equal(pipe2(res, O_CLOEXEC), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct lease_store *s = NULL;
		int64_t t;

		if (lease_store_open(c->uri, NULL, &s, NULL) < 0 ||
		    lease_revoke(s, name, lease_deadline_ms(WAIT_MS), NULL, NULL) < 0)
			_exit(4);
		t = lease_now_ns();
		_exit(write(res[1], &t, sizeof(t)) == sizeof(t) ? 0 : 5);
	}
	c->kids[0] = pid;
	close(res[1]);
	bool fired = tu_wait_readable(lease_loss_fd(l), WAIT_MS);
	int64_t lost_at = lease_now_ns();
	bool got = read_full(res[0], &done_at, sizeof(done_at), WAIT_MS);
	close(res[0]);
	bool reaped = wait_child(pid, WAIT_MS, &st);
	if (reaped)
		c->kids[0] = 0;
	assert_true(reaped);
	assert_true(got);
	assert_true(fired);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_int_equal(lease_loss_reason(l), LEASE_LOSS_REVOKED);
	print_message("cross-process revoke-to-loss: %.3f ms\n",
		      (lost_at > done_at ? lost_at - done_at : 0) / 1e6);
	assert_true(lost_at - done_at < 50 * 1000000LL);
	lease_free(l);
	l = must_acquire(c->store, name, lease_deadline_ms(WAIT_MS));
	lease_free(l);
}

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
	uint64_t e = acquire_release(c->store, name);
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
	l = must_acquire(c->store, name, 0);
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
static void test_forget_keeps_epochs(void **state)
{
	struct ctx *c = *state;
	const char *name = "sessions/forget";
	struct lease *a = must_acquire(c->store, name, 0), *b;
	uint64_t ea = lease_epoch(a);

	assert_int_equal(lease_release_forget(a, lease_deadline_ms(WAIT_MS)), 0);
	assert_false(file_exists(c, name, ".rec"));
	assert_false(file_exists(c, name, ".lock"));
	lease_free(a);
	a = must_acquire(c->store, name, 0);
	assert_true(lease_epoch(a) > ea);
	assert_int_equal(lease_release(a, lease_deadline_ms(WAIT_MS)), 0);
	b = must_acquire(c->store, name, 0);
	assert_int_equal(lease_release_forget(a, lease_deadline_ms(WAIT_MS)), 0);
	assert_true(file_exists(c, name, ".rec"));
	assert_false(lease_is_lost(b));
	assert_int_equal(lease_release_forget(b, lease_deadline_ms(WAIT_MS)), 0);
	assert_false(file_exists(c, name, ".rec"));
	lease_free(a);
	a = must_acquire(c->store, name, 0);
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
static void test_epoch_exhausted(void **state)
{
	struct ctx *c = *state;
	const char *name = "exhausted";
	char *path = rec_path(c, name, ".rec"), rec[1024], now[1024];
	struct lease_err err = { 0 };
	struct lease *l = NULL;
	size_t len;

	acquire_release(c->store, name);
	len = valid_record(rec, sizeof(rec), name, UINT64_MAX - 1);
	spit(path, rec, len);
	l = must_acquire(c->store, name, 0);
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

static void test_corrupt_truncated_empty(void **state)
{
	check_corrupt(*state, "corrupt/empty", TRUNCATE_EMPTY);
}

static void test_corrupt_truncated_half(void **state)
{
	check_corrupt(*state, "corrupt/half", TRUNCATE_HALF);
}

static void test_corrupt_garbage(void **state)
{
	check_corrupt(*state, "corrupt/garbage", GARBAGE);
}

static void test_corrupt_bad_checksum(void **state)
{
	check_corrupt(*state, "corrupt/checksum", BAD_CHECKSUM);
}

/* A record for another name copied over ours is corrupt, not adopted. */
static void test_corrupt_wrong_name(void **state)
{
	struct ctx *c = *state;
	char buf[4096];
	struct lease_err err = { 0 };
	struct lease *l = NULL;
	char *a = rec_path(c, "swap/a", ".rec"), *b = rec_path(c, "swap/b", ".rec");

	acquire_release(c->store, "swap/a");
	acquire_release(c->store, "swap/b");
	spit(b, buf, slurp(a, buf, sizeof(buf)));
	assert_int_equal(lease_acquire(c->store, "swap/b", 0, &l, &err), -EUCLEAN);
	assert_int_equal(err.kind, LEASE_E_CORRUPT);
	free(a);
	free(b);
}

/* ---- crash leftovers ------------------------------------------------ */

static void test_leftover_tmp_ignored(void **state)
{
	struct ctx *c = *state;
	const char *name = "crash/tmp";
	char buf[4096];
	char *rec = rec_path(c, name, ".rec"), *tmp = rec_path(c, name, ".rec.tmp");
	struct stat sb;
	uint64_t e = acquire_release(c->store, name);
	size_t n = slurp(rec, buf, sizeof(buf));

	/* A crash mid-write leaves a partial tmp file next to the record. */
	spit(tmp, buf, n / 3);
	struct lease *l = must_acquire(c->store, name, 0);
	uint64_t got = lease_epoch(l);
	lease_free(l);
	assert_true(got > e); /* continued, not reset */
	/* A complete but never renamed tmp (crash before rename) is ignored too. */
	acquire_release(c->store, name);
	n = slurp(rec, buf, sizeof(buf));
	spit(tmp, buf, n);
	spit(rec, "", 0);
	assert_int_equal(stat(tmp, &sb), 0);
	struct lease_err err = { 0 };
	assert_int_equal(lease_acquire(c->store, name, 0, &l, &err), -EUCLEAN);
	spit(rec, buf, n);
	l = must_acquire(c->store, name, 0);
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
	struct lease *l = must_acquire(c->store, name, 0);
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

static void test_hand_edits_noticed(void **state)
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

static void test_without_inotify(void **state)
{
	struct ctx *c = *state;
	int st = 0;
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0)
		_exit(no_inotify_child(c->uri));
	c->kids[0] = pid;
	assert_true(wait_child(pid, 4 * WAIT_MS, &st));
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

static void test_nested_names_and_files(void **state)
{
	struct ctx *c = *state;
	struct lease *l = must_acquire(c->store, "deep/a/b/c", 0);
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
static void test_bad_directory(void **state)
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_epoch_survives_restart, setup, teardown),
		cmocka_unit_test_setup_teardown(test_concurrent_processes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_kill9_reclaims_at_once, setup, teardown),
		cmocka_unit_test_setup_teardown(test_revoke_latency, setup, teardown),
		cmocka_unit_test_setup_teardown(test_revoke_from_process, setup, teardown),
		cmocka_unit_test_setup_teardown(test_epoch_exhausted, setup, teardown),
		cmocka_unit_test_setup_teardown(test_forget_keeps_epochs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_corrupt_truncated_empty, setup, teardown),
		cmocka_unit_test_setup_teardown(test_corrupt_truncated_half, setup, teardown),
		cmocka_unit_test_setup_teardown(test_corrupt_garbage, setup, teardown),
		cmocka_unit_test_setup_teardown(test_corrupt_bad_checksum, setup, teardown),
		cmocka_unit_test_setup_teardown(test_corrupt_wrong_name, setup, teardown),
		cmocka_unit_test_setup_teardown(test_leftover_tmp_ignored, setup, teardown),
		cmocka_unit_test_setup_teardown(test_nested_names_and_files, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_directory, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hand_edits_noticed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_without_inotify, setup, teardown),
	};

	return cmocka_run_group_tests_name("file-backend", tests, NULL, NULL);
}
