/* SPDX-License-Identifier: MIT */
/* The renewal engine of the TTL stores (the rules and locks: renew.h). */
#include <poll.h>
#include <string.h>

#include "renew.h"

/* A renewal that could not reach the store is retried this much later,
 * unless the store's rules say otherwise. */
#define RETRY_MS 1000
/* A fence is looked at this often when nothing tells of a change (a
 * harness release, an expiry). */
#define FENCE_LOOK_MS 500

void lease_renew_init(struct lease_renewer *rn, pthread_mutex_t *lock,
		      const struct lease_renew_ops *ops, void *ctx,
		      int64_t ttl_ms)
{
	memset(rn, 0, sizeof(*rn));
	rn->lock = lock;
	rn->ops = ops;
	rn->ctx = ctx;
	rn->ttl_ms = ttl_ms;
	rn->rules = (struct lease_renew_rules){ .retry_ms = RETRY_MS };
	rn->worker.kick_fd = -1;
}

/* TTL/3 of `g` after `t` (as the stores always counted it: whole ms). */
static int64_t third_after(const struct lease_renewer *rn,
			   const struct lease_renewal *g, int64_t t)
{
	return t + (g->ttl_ms ? g->ttl_ms : rn->ttl_ms) / 3 * 1000000;
}

void lease_renew_lost_locked(struct lease_renewal *g, enum lease_loss why,
			     bool for_good)
{
	if (for_good)
		g->renewing = false;
	lease_mark_lost(g->lease, why);
}

/* Caller holds the lock: what a renewal of `g` sent at `sent` found, with
 * `until` the safe-until read before it, applied. */
static void apply(struct lease_renewer *rn, struct lease_renewal *g,
		  int64_t sent, int64_t until, enum lease_renew_status st,
		  struct lease_renew_result res)
{
	struct lease *l = g->lease;

	if (st != LEASE_RENEW_HELD_BACK && st != LEASE_RENEW_SENT)
		lease_store_reach(l->store, st != LEASE_RENEW_UNREACHABLE);
	switch (st) {
	case LEASE_RENEW_UNREACHABLE:
	case LEASE_RENEW_HELD_BACK:
	case LEASE_RENEW_SENT: /* not an answer: as held back */
		g->next_renew = lease_deadline_ms(rn->rules.retry_ms);
		if (until && lease_now_ns() >= until)
			lease_mark_lost(l, LEASE_LOSS_STORE);
		return;
	case LEASE_RENEW_REFUSED:
		lease_renew_lost_locked(g, res.why, true);
		return;
	case LEASE_RENEW_TAKEN:
		break;
	}
	if (!rn->rules.safe_until_forward ||
	    res.safe_until > lease_safe_until(l))
		lease_set_safe_until(l, res.safe_until);
	if (rn->ops->renewed && rn->ops->renewed(rn->ctx, g))
		res.revoked = true;
	if (res.revoked)
		lease_mark_lost(l, LEASE_LOSS_REVOKED);
	g->next_renew = third_after(rn, g, sent);
}

/* Caller holds the lock: one renewal of `g`, and what it found applied
 * (now, or when its answer comes). */
static void renew_one(struct lease_renewer *rn, struct lease_renewal *g)
{
	struct lease_renew_result res = { 0 };
	int64_t sent = lease_now_ns(), until = lease_safe_until(g->lease);
	enum lease_renew_status st;

	g->check_now = false;
	st = rn->ops->renew(rn->ctx, g, sent, &res);
	if (st == LEASE_RENEW_SENT) {
		g->in_flight = true;
		g->sent_until = until;
		return;
	}
	apply(rn, g, sent, until, st, res);
}

void lease_renew_answer_locked(struct lease_renewer *rn,
			       struct lease_renewal *g, int64_t sent,
			       enum lease_renew_status st,
			       const struct lease_renew_result *res)
{
	g->in_flight = false;
	if (g->renewing)
		apply(rn, g, sent, g->sent_until, st, *res);
}

/* Caller holds the lock: the rules that end a grant without a renewal
 * (expire_at_safe_until, stop_at_loss); true if `g` is still renewed. */
static bool still_renewed(const struct lease_renewer *rn,
			  struct lease_renewal *g)
{
	int64_t until = lease_safe_until(g->lease);

	if (rn->rules.expire_at_safe_until && until &&
	    lease_now_ns() >= until)
		lease_mark_lost(g->lease, LEASE_LOSS_EXPIRED);
	if (rn->rules.stop_at_loss && lease_is_lost(g->lease))
		g->renewing = false;
	return g->renewing;
}

/* When the thread must next look at `g`: its renewal, and with
 * expire_at_safe_until its safe-until. */
static int64_t next_look(const struct lease_renewer *rn,
			 const struct lease_renewal *g)
{
	int64_t until = lease_safe_until(g->lease);
	int64_t t = g->in_flight ? INT64_MAX : g->next_renew;

	if (rn->rules.expire_at_safe_until && until && until < t)
		return until;
	return t;
}

int lease_renew_round_locked(struct lease_renewer *rn)
{
	const struct lease_renew_ops *ops = rn->ops;
	int64_t now = lease_now_ns(), next = now + (int64_t)RETRY_MS * 1000000;

	if (ops->round_begin)
		ops->round_begin(rn->ctx);
	for (struct lease_renewal *g = rn->grants; g; g = g->next) {
		if (!g->renewing || !still_renewed(rn, g))
			continue;
		if (ops->look)
			ops->look(rn->ctx, g);
		if (!g->in_flight &&
		    (g->check_now || lease_now_ns() >= g->next_renew))
			renew_one(rn, g);
		if (still_renewed(rn, g) && next_look(rn, g) < next)
			next = next_look(rn, g);
	}
	if (ops->round_end)
		ops->round_end(rn->ctx);
	now = lease_now_ns();
	return next > now ? (int)((next - now) / 1000000) + 1 : 0;
}

static void *renew_thread(void *arg)
{
	struct lease_renewer *rn = arg;

	pthread_mutex_lock(rn->lock);
	while (!rn->worker.stopping) {
		int timeout = lease_renew_round_locked(rn);
		int fd = rn->ops->wait_fd ? rn->ops->wait_fd(rn->ctx) : -1;
		short ev = POLLIN;

		pthread_mutex_unlock(rn->lock);
		if (rn->ops->wait)
			rn->ops->wait(rn->ctx, rn->worker.kick_fd, timeout);
		else
			ev = lease_worker_wait(&rn->worker, fd, timeout);
		pthread_mutex_lock(rn->lock);
		if ((ev & POLLIN) && rn->ops->readable)
			rn->ops->readable(rn->ctx);
	}
	pthread_mutex_unlock(rn->lock);
	return NULL;
}

int lease_renew_start_locked(struct lease_renewer *rn)
{
	return lease_worker_start_locked(&rn->worker, renew_thread, rn);
}

int lease_renew_add_from(struct lease_renewer *rn, struct lease_renewal *g,
			 int64_t from)
{
	int r;

	pthread_mutex_lock(rn->lock);
	r = lease_renew_start_locked(rn);
	if (r == 0) {
		g->renewing = true;
		g->in_flight = false;
		g->next_renew = third_after(rn, g, from);
		g->next = rn->grants;
		rn->grants = g;
		lease_worker_kick(&rn->worker);
	}
	pthread_mutex_unlock(rn->lock);
	return r;
}

int lease_renew_add(struct lease_renewer *rn, struct lease_renewal *g)
{
	return lease_renew_add_from(rn, g, lease_now_ns());
}

void lease_renew_remove(struct lease_renewer *rn, struct lease_renewal *g)
{
	pthread_mutex_lock(rn->lock);
	for (struct lease_renewal **pp = &rn->grants; *pp; pp = &(*pp)->next) {
		if (*pp == g) {
			*pp = g->next;
			break;
		}
	}
	g->renewing = false;
	if (g->in_flight && rn->ops->forget)
		rn->ops->forget(rn->ctx, g);
	g->in_flight = false;
	pthread_mutex_unlock(rn->lock);
}

void lease_renew_stop(struct lease_renewer *rn)
{
	lease_worker_stop(&rn->worker, rn->lock);
}

void lease_renew_check_locked(struct lease_renewer *rn, const char *name)
{
	for (struct lease_renewal *g = rn->grants; g; g = g->next) {
		if (strcmp(g->lease->name, name) == 0) {
			g->check_now = true;
			lease_worker_kick(&rn->worker);
		}
	}
}

void lease_renew_kick(struct lease_renewer *rn)
{
	lease_worker_kick(&rn->worker);
}

/* ---- the revoker's wait for a fence ---------------------------------- */

int lease_fence_wait(const struct lease_fence_look *fl, const char *name,
		     uint64_t epoch, int64_t deadline, enum lease_fence *out,
		     struct lease_err *err)
{
	bool leasefs = true;
	int64_t ms = 0, first_expiry = 0;
	int r;

	*out = LEASE_FENCE_PENDING;
	for (;;) {
		int64_t look;

		r = fl->state(fl->ctx, out, &leasefs, &ms, err);
		if (r != 0 || lease_deadline_passed(deadline))
			break;
		/* A harness holder cannot be told: it is fenced only if it has
		 * stopped renewing, which its first expiry shows. */
		if (!leasefs && !first_expiry)
			first_expiry = lease_deadline_ms(ms + fl->slack_ms);
		if (!leasefs && lease_deadline_passed(first_expiry))
			break;
		look = lease_deadline_ms(ms > 0 && ms < FENCE_LOOK_MS ? ms + 1
					 : FENCE_LOOK_MS);
		fl->wait(fl->ctx, look < deadline ? look : deadline);
	}
	if (r > 0)
		return 0;
	if (r == 0 && !leasefs)
		lease_err_untold(err, name, epoch, fl->untold);
	return r;
}
