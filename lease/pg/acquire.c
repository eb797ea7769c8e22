/* SPDX-License-Identifier: MIT */
/*
 * The pgstore backend: acquire and release (the tables: pg_int.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "pg_int.h"

/* How long a retry waits at most for what refused it to let go: a
 * harness release sends no notification, so it is looked for this often. */
#define RETRY_LOOK_MS 1000

/* '{"a","b"}': names need no escaping (lease.h's grammar). */
static char *text_array(const char *first, const struct lease_scopes *sc)
{
	size_t n = strlen(first) + 8;
	char *s, *p;

	for (size_t i = 0; i < sc->n; i++)
		n += strlen(sc->names[i]) + 3;
	s = malloc(n);
	if (!s)
		return NULL;
	p = s + sprintf(s, "{\"%s\"", first);
	for (size_t i = 0; i < sc->n; i++)
		p += sprintf(p, ",\"%s\"", sc->names[i]);
	strcpy(p, "}");
	return s;
}

static int held(const char *who, int64_t epoch, struct lease_err *err)
{
	int r = lease_err_set(err, LEASE_E_HELD, 0, who, "lease '%s' is held at "
			      "epoch %" PRId64, who, epoch);

	if (err)
		err->holder_epoch = (uint64_t)epoch;
	return r;
}

/* In the transaction: leasefs's rows of the name and its scopes, made if
 * missing and locked in name order: one leasefs acquirer at a time among
 * those whose names or scopes meet. */
static int lock_own(struct pg_store *ps, int64_t deadline, const char *names,
		    struct lease_err *err)
{
	const char *p[] = { ps->key, names };
	PGresult *res = NULL;
	int r;

	r = pg_query(ps, deadline, "INSERT INTO " PG_T_NAMES " (store, name) "
		     "SELECT $1, n FROM unnest($2::text[]) n ORDER BY n ON CONFLICT "
		     "(store, name) DO NOTHING", 2, p, &res, err);
	PQclear(res);
	if (r == 0)
		r = pg_query(ps, deadline, "SELECT name FROM " PG_T_NAMES " WHERE "
			     "store = $1 AND name = ANY($2::text[]) ORDER BY name "
			     "FOR UPDATE", 2, p, &res, err);
	PQclear(res);
	return r;
}

/* In the transaction, as the harness's acquire (lease.go:117-135): the
 * row made if missing and locked; held is busy; *epoch the row's. */
static int lock_row(struct pg_store *ps, int64_t deadline, const char *name,
		    int64_t *epoch, struct lease_err *err)
{
	char sql[512];
	const char *p[] = { name };
	PGresult *res = NULL;
	int r;

	snprintf(sql, sizeof(sql), "INSERT INTO %s (name, epoch, revision) "
		 "VALUES ($1, 0, 0) ON CONFLICT (name) DO NOTHING", ps->t_main);
	r = pg_query(ps, deadline, sql, 1, p, &res, err);
	PQclear(res);
	if (r < 0)
		return r;
	snprintf(sql, sizeof(sql), "SELECT epoch, holder IS NOT NULL AND "
		 "expires_at IS NOT NULL AND expires_at > clock_timestamp() FROM "
		 "%s WHERE name = $1 FOR UPDATE", ps->t_main);
	r = pg_query(ps, deadline, sql, 1, p, &res, err);
	if (r == 0 && PQntuples(res) != 1)
		r = lease_err_set(err, LEASE_E_IO, -EIO, name, "pgstore: lease "
				  "'%s' vanished while locked", name);
	if (r == 0)
		*epoch = pg_i64(res, 0, 0);
	if (r == 0 && *epoch < 0)
		r = lease_err_set(err, LEASE_E_CORRUPT, 0, name, "lease '%s' has a "
				  "negative epoch in %s", name, ps->t_main);
	else if (r == 0 && PQgetvalue(res, 0, 1)[0] == 't')
		r = held(name, *epoch, err);
	else if (r == 0 && *epoch == INT64_MAX)
		r = lease_err_set(err, LEASE_E_CORRUPT, 0, name,
				  "lease '%s' has used up its epochs", name);
	PQclear(res);
	return r;
}

/* The TTL is at most the store's max_ttl (which the grace assumes):
 * 0, or LEASE_E_USAGE naming both. */
static int fits(const struct pg_store *ps, struct lease_err *err)
{
	if (ps->ttl_ms <= ps->max_ttl_ms)
		return 0;
	return lease_err_set(err, LEASE_E_USAGE, 0, NULL, "pgstore %s: a TTL of "
			     "%.3g s is longer than the store's max_ttl of %.3g s "
			     "(the longest TTL any of its holders uses; raise "
			     "max_ttl= in the URI of every mount of the store)",
			     ps->shown, (double)ps->ttl_ms / 1e3,
			     (double)ps->max_ttl_ms / 1e3);
}

/* In the transaction: the harness's lease table is older than the grace
 * (a holder from before it, in a database made anew, has stopped
 * believing): 0, or busy. */
static int settled(struct pg_store *ps, int64_t deadline, const char *name,
		   int64_t epoch, struct lease_err *err)
{
	int64_t age = 0;
	int r = pg_age_ms_locked(ps, deadline, &age, err);

	if (r < 0 || age >= pg_grace_ms(ps))
		return r;
	r = held(name, epoch, err);
	if (err)
		snprintf(err->msg, sizeof(err->msg), "pgstore %s: lease '%s' is "
			 "not granted before the harness's lease table %s is "
			 "%.3g s old (it is %.3g s): a holder from before it (a "
			 "database made anew) may believe itself valid until "
			 "then", ps->shown, name, ps->t_main,
			 (double)pg_grace_ms(ps) / 1e3,
			 age > 0 ? (double)age / 1e3 : 0.0);
	return r;
}

/* A scope held (by anyone: read, neither made nor locked) is busy. */
static int check_scopes(struct pg_store *ps, int64_t deadline,
			const char *scopes, struct lease_err *err)
{
	char sql[512];
	const char *p[] = { scopes };
	PGresult *res = NULL;
	int r;

	snprintf(sql, sizeof(sql), "SELECT name, epoch FROM %s WHERE name = "
		 "ANY($1::text[]) AND holder IS NOT NULL AND expires_at > "
		 "clock_timestamp() ORDER BY name LIMIT 1", ps->t_main);
	r = pg_query(ps, deadline, sql, 1, p, &res, err);
	if (r == 0 && PQntuples(res) > 0)
		r = held(PQgetvalue(res, 0, 0), pg_i64(res, 0, 1), err);
	PQclear(res);
	return r;
}

/* A grant living within `name` (its holder still holds it) is busy. */
static int check_within(struct pg_store *ps, int64_t deadline,
			const char *name, struct lease_err *err)
{
	char sql[1024];
	const char *p[] = { ps->key, name };
	PGresult *res;
	int r;

	snprintf(sql, sizeof(sql), "SELECT w.name, w.epoch FROM " PG_T_WITHIN
		 " w JOIN %s m ON m.name = w.name AND m.epoch = w.epoch AND "
		 "m.holder = w.holder AND m.expires_at > clock_timestamp() WHERE "
		 "w.store = $1 AND w.scope = $2 LIMIT 1", ps->t_main);
	r = pg_query(ps, deadline, sql, 2, p, &res, err);
	if (r == 0 && PQntuples(res) > 0)
		r = held(PQgetvalue(res, 0, 0), pg_i64(res, 0, 1), err);
	PQclear(res);
	return r;
}

/* The grant itself, as the harness's (lease.go:136-138): the row at
 * *epoch + 1, which *epoch becomes; *safe its safe-until. */
static int take(struct pg_store *ps, int64_t deadline, struct pg_lease *pl,
		const char *name, int64_t *epoch, int64_t *safe,
		struct lease_err *err)
{
	char sql[1024], e[24], ttl[24];
	const char *p[] = { name, e, pl->holder, ttl };
	int64_t sent = lease_now_ns();
	PGresult *res;
	int r;

	snprintf(e, sizeof(e), "%" PRId64, *epoch + 1);
	snprintf(ttl, sizeof(ttl), "%" PRId64, ps->ttl_ms);
	snprintf(sql, sizeof(sql), "UPDATE %s SET epoch = $2, holder = $3::bytea, "
		 "expires_at = clock_timestamp() + $4::bigint * interval "
		 "'1 millisecond', revision = revision + 1 WHERE name = $1 "
		 "RETURNING (extract(epoch FROM expires_at - clock_timestamp()) * "
		 "1000)::bigint", ps->t_main);
	r = pg_query(ps, deadline, sql, 4, p, &res, err);
	if (r == 0 && PQntuples(res) != 1)
		r = lease_err_set(err, LEASE_E_IO, -EIO, name, "pgstore: lease "
				  "'%s' vanished while locked", name);
	if (r == 0) {
		*epoch += 1;
		*safe = pg_safe_until(ps, sent, pg_i64(res, 0, 0));
	}
	PQclear(res);
	return r;
}

/* Our records of the grant: the holder's (its loss channel) and one per
 * scope, in place of any an earlier holder of the name left. */
static int records(struct pg_store *ps, int64_t deadline, struct pg_lease *pl,
		   const char *name, int64_t epoch, const char *scopes,
		   const char *desc, struct lease_err *err)
{
	char e[24], pid[16];
	const char *p[] = { ps->key, name, e, pl->holder, pid, desc ? desc : "",
			    scopes };
	PGresult *res = NULL;
	int r;

	snprintf(e, sizeof(e), "%" PRId64, epoch);
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	r = pg_query(ps, deadline, "WITH w AS (DELETE FROM " PG_T_WITHIN " WHERE "
		     "store = $1 AND name = $2) UPDATE " PG_T_NAMES " SET epoch = $3, "
		     "holder = $4::bytea, pid = $5, description = $6, revoked = "
		     "false WHERE store = $1 AND name = $2", 6, p, &res, err);
	PQclear(res);
	if (r < 0 || !scopes)
		return r;
	/* After the DELETE: a data-modifying CTE and the statement see one
	 * snapshot, so the insert is a statement of its own. */
	{
		const char *q[] = { ps->key, name, e, pl->holder, scopes };

		r = pg_query(ps, deadline, "INSERT INTO " PG_T_WITHIN " (store, "
			     "scope, name, epoch, holder) SELECT $1, unnest($5::"
			     "text[]), $2, $3, $4::bytea", 5, q, &res, err);
	}
	PQclear(res);
	return r;
}

static struct pg_lease *pg_lease_new(void)
{
	struct pg_lease *pl = calloc(1, sizeof(*pl));
	uint8_t rnd[32];

	if (!pl)
		return NULL;
	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
		free(pl);
		return NULL;
	}
	strcpy(pl->holder, "\\x");
	for (int i = 0; i < 32; i++)
		snprintf(pl->holder + 2 + 2 * i, 3, "%02x", rnd[i]);
	return pl;
}

/* Caller holds ps->lock: one transaction from the rows to the records. */
static int acquire_locked(struct pg_store *ps, int64_t deadline,
			  struct pg_lease *pl, const char *name,
			  const struct lease_scopes *sc, const char *desc,
			  int64_t *epoch, int64_t *safe, struct lease_err *err)
{
	const struct lease_scopes rest = { sc->n ? sc->names + 1 : NULL,
					   sc->n ? sc->n - 1 : 0 };
	char *names = text_array(name, sc);
	char *scopes = sc->n ? text_array(sc->names[0], &rest) : NULL;
	int r;

	if (!names || (sc->n && !scopes)) {
		free(names);
		free(scopes);
		return lease_err_set(err, LEASE_E_IO, -ENOMEM, name, "out of memory");
	}
	r = pg_cmd(ps, deadline, "BEGIN", err);
	if (r == 0)
		r = lock_own(ps, deadline, names, err);
	if (r == 0)
		r = lock_row(ps, deadline, name, epoch, err);
	if (r == 0)
		r = settled(ps, deadline, name, *epoch, err);
	if (r == 0 && scopes)
		r = check_scopes(ps, deadline, scopes, err);
	if (r == 0)
		r = check_within(ps, deadline, name, err);
	if (r == 0)
		r = take(ps, deadline, pl, name, epoch, safe, err);
	if (r == 0)
		r = records(ps, deadline, pl, name, *epoch, scopes, desc, err);
	if (r == 0)
		r = pg_cmd(ps, deadline, "COMMIT", err);
	else if (ps->conn)
		pg_cmd(ps, deadline, "ROLLBACK", NULL);
	free(names);
	free(scopes);
	return r;
}

int pg_try_acquire(struct lease_store *store, const char *name,
		   const struct lease_scopes *sc, int64_t deadline,
		   struct lease **out, struct lease_err *err)
{
	struct pg_store *ps = pg_of(store);
	struct pg_lease *pl = pg_lease_new();
	struct lease *l = NULL;
	int64_t epoch = 0, safe = 0;
	int r;

	if (!pl)
		return lease_err_set(err, LEASE_E_IO, -ENOMEM, name, "out of memory");
	pthread_mutex_lock(&ps->lock);
	r = fits(ps, err);
	if (r == 0 && ps->anew)
		r = pg_schema_again_locked(ps, err);
	if (r == 0)
		r = acquire_locked(ps, deadline, pl, name, sc, store->opts.holder,
				   &epoch, &safe, err);
	pthread_mutex_unlock(&ps->lock);
	if (r == 0 && (r = lease_alloc(store, name, (uint64_t)epoch, sc, &l)) < 0)
		lease_err_set(err, LEASE_E_IO, r, name, "out of memory");
	if (r < 0) {
		free(pl);
		return r;
	}
	pl->rn.lease = l;
	l->priv = pl;
	lease_set_safe_until(l, safe);
	r = lease_renew_add(&ps->renewer, &pl->rn);
	if (r < 0) {
		/* No renewals: the grant expires by itself; let it go now. */
		pg_release(l, deadline);
		l->priv = NULL;
		lease_dispose(l);
		free(pl);
		return lease_err_set(err, LEASE_E_IO, r, name, "pgstore: cannot "
				     "start the renewal thread: %s", strerror(-r));
	}
	*out = l;
	return 0;
}

void pg_await_change(struct lease_store *store, const char *name,
		     const struct lease_scopes *sc, int64_t deadline)
{
	struct pg_store *ps = pg_of(store);
	int64_t until = lease_deadline_ms(RETRY_LOOK_MS);

	(void)name;
	(void)sc;
	pthread_mutex_lock(&ps->lock);
	if (lease_renew_start_locked(&ps->renewer) == 0)
		pg_wait_event_locked(ps, until < deadline ? until : deadline);
	pthread_mutex_unlock(&ps->lock);
}

/* Drop our records and clear the grant iff it is still ours (as the
 * harness's release, lease.go:91), tell waiters: in the lock order. */
int pg_release(struct lease *l, int64_t deadline)
{
	struct pg_store *ps = pg_of(l->store);
	struct pg_lease *pl = l->priv;
	char sql[512], e[24];
	const char *p[] = { l->name, e, pl ? pl->holder : "", ps->key };
	PGresult *res = NULL;
	int r;

	if (!pl)
		return 0;
	lease_renew_remove(&ps->renewer, &pl->rn);
	snprintf(e, sizeof(e), "%" PRIu64, l->epoch);
	pthread_mutex_lock(&ps->lock);
	r = pg_cmd(ps, deadline, "BEGIN", NULL);
	if (r == 0)
		r = pg_query(ps, deadline, "WITH a AS (UPDATE " PG_T_NAMES " SET "
			     "holder = NULL, pid = NULL, description = NULL, revoked "
			     "= false WHERE store = $4 AND name = $1 AND epoch = $2 "
			     "AND holder = $3::bytea), b AS (DELETE FROM " PG_T_WITHIN
			     " WHERE store = $4 AND name = $1 AND epoch = $2 AND "
			     "holder = $3::bytea) SELECT pg_notify('" PG_CHANNEL "', "
			     "'release ' || $4 || ' ' || $1)", 4, p, &res, NULL);
	PQclear(res);
	snprintf(sql, sizeof(sql), "UPDATE %s SET holder = NULL, expires_at = "
		 "NULL, revision = revision + 1 WHERE name = $1 AND epoch = $2 AND "
		 "holder = $3::bytea", ps->t_main);
	if (r == 0)
		r = pg_query(ps, deadline, sql, 3, p, &res, NULL);
	PQclear(res);
	if (r == 0)
		r = pg_cmd(ps, deadline, "COMMIT", NULL);
	else if (ps->conn)
		pg_cmd(ps, deadline, "ROLLBACK", NULL);
	pthread_mutex_unlock(&ps->lock);
	/* Failed: the grant expires by itself at its TTL, the backstop. */
	return r;
}

void pg_free_lease(struct lease *l)
{
	struct pg_lease *pl = l->priv;

	if (!pl)
		return;
	lease_renew_remove(&pg_of(l->store)->renewer, &pl->rn);
	free(pl);
	l->priv = NULL;
}
