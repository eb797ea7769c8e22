/* SPDX-License-Identifier: MIT */
/*
 * The natsstore backend: its wire calls for the renewal engine
 * (../renew.h), whose one thread per store renews every grant held
 * through it, with its markers (the buckets: nats_int.h).
 *
 * A renewal is a revision-conditional update of the harness's entry; one
 * the server refuses (another revision, no key) is loss for good, and the
 * markers are written again with a grant the server took.  A revoke (the
 * bell's publish, or the flag in our record, read after each renewal) is
 * loss.  No renewal is sent while the link is down or before the bucket
 * was looked at again after a reconnect or an advisory: the bucket first.
 * After a round that renewed, and at once after a reconnect or an
 * advisory about the bucket, the thread looks at the bucket: gone, or
 * another than the one a grant was made in (a server that lost its
 * store), is loss; a maximum age that no longer fits the TTL is loss; its
 * last timestamp measures the server's clock.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "nats_int.h"

/*
 * A write sent at `sent` said expires_at = server_hi(sent) + TTL: until
 * server_hi(m) reaches expires_at less the skew tolerated in a harness
 * acquirer's clock, which is (TTL - skew) / (1 + rate) after `sent`.  And
 * never past the bucket's maximum age after it (the server drops the
 * entry then), less the clock's uncertainty.
 */
int64_t ns_safe_until(struct ns_store *ns, int64_t sent)
{
	int64_t w = ns->ttl_ms * 1000000 - ns_skew_ns(ns), age, width;

	w -= w / (1000000 / NS_RATE_PPM);
	pthread_mutex_lock(&ns->view_lock);
	age = ns->bucket.max_age_ns;
	width = ns->clock.hi - ns->clock.lo;
	pthread_mutex_unlock(&ns->view_lock);
	if (age > 0) {
		age -= age / (1000000 / NS_RATE_PPM) + width;
		if (age < w)
			w = age;
	}
	return sent + (w > 0 ? w : 0);
}


/* The bell: a revoker published for one of our keys.  Runs on the
 * library's thread: no lock, nothing that can block. */
static void bell_rang(natsConnection *nc, natsSubscription *sub, natsMsg *msg,
		      void *ud)
{
	struct ns_store *ns = ud;

	(void)nc;
	(void)sub;
	natsMsg_Destroy(msg);
	atomic_store(&ns->revoke_seen, true);
	lease_renew_kick(&ns->renewer);
}

/* Caller holds ns->lock: whether our record says revoked. */
static bool revoked_locked(struct ns_store *ns, struct ns_lease *pl)
{
	struct ns_record rec;

	return ns_holder_read(ns, pl->key, &rec) &&
	       rec.epoch == pl->rn.lease->epoch &&
	       strcmp(rec.holder, pl->holder) == 0 && rec.revoked;
}

/* Caller holds ns->lock: why a grant the server refused to renew is
 * gone. */
static enum lease_loss why_gone(struct ns_store *ns, struct ns_lease *pl)
{
	struct ns_value cur;
	int r = ns_get(ns, ns->kv, pl->key, &cur, NULL);

	if (r == 1 && cur.epoch > pl->rn.lease->epoch)
		return LEASE_LOSS_TAKEOVER;
	return r == 0 ? LEASE_LOSS_STORE : LEASE_LOSS_TAKEOVER;
}

static enum lease_renew_status renew(void *ctx, struct lease_renewal *g,
				     int64_t sent,
				     struct lease_renew_result *res)
{
	struct ns_store *ns = ctx;
	struct ns_lease *pl = ns_lease_of(g);
	struct ns_value v = { .epoch = g->lease->epoch,
			      .revision = pl->revision };
	natsStatus s = NATS_CONNECTION_DISCONNECTED;
	bool link = natsConnection_Status(ns->nc) == NATS_CONN_STATUS_CONNECTED;

	/* Sent while the link is down, a write would wait in the library's
	 * buffer for whatever server comes next, which may be one that lost
	 * its store: no renewal before the bucket was looked at again. */
	if (link && atomic_load(&ns->recheck))
		return LEASE_RENEW_HELD_BACK;
	snprintf(v.holder, sizeof(v.holder), "%s", pl->holder);
	v.expires_ns = ns_server_hi(ns, sent) + ns->ttl_ms * 1000000;
	if (link)
		s = ns_write_value(ns->kv, pl->key, &v, false);
	/* Nothing listens on the bucket's subjects: it may be gone. */
	if (s == NATS_NO_RESPONDERS)
		atomic_store(&ns->recheck, true);
	if (s != NATS_OK && ns_unreachable(s))
		return LEASE_RENEW_UNREACHABLE;
	if (s != NATS_OK) {
		res->why = why_gone(ns, pl);
		return LEASE_RENEW_REFUSED;
	}
	pl->revision = v.revision;
	ns->round = (struct ns_round){ .sent = sent, .rev = v.revision,
				       .created_ns = pl->created_ns,
				       .expires_ns = v.expires_ns };
	res->safe_until = ns_safe_until(ns, sent);
	return LEASE_RENEW_TAKEN;
}

/* Put, not an update on our last revision: the renewal was conditional
 * and succeeded, so the markers are ours to write, and a refused
 * contender for the name (which writes the same keys before it looks, and
 * deletes them after) must not make us stop. */
static bool renewed(void *ctx, struct lease_renewal *g)
{
	struct ns_store *ns = ctx;
	struct ns_lease *pl = ns_lease_of(g);
	struct ns_value v = { .epoch = g->lease->epoch,
			      .expires_ns = ns->round.expires_ns };

	snprintf(v.holder, sizeof(v.holder), "%s", pl->holder);
	for (size_t i = 0; i < pl->nmarkers; i++)
		if (pl->markers[i])
			ns_marker_put(ns, pl->markers[i], &v, &pl->marker_revs[i]);
	return revoked_locked(ns, pl);
}

/*
 * Caller holds ns->lock: look at the bucket.  Gone, or made anew since a
 * grant was made in it, is loss (and no more renewals: the key is not
 * ours to write); a maximum age that no longer fits the TTL is loss (the
 * server may drop the entry while we believe in it; renewals go on, for a
 * drain).  The stream's last timestamp, of a write at or after the
 * round's last renewal, measures the server's clock.  0, or -errno if the
 * server could not be asked.
 */
static int bucket_check_locked(struct ns_store *ns, const struct ns_round *rd)
{
	struct ns_bucket b;
	int r = ns_bucket_info(ns, &b, NULL);

	if (r < 0)
		return r;
	for (struct lease_renewal *g = ns->renewer.grants; g; g = g->next) {
		struct ns_lease *pl = ns_lease_of(g);

		if (r == 0 || b.created_ns != pl->created_ns)
			lease_renew_lost_locked(g, LEASE_LOSS_STORE, true);
		else if (b.max_age_ns > 0 &&
			 ns->ttl_ms * 1000000 >= b.max_age_ns)
			lease_renew_lost_locked(g, LEASE_LOSS_STORE, false);
	}
	if (r == 1 && rd && rd->sent && rd->created_ns == b.created_ns &&
	    b.last_seq >= rd->rev && b.last_ts_ns > 0)
		ns_clock_note(ns, b.last_ts_ns, rd->sent, b.recv_ns);
	return 0;
}

/* After a reconnect or an advisory: the bucket first. */
static void round_begin(void *ctx)
{
	struct ns_store *ns = ctx;

	ns->bell = atomic_exchange(&ns->revoke_seen, false);
	ns->round = (struct ns_round){ 0 };
	if (atomic_exchange(&ns->recheck, false) && ns->renewer.grants &&
	    bucket_check_locked(ns, NULL) < 0)
		atomic_store(&ns->recheck, true);
}

/* The bell rang: whose record says revoked. */
static void look(void *ctx, struct lease_renewal *g)
{
	struct ns_store *ns = ctx;

	if (ns->bell && !lease_is_lost(g->lease) &&
	    revoked_locked(ns, ns_lease_of(g)))
		lease_mark_lost(g->lease, LEASE_LOSS_REVOKED);
}

static void round_end(void *ctx)
{
	struct ns_store *ns = ctx;

	if ((ns->round.sent || atomic_exchange(&ns->recheck, false)) &&
	    bucket_check_locked(ns, &ns->round) < 0)
		atomic_store(&ns->recheck, true);
}

const struct lease_renew_ops ns_renew_ops = {
	.renew = renew,
	.renewed = renewed,
	.round_begin = round_begin,
	.look = look,
	.round_end = round_end,
};

int ns_holder_add(struct ns_store *ns, struct ns_lease *pl)
{
	char subj[NS_KEY_MAX + 48];

	snprintf(subj, sizeof(subj), NS_SUBJECT ".revoke.%s", pl->key);
	if (natsConnection_Subscribe(&pl->bell, ns->nc, subj, bell_rang, ns) !=
	    NATS_OK || natsConnection_FlushTimeout(ns->nc, 3000) != NATS_OK)
		return -EIO;
	return lease_renew_add(&ns->renewer, &pl->rn);
}

void ns_holder_remove(struct ns_store *ns, struct ns_lease *pl)
{
	lease_renew_remove(&ns->renewer, &pl->rn);
	if (pl->bell) {
		natsSubscription_Unsubscribe(pl->bell);
		natsSubscription_Destroy(pl->bell);
		pl->bell = NULL;
	}
}
