/* SPDX-License-Identifier: MIT */
/*
 * The pgstore backend: the store's one thread, which renews every grant
 * held through the store, reads notifications, and reconnects (the
 * tables: pg_int.h).
 *
 * A grant is renewed every TTL/3 while it is ours; a revoke (noticed by
 * notification, or by the flag a renewal reads) marks it lost and it is
 * still renewed until released, so that a holder draining its writes
 * keeps every successor out; a renewal that finds the row no longer ours
 * marks it lost for good.  A database out of reach costs retries once a
 * second: the grant's safe-until passes on its own meanwhile.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pg_int.h"

#define RETRY_MS 1000

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

/* Caller holds ps->lock. */
static void renew_locked(struct pg_store *ps, struct pg_lease *pl)
{
	struct lease *l = pl->lease;
	char sql[1024], e[24], ttl[24];
	const char *p[] = { l->name, e, pl->holder, ttl, ps->key };
	int64_t sent = lease_now_ns(), until = lease_safe_until(l);
	PGresult *res = NULL;
	int r;

	pl->check_now = false;
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
	r = pg_query(ps, until > sent ? until : 0, sql, 5, p, &res, NULL);
	lease_store_reach(l->store, r == 0);
	if (r < 0) {
		pl->next_renew = lease_deadline_ms(RETRY_MS);
		if (until && lease_now_ns() >= until)
			lease_mark_lost(l, LEASE_LOSS_STORE);
		return;
	}
	if (PQntuples(res) != 1) {
		PQclear(res);
		pl->renewing = false;
		lease_mark_lost(l, why_gone(ps, l));
		return;
	}
	lease_set_safe_until(l, pg_safe_until(ps, sent, pg_i64(res, 0, 0)));
	if (strcmp(PQgetvalue(res, 0, 1), "t") == 0)
		lease_mark_lost(l, LEASE_LOSS_REVOKED);
	PQclear(res);
	pl->next_renew = sent + ps->ttl_ms / 3 * 1000000;
}

/* Caller holds ps->lock: renew what is due; ms to the next duty. */
static int duties_locked(struct pg_store *ps)
{
	int64_t now = lease_now_ns(), next = now + (int64_t)RETRY_MS * 1000000;

	if (!ps->conn && ps->leases && lease_deadline_passed(ps->next_connect))
		pg_connect_locked(ps, lease_deadline_ms(RETRY_MS * 2), NULL);
	for (struct pg_lease *pl = ps->leases; pl; pl = pl->next) {
		if (!pl->renewing)
			continue;
		if (pl->check_now || now >= pl->next_renew)
			renew_locked(ps, pl);
		if (pl->renewing && pl->next_renew < next)
			next = pl->next_renew;
	}
	pthread_cond_broadcast(&ps->changed);
	now = lease_now_ns();
	return next > now ? (int)((next - now) / 1000000) + 1 : 0;
}

static void *holder_thread(void *arg)
{
	struct pg_store *ps = arg;

	pthread_mutex_lock(&ps->lock);
	while (!ps->worker.stopping) {
		int timeout = duties_locked(ps);
		int fd = ps->conn ? PQsocket(ps->conn) : -1;
		short ev;

		pthread_mutex_unlock(&ps->lock);
		ev = lease_worker_wait(&ps->worker, fd, timeout);
		pthread_mutex_lock(&ps->lock);
		if (ev & POLLIN)
			pg_consume_locked(ps);
	}
	pthread_mutex_unlock(&ps->lock);
	return NULL;
}

int pg_thread_start_locked(struct pg_store *ps)
{
	return lease_worker_start_locked(&ps->worker, holder_thread, ps);
}

void pg_thread_stop(struct pg_store *ps)
{
	lease_worker_stop(&ps->worker, &ps->lock);
}

int pg_holder_add(struct pg_store *ps, struct pg_lease *pl)
{
	int r;

	pthread_mutex_lock(&ps->lock);
	r = pg_thread_start_locked(ps);
	if (r == 0) {
		pl->renewing = true;
		pl->next_renew = lease_now_ns() + ps->ttl_ms / 3 * 1000000;
		pl->next = ps->leases;
		ps->leases = pl;
		lease_worker_kick(&ps->worker);
	}
	pthread_mutex_unlock(&ps->lock);
	return r;
}

void pg_holder_remove(struct pg_store *ps, struct pg_lease *pl)
{
	pthread_mutex_lock(&ps->lock);
	for (struct pg_lease **pp = &ps->leases; *pp; pp = &(*pp)->next) {
		if (*pp == pl) {
			*pp = pl->next;
			break;
		}
	}
	pl->renewing = false;
	pthread_mutex_unlock(&ps->lock);
}

void pg_revoke_noticed_locked(struct pg_store *ps, const char *name)
{
	for (struct pg_lease *pl = ps->leases; pl; pl = pl->next) {
		if (strcmp(pl->lease->name, name) == 0) {
			pl->check_now = true;
			lease_worker_kick(&ps->worker);
		}
	}
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
