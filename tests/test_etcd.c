/* SPDX-License-Identifier: MIT */
/*
 * etcd backend specifics, run by tests/etcd-harness.sh against a private
 * etcd: keepalives advance safe_until; deleting the key or revoking the
 * etcd lease fires loss promptly; a SIGSTOPped holder is fenced by its own
 * safe_until and superseded with a higher epoch; a stopped etcd lets
 * safe_until run out; epochs strictly increase.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <json-c/json.h>
#include <openssl/evp.h>

#include "testutil.h"

#define MS 1000000LL

extern char **environ;

static char prefix[256];

/* ---- helpers -------------------------------------------------------- */

/* Open an etcd store on a fresh prefix with the given TTL. */
static struct lease_store *open_ttl(int64_t ttl_ms)
{
	const char *ep = getenv("LEASEFS_ETCD_ENDPOINTS");
	struct lease_store_opts o = { .ttl_ms = ttl_ms, .holder = "test_etcd" };
	struct lease_store *st = NULL;
	struct lease_err err = { 0 };
	char uri[512];

	assert_non_null(ep);
	snprintf(prefix, sizeof(prefix), "/leasefs-etcdtest-%s/", tu_unique());
	tu_etcd_settle(prefix);
	snprintf(uri, sizeof(uri), "etcd://%s%s", ep, prefix);
	if (lease_store_open(uri, &o, &st, &err) < 0)
		fail_msg("lease_store_open(%s): %s", uri, err.msg);
	return st;
}

/* Same prefix as the last open_ttl(), new handle. */
static struct lease_store *reopen(int64_t ttl_ms)
{
	struct lease_store_opts o = { .ttl_ms = ttl_ms };
	struct lease_store *st = NULL;
	struct lease_err err = { 0 };
	char uri[512];

	snprintf(uri, sizeof(uri), "etcd://%s%s",
		 getenv("LEASEFS_ETCD_ENDPOINTS"), prefix);
	if (lease_store_open(uri, &o, &st, &err) < 0)
		fail_msg("lease_store_open(%s): %s", uri, err.msg);
	return st;
}

static struct lease *acquire_ok(struct lease_store *st, const char *name,
				int64_t wait_ms)
{
	struct lease_err err = { 0 };
	struct lease *l = NULL;

	if (lease_acquire(st, name, lease_deadline_ms(wait_ms), &l, &err) < 0)
		fail_msg("acquire %s: %s (%s)", name, err.msg,
			 lease_errkind_str(err.kind));
	return l;
}

static size_t collect(char *d, size_t s, size_t n, void *ud)
{
	FILE *f = ud;

	return fwrite(d, s, n, f);
}

/* POST a JSON body to one member's gateway directly; parsed answer. */
static json_object *raw_post_ep(const char *ep, const char *path,
				const char *body)
{
	char url[512], *out = NULL;
	size_t outlen = 0;
	FILE *f = open_memstream(&out, &outlen);
	CURL *h = curl_easy_init();
	json_object *j;
	CURLcode cc;

	assert_non_null(f);
	assert_non_null(h);
	snprintf(url, sizeof(url), "http://%s%s", ep, path);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 5000L);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, f);
	cc = curl_easy_perform(h);
	curl_easy_cleanup(h);
	fclose(f);
	if (cc != CURLE_OK)
		fail_msg("POST %s: %s", path, curl_easy_strerror(cc));
	j = json_tokener_parse(out);
	free(out);
	assert_non_null(j);
	return j;
}

/* POST to the first endpoint. */
static json_object *raw_post(const char *path, const char *body)
{
	char ep[256];

	snprintf(ep, sizeof(ep), "%s", getenv("LEASEFS_ETCD_ENDPOINTS"));
	ep[strcspn(ep, ",")] = '\0';
	return raw_post_ep(ep, path, body);
}

static char *b64(const char *s)
{
	char *out = malloc(4 * ((strlen(s) + 2) / 3) + 1);

	assert_non_null(out);
	EVP_EncodeBlock((unsigned char *)out, (const unsigned char *)s,
			(int)strlen(s));
	return out;
}

static char *key_of(const char *name)
{
	char raw[1024];

	snprintf(raw, sizeof(raw), "%s%s", prefix, name);
	return b64(raw);
}

static int64_t jint(json_object *o, const char *k)
{
	json_object *v;

	if (!o || !json_object_object_get_ex(o, k, &v))
		return 0;
	return strtoll(json_object_get_string(v), NULL, 10);
}

/* The etcd lease ID the key of `name` is attached to. */
static int64_t key_lease_id(const char *name)
{
	char *k = key_of(name), body[1200];
	json_object *ans, *kvs;
	int64_t id;

	snprintf(body, sizeof(body), "{\"key\":\"%s\"}", k);
	ans = raw_post("/v3/kv/range", body);
	assert_true(json_object_object_get_ex(ans, "kvs", &kvs));
	id = jint(json_object_array_get_idx(kvs, 0), "lease");
	json_object_put(ans);
	free(k);
	assert_true(id != 0);
	return id;
}

static void raw_delete(const char *name)
{
	char *k = key_of(name), body[1200];

	snprintf(body, sizeof(body), "{\"key\":\"%s\"}", k);
	json_object_put(raw_post("/v3/kv/deleterange", body));
	free(k);
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return x < y ? -1 : x > y;
}

static void report(const char *what, int64_t *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_i64);
	printf("# %s over %d runs: median %.2f ms, max %.2f ms\n", what, n,
	       (double)v[n / 2] / 1e6, (double)v[n - 1] / 1e6);
	fflush(stdout);
}

/*
 * Wait for the loss fd after an operation that ran from t0 to now.
 * total[i] = loss - t0; after[i] = loss - end of the operation (0 if the
 * notification was already there when the operation returned).
 */
static void await_loss(struct lease *l, int64_t t0, int64_t *total,
		       int64_t *after)
{
	int64_t t1 = lease_now_ns();
	bool early = tu_wait_readable(lease_loss_fd(l), 0);
	int64_t t;

	if (!early && !tu_wait_readable(lease_loss_fd(l), 1000))
		fail_msg("no loss notification within 1 s");
	t = lease_now_ns();
	*total = t - t0;
	*after = early ? 0 : t - t1;
}

static void report2(const char *what, int64_t *total, int64_t *after, int n)
{
	char buf[160];

	snprintf(buf, sizeof(buf), "%s, from the request", what);
	report(buf, total, n);
	snprintf(buf, sizeof(buf), "%s, after the request returned", what);
	report(buf, after, n);
}

/* ---- tests ---------------------------------------------------------- */

static void test_safe_until_advances(void **state)
{
	struct lease_store *st = open_ttl(3000);
	int64_t before = lease_now_ns();
	struct lease *l = acquire_ok(st, "keepalive", 5000);
	int64_t s0 = lease_safe_until(l), s1 = s0, limit;

	(void)state;
	/* Set before the grant returned, and no later than grant + TTL. */
	assert_true(s0 > lease_now_ns());
	assert_true(s0 <= before + 3000 * MS);
	/* Keepalives every TTL/3 must move it forward within one TTL. */
	limit = lease_now_ns() + 3000 * MS;
	while (s1 == s0 && lease_now_ns() < limit) {
		tu_wait_readable(lease_loss_fd(l), 20);
		s1 = lease_safe_until(l);
	}
	assert_true(s1 > s0);
	assert_false(lease_is_lost(l));
	printf("# safe_until advanced by %.0f ms after a keepalive\n",
	       (double)(s1 - s0) / 1e6);
	/* Still alive well past the first TTL. */
	assert_false(tu_wait_readable(lease_loss_fd(l), 3500));
	assert_true(lease_safe_until(l) > lease_now_ns());
	lease_free(l);
	lease_store_close(st);
}

static void test_key_delete_fires_loss(void **state)
{
	struct lease_store *st = open_ttl(15000);
	int64_t tot[20], aft[20];

	(void)state;
	for (int i = 0; i < 20; i++) {
		struct lease *l = acquire_ok(st, "deleted", 5000);
		int64_t t0 = lease_now_ns();

		raw_delete("deleted");
		await_loss(l, t0, &tot[i], &aft[i]);
		assert_int_equal(lease_loss_reason(l), LEASE_LOSS_REVOKED);
		lease_free(l);
	}
	report2("key delete -> loss", tot, aft, 20);
	assert_true(aft[19] < 100 * MS);
	assert_true(tot[10] < 100 * MS);
	lease_store_close(st);
}

static void test_lease_revoke_fires_loss(void **state)
{
	struct lease_store *st = open_ttl(15000);
	int64_t tot[10], aft[10];

	(void)state;
	for (int i = 0; i < 10; i++) {
		struct lease *l = acquire_ok(st, "etcd-revoked", 5000);
		char body[64];
		int64_t t0;

		snprintf(body, sizeof(body), "{\"ID\":\"%" PRId64 "\"}",
			 key_lease_id("etcd-revoked"));
		t0 = lease_now_ns();
		json_object_put(raw_post("/v3/lease/revoke", body));
		await_loss(l, t0, &tot[i], &aft[i]);
		assert_true(lease_loss_reason(l) == LEASE_LOSS_REVOKED ||
			    lease_loss_reason(l) == LEASE_LOSS_EXPIRED);
		lease_free(l);
	}
	report2("etcd lease revoke -> loss", tot, aft, 10);
	assert_true(aft[9] < 100 * MS);
	assert_true(tot[5] < 100 * MS);
	lease_store_close(st);
}

static void test_operator_revoke(void **state)
{
	struct lease_store *st = open_ttl(15000), *op = reopen(15000);
	struct lease_err err = { 0 };
	struct lease_info info;
	int64_t tot[10], aft[10];
	uint64_t epoch = 0;

	(void)state;
	for (int i = 0; i < 10; i++) {
		struct lease *l = acquire_ok(st, "ops/revoked", 5000);
		int64_t t0 = lease_now_ns();

		epoch = lease_epoch(l);
		assert_int_equal(lease_revoke(op, "ops/revoked",
					      lease_deadline_ms(5000), NULL, &err), 0);
		await_loss(l, t0, &tot[i], &aft[i]);
		assert_int_equal(lease_loss_reason(l), LEASE_LOSS_REVOKED);
		lease_free(l);
	}
	report2("lease_revoke -> loss", tot, aft, 10);
	assert_true(aft[9] < 100 * MS);
	assert_true(tot[5] < 100 * MS);
	/* Each holder acknowledged (lease_free releases): free again, the
	 * epoch kept (revoked only while the fence stands). */
	assert_int_equal(lease_show(op, "ops/revoked", &info, &err), 0);
	assert_int_equal(info.state, LEASE_STATE_FREE);
	assert_int_equal(info.epoch, epoch);
	assert_int_equal(lease_revoke(op, "ops/revoked", lease_deadline_ms(5000),
				      NULL, &err), -ENOENT);
	lease_store_close(op);
	lease_store_close(st);
}

static void test_epochs_increase(void **state)
{
	struct lease_store *st = open_ttl(15000), *st2;
	struct lease_err err = { 0 };
	struct lease_info info;
	uint64_t last = 0;
	struct lease *l;

	(void)state;
	for (int i = 0; i < 5; i++) {
		l = acquire_ok(st, "epochs/a", 5000);
		assert_true(lease_epoch(l) > last);
		last = lease_epoch(l);
		assert_int_equal(lease_show(st, "epochs/a", &info, &err), 0);
		assert_int_equal(info.state, LEASE_STATE_HELD);
		assert_int_equal(info.epoch, last);
		assert_string_equal(info.holder, "test_etcd");
		assert_int_equal(info.holder_pid, getpid());
		assert_int_equal(lease_release(l, lease_deadline_ms(5000)), 0);
		lease_free(l);
		assert_int_equal(lease_show(st, "epochs/a", &info, &err), 0);
		assert_int_equal(info.state, LEASE_STATE_FREE);
		assert_int_equal(info.epoch, last);
	}
	lease_store_close(st);
	st2 = reopen(15000);
	l = acquire_ok(st2, "epochs/a", 5000);
	assert_true(lease_epoch(l) > last);
	lease_free(l);
	lease_store_close(st2);
}

static int count_cb(const struct lease_info *info, void *ud)
{
	int *n = ud;

	if (strcmp(info->name, "list/a") == 0 && info->state == LEASE_STATE_HELD)
		n[0]++;
	if (strcmp(info->name, "list/b") == 0 && info->state == LEASE_STATE_FREE)
		n[1]++;
	n[2]++;
	return 0;
}

static void test_list(void **state)
{
	struct lease_store *st = open_ttl(15000);
	struct lease *a = acquire_ok(st, "list/a", 5000);
	struct lease *b = acquire_ok(st, "list/b", 5000);
	int n[3] = { 0 };

	(void)state;
	lease_free(b);
	assert_int_equal(lease_list(st, count_cb, n, NULL), 0);
	assert_int_equal(n[0], 1);
	assert_int_equal(n[1], 1);
	assert_int_equal(n[2], 2);
	lease_free(a);
	lease_store_close(st);
}

/* Child side of the SIGSTOP test; talks over pipes, never returns. */
static void stopped_child(struct lease_store *parent_st, int to_parent,
			  int from_parent)
{
	struct lease_store *st = reopen(2000);
	struct lease *l = NULL;
	char msg[64];
	uint64_t epoch = 0;
	int healthy, reason;

	lease_store_close(parent_st); /* inherited copy, holds no leases */
	if (lease_acquire(st, "stale", lease_deadline_ms(5000), &l, NULL) == 0)
		epoch = lease_epoch(l);
	if (write(to_parent, &epoch, sizeof(epoch)) != sizeof(epoch) || !l)
		_exit(2);
	/* Parent stops us here and continues us after the takeover. */
	if (read(from_parent, msg, 1) != 1)
		_exit(3);
	/* What healthy() would see, before anything else runs. */
	healthy = !lease_is_lost(l) && lease_safe_until(l) > lease_now_ns();
	reason = tu_wait_readable(lease_loss_fd(l), 3000) ?
		 (int)lease_loss_reason(l) : -1;
	snprintf(msg, sizeof(msg), "%d %d", healthy, reason);
	if (write(to_parent, msg, strlen(msg) + 1) < 0)
		_exit(4);
	lease_free(l);
	lease_store_close(st);
	_exit(0);
}

static pid_t child_pid;

static void reap_child(void)
{
	int status;

	if (child_pid <= 0)
		return;
	kill(child_pid, SIGCONT);
	kill(child_pid, SIGKILL);
	waitpid(child_pid, &status, 0);
	child_pid = 0;
}

static void test_sigstop_holder_fenced(void **state)
{
	struct lease_store *st = open_ttl(2000);
	int up[2], down[2], healthy = -1, reason = -2, status;
	uint64_t child_epoch = 0;
	char msg[64] = "";
	struct lease *l;
	int64_t t_stop, reclaim;

	(void)state;
	assert_int_equal(pipe2(up, O_CLOEXEC), 0);
	assert_int_equal(pipe2(down, O_CLOEXEC), 0);
	child_pid = fork();
	assert_true(child_pid >= 0);
	if (child_pid == 0) {
		close(up[0]);
		close(down[1]);
		stopped_child(st, up[1], down[0]);
	}
	close(up[1]);
	close(down[0]);
	assert_true(tu_wait_readable(up[0], 10000));
	assert_int_equal(read(up[0], &child_epoch, sizeof(child_epoch)),
			 sizeof(child_epoch));
	assert_true(child_epoch > 0);
	assert_int_equal(kill(child_pid, SIGSTOP), 0);
	t_stop = lease_now_ns();
	/* etcd expires the stopped holder's lease; we take over. */
	l = acquire_ok(st, "stale", 2000 + 3000);
	reclaim = lease_now_ns() - t_stop;
	assert_true(lease_epoch(l) > child_epoch);
	printf("# SIGSTOPped holder (TTL 2 s) reclaimed after %.0f ms\n",
	       (double)reclaim / 1e6);
	assert_int_equal(kill(child_pid, SIGCONT), 0);
	assert_int_equal(write(down[1], "c", 1), 1);
	if (tu_wait_readable(up[0], 5000) && read(up[0], msg, sizeof(msg) - 1) > 0)
		sscanf(msg, "%d %d", &healthy, &reason);
	assert_int_equal(waitpid(child_pid, &status, 0), child_pid);
	child_pid = 0;
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* The stale holder saw itself unhealthy before any notification. */
	assert_int_equal(healthy, 0);
	assert_true(reason == LEASE_LOSS_EXPIRED || reason == LEASE_LOSS_TAKEOVER ||
		    reason == LEASE_LOSS_REVOKED);
	assert_false(lease_is_lost(l));
	lease_free(l);
	close(up[0]);
	close(down[1]);
	lease_store_close(st);
}

static pid_t etcd_pid(void)
{
	const char *s = getenv("ETCD_PID");

	assert_non_null(s);
	return (pid_t)atoi(s);
}

static void test_etcd_stopped(void **state)
{
	struct lease_store *st = open_ttl(2000);
	struct lease *l = acquire_ok(st, "etcd-down", 5000), *l2;
	int64_t t_stop, t_loss, su;
	uint64_t epoch = lease_epoch(l);

	(void)state;
	/* Let at least one keepalive land. */
	su = lease_safe_until(l);
	for (int i = 0; i < 200 && lease_safe_until(l) == su; i++)
		assert_false(tu_wait_readable(lease_loss_fd(l), 20));
	assert_true(lease_safe_until(l) > su);
	assert_int_equal(kill(etcd_pid(), SIGSTOP), 0);
	t_stop = lease_now_ns();
	/* The last acknowledged keepalive was sent before t_stop. */
	t_loss = tu_wait_readable(lease_loss_fd(l), 4000) ? lease_now_ns() : 0;
	su = lease_safe_until(l);
	kill(etcd_pid(), SIGCONT);
	assert_true(t_loss > 0);
	assert_int_equal(lease_loss_reason(l), LEASE_LOSS_EXPIRED);
	assert_true(su <= t_stop + 2000 * MS);
	assert_true(su <= t_loss);
	printf("# etcd stopped: holder lost after %.0f ms (TTL 2000 ms)\n",
	       (double)(t_loss - t_stop) / 1e6);
	assert_true(t_loss - t_stop <= 2000 * MS + 100 * MS);
	lease_free(l);
	/* After etcd resumes, the name is granted again, never at the old epoch. */
	l2 = acquire_ok(st, "etcd-down", 10000);
	assert_true(lease_epoch(l2) > epoch);
	lease_free(l2);
	lease_store_close(st);
}

/* A contender keeps its etcd lease between tries; if that lease vanishes
 * meanwhile ("lease not found"), the next try grants a new one. */
static void test_contender_lease_vanishes(void **state)
{
	struct lease_store *st = open_ttl(15000), *st2 = reopen(15000);
	struct lease_err err = { 0 };
	struct lease *a = acquire_ok(st, "spare", 5000), *b = NULL;
	json_object *ans, *leases;
	int64_t holder_id = key_lease_id("spare"), revoked = 0;
	char body[64];

	(void)state;
	assert_int_equal(lease_acquire(st2, "spare", 0, &b, &err), -EBUSY);
	assert_int_equal(err.holder_epoch, lease_epoch(a));
	/* Revoke every etcd lease but the holder's: the contender's kept one. */
	ans = raw_post("/v3/lease/leases", "{}");
	assert_true(json_object_object_get_ex(ans, "leases", &leases));
	for (size_t i = 0; i < json_object_array_length(leases); i++) {
		int64_t id = jint(json_object_array_get_idx(leases, i), "ID");

		if (id == holder_id)
			continue;
		snprintf(body, sizeof(body), "{\"ID\":\"%" PRId64 "\"}", id);
		json_object_put(raw_post("/v3/lease/revoke", body));
		revoked++;
	}
	json_object_put(ans);
	assert_true(revoked >= 1);
	assert_int_equal(lease_release(a, lease_deadline_ms(5000)), 0);
	b = acquire_ok(st2, "spare", 5000);
	assert_true(lease_epoch(b) > lease_epoch(a));
	assert_true(key_lease_id("spare") != holder_id);
	assert_true(lease_safe_until(b) > lease_now_ns());
	assert_false(tu_wait_readable(lease_loss_fd(b), 200));
	lease_free(b);
	lease_free(a);
	lease_store_close(st2);
	lease_store_close(st);
}

static void test_unreachable(void **state)
{
	struct lease_store *st = NULL;
	struct lease_err err = { 0 };
	struct lease *l = NULL;

	(void)state;
	/* Port 1 on loopback: nothing listens. */
	assert_int_equal(lease_store_open("etcd://127.0.0.1:1/x/", NULL, &st,
					  &err), 0);
	assert_int_equal(lease_acquire(st, "a", lease_deadline_ms(500), &l, &err),
			 -EHOSTUNREACH);
	assert_int_equal(err.kind, LEASE_E_UNREACHABLE);
	lease_store_close(st);
	assert_true(lease_store_open("etcd://", NULL, &st, &err) < 0);
	assert_int_equal(err.kind, LEASE_E_USAGE);
	assert_true(lease_store_open("etcd://h:notaport", NULL, &st, &err) < 0);
	assert_int_equal(err.kind, LEASE_E_USAGE);
}

/* Open the store on `prefix` with URI parameters `params` and a TTL. */
static int open_params(const char *params, int64_t ttl_ms,
		       struct lease_store **st, struct lease_err *err)
{
	struct lease_store_opts o = { .ttl_ms = ttl_ms, .holder = "test_etcd" };
	char uri[512];

	snprintf(uri, sizeof(uri), "etcd://%s%s%s",
		 getenv("LEASEFS_ETCD_ENDPOINTS"), prefix, params);
	return lease_store_open(uri, &o, st, err);
}

/* max_ttl= in the URI: seconds, 1 to 1000000, once; a TTL above it is
 * refused at the grant. */
static void test_max_ttl_param(void **state)
{
	static const char *const bad[] = { "?max_ttl=0", "?max_ttl=abc",
					   "?ttl=3", "?max_ttl=3&max_ttl=3",
					   "?max_ttl=3&x", "?max_ttl=" };
	struct lease_store *st = NULL;
	struct lease_err err = { 0 };
	struct lease *l = NULL;

	(void)state;
	snprintf(prefix, sizeof(prefix), "/leasefs-etcdttl-%s/", tu_unique());
	tu_etcd_settle(prefix);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_true(open_params(bad[i], 1000, &st, &err) < 0);
		assert_int_equal(err.kind, LEASE_E_USAGE);
	}
	assert_int_equal(open_params("?max_ttl=2", 3000, &st, &err), 0);
	assert_true(lease_acquire(st, "ttl/a", 0, &l, &err) < 0);
	assert_int_equal(err.kind, LEASE_E_USAGE);
	assert_non_null(strstr(err.msg, "max_ttl"));
	lease_store_close(st);
	assert_int_equal(open_params("?max_ttl=3", 3000, &st, &err), 0);
	l = acquire_ok(st, "ttl/a", 0);
	lease_free(l);
	lease_store_close(st);
}

/*
 * A prefix no grant was ever made under (as after an etcd that lost its
 * data) grants nothing until its marker is max_ttl and a third old on
 * etcd's clock: a try is told busy, naming the marker and the time left;
 * a waiting acquire is granted no sooner; then every store on the prefix
 * grants at once.
 */
static void test_new_store_waits(void **state)
{
	struct lease_store *st = NULL, *st2 = NULL;
	struct lease_err err = { 0 };
	struct lease *l = NULL;
	int64_t t0, waited;

	(void)state;
	snprintf(prefix, sizeof(prefix), "/leasefs-etcdnew-%s/", tu_unique());
	assert_int_equal(open_params("?max_ttl=1", 1000, &st, &err), 0);
	assert_int_equal(open_params("?max_ttl=1", 1000, &st2, &err), 0);
	t0 = lease_now_ns();
	assert_int_equal(lease_acquire(st, "new/a", 0, &l, &err), -EBUSY);
	assert_int_equal(err.kind, LEASE_E_HELD);
	printf("# %s\n", err.msg);
	assert_non_null(strstr(err.msg, "!store"));
	assert_non_null(strstr(err.msg, "s to go"));
	assert_int_equal(lease_acquire(st2, "new/b", 0, &l, &err), -EBUSY);
	l = acquire_ok(st, "new/a", 10000);
	waited = lease_now_ns() - t0;
	printf("# a new store granted %.0f ms after the first try (max_ttl 1 s)\n",
	       (double)waited / 1e6);
	assert_true(waited >= 1333 * MS);
	lease_free(l);
	assert_int_equal(lease_acquire(st2, "new/b", 0, &l, &err), 0);
	lease_free(l);
	lease_store_close(st2);
	lease_store_close(st);
}

static int teardown(void **state)
{
	(void)state;
	reap_child();
	return 0;
}

/* ---- etcd restarted without its data -------------------------------- */

/* The first member's command line; with `other`, its cluster token
 * replaced by another (a new cluster).  NULL-terminated, malloc'ed. */
static char **member_argv(pid_t pid, bool other)
{
	static char buf[8192];
	char path[64], **argv = calloc(64, sizeof(char *));
	size_t n = 0, len;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	f = fopen(path, "re");
	assert_non_null(f);
	assert_non_null(argv);
	len = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	for (size_t i = 0; i < len && n < 63; i += strlen(buf + i) + 1) {
		bool token = other && n > 0 &&
			     strcmp(argv[n - 1], "--initial-cluster-token") == 0;

		argv[n++] = token ? strdup("leasefs-wiped") : strdup(buf + i);
	}
	assert_true(n > 1);
	return argv;
}

static size_t discard(char *d, size_t s, size_t n, void *ud)
{
	(void)d;
	(void)ud;
	return s * n;
}

static bool etcd_answers(void)
{
	char url[512];
	CURL *h = curl_easy_init();
	long status = 0;

	snprintf(url, sizeof(url), "%s/health", getenv("ETCD_CLIENT_URL"));
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 1000L);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
	if (curl_easy_perform(h) == CURLE_OK)
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_cleanup(h);
	return status == 200;
}

static pid_t our_etcd;

static int kill_our_etcd(void **state)
{
	int status;

	(void)state;
	if (our_etcd > 0) {
		kill(our_etcd, SIGTERM);
		waitpid(our_etcd, &status, 0);
	}
	our_etcd = 0;
	return 0;
}

/* Start argv as etcd (without the harness's ETCD_* variables, which etcd
 * reads as flags) until it answers; a start that cannot bind yet (the
 * killed one's threads still hold its ports) exits and is tried again. */
static void etcd_start(char **argv)
{
	for (int tries = 0; tries < 50; tries++) {
		int status;

		our_etcd = fork();
		assert_true(our_etcd >= 0);
		if (our_etcd == 0) {
			int null = open("/dev/null", O_WRONLY | O_CLOEXEC);

			for (char **e = environ; *e;)
				if (strncmp(*e, "ETCD_", 5) == 0) {
					char name[128];

					snprintf(name, sizeof(name), "%.*s",
						 (int)strcspn(*e, "="), *e);
					unsetenv(name);
				} else {
					e++;
				}
			dup2(null, STDOUT_FILENO);
			dup2(null, STDERR_FILENO);
			execv(argv[0], argv);
			_exit(127);
		}
		for (int i = 0; i < 100; i++) {
			if (waitpid(our_etcd, &status, WNOHANG) == our_etcd) {
				our_etcd = 0;
				break;
			}
			if (etcd_answers())
				return;
			poll(NULL, 0, 50);
		}
	}
	fail_msg("etcd did not come back");
}

/* Kill -9 the first member and start it again at once: with its data, or
 * (wipe) without it, as another cluster.  Returns the time of the kill. */
static int64_t etcd_restart(bool wipe)
{
	pid_t old = etcd_pid();
	char **argv = member_argv(old, wipe), pidbuf[16];
	int64_t t_kill;
	int status;

	assert_int_equal(kill(old, SIGKILL), 0);
	t_kill = lease_now_ns();
	if (old == our_etcd)
		waitpid(old, &status, 0);
	our_etcd = 0;
	if (wipe)
		tu_rmrf(getenv("ETCD_DATA_DIR"));
	etcd_start(argv);
	snprintf(pidbuf, sizeof(pidbuf), "%d", (int)our_etcd);
	setenv("ETCD_PID", pidbuf, 1);
	for (char **a = argv; *a; a++)
		free(*a);
	free(argv);
	return t_kill;
}

/* etcd killed -9 and started again with its data: a prefix that has its
 * marker grants at once, as before. */
static void test_restart_keeps_marker(void **state)
{
	struct lease_store *st = open_ttl(3000);
	struct lease *l = acquire_ok(st, "restart/a", 0), *l2 = NULL;
	struct lease_err err = { 0 };
	uint64_t epoch = lease_epoch(l);

	(void)state;
	lease_free(l);
	etcd_restart(false);
	assert_int_equal(lease_acquire(st, "restart/a", 0, &l2, &err), 0);
	assert_true(lease_epoch(l2) > epoch);
	lease_free(l2);
	lease_store_close(st);
}

/*
 * etcd killed -9 and started again at once without its data, as another
 * cluster, under a holder: the holder turns lost (store) at the first
 * keepalive the new member answers; a successor is refused at once, and
 * granted no sooner than max_ttl and a third after the kill, when the
 * holder is long lost.
 */
static void test_wipe(void **state)
{
	struct lease_store *st, *st2;
	struct lease_err err = { 0 };
	struct lease *l, *l2 = NULL;
	int64_t t_kill, t_up, t_lost, t_grant, su;

	(void)state;
	snprintf(prefix, sizeof(prefix), "/leasefs-etcdwipe-%s/", tu_unique());
	tu_etcd_settle(prefix);
	assert_int_equal(open_params("?max_ttl=3", 3000, &st, &err), 0);
	assert_int_equal(open_params("?max_ttl=3", 3000, &st2, &err), 0);
	l = acquire_ok(st, "wipe/a", 5000);
	su = lease_safe_until(l);
	for (int i = 0; i < 200 && lease_safe_until(l) == su; i++)
		assert_false(tu_wait_readable(lease_loss_fd(l), 20));
	t_kill = etcd_restart(true);
	t_up = lease_now_ns();
	assert_int_equal(lease_acquire(st2, "wipe/a", 0, &l2, &err), -EBUSY);
	assert_non_null(strstr(err.msg, "!store"));
	t_lost = tu_wait_readable(lease_loss_fd(l), 5000) ? lease_now_ns() : 0;
	printf("# etcd back %.0f ms after the kill; the holder lost (%s) %.0f ms "
	       "after the kill\n", (double)(t_up - t_kill) / 1e6,
	       lease_loss_str(lease_loss_reason(l)), (double)(t_lost - t_kill) / 1e6);
	assert_true(t_lost > 0);
	assert_int_equal(lease_loss_reason(l), LEASE_LOSS_STORE);
	l2 = acquire_ok(st2, "wipe/a", 10000);
	t_grant = lease_now_ns();
	printf("# the successor granted %.0f ms after the kill (max_ttl 3 s)\n",
	       (double)(t_grant - t_kill) / 1e6);
	assert_true(t_grant - t_kill >= 4000 * MS);
	lease_free(l2);
	lease_free(l);
	lease_store_close(st2);
	lease_store_close(st);
}

/* ---- cluster (ETCD_MEMBERS=3) ------------------------------------- */

/* Index (in endpoint order) of the current leader, or -1. */
static int leader_index(char eps[][64], int n)
{
	for (int i = 0; i < n; i++) {
		json_object *st = raw_post_ep(eps[i], "/v3/maintenance/status", "{}");
		json_object *hdr = NULL;
		int64_t me, leader;

		json_object_object_get_ex(st, "header", &hdr);
		me = jint(hdr, "member_id");
		leader = jint(st, "leader");
		json_object_put(st);
		if (me != 0 && me == leader)
			return i;
	}
	return -1;
}

static int split_list(const char *s, const char *sep, char out[][64], int max)
{
	char buf[1024], *save = NULL, *t;
	int n = 0;

	snprintf(buf, sizeof(buf), "%s", s);
	for (t = strtok_r(buf, sep, &save); t && n < max;
	     t = strtok_r(NULL, sep, &save))
		snprintf(out[n++], 64, "%s", t);
	return n;
}

/* Holder child for the cluster test: reports its epoch, then a byte if
 * the lease is ever lost; killed by the parent. */
static void cluster_child(struct lease_store *parent_st, int to_parent)
{
	struct lease_store *st = reopen(5000);
	struct lease *l = NULL;
	uint64_t epoch = 0;
	char why;

	lease_store_close(parent_st);
	if (lease_acquire(st, "cluster/holder", lease_deadline_ms(10000), &l,
			  NULL) == 0)
		epoch = lease_epoch(l);
	if (write(to_parent, &epoch, sizeof(epoch)) != sizeof(epoch) || !l)
		_exit(2);
	/* Bounded: the parent kills us long before this passes. */
	if (tu_wait_readable(lease_loss_fd(l), 120000)) {
		why = (char)lease_loss_reason(l);
		if (write(to_parent, &why, 1) != 1)
			_exit(3);
	}
	_exit(0);
}

static void test_cluster_leader_kill(void **state)
{
	struct lease_store *st = open_ttl(5000);
	char eps[8][64], pids[8][64];
	int n = split_list(getenv("LEASEFS_ETCD_ENDPOINTS"), ",", eps, 8);
	int up[2], leader, status;
	struct lease_err err = { 0 };
	struct lease_info info;
	uint64_t child_epoch = 0;
	int64_t t0, reclaim;
	struct lease *l;

	(void)state;
	assert_int_equal(split_list(getenv("ETCD_PIDS"), " ", pids, 8), n);
	assert_true(n >= 3);
	assert_int_equal(pipe2(up, O_CLOEXEC), 0);
	child_pid = fork();
	assert_true(child_pid >= 0);
	if (child_pid == 0) {
		close(up[0]);
		cluster_child(st, up[1]);
	}
	close(up[1]);
	assert_true(tu_wait_readable(up[0], 15000));
	assert_int_equal(read(up[0], &child_epoch, sizeof(child_epoch)),
			 sizeof(child_epoch));
	assert_true(child_epoch > 0);

	leader = leader_index(eps, n);
	assert_true(leader >= 0);
	printf("# killing leader %s (pid %s) under a live holder\n",
	       eps[leader], pids[leader]);
	assert_int_equal(kill((pid_t)atoi(pids[leader]), SIGKILL), 0);
	/* Two TTLs without any loss at the holder: the lease survived. */
	assert_false(tu_wait_readable(up[0], 2 * 5000));
	assert_int_equal(lease_show(st, "cluster/holder", &info, &err), 0);
	assert_int_equal(info.state, LEASE_STATE_HELD);
	assert_int_equal(info.epoch, child_epoch);
	printf("# lease survived the leader kill (epoch %" PRIu64 ")\n",
	       child_epoch);

	/* Now kill the holder too: the lease is reclaimed within TTL + 2 s. */
	assert_int_equal(kill(child_pid, SIGKILL), 0);
	t0 = lease_now_ns();
	assert_int_equal(waitpid(child_pid, &status, 0), child_pid);
	child_pid = 0;
	l = acquire_ok(st, "cluster/holder", 5000 + 2000);
	reclaim = lease_now_ns() - t0;
	assert_true(lease_epoch(l) > child_epoch);
	printf("# killed holder (TTL 5 s) reclaimed after %.0f ms, epoch %" PRIu64
	       " -> %" PRIu64 "\n", (double)reclaim / 1e6, child_epoch, lease_epoch(l));
	lease_free(l);
	close(up[0]);
	lease_store_close(st);
}

/* ---- TLS (ETCD_TLS=1) ---------------------------------------------- */

static struct lease_store *open_tls(bool with_client_cert)
{
	struct lease_store_opts o = {
		.ttl_ms = 3000,
		.ca_file = getenv("LEASEFS_ETCD_CA"),
		.cert_file = with_client_cert ? getenv("LEASEFS_ETCD_CERT") : NULL,
		.key_file = with_client_cert ? getenv("LEASEFS_ETCD_KEY") : NULL,
	};
	struct lease_store *st = NULL;
	struct lease_err err = { 0 };
	char uri[512];

	assert_non_null(o.ca_file);
	snprintf(uri, sizeof(uri), "etcds://%s%s",
		 getenv("LEASEFS_ETCD_ENDPOINTS"), prefix);
	if (lease_store_open(uri, &o, &st, &err) < 0)
		fail_msg("lease_store_open(%s): %s", uri, err.msg);
	return st;
}

static void test_tls_hold_and_revoke(void **state)
{
	struct lease_store *st, *op;
	struct lease_err err = { 0 };
	struct lease_info info;
	struct lease *l, *l2;
	int64_t s0, t0, tot, aft;

	(void)state;
	snprintf(prefix, sizeof(prefix), "/leasefs-etcdtls-%s/", tu_unique());
	tu_etcd_settle(prefix);
	st = open_tls(true);
	op = open_tls(true);
	l = acquire_ok(st, "tls/a", 5000);
	assert_int_equal(lease_show(op, "tls/a", &info, &err), 0);
	assert_int_equal(info.state, LEASE_STATE_HELD);
	assert_int_equal(info.epoch, lease_epoch(l));
	/* Keepalives over TLS move safe_until (TTL 3 s: one per second). */
	s0 = lease_safe_until(l);
	for (int i = 0; i < 150 && lease_safe_until(l) == s0; i++)
		assert_false(tu_wait_readable(lease_loss_fd(l), 20));
	assert_true(lease_safe_until(l) > s0);
	/* The watch over TLS delivers an operator revoke promptly. */
	t0 = lease_now_ns();
	assert_int_equal(lease_revoke(op, "tls/a", lease_deadline_ms(5000), NULL, &err), 0);
	await_loss(l, t0, &tot, &aft);
	assert_int_equal(lease_loss_reason(l), LEASE_LOSS_REVOKED);
	printf("# TLS: revoke -> loss %.2f ms (%.2f ms after the revoke returned)\n",
	       (double)tot / 1e6, (double)aft / 1e6);
	assert_true(aft < 100 * MS);
	l2 = acquire_ok(st, "tls/a", 5000);
	assert_true(lease_epoch(l2) > lease_epoch(l));
	lease_free(l);
	lease_free(l2);
	lease_store_close(op);
	lease_store_close(st);
}

static void test_tls_needs_client_cert(void **state)
{
	struct lease_store *st;
	struct lease_err err = { 0 };
	struct lease *l = NULL;

	(void)state;
	st = open_tls(false);
	assert_true(lease_acquire(st, "tls/b", lease_deadline_ms(2000), &l,
				  &err) < 0);
	assert_null(l);
	assert_int_equal(err.kind, LEASE_E_UNREACHABLE);
	lease_store_close(st);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_unreachable),
		cmocka_unit_test(test_max_ttl_param),
		cmocka_unit_test(test_new_store_waits),
		cmocka_unit_test(test_epochs_increase),
		cmocka_unit_test(test_list),
		cmocka_unit_test(test_contender_lease_vanishes),
		cmocka_unit_test(test_safe_until_advances),
		cmocka_unit_test(test_key_delete_fires_loss),
		cmocka_unit_test(test_lease_revoke_fires_loss),
		cmocka_unit_test(test_operator_revoke),
		cmocka_unit_test_teardown(test_sigstop_holder_fenced, teardown),
		cmocka_unit_test(test_etcd_stopped),
		/* Last: etcd is another process after them. */
		cmocka_unit_test(test_restart_keeps_marker),
		cmocka_unit_test_teardown(test_wipe, kill_our_etcd),
	};
	const struct CMUnitTest tls[] = {
		cmocka_unit_test(test_tls_hold_and_revoke),
		cmocka_unit_test(test_tls_needs_client_cert),
	};
	const struct CMUnitTest cluster[] = {
		cmocka_unit_test_teardown(test_cluster_leader_kill, teardown),
	};

	setvbuf(stdout, NULL, _IOLBF, 0);
	curl_global_init(CURL_GLOBAL_ALL);
	if (argc > 1 && strcmp(argv[1], "cluster") == 0)
		return cmocka_run_group_tests_name("etcd-cluster", cluster, NULL,
						   NULL);
	if (argc > 1 && strcmp(argv[1], "tls") == 0)
		return cmocka_run_group_tests_name("etcd-tls", tls, NULL, NULL);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
