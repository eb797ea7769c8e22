/* SPDX-License-Identifier: MIT */
/*
 * Internals of the etcd backend, shared by its units, each of which calls
 * only those listed before it: http.c (the JSON gateway over libcurl),
 * keys.c (keys, request JSON, scope keys, etcd leases), fence.c (revoke,
 * fences), view.c (show, list), holder.c (the holder: keepalives on the
 * renewal engine, the watch thread), acquire.c (acquire), etcd.c (the store,
 * release, the wait for a change, the backend table).  The layout of the
 * keys: etcd.c.
 */
#ifndef LEASEFS_ETCD_INT_H
#define LEASEFS_ETCD_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "backend.h"
#include "http.h"
#include "renew.h"

#define ETCD_DEFAULT_PREFIX "/leasefs/"
#define ETCD_DEFAULT_TTL_MS 15000
#define ETCD_HWM_DIR "!epoch/"
#define ETCD_FENCE_DIR "!fence/"
#define ETCD_SCOPE_DIR "!scope/"
/* A single acquire try (deadline already passed) still gets this long. */
#define ETCD_MIN_TRY_MS 1000
/* Retry pause after a failed keepalive or a broken watch. */
#define ETCD_RETRY_MS 200
/* Upper bound on one keepalive try. */
#define ETCD_KA_MAX_MS 2000

struct etcd_store {
	struct etcd_client cli;
	char *prefix;      /* ends with '/' */
	int64_t ttl_ms;    /* requested TTL */
	/* URI max_ttl=: the longest TTL any holder of the store uses; no
	 * grant while the store is younger than it and a third (settle.c). */
	int64_t max_ttl_ms;
	char *holder;      /* holder description of this process */
	/* spare_lock protects spare_id, spare_sent and spare_ttl_ms: an etcd
	 * lease granted by a try that lost, kept for the next try. */
	pthread_mutex_t spare_lock;
	int64_t spare_id;  /* 0 = none */
	int64_t spare_sent;
	int64_t spare_ttl_ms;
	/* The renewal engine (renew.h) runs every holder's keepalives;
	 * renew_lock is its lock and protects ka_list and each holder's ka.
	 * ka_multi is the engine thread's (its wire calls and its wait). */
	pthread_mutex_t renew_lock;
	struct lease_renewer renewer;
	CURLM *ka_multi;
	struct ka_xfer *ka_list;  /* renew_lock: every keepalive in flight */
	bool renew_inited;        /* etcd_renew_init() was called */
};

/* A granted etcd lease. */
struct grant {
	int64_t id;
	int64_t sent;   /* CLOCK_MONOTONIC ns when the grant was sent */
	int64_t ttl_ms; /* min(requested, granted) */
};

/* A keepalive in flight, on the engine's thread; its holder (el) is
 * cleared when the grant is removed (renew_lock), and the transfer runs
 * out alone. */
struct ka_xfer {
	struct etcd_lease *el;     /* renew_lock; NULL: forgotten */
	struct ka_xfer *next;      /* renew_lock: es->ka_list */
	CURL *h;
	struct curl_slist *hdrs;
	struct etcd_buf buf;
	char body[64];
	int64_t sent;              /* monotonic ns */
};

/* Watch transfer state; thread-only. */
struct watch_xfer {
	CURL *h;
	struct curl_slist *hdrs;
	json_tokener *tok;
	char *body;
	int64_t next_rev;  /* first revision not yet seen */
	size_t ep;         /* endpoint the watch runs on */
};

struct etcd_lease {
	struct etcd_store *es;
	struct lease *lease;
	int64_t lease_id;
	int64_t ttl_ms;
	int64_t margin_ns;
	char *key_b64;
	CURLM *multi;          /* used by the thread; wakeup from any thread */
	pthread_t thread;
	bool thread_started;   /* set/cleared by the owner thread only */
	_Atomic bool stop;
	/* ready_lock protects watch_ready: the first watch is registered with
	 * etcd, so later changes of the key are delivered without delay. */
	pthread_mutex_t ready_lock;
	pthread_cond_t ready_cond;
	bool watch_ready;
	/* The engine's: its schedule (renew_lock) and the keepalive in flight
	 * (renew_lock).  ep is the endpoint of the keepalives: the engine
	 * moves it on after a failed one, the watch follows. */
	struct lease_renewal rn;
	struct ka_xfer *ka;
	_Atomic size_t ep;
	/* The fields below are used by the watch thread only. */
	struct watch_xfer w;
	int64_t watch_retry;
	/* Used by the lease's owner after loss (etcd_hold_fence()). */
	int64_t hold_next;
	/* The cluster of the first keepalive answer; the engine thread's. */
	char cluster_id[24];
};

static inline struct etcd_store *etcd_store_priv(struct lease_store *s)
{
	return s->priv;
}

static inline int64_t etcd_ms_to_ns(int64_t ms)
{
	return ms * 1000000LL;
}

/* ---- keys.c: keys, request JSON, scope keys, etcd leases -------------- */

/* malloc'ed base64 of prefix + mid + name. */
char *etcd_key_b64(const struct etcd_store *es, const char *mid,
		   const char *name);
/* Base64 of the first key after every key with this prefix. */
char *etcd_range_end_b64(const char *prefix);
json_object *etcd_obj_str(const char *k, const char *v);
json_object *etcd_obj_i64(const char *k, int64_t v);
/* {"kind": inner} */
json_object *etcd_wrap(const char *kind, json_object *inner);
/* Put key (base64) with value vb64 (NULL: empty) and etcd lease `lease`
 * (0: none) into the ops array of a transaction. */
void etcd_add_put(json_object *ops, const char *kb64, const char *vb64,
		  int64_t lease);
/* Compare create_revision(key) == rev. */
json_object *etcd_cmp_create(const char *kb64, int64_t rev);
json_object *etcd_txn_body(json_object *cmp, json_object *succ,
			   json_object *fail);
/* A one-element array. */
json_object *etcd_one(json_object *o);
json_object *etcd_first_kv(json_object *range_resp);
/* responses[i].response_range of a txn answer. */
json_object *etcd_txn_range(json_object *ans, size_t i);
bool etcd_txn_ok(json_object *ans);
/* Revoke an etcd lease; "not found" counts as done. */
int etcd_revoke_id(struct etcd_store *es, int64_t id, int64_t deadline,
		   const char *name, struct lease_err *err);
/* Range read of the one key P<mid><name>; *ans is the answer. */
int etcd_range_key(struct etcd_store *es, const char *mid, const char *name,
		   int64_t deadline, json_object **ans, struct lease_err *err);
int etcd_grant_new(struct etcd_store *es, int64_t deadline,
		const char *name, struct grant *g, struct lease_err *err);
int64_t etcd_margin_ms_for(int64_t ttl_ms);
bool etcd_put_spare(struct etcd_store *es, const struct grant *g);
bool etcd_take_spare(struct etcd_store *es, struct grant *g);

/* P!scope/<scope>!<name>: name lives within scope (base64, malloc'ed). */
char *etcd_scope_key(const struct etcd_store *es, const char *scope,
		     const char *name);
/* The range of every grant within `scope`: [*key, *end), base64. */
int etcd_scope_range(const struct etcd_store *es, const char *scope,
		     char **key, char **end);
/* The name a scope key of `scope` says lives within it (malloc'ed). */
char *etcd_scope_holder(const struct etcd_store *es, const char *scope,
			json_object *kv);
/* Compare: no key at all in [kb64, endb64). */
json_object *etcd_cmp_none(const char *kb64, const char *endb64);

/* ---- fence.c: revoke, fences ----------------------------------------- */

/* The revoked epoch a fence entry carries. */
uint64_t etcd_fence_epoch(json_object *kv);
/* A fence with no etcd lease yet, whose holder's lease is gone: attach it
 * (and the scope keys it keeps) to a fresh lease of the holder's TTL + 1 s,
 * from which it expires.  Best effort: 0 or -errno. */
int etcd_fence_complete(struct etcd_store *es, const char *name,
			int64_t deadline);
/* The revoked holder's acknowledgement, at its release after the drain. */
int etcd_fence_ack(struct etcd_store *es, const struct lease *l,
		   int64_t deadline);
/* Block until the key P<mid><name> (with `end`, the range from it)
 * changes after revision `rev`, or the deadline. */
void etcd_key_watch(struct etcd_store *es, const char *kb64, const char *end,
		    int64_t rev, int64_t deadline);
int etcd_revoke(struct lease_store *st, const char *name, int64_t deadline,
		uint64_t *epoch, struct lease_err *err);
int etcd_await_fence(struct lease_store *st, const char *name, uint64_t epoch,
		     int64_t deadline, enum lease_fence *out,
		     struct lease_err *err);
void etcd_hold_fence(struct lease *l);

/* ---- view.c ------------------------------------------------------------ */

int etcd_show(struct lease_store *st, const char *name,
	      struct lease_info *info, struct lease_err *err);
int etcd_list(struct lease_store *st, lease_list_cb cb, void *userdata,
	      struct lease_err *err);

/* ---- holder.c: keepalives on the engine, the watch thread -------------- */

/* The store's renewal engine with etcd's rules: 0 or -ENOMEM.  After
 * etcd_renew_init() (even failed), etcd_renew_fini() once every holder
 * was stopped. */
int etcd_renew_init(struct etcd_store *es);
void etcd_renew_fini(struct etcd_store *es);
/* The holder of `l` granted with `g`: its safe-until published, its
 * keepalives on the engine, its watch thread started (l->priv set).  0 or
 * -errno (nothing left). */
int etcd_start_holder(struct etcd_store *es, struct lease *l,
		      const struct grant *g);
/* Wait until the watch is registered (or the lease is lost, or the
 * deadline passes: the grant stands, the watch keeps trying). */
void etcd_wait_ready(struct etcd_lease *el, int64_t deadline);
void etcd_stop_holder(struct etcd_lease *el);
void etcd_lease_free(struct etcd_lease *el);

/* ---- acquire.c --------------------------------------------------------- */

/* Keys a create of `name` within sc compares and reads, in the order of
 * the failure reads: P<name>, its fence, the range within it, then per
 * scope P<scope> and its fence. */
struct create_keys {
	char *k, *hk, *fk, *in, *in_end;
	char **sk, **sfk, **scope;  /* per scope: P<S>, fence, scope key */
	size_t n;
};

int etcd_try_acquire(struct lease_store *st, const char *name,
		     const struct lease_scopes *sc, int64_t deadline,
		     struct lease **out, struct lease_err *err);
void etcd_create_keys_free(struct create_keys *ck);
int etcd_create_keys_make(const struct etcd_store *es, const char *name,
		const struct lease_scopes *sc, struct create_keys *ck);
int etcd_delete_if_epoch(struct etcd_store *es, const char *name,
		uint64_t epoch, int64_t deadline,
		struct lease_err *err);

/* settle.c: a store made anew grants nothing for max_ttl and a third. */
/* Take "?max_ttl=SECONDS" off `rest` (after "etcd://"): *bare is the rest
 * without it (malloc'ed), *max_ttl_ms the value or the default.  0 or
 * LEASE_E_USAGE. */
int etcd_settle_uri(const char *rest, char **bare, int64_t *max_ttl_ms,
		struct lease_err *err);
/* Before a grant: the TTL fits max_ttl and the store is old enough (its
 * marker there, its grace run out; a missing marker is made).  0, busy
 * naming how long is left, or -errno. */
int etcd_settled(struct etcd_store *es, const char *name, int64_t deadline,
		struct lease_err *err);
/* Add to a grant's txn the compares that the store is still settled. */
int etcd_settle_guard(const struct etcd_store *es, json_object *txn,
		const char *name, struct lease_err *err);
/* While the grace runs: block until it ends or `deadline`, true.  Else
 * false at once. */
bool etcd_settle_await(struct etcd_store *es, int64_t deadline);
/* A keepalive's result from another cluster than the first one (etcd's
 * cluster_id): marks the lease lost (store), true. */
bool etcd_settle_other_cluster(struct etcd_lease *el, json_object *result);

#endif
