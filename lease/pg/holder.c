/* SPDX-License-Identifier: MIT */
/*
 * The pgstore backend: its wire calls for the renewal engine (../renew.h),
 * whose one thread per store renews every grant held through it, reads
 * notifications and reconnects (the tables: pg_int.h).
 *
 * A renewal is the harness's (conditional on name, epoch, holder and not
 * yet expired) and reads the flag a revoker sets in our record; a revoke
 * notified makes it at once.  A row no longer ours is a refusal: taken
 * over if a later epoch has it, else expired.  The safe-until is the
 * send time plus what the database says is left, less the margin
 * (pg_safe_until()).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "pg_int.h"

#define RECONNECT_MS 2000

/* Caller holds ps->lock: why a grant that is no longer ours was lost. */
static enum lease_loss why_gone(struct pg_store *ps, const struct lease *l)
{
	char sql[256];
	const char *p[] = { l->name };
	PGresult *res = NULL;
	enum lease_loss why = LEASE_LOSS_EXPIRED;

	snprintf(sql, sizeof(sql), "SELECT epoch FROM %s WHERE name = $1",
		 ps->t_main);
	if (pg_query(ps, 0, sql, 1, p, &res, NULL) == 0 && PQntuples(res) == 1 &&
	    (uint64_t)pg_i64(res, 0, 0) > l->epoch)
		why = LEASE_LOSS_TAKEOVER;
	PQclear(res);
	return why;
}

static enum lease_renew_status renew(void *ctx, struct lease_renewal *g,
				     int64_t sent,
				     struct lease_renew_result *res)
{
	struct pg_store *ps = ctx;
	struct pg_lease *pl = pg_lease_of(g);
	struct lease *l = g->lease;
	char sql[1024], e[24], ttl[24];
	const char *p[] = { l->name, e, pl->holder, ttl, ps->key };
	int64_t until = lease_safe_until(l);
	PGresult *pr = NULL;

	snprintf(e, sizeof(e), "%" PRIu64, l->epoch);
	snprintf(ttl, sizeof(ttl), "%" PRId64, ps->ttl_ms);
	/* As the harness's renewal (lease.go:72), and our record's flag. */
	snprintf(sql, sizeof(sql), "UPDATE %s SET expires_at = clock_timestamp() "
		 "+ $4::bigint * interval '1 millisecond', revision = revision + 1 "
		 "WHERE name = $1 AND epoch = $2 AND holder = $3::bytea AND "
		 "expires_at > clock_timestamp() RETURNING (extract(epoch FROM "
		 "expires_at - clock_timestamp()) * 1000)::bigint, coalesce("
		 "(SELECT revoked FROM " PG_T_NAMES " h WHERE h.store = $5 AND "
		 "h.name = $1 AND h.epoch = $2 AND h.holder = $3::bytea), false)",
		 ps->t_main);
	if (pg_query(ps, until > sent ? until : 0, sql, 5, p, &pr, NULL) < 0)
		return LEASE_RENEW_UNREACHABLE;
	if (PQntuples(pr) != 1) {
		PQclear(pr);
		res->why = why_gone(ps, l);
		return LEASE_RENEW_REFUSED;
	}
	res->safe_until = pg_safe_until(ps, sent, pg_i64(pr, 0, 0));
	res->revoked = strcmp(PQgetvalue(pr, 0, 1), "t") == 0;
	PQclear(pr);
	return LEASE_RENEW_TAKEN;
}

/* A round: reconnect first where a grant needs it. */
static void round_begin(void *ctx)
{
	struct pg_store *ps = ctx;

	if (!ps->conn && ps->renewer.grants &&
	    lease_deadline_passed(ps->next_connect))
		pg_connect_locked(ps, lease_deadline_ms(RECONNECT_MS), NULL);
}

static void round_end(void *ctx)
{
	struct pg_store *ps = ctx;

	pthread_cond_broadcast(&ps->changed);
}

/* Notifications come on the connection's socket. */
static int wait_fd(void *ctx)
{
	struct pg_store *ps = ctx;

	return ps->conn ? PQsocket(ps->conn) : -1;
}

static void readable(void *ctx)
{
	pg_consume_locked(ctx);
}

const struct lease_renew_ops pg_renew_ops = {
	.renew = renew,
	.round_begin = round_begin,
	.round_end = round_end,
	.wait_fd = wait_fd,
	.readable = readable,
};
