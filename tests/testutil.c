/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
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
#include <openssl/evp.h>

#include "mem.h"
#include "testutil.h"

static char last_uri[1024];

char *tu_mkdtemp(const char *tag)
{
	const char *tmp = getenv("TMPDIR");
	char *path, *real;

	if (!tmp || !*tmp)
		tmp = "/tmp";

	assert_true(asprintf(&path, "%s/leasefs-%s-XXXXXX", tmp, tag) > 0);
	assert_non_null(mkdtemp(path));
	/* canonical, as the coordinator takes roots */
	real = realpath(path, NULL);
	assert_non_null(real);
	free(path);
	return real;
}

static int rm_one(const char *path, const struct stat *sb, int flag,
		  struct FTW *ftw)
{
	(void)sb; (void)flag; (void)ftw;
	remove(path);
	return 0;
}

void tu_rmrf(const char *path)
{
	if (path)
		nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

bool tu_wait_readable(int fd, int timeout_ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int r;

	do
		r = poll(&p, 1, timeout_ms);
	while (r < 0 && errno == EINTR);
	return r == 1 && (p.revents & POLLIN);
}

const char *tu_unique(void)
{
	static char buf[64];
	static unsigned counter;

	snprintf(buf, sizeof(buf), "%d-%u", (int)getpid(), ++counter);
	return buf;
}

static size_t tu_discard(char *d, size_t s, size_t n, void *ud)
{
	(void)d;
	(void)ud;
	return s * n;
}

void tu_etcd_settle(const char *prefix)
{
	const char *base = getenv("ETCD_CLIENT_URL");
	const char *tls[3] = { getenv("LEASEFS_ETCD_CA"),
			       getenv("LEASEFS_ETCD_CERT"),
			       getenv("LEASEFS_ETCD_KEY") };
	char key[1024], k64[1400], url[512], body[1500];
	CURL *h = curl_easy_init();
	long status = 0;
	CURLcode cc;

	assert_non_null(base);
	assert_non_null(h);
	snprintf(key, sizeof(key), "%s!store", prefix);
	assert_true(strlen(key) < 1000);
	EVP_EncodeBlock((unsigned char *)k64, (const unsigned char *)key,
			(int)strlen(key));
	snprintf(url, sizeof(url), "%s/v3/kv/put", base);
	snprintf(body, sizeof(body), "{\"key\":\"%s\"}", k64);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 5000L);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, tu_discard);
	if (strncmp(base, "https:", 6) == 0) {
		curl_easy_setopt(h, CURLOPT_CAINFO, tls[0]);
		curl_easy_setopt(h, CURLOPT_SSLCERT, tls[1]);
		curl_easy_setopt(h, CURLOPT_SSLKEY, tls[2]);
	}
	cc = curl_easy_perform(h);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_cleanup(h);
	if (cc != CURLE_OK || status != 200)
		fail_msg("settling etcd prefix %s: %s, HTTP %ld", prefix,
			 curl_easy_strerror(cc), status);
}

/*
 * The harness's record of its migrations under `prefix` says they were
 * applied an hour ago (a database set up long before): pgstore grants
 * nothing while the lease table is younger than its max_ttl and a third
 * (a database made anew), which test_pgstore.sh's wipe section runs.
 */
static void pg_age(const char *dsn, const char *prefix)
{
	static const char *const py = "import psycopg2, sys\n"
		"c = psycopg2.connect(sys.argv[1])\n"
		"c.cursor().execute('UPDATE looprig.' + sys.argv[2] + "
		"'schema_migrations SET applied_at = applied_at - "
		"interval \\'1 hour\\'')\n"
		"c.commit()\n";
	int status = -1;
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		execl("/usr/bin/python3", "python3", "-c", py, dsn, prefix,
		      (char *)NULL);
		_exit(127);
	}
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail_msg("ageing the migrations for prefix %s: status %d",
			 prefix, status);
}

/*
 * The harness's migrations applied to a fresh table prefix, as its
 * pgstore.Open in apply mode does (by the peer that follows it): leasefs
 * opens only a store whose lease table the harness made.
 */
static void pg_harness_apply(const char *uri, const char *prefix)
{
	const char *peer = getenv("LEASEFS_PG_PEER");
	char dsn[1024], opt[128];
	int status = -1;
	pid_t pid;

	assert_non_null(peer);
	snprintf(dsn, sizeof(dsn), "%s%ssslmode=disable", uri,
		 strchr(uri, '?') ? "&" : "?");
	snprintf(opt, sizeof(opt), "--prefix=%s", prefix);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY | O_CLOEXEC);

		if (null >= 0)
			dup2(null, STDOUT_FILENO);
		execl("/usr/bin/python3", "python3", peer, "--migrations=apply",
		      opt, dsn, "migrate", (char *)NULL);
		_exit(127);
	}
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail_msg("the harness's migrations for prefix %s: status %d",
			 prefix, status);
	pg_age(dsn, prefix);
}

/* A natsstore grants nothing while its bucket is younger than its
 * max_ttl and a third (the server may have lost its store): once per
 * process, wait for that with a grant of a name of its own. */
static void nats_settle(struct lease_store *st)
{
	static bool settled;
	struct lease_err err = { 0 };
	struct lease *l = NULL;

	if (settled)
		return;
	if (lease_acquire(st, "contract/settle", lease_deadline_ms(20000), &l,
			  &err) < 0)
		fail_msg("natsstore: no first grant: %s", err.msg);
	lease_free(l);
	settled = true;
}

struct lease_store *tu_open_store(const char *backend, char **dir_out)
{
	static const struct lease_store_opts short_ttl = { .ttl_ms = 3000 };
	const struct lease_store_opts *opts = NULL;
	struct lease_store *st = NULL;
	struct lease_err err = { 0 };

	if (dir_out)
		*dir_out = NULL;
	if (strcmp(backend, "mem") == 0) {
		assert_int_equal(lease_backend_add(&lease_backend_mem), 0);
		snprintf(last_uri, sizeof(last_uri), "mem:");
	} else if (strcmp(backend, "file") == 0) {
		char *dir = tu_mkdtemp("leases");

		snprintf(last_uri, sizeof(last_uri), "file:%s", dir);
		if (dir_out)
			*dir_out = dir;
		else
			free(dir);
	} else if (strcmp(backend, "fsstore") == 0) {
		char *dir = tu_mkdtemp("fsstore");

		snprintf(last_uri, sizeof(last_uri), "fsstore:%s", dir);
		if (dir_out)
			*dir_out = dir;
		else
			free(dir);
	} else if (strcmp(backend, "pg") == 0) {
		const char *uri = getenv("LEASEFS_PG_URI");
		char prefix[80];

		assert_non_null(uri);
		/* A table prefix of its own per store: a fresh, empty store. */
		snprintf(prefix, sizeof(prefix), "t%s_", tu_unique());
		for (char *p = prefix; *p; p++)
			if (*p == '-')
				*p = '_';
		pg_harness_apply(uri, prefix);
		snprintf(last_uri, sizeof(last_uri), "%s?table_prefix=%s", uri,
			 prefix);
	} else if (strcmp(backend, "nats") == 0) {
		const char *uri = getenv("LEASEFS_NATS_URI");

		assert_non_null(uri);
		/* The server is the suite's own: no holder uses a TTL above
		 * 3 s, so a new bucket is granted from after 4 s. */
		snprintf(last_uri, sizeof(last_uri), "%s?max_ttl=3", uri);
		opts = &short_ttl;
	} else if (strcmp(backend, "etcd") == 0) {
		const char *ep = getenv("LEASEFS_ETCD_ENDPOINTS");
		char prefix[128];

		assert_non_null(ep);
		snprintf(prefix, sizeof(prefix), "/leasefs-test-%s/", tu_unique());
		tu_etcd_settle(prefix);
		snprintf(last_uri, sizeof(last_uri), "etcd://%s%s", ep, prefix);
	} else {
		fail_msg("unknown backend %s", backend);
	}
	if (lease_store_open(last_uri, opts, &st, &err) < 0)
		fail_msg("lease_store_open(%s): %s", last_uri, err.msg);
	if (strcmp(backend, "nats") == 0)
		nats_settle(st);
	return st;
}

const char *tu_last_uri(void)
{
	return last_uri;
}

int tu_write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC), r = 0;
	size_t n = strlen(text);

	if (fd < 0)
		return -errno;
	if (write(fd, text, n) != (ssize_t)n)
		r = -errno;
	close(fd);
	return r;
}
