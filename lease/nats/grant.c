/* SPDX-License-Identifier: MIT */
/*
 * The natsstore backend: acquire and release (the buckets: nats_int.h;
 * the renewals: holder.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <poll.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <json-c/json.h>

#include "nats_int.h"

/* A retry looks again this often at most: a harness release is a write
 * like any other, so it is also watched for. */
#define RETRY_LOOK_MS 1000


static int held(const char *who, uint64_t epoch, struct lease_err *err)
{
	int r = lease_err_set(err, LEASE_E_HELD, 0, who, "lease '%s' is held at "
			      "epoch %" PRIu64, who, epoch);

	if (err)
		err->holder_epoch = epoch;
	return r;
}

/* The TTL fits the store (its max_ttl) and the bucket (entries live
 * longer than a grant is believed): 0, or -EINVAL naming both. */
static int fits(struct ns_store *ns, const struct ns_bucket *b,
		struct lease_err *err)
{
	if (ns->ttl_ms > ns->max_ttl_ms)
		return lease_err_set(err, LEASE_E_USAGE, 0, NULL, "natsstore %s: "
				     "a TTL of %.3g s is longer than the store's "
				     "max_ttl of %.3g s (the longest TTL any of "
				     "its holders uses; raise max_ttl= in the "
				     "URI of every mount of the store)", ns->shown,
				     (double)ns->ttl_ms / 1e3, (double)ns->max_ttl_ms / 1e3);
	if (b->max_age_ns > 0 && ns->ttl_ms * 1000000 >= b->max_age_ns)
		return lease_err_set(err, LEASE_E_USAGE, 0, NULL, "natsstore %s: "
				     "a TTL of %.3g s does not fit the bucket "
				     NS_BUCKET ", whose entries the server drops "
				     "%.3g s after their last write (its max "
				     "age): a live grant could vanish between "
				     "renewals; use a TTL below %.3g s",
				     ns->shown, (double)ns->ttl_ms / 1e3,
				     (double)b->max_age_ns / 1e9, (double)b->max_age_ns / 1e9);
	return 0;
}

/* The bucket is older than the grace (a holder from before it, on a
 * server that lost its store, has stopped believing): 0, or busy. */
static int settled(struct ns_store *ns, const char *name, const char *key,
		   const struct ns_bucket *b, struct lease_err *err)
{
	int64_t age = ns_server_lo(ns, lease_now_ns()) - b->created_ns;
	struct ns_value cur;
	uint64_t epoch = 0, hwm = 0;

	if (age >= ns_grace_ns(ns))
		return 0;
	if (ns_get(ns, ns->kv, key, &cur, NULL) == 1)
		epoch = cur.epoch;
	if (ns_hwm_get(ns, key, &hwm, NULL) == 0 && hwm > epoch)
		epoch = hwm;
	held(name, epoch, err);
	if (err)
		snprintf(err->msg, sizeof(err->msg), "natsstore %s: lease '%s' "
			 "is not granted before the bucket " NS_BUCKET " is "
			 "%.3g s old (it is %.3g s): a holder from before it "
			 "(a server that lost its store) may believe itself "
			 "valid until then", ns->shown, name,
			 (double)ns_grace_ns(ns) / 1e9, age > 0 ? (double)age / 1e9 : 0.0);
	return lease_errkind_errno(LEASE_E_HELD);
}

/* The bucket the grant was written in is still the one looked at
 * before: 0, or busy (it was made anew meanwhile; the next try waits
 * for its grace). */
static int same_bucket(struct ns_store *ns, const char *name,
		       int64_t created_ns, uint64_t epoch,
		       struct lease_err *err)
{
	struct ns_bucket now;
	int r = ns_bucket_info(ns, &now, err);

	if (r < 0)
		return r;
	if (r == 1 && now.created_ns == created_ns)
		return 0;
	return held(name, epoch, err);
}

/* The epoch to grant after the entry `cur` (epoch 0: none): one above
 * it and above every epoch leasefs has seen of the name. */
static int next_epoch(struct ns_store *ns, const char *key,
		      const struct ns_value *cur, uint64_t *epoch,
		      struct lease_err *err)
{
	uint64_t hwm = 0;
	int r = ns_hwm_get(ns, key, &hwm, err);

	if (r < 0)
		return r;
	*epoch = cur->epoch > hwm ? cur->epoch : hwm;
	if (*epoch == UINT64_MAX)
		return lease_err_set(err, LEASE_E_CORRUPT, 0, key, "natsstore %s: "
				     "the epoch of %s cannot go higher; nothing "
				     "was granted", ns->shown, key);
	return ns_hwm_raise(ns, key, ++*epoch, err);
}

/* One try at the harness's key: 1 granted (*v, *sent, *created), or
 * busy/-errno. */
static int take(struct ns_store *ns, const char *name, const char *key,
		const char *holder, struct ns_value *v, int64_t *sent,
		int64_t *created, struct lease_err *err)
{
	struct ns_bucket b;
	int r = ns_bucket_ensure(ns, &b, err);

	if (r == 0)
		r = fits(ns, &b, err);
	if (r == 0)
		r = settled(ns, name, key, &b, err);
	for (int tries = 0; r == 0 && tries < 3; tries++) {
		struct ns_value cur = { 0 };
		int got = ns_get(ns, ns->kv, key, &cur, err);
		natsStatus s;

		if (got < 0)
			return got;
		if (got == 1)
			ns_hwm_note(ns, key, cur.epoch);
		if (got == 1 && ns_live(ns, &cur))
			return held(name, cur.epoch, err);
		*v = (struct ns_value){ .revision = cur.revision };
		r = next_epoch(ns, key, &cur, &v->epoch, err);
		if (r < 0)
			return r;
		snprintf(v->holder, sizeof(v->holder), "%s", holder);
		*sent = lease_now_ns();
		v->expires_ns = ns_server_hi(ns, *sent) + ns->ttl_ms * 1000000;
		s = ns_write_value(ns->kv, key, v, got == 0);
		if (s == NATS_OK) {
			*created = b.created_ns;
			return 1;
		}
		if (ns_unreachable(s))
			return ns_fail(ns, s, name, "take", err);
		/* Another writer was first: look again. */
	}
	if (r < 0)
		return r;
	return lease_err_set(err, LEASE_E_HELD, 0, name, "lease '%s' is "
			     "contended", name);
}

/* ---- our records ---------------------------------------------------- */

/*
 * Our record of the grant at `epoch`, written over the previous holder's
 * only: created where there is none, else updated on the revision read,
 * and never over a record of this epoch or a later one (a successor's,
 * if our grant was taken over before we got here: -EBUSY).
 */
static int record_put(struct ns_store *ns, const char *key, uint64_t epoch,
		      const char *holder, const char *desc, uint64_t *rev)
{
	json_object *o = json_object_new_object();
	char rk[NS_KEY_MAX + 4];
	natsStatus s = NATS_ERR;
	int r = -EIO;

	json_object_object_add(o, "epoch", json_object_new_uint64(epoch));
	json_object_object_add(o, "holder", json_object_new_string(holder));
	json_object_object_add(o, "revoked", json_object_new_boolean(false));
	json_object_object_add(o, "pid", json_object_new_int((int)getpid()));
	json_object_object_add(o, "description",
			       json_object_new_string(desc ? desc : ""));
	snprintf(rk, sizeof(rk), "h.%s", key);
	for (int tries = 0; s != NATS_OK && tries < 3; tries++) {
		const char *json = json_object_to_json_string(o);
		struct ns_record cur;
		bool had = ns_holder_read(ns, key, &cur) == 1;

		if (had && cur.epoch >= epoch) {
			r = -EBUSY;
			break;
		}
		s = had ? kvStore_UpdateString(rev, ns->own, rk, json, cur.rev)
			: kvStore_CreateString(rev, ns->own, rk, json);
		if (ns_unreachable(s))
			break;
	}
	json_object_put(o);
	return s == NATS_OK ? 0 : r;
}

/* Our markers, each only if nobody wrote it since our last write (a
 * successor within the same scopes writes the same keys). */
static void markers_drop(struct ns_store *ns, struct ns_lease *pl)
{
	for (size_t i = 0; i < pl->nmarkers; i++)
		if (pl->markers[i] && pl->marker_revs[i])
			ns_own_delete_if(ns, pl->markers[i], pl->marker_revs[i]);
}

/* Markers first, then the scopes looked at: of a grant within a scope
 * and a grant of the scope that race, one sees the other. */
static int markers_make(struct ns_store *ns, struct ns_lease *pl,
			const struct lease_scopes *sc, struct lease_err *err)
{
	struct ns_value v = { .expires_ns = ns_server_hi(ns, lease_now_ns()) +
					    ns->ttl_ms * 1000000 };
	char sk[NS_KEY_MAX];

	snprintf(v.holder, sizeof(v.holder), "%s", pl->holder);
	for (size_t i = 0; i < sc->n; i++) {
		natsStatus s;

		if (ns_key(sc->names[i], sk, sizeof(sk)) < 0 ||
		    asprintf(&pl->markers[i], "w.%s.%s", sk, pl->key) < 0) {
			pl->markers[i] = NULL;
			return lease_err_set(err, LEASE_E_IO, -ENOMEM, sc->names[i],
					     "out of memory");
		}
		s = ns_marker_put(ns, pl->markers[i], &v, &pl->marker_revs[i]);
		if (s != NATS_OK)
			return ns_fail(ns, s, sc->names[i], "mark", err);
	}
	for (size_t i = 0; i < sc->n; i++) {
		struct ns_value cur;
		int r;

		ns_key(sc->names[i], sk, sizeof(sk));
		r = ns_get(ns, ns->kv, sk, &cur, err);
		if (r < 0)
			return r;
		if (r == 1 && ns_live(ns, &cur))
			return held(sc->names[i], cur.epoch, err);
	}
	return 0;
}

static void ns_lease_free(struct ns_lease *pl)
{
	for (size_t i = 0; i < pl->nmarkers; i++)
		free(pl->markers[i]);
	free(pl->markers);
	free(pl->marker_revs);
	free(pl);
}

static struct ns_lease *ns_lease_new(const char *name, size_t nscopes)
{
	struct ns_lease *pl = calloc(1, sizeof(*pl));
	uint8_t rnd[16];

	if (!pl)
		return NULL;
	pl->nmarkers = nscopes;
	pl->markers = calloc(nscopes ? nscopes : 1, sizeof(char *));
	pl->marker_revs = calloc(nscopes ? nscopes : 1, sizeof(uint64_t));
	if (!pl->markers || !pl->marker_revs || ns_key(name, pl->key,
						       sizeof(pl->key)) < 0 ||
	    getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
		ns_lease_free(pl);
		return NULL;
	}
	for (int i = 0; i < 16; i++)
		snprintf(pl->holder + 2 * i, 3, "%02x", rnd[i]);
	return pl;
}

/* ---- acquire and release -------------------------------------------- */

/* Our grant given back at once: expires now, the epoch kept. */
static void give_back(struct ns_store *ns, struct ns_lease *pl, uint64_t epoch)
{
	struct ns_value v = { .epoch = epoch,
			      .expires_ns = ns_server_lo(ns, lease_now_ns()),
			      .revision = pl->revision };

	snprintf(v.holder, sizeof(v.holder), "%s", pl->holder);
	ns_write_value(ns->kv, pl->key, &v, false);
}

/* record_put() for a grant, its failure said. */
static int record_write(struct ns_store *ns, struct lease_store *store,
			struct ns_lease *pl, const char *name, uint64_t epoch,
			struct lease_err *err)
{
	uint64_t rev = 0;
	int r = record_put(ns, pl->key, epoch, pl->holder, store->opts.holder,
			   &rev);

	if (r == -EBUSY)
		return held(name, epoch + 1, err); /* taken over meanwhile */
	if (r < 0)
		return lease_err_set(err, LEASE_E_IO, -EIO, name, "natsstore "
				     "%s: cannot write the holder's record "
				     "of %s", ns->shown, name);
	return 0;
}

static int grant(struct lease_store *store, struct ns_lease *pl,
		 const char *name, const struct lease_scopes *sc,
		 struct ns_value *v, int64_t sent, struct lease **out,
		 struct lease_err *err)
{
	struct ns_store *ns = ns_of(store);
	char inner[LEASE_NAME_MAX + 1];
	uint64_t inner_epoch = 0;
	struct lease *l = NULL;
	int r = 0;

	pl->revision = v->revision;
	r = same_bucket(ns, name, pl->created_ns, v->epoch, err);
	if (r == 0 && ns_within(ns, pl->key, inner, sizeof(inner),
				&inner_epoch) > 0)
		r = held(inner, inner_epoch, err);
	if (r == 0)
		r = record_write(ns, store, pl, name, v->epoch, err);
	if (r == 0 && (r = lease_alloc(store, name, v->epoch, sc, &l)) < 0)
		lease_err_set(err, LEASE_E_IO, r, name, "out of memory");
	if (r < 0) {
		give_back(ns, pl, v->epoch);
		return r;
	}
	pl->rn.lease = l;
	l->priv = pl;
	lease_set_safe_until(l, ns_safe_until(ns, sent));
	r = ns_holder_add(ns, pl);
	if (r < 0) {
		give_back(ns, pl, v->epoch);
		l->priv = NULL;
		lease_dispose(l);
		return lease_err_set(err, LEASE_E_IO, r, name, "natsstore: cannot "
				     "start renewing %s", name);
	}
	*out = l;
	return 0;
}

int ns_try_acquire(struct lease_store *store, const char *name,
		   const struct lease_scopes *sc, int64_t deadline,
		   struct lease **out, struct lease_err *err)
{
	struct ns_store *ns = ns_of(store);
	struct ns_lease *pl = ns_lease_new(name, sc->n);
	struct ns_value v = { 0 };
	int64_t sent = 0;
	int r;

	(void)deadline; /* each request is bounded by the JetStream wait */
	if (!pl)
		return lease_err_set(err, LEASE_E_BADNAME, -ENAMETOOLONG, name,
				     "lease '%s' cannot be a natsstore key", name);
	r = ns_clock_fresh(ns, err);
	if (r == 0)
		r = markers_make(ns, pl, sc, err);
	if (r == 0) {
		r = take(ns, name, pl->key, pl->holder, &v, &sent,
			 &pl->created_ns, err);
		r = r == 1 ? 0 : r;
	}
	if (r == 0)
		r = grant(store, pl, name, sc, &v, sent, out, err);
	if (r == 0)
		return 0;
	markers_drop(ns, pl);
	ns_lease_free(pl);
	return r;
}

void ns_await_change(struct lease_store *store, const char *name,
		     const struct lease_scopes *sc, int64_t deadline)
{
	struct ns_store *ns = ns_of(store);
	kvWatchOptions o;
	kvWatcher *w = NULL;
	kvEntry *e = NULL;
	char key[NS_KEY_MAX];
	int64_t until = lease_deadline_ms(RETRY_LOOK_MS);

	(void)sc;
	if (until > deadline)
		until = deadline;
	kvWatchOptions_Init(&o);
	if (ns_key(name, key, sizeof(key)) < 0 ||
	    kvStore_Watch(&w, ns->kv, key, &o) != NATS_OK) {
		/* No watch (the bucket is gone, or the server): the next try
		 * is at `until`. */
		int64_t ms = (until - lease_now_ns()) / 1000000;

		if (ms > 0)
			poll(NULL, 0, (int)ms);
		return;
	}
	/* The current value comes first, then a NULL entry (the initial
	 * values are done); any entry after that is a change. */
	for (bool started = false; !lease_deadline_passed(until); ) {
		int64_t left = (until - lease_now_ns()) / 1000000 + 1;
		bool change;

		if (kvWatcher_Next(&e, w, left) != NATS_OK)
			break;
		change = e && started;
		started = started || !e;
		kvEntry_Destroy(e);
		e = NULL;
		if (change)
			break;
	}
	kvWatcher_Destroy(w);
}

int ns_release(struct lease *l, int64_t deadline)
{
	struct ns_store *ns = ns_of(l->store);
	struct ns_lease *pl = l->priv;
	char rk[NS_KEY_MAX + 4];
	struct ns_record rec;
	uint64_t rev = 0;

	(void)deadline;
	if (!pl)
		return 0;
	ns_holder_remove(ns, pl);
	/* Our record says "released" before the grant goes: a revoker that
	 * sees the entry expired knows it was given back, not let lapse.
	 * Only our own record, at the revision read (a successor may have
	 * replaced it while we were away), and only that revision is
	 * deleted: a late release never touches a successor's record. */
	if (ns_holder_read(ns, pl->key, &rec) == 1 && rec.epoch == l->epoch &&
	    strcmp(rec.holder, pl->holder) == 0 &&
	    ns_holder_mark(ns, pl->key, "released", rec.rev, &rev) < 0)
		rev = 0;
	give_back(ns, pl, l->epoch);
	markers_drop(ns, pl);
	snprintf(rk, sizeof(rk), "h.%s", pl->key);
	if (rev)
		ns_own_delete_if(ns, rk, rev);
	ns_publish(ns, "release", pl->key);
	return 0;
}

void ns_free_lease(struct lease *l)
{
	struct ns_lease *pl = l->priv;

	if (!pl)
		return;
	ns_holder_remove(ns_of(l->store), pl);
	ns_lease_free(pl);
	l->priv = NULL;
}
