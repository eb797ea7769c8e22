/* SPDX-License-Identifier: MIT */
/*
 * The natsstore backend ("nats://H:P[,H:P...]"): the seed harness's store
 * on NATS JetStream KV, read and written as the harness does, so that a
 * harness session and a leasefs mount contend for one lease.  What its
 * units share (store.c: the store, connection, keys and values;
 * grant.c: acquire, renew, release; view.c: show, list, revoke, fence).
 *
 * The harness's bucket, kept as the harness keeps it:
 *   natsstore_leases (file storage, history 1); key = the name with
 *   '_' -> "_u", '.' -> "_d", '/' -> "_s"; value a JSON object with exactly
 *   "epoch" (number), "holder" (32 hex chars) and "expires_at" (RFC 3339).
 *   Acquire creates the key with epoch 1 when absent, takes over an
 *   expired entry with a revision-conditional update to epoch + 1, and is
 *   refused otherwise; renewals every TTL/3 move expires_at by a
 *   revision-conditional update (a conflict or a missing key is loss); a
 *   release sets expires_at to now and keeps the epoch (never deletes).
 *   Expiry is judged on wall clocks: whoever reads compares expires_at
 *   with its own clock.
 *
 * leasefs's own bucket beside it, which the harness never reads:
 *   natsstore_leases_leasefs: "h.KEY" a leasefs holder's record (epoch,
 *   holder, revoked, pid, description), its loss channel: a revoker sets
 *   revoked and publishes on "leasefs.natsstore.revoke.KEY"; the holder
 *   keeps renewing until it has drained and released (then it deletes
 *   its record and publishes on "leasefs.natsstore.release.KEY").
 *   "w.SCOPEKEY.KEY" a grant living within a scope (epoch, holder,
 *   expires_at, renewed with the grant).  Only leasefs reads them.
 *
 * A holder's safe-until is its renewal's send time plus TTL less the clock
 * skew it tolerates (TTL/10; 3 s at the default TTL of 30 s).
 */
#ifndef LEASEFS_NATS_INT_H
#define LEASEFS_NATS_INT_H

#include <nats/nats.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "backend.h"

#define NS_BUCKET "natsstore_leases"
#define NS_OWN_BUCKET "natsstore_leases_leasefs"
#define NS_SUBJECT "leasefs.natsstore"
#define NS_DEFAULT_TTL_MS 30000
/* An encoded name: every byte may become two. */
#define NS_KEY_MAX (2 * LEASE_NAME_MAX + 1)

struct ns_lease;

struct ns_store {
	natsConnection *nc;
	jsCtx *js;
	kvStore *kv;      /* the harness's bucket */
	kvStore *own;     /* ours */
	char *shown;      /* the URI for messages: no password */
	int64_t ttl_ms;
	/* lock protects leases (and each member's fields marked so) and
	 * the worker's running and stopping.  The thread holds it for its
	 * renewals. */
	pthread_mutex_t lock;
	struct ns_lease *leases;
	struct lease_worker worker; /* renews; kicked by a revoke's bell */
	atomic_bool revoke_seen;  /* set by the bell's callback */
};

/* One entry of the harness's bucket. */
struct ns_value {
	uint64_t epoch;
	char holder[33];
	int64_t expires_ns;   /* Unix ns */
	uint64_t revision;
};

struct ns_lease {
	struct lease *lease;     /* immutable */
	char key[NS_KEY_MAX];    /* immutable */
	char holder[33];         /* immutable */
	uint64_t revision;       /* lock: of our last write */
	natsSubscription *bell;  /* made at grant, destroyed at release */
	int64_t next_renew;      /* lock: monotonic ns */
	bool renewing;           /* lock: still renewed */
	char **markers;          /* "w.SCOPE.KEY" per scope; immutable */
	uint64_t *marker_revs;   /* lock */
	size_t nmarkers;
	struct ns_lease *next;   /* lock */
};

static inline struct ns_store *ns_of(const struct lease_store *store)
{
	return store->priv;
}

/* store.c */
/* The harness's key for `name`: 0 or -ENAMETOOLONG. */
int ns_key(const char *name, char *out, size_t outsz);
/* Back from a key to the name: 0 or -EINVAL. */
int ns_unkey(const char *key, char *out, size_t outsz);
int64_t ns_wall_ns(void);
/* The harness's value at `key`: 1 with *v, 0 if absent, or -errno. */
int ns_get(struct ns_store *ns, kvStore *kv, const char *key,
	   struct ns_value *v, struct lease_err *err);
/* A value as the harness writes it: 0 with *v (not its revision), or
 * -EINVAL. */
int ns_value_parse(const char *text, int len, struct ns_value *v);
/* The value JSON of `v` (exactly epoch, holder, expires_at), malloc'ed. */
char *ns_value_json(const struct ns_value *v);
/* A status as an error of ours. */
int ns_fail(struct ns_store *ns, natsStatus s, const char *name,
	    const char *what, struct lease_err *err);
/* Publish `what` ("revoke", "release") for `key`. */
void ns_publish(struct ns_store *ns, const char *what, const char *key);

/* grant.c */
int ns_try_acquire(struct lease_store *store, const char *name,
		   const struct lease_scopes *sc, int64_t deadline,
		   struct lease **out, struct lease_err *err);
void ns_await_change(struct lease_store *store, const char *name,
		     const struct lease_scopes *sc, int64_t deadline);
int ns_release(struct lease *l, int64_t deadline);
void ns_free_lease(struct lease *l);
void ns_thread_stop(struct ns_store *ns);
/* The safe-until of a write sent at `sent` (monotonic). */
int64_t ns_safe_until(const struct ns_store *ns, int64_t sent);

/* view.c */
int ns_show(struct lease_store *store, const char *name,
	    struct lease_info *info, struct lease_err *err);
int ns_list(struct lease_store *store, lease_list_cb cb, void *userdata,
	    struct lease_err *err);
int ns_revoke(struct lease_store *store, const char *name, int64_t deadline,
	      uint64_t *epoch, struct lease_err *err);
int ns_await_fence(struct lease_store *store, const char *name,
		   uint64_t epoch, int64_t deadline, enum lease_fence *out,
		   struct lease_err *err);
/* A leasefs holder's record ("h.KEY" in our bucket). */
struct ns_record {
	uint64_t epoch;
	char holder[33];
	bool revoked;         /* a revoker set it */
	bool released;        /* the holder set it, right before it let go */
	int pid;
	char desc[1024];
	uint64_t rev;         /* of the record */
};
/* The record at `key`: 1 with *rec, 0 if none. */
int ns_holder_read(struct ns_store *ns, const char *key, struct ns_record *rec);
/* Set `field` (revoked, released) in the record, over revision `rev`
 * (0: whatever is there): 0 or -errno. */
int ns_holder_mark(struct ns_store *ns, const char *key, const char *field,
		   uint64_t rev);
/* Live grants within `name`: count, and the first one's name and epoch. */
unsigned ns_within(struct ns_store *ns, const char *key, char *first,
		   size_t firstsz, uint64_t *first_epoch);

#endif
