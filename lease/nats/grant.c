/* SPDX-License-Identifier: MIT */
/*
 * The natsstore backend: acquire, renew and release (the buckets:
 * nats_int.h).
 *
 * The store's one thread renews every grant held through it every TTL/3,
 * and its markers with it; a revoke (the bell's publish, or the flag in
 * our record, read at each renewal) marks a grant lost and it is still
 * renewed until released, so that a holder draining its writes keeps
 * every successor out.  A renewal the server refuses (another revision)
 * is loss for good; one that cannot reach it is retried each second while
 * the grant's safe-until passes on its own.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <json-c/json.h>

#include "nats_int.h"

#define RETRY_MS 1000
/* A retry looks again this often at most: a harness release is a write
 * like any other, so it is also watched for. */
#define RETRY_LOOK_MS 1000

int64_t ns_safe_until(const struct ns_store *ns, int64_t sent)
{
	return sent + (ns->ttl_ms - ns->ttl_ms / 10) * 1000000;
}

static int held(const char *who, uint64_t epoch, struct lease_err *err)
{
	int r = lease_err_set(err, LEASE_E_HELD, 0, who, "lease '%s' is held at "
			      "epoch %" PRIu64, who, epoch);

	if (err)
		err->holder_epoch = epoch;
	return r;
}

/* A status that says the server is out of reach (not a refusal). */
static bool unreachable(natsStatus s)
{
	return s == NATS_TIMEOUT || s == NATS_CONNECTION_CLOSED ||
	       s == NATS_NO_SERVER || s == NATS_CONNECTION_DISCONNECTED ||
	       s == NATS_NO_RESPONDERS || s == NATS_NO_MEMORY;
}

/* Write `v` at `key`: created if `create`, else conditional on
 * v->revision; v->revision becomes the new one. */
static natsStatus write_value(kvStore *kv, const char *key, struct ns_value *v,
			      bool create)
{
	char *json = ns_value_json(v);
	uint64_t rev = 0;
	natsStatus s;

	if (!json)
		return NATS_NO_MEMORY;
	s = create ? kvStore_CreateString(&rev, kv, key, json)
		   : kvStore_UpdateString(&rev, kv, key, json, v->revision);
	free(json);
	if (s == NATS_OK)
		v->revision = rev;
	return s;
}

/* One try at the harness's key: 1 granted (*v, *sent), or busy/-errno. */
static int take(struct ns_store *ns, const char *name, const char *key,
		const char *holder, struct ns_value *v, int64_t *sent,
		struct lease_err *err)
{
	for (int tries = 0; tries < 3; tries++) {
		struct ns_value cur = { 0 };
		int r = ns_get(ns, ns->kv, key, &cur, err);
		int64_t now = ns_wall_ns();
		natsStatus s;

		if (r < 0)
			return r;
		if (r == 1 && cur.expires_ns > now)
			return held(name, cur.epoch, err);
		*v = (struct ns_value){ .epoch = r ? cur.epoch + 1 : 1,
					.expires_ns = now + ns->ttl_ms * 1000000,
					.revision = cur.revision };
		snprintf(v->holder, sizeof(v->holder), "%s", holder);
		*sent = lease_now_ns();
		s = write_value(ns->kv, key, v, r == 0);
		if (s == NATS_OK)
			return 1;
		if (unreachable(s))
			return ns_fail(ns, s, name, "take", err);
		/* Another writer was first: look again. */
	}
	return lease_err_set(err, LEASE_E_HELD, 0, name, "lease '%s' is "
			     "contended", name);
}

/* ---- our records ---------------------------------------------------- */

static int record_put(struct ns_store *ns, const char *key, uint64_t epoch,
		      const char *holder, const char *desc, uint64_t *rev)
{
	json_object *o = json_object_new_object();
	char rk[NS_KEY_MAX + 4];
	natsStatus s;

	json_object_object_add(o, "epoch", json_object_new_uint64(epoch));
	json_object_object_add(o, "holder", json_object_new_string(holder));
	json_object_object_add(o, "revoked", json_object_new_boolean(false));
	json_object_object_add(o, "pid", json_object_new_int((int)getpid()));
	json_object_object_add(o, "description",
			       json_object_new_string(desc ? desc : ""));
	snprintf(rk, sizeof(rk), "h.%s", key);
	s = kvStore_PutString(rev, ns->own, rk, json_object_to_json_string(o));
	json_object_put(o);
	return s == NATS_OK ? 0 : -EIO;
}

static natsStatus marker_put(struct ns_store *ns, const char *mk,
			     const struct ns_value *v, uint64_t *rev)
{
	char *json = ns_value_json(v);
	natsStatus s;

	if (!json)
		return NATS_NO_MEMORY;
	s = kvStore_PutString(rev, ns->own, mk, json);
	free(json);
	return s;
}

static void markers_drop(struct ns_store *ns, struct ns_lease *pl)
{
	for (size_t i = 0; i < pl->nmarkers; i++)
		if (pl->markers[i])
			kvStore_Delete(ns->own, pl->markers[i]);
}

/* Markers first, then the scopes looked at: of a grant within a scope
 * and a grant of the scope that race, one sees the other. */
static int markers_make(struct ns_store *ns, struct ns_lease *pl,
			const struct lease_scopes *sc, struct lease_err *err)
{
	struct ns_value v = { .expires_ns = ns_wall_ns() + ns->ttl_ms * 1000000 };
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
		s = marker_put(ns, pl->markers[i], &v, &pl->marker_revs[i]);
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
		if (r == 1 && cur.expires_ns > ns_wall_ns())
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

/* ---- the thread ----------------------------------------------------- */

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
	lease_worker_kick(&ns->worker);
}

/* Caller holds ns->lock: whether our record says revoked. */
static bool revoked_locked(struct ns_store *ns, struct ns_lease *pl)
{
	struct ns_record rec;

	return ns_holder_read(ns, pl->key, &rec) && rec.epoch == pl->lease->epoch &&
	       strcmp(rec.holder, pl->holder) == 0 && rec.revoked;
}

/* Caller holds ns->lock: why a grant the server refused to renew is
 * gone. */
static enum lease_loss why_gone(struct ns_store *ns, struct ns_lease *pl)
{
	struct ns_value cur;
	int r = ns_get(ns, ns->kv, pl->key, &cur, NULL);

	if (r == 1 && cur.epoch > pl->lease->epoch)
		return LEASE_LOSS_TAKEOVER;
	return r == 0 ? LEASE_LOSS_STORE : LEASE_LOSS_TAKEOVER;
}

/* Caller holds ns->lock. */
static void renew_locked(struct ns_store *ns, struct ns_lease *pl)
{
	struct lease *l = pl->lease;
	struct ns_value v = { .epoch = l->epoch, .revision = pl->revision };
	int64_t sent = lease_now_ns(), until = lease_safe_until(l);
	natsStatus s;

	snprintf(v.holder, sizeof(v.holder), "%s", pl->holder);
	v.expires_ns = ns_wall_ns() + ns->ttl_ms * 1000000;
	s = write_value(ns->kv, pl->key, &v, false);
	if (s != NATS_OK && unreachable(s)) {
		pl->next_renew = lease_deadline_ms(RETRY_MS);
		if (until && lease_now_ns() >= until)
			lease_mark_lost(l, LEASE_LOSS_STORE);
		return;
	}
	if (s != NATS_OK) {
		pl->renewing = false;
		lease_mark_lost(l, why_gone(ns, pl));
		return;
	}
	pl->revision = v.revision;
	lease_set_safe_until(l, ns_safe_until(ns, sent));
	for (size_t i = 0; i < pl->nmarkers; i++)
		if (pl->markers[i])
			marker_put(ns, pl->markers[i], &v, &pl->marker_revs[i]);
	if (revoked_locked(ns, pl))
		lease_mark_lost(l, LEASE_LOSS_REVOKED);
	pl->next_renew = sent + ns->ttl_ms / 3 * 1000000;
}

/* Caller holds ns->lock: renew what is due; ms to the next duty. */
static int duties_locked(struct ns_store *ns)
{
	bool bell = atomic_exchange(&ns->revoke_seen, false);
	int64_t now = lease_now_ns(), next = now + (int64_t)RETRY_MS * 1000000;

	for (struct ns_lease *pl = ns->leases; pl; pl = pl->next) {
		if (!pl->renewing)
			continue;
		if (bell && !lease_is_lost(pl->lease) && revoked_locked(ns, pl))
			lease_mark_lost(pl->lease, LEASE_LOSS_REVOKED);
		if (lease_now_ns() >= pl->next_renew)
			renew_locked(ns, pl);
		if (pl->renewing && pl->next_renew < next)
			next = pl->next_renew;
	}
	now = lease_now_ns();
	return next > now ? (int)((next - now) / 1000000) + 1 : 0;
}

static void *renew_thread(void *arg)
{
	struct ns_store *ns = arg;

	pthread_mutex_lock(&ns->lock);
	while (!ns->worker.stopping) {
		int timeout = duties_locked(ns);

		pthread_mutex_unlock(&ns->lock);
		lease_worker_wait(&ns->worker, -1, timeout);
		pthread_mutex_lock(&ns->lock);
	}
	pthread_mutex_unlock(&ns->lock);
	return NULL;
}

void ns_thread_stop(struct ns_store *ns)
{
	lease_worker_stop(&ns->worker, &ns->lock);
}

static int holder_add(struct ns_store *ns, struct ns_lease *pl)
{
	char subj[NS_KEY_MAX + 48];
	int r;

	snprintf(subj, sizeof(subj), NS_SUBJECT ".revoke.%s", pl->key);
	if (natsConnection_Subscribe(&pl->bell, ns->nc, subj, bell_rang, ns) !=
	    NATS_OK || natsConnection_FlushTimeout(ns->nc, 3000) != NATS_OK)
		return -EIO;
	pthread_mutex_lock(&ns->lock);
	r = lease_worker_start_locked(&ns->worker, renew_thread, ns);
	if (r == 0) {
		pl->renewing = true;
		pl->next_renew = lease_now_ns() + ns->ttl_ms / 3 * 1000000;
		pl->next = ns->leases;
		ns->leases = pl;
		lease_worker_kick(&ns->worker);
	}
	pthread_mutex_unlock(&ns->lock);
	return r;
}

static void holder_remove(struct ns_store *ns, struct ns_lease *pl)
{
	pthread_mutex_lock(&ns->lock);
	for (struct ns_lease **pp = &ns->leases; *pp; pp = &(*pp)->next) {
		if (*pp == pl) {
			*pp = pl->next;
			break;
		}
	}
	pl->renewing = false;
	pthread_mutex_unlock(&ns->lock);
	if (pl->bell) {
		natsSubscription_Unsubscribe(pl->bell);
		natsSubscription_Destroy(pl->bell);
		pl->bell = NULL;
	}
}

/* ---- acquire and release -------------------------------------------- */

/* Our grant given back at once: expires now, the epoch kept. */
static void give_back(struct ns_store *ns, struct ns_lease *pl, uint64_t epoch)
{
	struct ns_value v = { .epoch = epoch, .expires_ns = ns_wall_ns(),
			      .revision = pl->revision };

	snprintf(v.holder, sizeof(v.holder), "%s", pl->holder);
	write_value(ns->kv, pl->key, &v, false);
}

static int grant(struct lease_store *store, struct ns_lease *pl,
		 const char *name, const struct lease_scopes *sc,
		 struct ns_value *v, int64_t sent, struct lease **out,
		 struct lease_err *err)
{
	struct ns_store *ns = ns_of(store);
	char inner[LEASE_NAME_MAX + 1];
	uint64_t inner_epoch = 0, rev = 0;
	struct lease *l = NULL;
	int r = 0;

	pl->revision = v->revision;
	if (ns_within(ns, pl->key, inner, sizeof(inner), &inner_epoch) > 0)
		r = held(inner, inner_epoch, err);
	if (r == 0 && record_put(ns, pl->key, v->epoch, pl->holder,
				 store->opts.holder, &rev) < 0)
		r = lease_err_set(err, LEASE_E_IO, -EIO, name, "natsstore %s: "
				  "cannot write the holder's record of %s",
				  ns->shown, name);
	if (r == 0 && (r = lease_alloc(store, name, v->epoch, sc, &l)) < 0)
		lease_err_set(err, LEASE_E_IO, r, name, "out of memory");
	if (r < 0) {
		give_back(ns, pl, v->epoch);
		return r;
	}
	pl->lease = l;
	l->priv = pl;
	lease_set_safe_until(l, ns_safe_until(ns, sent));
	r = holder_add(ns, pl);
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
	r = markers_make(ns, pl, sc, err);
	if (r == 0) {
		r = take(ns, name, pl->key, pl->holder, &v, &sent, err);
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
	    kvStore_Watch(&w, ns->kv, key, &o) != NATS_OK)
		return;
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

	(void)deadline;
	if (!pl)
		return 0;
	holder_remove(ns, pl);
	/* Our record says "released" before the grant goes: a revoker that
	 * sees the entry expired knows it was given back, not let lapse. */
	ns_holder_mark(ns, pl->key, "released", 0);
	give_back(ns, pl, l->epoch);
	markers_drop(ns, pl);
	snprintf(rk, sizeof(rk), "h.%s", pl->key);
	kvStore_Delete(ns->own, rk);
	ns_publish(ns, "release", pl->key);
	return 0;
}

void ns_free_lease(struct lease *l)
{
	struct ns_lease *pl = l->priv;

	if (!pl)
		return;
	holder_remove(ns_of(l->store), pl);
	ns_lease_free(pl);
	l->priv = NULL;
}
