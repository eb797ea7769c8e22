/* SPDX-License-Identifier: MIT */
/*
 * The pgstore backend: the store, its connection and bounded queries (the
 * tables and what the units share: pg_int.h).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pg_int.h"

/* Every query is bounded; this is the bound when the caller has none. */
#define QUERY_MS 5000
#define RECONNECT_MIN_MS 200

/* ---- the URI -------------------------------------------------------- */

/* "max_ttl=SECONDS" (1 to 1000000, as natsstore takes it): 0 or
 * LEASE_E_USAGE. */
static int take_max_ttl(const char *v, int64_t *ms, struct lease_err *err)
{
	char *end;
	double d;

	errno = 0;
	d = strtod(v, &end);
	if (errno || end == v || *end || !(d >= 1 && d <= 1e6))
		return lease_err_set(err, LEASE_E_USAGE, 0, NULL, "pgstore: bad "
				     "max_ttl=%.80s (expected seconds, 1 to "
				     "1000000)", v);
	*ms = (int64_t)(d * 1000);
	return 0;
}

/*
 * Take our own query parameters (schema=, table_prefix=, max_ttl=) out of
 * the URI, which libpq would refuse; the rest goes to libpq as it is.
 * schema and table_prefix are checked by the harness's rule; empty is the
 * harness's default (options.go:121-123, :128-130).  0 or LEASE_E_USAGE.
 */
static int take_params(char **uri, char *schema, char *prefix,
		       int64_t *max_ttl_ms, struct lease_err *err)
{
	static const char *const keys[] = { "schema=", "table_prefix=",
					    "max_ttl=" };
	char *q = strchr(*uri, '?'), *out, *p, *save = NULL, sep = '?';
	bool seen[3] = { false, false, false };
	size_t len;

	if (!q)
		return 0;
	*q++ = '\0';
	out = malloc(strlen(*uri) + strlen(q) + 2);
	if (!out)
		return lease_err_set(err, LEASE_E_IO, -ENOMEM, NULL, "out of memory");
	len = (size_t)sprintf(out, "%s", *uri);
	for (p = strtok_r(q, "&", &save); p; p = strtok_r(NULL, "&", &save)) {
		int which = -1, r = 0;
		size_t max;

		for (int i = 0; i < 3; i++)
			if (strncmp(p, keys[i], strlen(keys[i])) == 0)
				which = i;
		if (which < 0) {
			len += (size_t)sprintf(out + len, "%c%s", sep, p);
			sep = '&';
			continue;
		}
		max = which == 1 ? PG_PREFIX_MAX : PG_SCHEMA_MAX;
		p += strlen(keys[which]);
		if (seen[which])
			r = lease_err_set(err, LEASE_E_USAGE, 0, NULL, "pgstore: %.*s "
					  "given twice", (int)strlen(keys[which]) - 1,
					  keys[which]);
		else if (which == 2)
			r = take_max_ttl(p, max_ttl_ms, err);
		else if (*p)
			r = pg_ident_check(which ? "table_prefix" : "schema", p,
					   max, err);
		if (r < 0) {
			free(out);
			return r;
		}
		seen[which] = true;
		if (which < 2 && *p)
			snprintf(which ? prefix : schema, max + 1, "%s", p);
	}
	free(*uri);
	*uri = out;
	return 0;
}

/* ---- the connection ------------------------------------------------- */

static int unreachable(struct pg_store *ps, struct lease_err *err,
		       const char *what)
{
	return lease_err_set(err, LEASE_E_UNREACHABLE, 0, NULL, "pgstore %s: %s",
			     ps->shown, what);
}

static void drop_conn_locked(struct pg_store *ps)
{
	if (ps->conn)
		PQfinish(ps->conn);
	ps->conn = NULL;
	ps->next_connect = lease_deadline_ms(RECONNECT_MIN_MS);
}

/* Seconds for connect_timeout: what is left of `deadline`, at least 1. */
static void seconds_left(char *buf, size_t sz, int64_t deadline)
{
	int64_t ms = (deadline - lease_now_ns()) / 1000000;

	snprintf(buf, sz, "%lld", (long long)(ms > 1000 ? (ms + 999) / 1000 : 1));
}

/* The server's notices (a table that exists already) are nobody's
 * business: the library writes nothing to stderr. */
static void quiet(void *ud, const char *msg)
{
	(void)ud;
	(void)msg;
}

static int listen_locked(struct pg_store *ps, int64_t deadline,
			 struct lease_err *err)
{
	PGresult *res = NULL;
	int r;

	r = pg_query(ps, deadline, "LISTEN \"" PG_CHANNEL "\"", 0, NULL, &res,
		     err);
	PQclear(res);
	return r;
}

void pg_database_changed_locked(struct pg_store *ps, const char *now)
{
	for (struct pg_lease *pl = ps->leases; pl; pl = pl->next) {
		if (!pl->renewing)
			continue;
		pl->renewing = false;
		lease_mark_lost(pl->lease, LEASE_LOSS_STORE);
	}
	if (now)
		snprintf(ps->ident, sizeof(ps->ident), "%s", now);
	ps->anew = true;
}

/*
 * After a reconnect: the database is still the one the store's grants
 * were made in.  Another, or the harness's lease table gone, is the
 * database made anew (pg_database_changed_locked).  0, or -errno where
 * the database did not answer.
 */
static int same_database_locked(struct pg_store *ps, struct lease_err *err)
{
	char now[PG_IDENT_MAX] = "";
	struct lease_err why = { 0 };
	int r = pg_identity_locked(ps, now, sizeof(now), &why);

	if (r < 0 && (!ps->conn || why.kind != LEASE_E_UNREACHABLE)) {
		if (err)
			*err = why;
		return r;
	}
	if (r < 0 || strcmp(now, ps->ident) != 0)
		pg_database_changed_locked(ps, r == 0 ? now : NULL);
	return 0;
}

int pg_connect_locked(struct pg_store *ps, int64_t deadline,
		      struct lease_err *err)
{
	char secs[24];
	int r;
	/* TCP keepalives and a user timeout bound a dead peer; the user's
	 * own settings in the URI win (libpq takes the last of each). */
	const char *keys[] = { "connect_timeout", "keepalives",
			       "keepalives_idle", "keepalives_interval",
			       "keepalives_count", "application_name",
			       "dbname", NULL };
	const char *vals[] = { secs, "1", "5", "2", "2", "leasefs",
			       ps->conninfo, NULL };

	if (ps->conn && PQstatus(ps->conn) == CONNECTION_OK)
		return 0;
	drop_conn_locked(ps);
	seconds_left(secs, sizeof(secs), deadline);
	ps->conn = PQconnectdbParams(keys, vals, 1);
	if (!ps->conn || PQstatus(ps->conn) != CONNECTION_OK) {
		char why[256];

		snprintf(why, sizeof(why), "%s", ps->conn ?
			 PQerrorMessage(ps->conn) : "out of memory");
		why[strcspn(why, "\n")] = '\0';
		drop_conn_locked(ps);
		return unreachable(ps, err, why);
	}
	PQsetnonblocking(ps->conn, 1);
	PQsetNoticeProcessor(ps->conn, quiet, NULL);
	r = listen_locked(ps, deadline, err);
	if (r == 0 && ps->ident[0])
		r = same_database_locked(ps, err);
	return r;
}

/* A notification ("VERB STORE NAME") for this store: wake waiters; a
 * revoke is checked by the holder. */
static void notified_locked(struct pg_store *ps, const PGnotify *n)
{
	const char *store = strchr(n->extra, ' ');
	size_t len = strlen(ps->key);

	if (strcmp(n->relname, PG_CHANNEL) != 0 || !store ||
	    strncmp(store + 1, ps->key, len) != 0 || store[1 + len] != ' ')
		return;
	if (strncmp(n->extra, "revoke ", 7) == 0)
		pg_revoke_noticed_locked(ps, store + 2 + len);
	ps->events++;
	pthread_cond_broadcast(&ps->changed);
}

void pg_consume_locked(struct pg_store *ps)
{
	PGnotify *n;

	if (!ps->conn)
		return;
	if (!PQconsumeInput(ps->conn)) {
		drop_conn_locked(ps);
		return;
	}
	while ((n = PQnotifies(ps->conn)) != NULL) {
		notified_locked(ps, n);
		PQfreemem(n);
	}
}

/* Wait until the socket can do `events`, or `deadline`: 0 or -ETIMEDOUT. */
static int wait_socket(PGconn *c, short events, int64_t deadline)
{
	struct pollfd p = { .fd = PQsocket(c), .events = events };

	for (;;) {
		int64_t left = (deadline - lease_now_ns()) / 1000000;
		int r;

		if (left <= 0)
			return -ETIMEDOUT;
		r = poll(&p, 1, left > 1000 ? 1000 : (int)left);
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
	}
}

/* Send, then read until the result is whole; notifications on the way
 * are acted on. */
static int run(struct pg_store *ps, int64_t deadline, const char *sql,
	       int nparams, const char *const *params, PGresult **res)
{
	PGconn *c = ps->conn;
	PGresult *last = NULL, *r;
	int f;

	if (!PQsendQueryParams(c, sql, nparams, NULL, params, NULL, NULL, 0))
		return -EIO;
	while ((f = PQflush(c)) == 1)
		if (wait_socket(c, POLLIN | POLLOUT, deadline) < 0 ||
		    !PQconsumeInput(c))
			return -ETIMEDOUT;
	if (f < 0)
		return -EIO;
	for (;;) {
		while (PQisBusy(c)) {
			if (wait_socket(c, POLLIN, deadline) < 0)
				return -ETIMEDOUT;
			if (!PQconsumeInput(c))
				return -EIO;
		}
		r = PQgetResult(c);
		if (!r)
			break;
		PQclear(last);
		last = r;
	}
	pg_consume_locked(ps);
	*res = last;
	return last ? 0 : -EIO;
}

/* The statement named a table or schema that is not there (SQLSTATE
 * undefined_table, invalid_schema_name). */
static bool vanished(const PGresult *res)
{
	const char *code = PQresultErrorField(res, PG_DIAG_SQLSTATE);

	return code && (strcmp(code, "42P01") == 0 || strcmp(code, "3F000") == 0);
}

int pg_query(struct pg_store *ps, int64_t deadline, const char *sql,
	     int nparams, const char *const *params, PGresult **res,
	     struct lease_err *err)
{
	ExecStatusType st;
	int r;

	*res = NULL;
	if (!deadline || lease_deadline_passed(deadline))
		deadline = lease_deadline_ms(QUERY_MS);
	if (!ps->conn) {
		if (!lease_deadline_passed(ps->next_connect) &&
		    ps->next_connect < deadline)
			return unreachable(ps, err, "down (retrying)");
		r = pg_connect_locked(ps, deadline, err);
		if (r < 0)
			return r;
	}
	r = run(ps, deadline, sql, nparams, params, res);
	if (r < 0) {
		PQclear(*res);
		*res = NULL;
		if (r == -ETIMEDOUT) {
			PGcancel *cancel = PQgetCancel(ps->conn);
			char buf[64];

			if (cancel) {
				PQcancel(cancel, buf, sizeof(buf));
				PQfreeCancel(cancel);
			}
		}
		drop_conn_locked(ps);
		return r == -ETIMEDOUT
			? lease_err_set(err, LEASE_E_TIMEOUT, 0, NULL, "pgstore %s: "
					"no answer in time", ps->shown)
			: unreachable(ps, err, "the connection broke");
	}
	st = PQresultStatus(*res);
	if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)
		return 0;
	if (vanished(*res)) {
		/* A database made anew, being set up again: the tables are
		 * looked at (and ours made) before the next grant. */
		ps->anew = true;
		r = lease_err_set(err, LEASE_E_UNREACHABLE, 0, NULL, "pgstore %s: "
				  "%s (the database is being made anew?)",
				  ps->shown, PQresultErrorMessage(*res));
	} else {
		r = lease_err_set(err, LEASE_E_IO, -EIO, NULL, "pgstore %s: %s",
				  ps->shown, PQresultErrorMessage(*res));
	}
	if (err)
		err->msg[strcspn(err->msg, "\n")] = '\0';
	PQclear(*res);
	*res = NULL;
	if (PQstatus(ps->conn) != CONNECTION_OK)
		drop_conn_locked(ps);
	return r;
}

int pg_cmd(struct pg_store *ps, int64_t deadline, const char *sql,
	   struct lease_err *err)
{
	PGresult *res = NULL;
	int r = pg_query(ps, deadline, sql, 0, NULL, &res, err);

	PQclear(res);
	return r;
}

int64_t pg_safe_until(const struct pg_store *ps, int64_t sent, int64_t left_ms)
{
	int64_t margin = ps->ttl_ms / 10 < 500 ? ps->ttl_ms / 10 : 500;

	return sent + (left_ms - margin) * 1000000;
}

int64_t pg_grace_ms(const struct pg_store *ps)
{
	return ps->max_ttl_ms + ps->max_ttl_ms / 3;
}

int64_t pg_i64(const PGresult *res, int row, int col)
{
	return PQgetisnull(res, row, col) ? 0
		: strtoll(PQgetvalue(res, row, col), NULL, 10);
}

/* ---- the store ------------------------------------------------------ */

static void pg_store_free(struct pg_store *ps)
{
	if (!ps)
		return;
	if (ps->conn)
		PQfinish(ps->conn);
	pthread_mutex_destroy(&ps->lock);
	pthread_cond_destroy(&ps->changed);
	free(ps->conninfo);
	free(ps->shown);
	free(ps);
}

/* `rest` follows "postgres:" or "postgresql:" ("//user@host/db?..."). */
static int pg_open(struct lease_store *store, const char *rest,
		   struct lease_err *err)
{
	struct pg_store *ps = calloc(1, sizeof(*ps));
	/* The harness's defaults (options.go:15-16). */
	char schema[PG_SCHEMA_MAX + 1] = "looprig";
	char prefix[PG_PREFIX_MAX + 1] = "looprig_";
	pthread_condattr_t ca;
	int r;

	if (!ps)
		return lease_err_set(err, LEASE_E_IO, -ENOMEM, NULL, "out of memory");
	pthread_mutex_init(&ps->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&ps->changed, &ca);
	pthread_condattr_destroy(&ca);
	ps->worker.kick_fd = -1;
	ps->max_ttl_ms = PG_DEFAULT_TTL_MS;
	if (asprintf(&ps->conninfo, "postgresql:%s", rest) < 0) {
		ps->conninfo = NULL;
		r = lease_err_set(err, LEASE_E_IO, -ENOMEM, NULL, "out of memory");
		goto fail;
	}
	r = take_params(&ps->conninfo, schema, prefix, &ps->max_ttl_ms, err);
	if (r < 0)
		goto fail;
	/* No TTL named: the harness's, or max_ttl where that is shorter. */
	ps->ttl_ms = store->opts.ttl_ms ? store->opts.ttl_ms
		: PG_DEFAULT_TTL_MS < ps->max_ttl_ms ? PG_DEFAULT_TTL_MS
		: ps->max_ttl_ms;
	ps->shown = malloc(strlen(ps->conninfo) + 8);
	if (!ps->shown) {
		r = lease_err_set(err, LEASE_E_IO, -ENOMEM, NULL, "out of memory");
		goto fail;
	}
	lease_uri_redact(ps->conninfo, ps->shown, strlen(ps->conninfo) + 8);
	pg_names_set(ps, schema, prefix);
	pthread_mutex_lock(&ps->lock);
	r = pg_connect_locked(ps, lease_deadline_ms(QUERY_MS), err);
	if (r == 0)
		r = pg_schema_open_locked(ps, err);
	if (r == 0)
		r = pg_identity_locked(ps, ps->ident, sizeof(ps->ident), err);
	pthread_mutex_unlock(&ps->lock);
	if (r < 0)
		goto fail;
	store->priv = ps;
	return 0;
fail:
	pg_store_free(ps);
	return r;
}

/* Leases of the store must have been freed before close. */
static void pg_close(struct lease_store *store)
{
	struct pg_store *ps = pg_of(store);

	if (!ps)
		return;
	pg_thread_stop(ps);
	pg_store_free(ps);
	store->priv = NULL;
}

#define PG_BACKEND(name) {                                                    \
	.scheme = name,                                                       \
	.open = pg_open,                                                      \
	.close = pg_close,                                                    \
	.try_acquire = pg_try_acquire,                                        \
	.await_change = pg_await_change,                                      \
	.release = pg_release,                                                \
	.free_lease = pg_free_lease,                                          \
	.list = pg_list,                                                      \
	.show = pg_show,                                                      \
	.revoke = pg_revoke,                                                  \
	.await_fence = pg_await_fence,                                        \
}

const struct lease_backend lease_backend_pg = PG_BACKEND("postgres");
const struct lease_backend lease_backend_pgql = PG_BACKEND("postgresql");
