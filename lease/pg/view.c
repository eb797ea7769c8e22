/* SPDX-License-Identifier: MIT */
/*
 * The pgstore backend: show, list, revoke and its fence (the tables:
 * pg_int.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_int.h"

/* The columns every view reads, for each name of `names` (a subquery
 * naming a column `name`): epoch, held (on the database's clock), ms to
 * expiry, whether our record names this holder and says revoked, pid,
 * description; then the within count and one of them.  The store's key
 * is parameter $`key`. */
static const char *view_sql(const struct pg_store *ps, const char *names,
			    int key, char *buf, size_t sz)
{
	snprintf(buf, sz,
		 "SELECT n.name, coalesce(m.epoch, 0), coalesce(m.holder IS NOT "
		 "NULL AND m.expires_at > clock_timestamp(), false), coalesce(("
		 "extract(epoch FROM m.expires_at - clock_timestamp()) * 1000)"
		 "::bigint, 0), h.name IS NOT NULL, coalesce(h.revoked, false), "
		 "coalesce(h.pid, 0), coalesce(h.description, ''), (SELECT count(*) "
		 "FROM " PG_T_WITHIN " w JOIN %s i ON i.name = w.name AND i.epoch = "
		 "w.epoch AND i.holder = w.holder AND i.expires_at > "
		 "clock_timestamp() WHERE w.store = $%d AND w.scope = n.name), "
		 "(SELECT w.name || ' ' || w.epoch FROM " PG_T_WITHIN " w JOIN %s i "
		 "ON i.name = w.name AND i.epoch = w.epoch AND i.holder = w.holder "
		 "AND i.expires_at > clock_timestamp() WHERE w.store = $%d AND "
		 "w.scope = n.name LIMIT 1) FROM %s n LEFT JOIN %s m ON m.name = "
		 "n.name LEFT JOIN " PG_T_NAMES " h ON h.store = $%d AND h.name = "
		 "m.name AND h.epoch = m.epoch AND h.holder = m.holder",
		 ps->t_main, key, ps->t_main, key, names, ps->t_main, key);
	return buf;
}

static void info_of(const PGresult *res, int i, struct lease_info *info)
{
	const char *first = PQgetvalue(res, i, 9);

	memset(info, 0, sizeof(*info));
	snprintf(info->name, sizeof(info->name), "%s", PQgetvalue(res, i, 0));
	info->epoch = (uint64_t)pg_i64(res, i, 1);
	if (strcmp(PQgetvalue(res, i, 2), "t") == 0) {
		bool ours = strcmp(PQgetvalue(res, i, 4), "t") == 0;

		info->state = ours && strcmp(PQgetvalue(res, i, 5), "t") == 0
			? LEASE_STATE_REVOKED : LEASE_STATE_HELD;
		info->holder_pid = ours ? (pid_t)pg_i64(res, i, 6) : 0;
		snprintf(info->holder, sizeof(info->holder), "%s", ours ?
			 PQgetvalue(res, i, 7) : "not a leasefs mount (no loss "
			 "channel but its expiry)");
	}
	info->within = (unsigned)pg_i64(res, i, 8);
	if (info->within && first[0]) {
		unsigned long long e = 0;

		sscanf(first, "%512s %llu", info->within_name, &e);
		info->within_epoch = e;
	}
}

int pg_show(struct lease_store *store, const char *name,
	    struct lease_info *info, struct lease_err *err)
{
	struct pg_store *ps = pg_of(store);
	char sql[4096];
	const char *p[] = { name, ps->key };
	PGresult *res = NULL;
	int r;

	memset(info, 0, sizeof(*info));
	snprintf(info->name, sizeof(info->name), "%s", name);
	view_sql(ps, "(SELECT $1::text AS name)", 2, sql, sizeof(sql));
	pthread_mutex_lock(&ps->lock);
	r = pg_query(ps, 0, sql, 2, p, &res, err);
	pthread_mutex_unlock(&ps->lock);
	if (r == 0 && PQntuples(res) == 1)
		info_of(res, 0, info);
	PQclear(res);
	return r;
}

int pg_list(struct lease_store *store, lease_list_cb cb, void *userdata,
	    struct lease_err *err)
{
	struct pg_store *ps = pg_of(store);
	char sql[4096], names[512];
	const char *p[] = { ps->key };
	PGresult *res = NULL;
	int r;

	/* The harness's names, and the scopes of our live nested grants. */
	snprintf(names, sizeof(names), "(SELECT name FROM %s UNION SELECT w.scope "
		 "FROM " PG_T_WITHIN " w JOIN %s i ON i.name = w.name AND i.epoch "
		 "= w.epoch AND i.holder = w.holder AND i.expires_at > "
		 "clock_timestamp() WHERE w.store = $1)", ps->t_main, ps->t_main);
	view_sql(ps, names, 1, sql, sizeof(sql));
	strcat(sql, " ORDER BY n.name");
	pthread_mutex_lock(&ps->lock);
	r = pg_query(ps, 0, sql, 1, p, &res, err);
	pthread_mutex_unlock(&ps->lock);
	for (int i = 0; r == 0 && i < PQntuples(res); i++) {
		struct lease_info info;

		info_of(res, i, &info);
		r = cb(&info, userdata);
	}
	PQclear(res);
	return r;
}

/*
 * A leasefs holder's record is marked revoked and the holder notified; a
 * holder without one (a harness session) is left alone: its expiry is
 * its fence, and it keeps renewing if it lives.
 */
int pg_revoke(struct lease_store *store, const char *name, int64_t deadline,
	      uint64_t *epoch, struct lease_err *err)
{
	struct pg_store *ps = pg_of(store);
	char sql[1024];
	const char *p[] = { name, ps->key };
	PGresult *res = NULL;
	int r;

	snprintf(sql, sizeof(sql), "WITH m AS (SELECT epoch, holder FROM %s WHERE "
		 "name = $1 AND holder IS NOT NULL AND expires_at > "
		 "clock_timestamp()), h AS (UPDATE " PG_T_NAMES " h SET revoked = "
		 "true FROM m WHERE h.store = $2 AND h.name = $1 AND h.epoch = "
		 "m.epoch AND h.holder = m.holder AND NOT h.revoked RETURNING "
		 "h.epoch) SELECT (SELECT epoch FROM m), (SELECT epoch FROM h), "
		 "(SELECT revoked FROM " PG_T_NAMES " x, m WHERE x.store = $2 AND "
		 "x.name = $1 AND x.epoch = m.epoch AND x.holder = m.holder), CASE "
		 "WHEN EXISTS (SELECT 1 FROM h) THEN pg_notify('" PG_CHANNEL "', "
		 "'revoke ' || $2 || ' ' || $1) END", ps->t_main);
	pthread_mutex_lock(&ps->lock);
	r = pg_query(ps, deadline, sql, 2, p, &res, err);
	pthread_mutex_unlock(&ps->lock);
	if (r < 0)
		return r;
	if (PQgetisnull(res, 0, 0))
		r = lease_err_not_held(err, name);
	else if (PQgetisnull(res, 0, 1) &&
		 strcmp(PQgetvalue(res, 0, 2), "t") == 0)
		r = lease_err_not_held(err, name); /* revoked already: nothing held */
	else
		*epoch = (uint64_t)pg_i64(res, 0, 0);
	PQclear(res);
	return r;
}

/* Where the revoked holder at `epoch` stands: 1 fenced (*out set), 0 not
 * yet (*ms to its expiry), or -errno. */
static int fence_state(struct pg_store *ps, const char *name, uint64_t epoch,
		       enum lease_fence *out, bool *leasefs, int64_t *ms,
		       struct lease_err *err)
{
	char sql[1024], e[24];
	const char *p[] = { name, e, ps->key };
	PGresult *res = NULL;
	int r;

	snprintf(e, sizeof(e), "%" PRIu64, epoch);
	snprintf(sql, sizeof(sql), "SELECT m.epoch, m.holder IS NULL, "
		 "m.expires_at <= clock_timestamp(), coalesce((extract(epoch FROM "
		 "m.expires_at - clock_timestamp()) * 1000)::bigint, 0), EXISTS "
		 "(SELECT 1 FROM " PG_T_NAMES " h WHERE h.store = $3 AND h.name = $1 "
		 "AND h.epoch = $2::bigint AND h.holder = m.holder) FROM %s m WHERE "
		 "m.name = $1", ps->t_main);
	r = pg_query(ps, 0, sql, 3, p, &res, err);
	if (r < 0)
		return r;
	r = 0;
	if (PQntuples(res) != 1 || (uint64_t)pg_i64(res, 0, 0) > epoch ||
	    strcmp(PQgetvalue(res, 0, 1), "t") == 0) {
		*out = LEASE_FENCE_ACKED;
		r = 1;
	} else if (strcmp(PQgetvalue(res, 0, 2), "t") == 0) {
		*out = LEASE_FENCE_EXPIRED;
		r = 1;
	} else {
		*ms = pg_i64(res, 0, 3);
		*leasefs = strcmp(PQgetvalue(res, 0, 4), "t") == 0;
	}
	PQclear(res);
	return r;
}

/* The fence's look and wait, under ps->lock. */
struct fence_ctx {
	struct pg_store *ps;
	const char *name;
	uint64_t epoch;
};

static int fence_look(void *ctx, enum lease_fence *out, bool *leasefs,
		      int64_t *ms, struct lease_err *err)
{
	struct fence_ctx *fc = ctx;

	return fence_state(fc->ps, fc->name, fc->epoch, out, leasefs, ms, err);
}

static void fence_wait(void *ctx, int64_t until)
{
	pg_wait_event_locked(((struct fence_ctx *)ctx)->ps, until);
}

int pg_await_fence(struct lease_store *store, const char *name,
		   uint64_t epoch, int64_t deadline, enum lease_fence *out,
		   struct lease_err *err)
{
	struct pg_store *ps = pg_of(store);
	struct fence_ctx fc = { ps, name, epoch };
	const struct lease_fence_look fl = {
		.state = fence_look, .wait = fence_wait, .ctx = &fc,
		.slack_ms = 100, .untold = "it releases, or stops renewing and "
		"the database expires it",
	};
	int r;

	*out = LEASE_FENCE_PENDING;
	pthread_mutex_lock(&ps->lock);
	/* The thread reads the notifications a release sends. */
	r = lease_renew_start_locked(&ps->renewer);
	if (r == 0)
		r = lease_fence_wait(&fl, name, epoch, deadline, out, err);
	pthread_mutex_unlock(&ps->lock);
	return r;
}
