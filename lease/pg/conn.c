/* SPDX-License-Identifier: MIT */
/*
 * The pgstore backend: the connection, its bounded queries and
 * notifications, and which database it reaches (the tables and what the
 * units share: pg_int.h).  The lowest unit: it calls no other of pgstore.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pg_int.h"

#define RECONNECT_MIN_MS 200

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
	for (struct lease_renewal *g = ps->renewer.grants; g; g = g->next)
		if (g->renewing)
			lease_renew_lost_locked(g, LEASE_LOSS_STORE, true);
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
		lease_renew_check_locked(&ps->renewer, store + 2 + len);
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
		deadline = lease_deadline_ms(PG_QUERY_MS);
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

/* ---- which database -------------------------------------------------- */

int pg_identity_locked(struct pg_store *ps, char *buf, size_t sz,
		       struct lease_err *err)
{
	char sql[1024];
	const char *p[] = { ps->t_main };
	PGresult *res = NULL;
	int r;

	/* pg_control_system() may be closed to this user: then the rest. */
	snprintf(sql, sizeof(sql), "SELECT CASE WHEN has_function_privilege("
		 "'pg_control_system()', 'EXECUTE') THEN (SELECT "
		 "system_identifier FROM pg_control_system())::text ELSE '-' END "
		 "|| ' ' || (SELECT oid FROM pg_database WHERE datname = "
		 "current_database())::text || ' ' || coalesce(to_regclass($1)::"
		 "oid::text, '-') || ' ' || coalesce(extract(epoch FROM "
		 PG_LEASES_MADE("%s") ")::text, '-')", ps->t_versions);
	r = pg_query(ps, 0, sql, 1, p, &res, err);
	if (r == 0)
		snprintf(buf, sz, "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	return r;
}

void pg_wait_event_locked(struct pg_store *ps, int64_t until)
{
	uint64_t seen = ps->events;
	struct timespec ts = { .tv_sec = until / 1000000000,
			       .tv_nsec = until % 1000000000 };

	while (ps->events == seen && !lease_deadline_passed(until))
		if (pthread_cond_timedwait(&ps->changed, &ps->lock, &ts) == ETIMEDOUT)
			break;
}
