/* SPDX-License-Identifier: MIT */
/*
 * The natsstore backend ("nats://H:P[,H:P...][?max_ttl=S]"): the seed
 * harness's store on NATS JetStream KV, read and written as the harness
 * does, so that a harness session and a leasefs mount contend for one
 * lease.  What its units share (kv.c: keys, times and values, statuses;
 * server.c: the bucket's info and creation, the server's clock; epoch.c:
 * epochs' high-water marks; records.c: our holder records and markers;
 * holder.c: the wire calls of the renewal engine (../renew.h); grant.c:
 * acquire and release; view.c: show, list, revoke, fence; store.c: the
 * store, its connection and backend table).  Each calls only units
 * listed before it.
 *
 * The harness's bucket, kept as the harness keeps it:
 *   natsstore_leases (file storage, history 1); key = the name with
 *   '_' -> "_u", '.' -> "_d", '/' -> "_s"; value a JSON object with exactly
 *   "epoch" (number), "holder" (32 hex chars) and "expires_at" (RFC 3339).
 *   The harness creates the key with epoch 1 when absent; leasefs with
 *   one above every epoch it has seen of the name ("e.KEY" below).  An
 *   expired entry is taken over with a revision-conditional update to
 *   epoch + 1 (leasefs: above what it has seen, too); a live one refuses.
 *   Renewals every TTL/3 move expires_at by a revision-conditional update
 *   (a conflict or a missing key is loss); a release sets expires_at to
 *   now and keeps the epoch (never deletes).  The harness judges
 *   expires_at on its own wall clock.  Nothing is granted by leasefs while
 *   the bucket is younger than max_ttl + max_ttl/3.
 *
 * leasefs's own bucket beside it, which the harness never reads:
 *   natsstore_leases_leasefs: "h.KEY" a leasefs holder's record (epoch,
 *   holder, revoked, pid, description), its loss channel: a revoker sets
 *   revoked and publishes on "leasefs.natsstore.revoke.KEY"; the holder
 *   keeps renewing until it has drained and released (then it deletes
 *   its record and publishes on "leasefs.natsstore.release.KEY").
 *   "w.SCOPEKEY.KEY" a grant living within a scope (epoch, holder,
 *   expires_at, renewed with the grant).  "e.KEY" the highest epoch
 *   leasefs granted or was about to grant of the name (decimal; this
 *   bucket has no maximum age).  "clock" written to read the server's
 *   timestamp back.  Only leasefs reads them.
 *
 * Time is the server's (server.c): expires_at is written as the server's
 * time at the write plus TTL and judged against the server's time, both
 * taken from an estimate of the server's clock against our monotonic one
 * (JetStream's timestamp on a write of ours, bounded by its round trip).
 * A holder's safe-until, on its monotonic clock, is its renewal's send
 * time plus (TTL less the skew it tolerates in a harness session's clock,
 * TTL/10) less 0.1% for clock rates.  The design and its proof:
 * README.md beside this file.
 */
#ifndef LEASEFS_NATS_INT_H
#define LEASEFS_NATS_INT_H

#include <nats/nats.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "renew.h"

#define NS_BUCKET "natsstore_leases"
#define NS_OWN_BUCKET "natsstore_leases_leasefs"
#define NS_SUBJECT "leasefs.natsstore"
#define NS_DEFAULT_TTL_MS 30000
/* The harness's own TTL (natsstore lease.go:22, wired at natsstore.go:316),
 * the default of the store's max_ttl. */
#define NS_HARNESS_TTL_MS 30000
/* The server's clock and ours run at rates this far apart at most
 * (1000 ppm: twice what NTP slews). */
#define NS_RATE_PPM 1000
/* Every request to the server is bounded by this (JetStream's wait). */
#define NS_REQUEST_MS 3000
/* An encoded name: every byte may become two. */
#define NS_KEY_MAX (2 * LEASE_NAME_MAX + 1)

struct ns_lease;

/* What the server said of the harness's bucket (its stream's info). */
struct ns_bucket {
	int64_t created_ns;  /* server Unix ns of its creation */
	int64_t max_age_ns;  /* 0: none */
	uint64_t last_seq;   /* the stream's last message */
	int64_t last_ts_ns;  /* its server timestamp */
	int64_t sent_ns, recv_ns; /* monotonic: when asked, when answered */
};

/* The server's clock against our monotonic one: at monotonic m, the
 * server's time was within [m + lo, m + hi] when measured (at), and the
 * bounds widen by NS_RATE_PPM of the time since. */
struct ns_clock {
	int64_t lo, hi;
	int64_t at;          /* monotonic ns; 0: never measured */
};

/* What a round's renewals tell of the server's clock: the send time,
 * revision and expires_at of the last one that succeeded, and its
 * bucket. */
struct ns_round {
	int64_t sent;
	uint64_t rev;
	int64_t created_ns;
	int64_t expires_ns;
};

/* The highest epoch this store has seen of a name (its process's
 * memory; the store's own is "e.KEY" in our bucket). */
struct ns_seen {
	char key[NS_KEY_MAX];
	uint64_t epoch;
	struct ns_seen *next;
};

struct ns_store {
	natsConnection *nc;
	jsCtx *js;
	kvStore *kv;      /* the harness's bucket */
	kvStore *own;     /* ours */
	char *shown;      /* the URI for messages: no password */
	int64_t ttl_ms;
	/* The longest TTL any holder of the store uses (URI max_ttl=,
	 * default the harness's): no grant into a bucket younger than
	 * max_ttl + max_ttl/3, no mount's TTL above it. */
	int64_t max_ttl_ms;
	/* lock protects the renewer's grants and thread (renew.h), bell and
	 * round.  The thread holds it for its renewals. */
	pthread_mutex_t lock;
	struct lease_renewer renewer; /* kicked by a revoke's bell */
	bool bell;                /* lock: the bell rang before this round */
	struct ns_round round;    /* lock: this round's */
	atomic_bool revoke_seen;  /* set by the bell's callback */
	/* Set on a reconnect or a JetStream advisory about the bucket:
	 * the thread looks at the bucket before it renews again. */
	atomic_bool recheck;
	natsSubscription *advisory;
	/* view_lock protects clock and bucket: taken for reads and updates
	 * only, never across I/O. */
	pthread_mutex_t view_lock;
	struct ns_clock clock;
	struct ns_bucket bucket;  /* as last seen */
	/* seen_lock protects seen. */
	pthread_mutex_t seen_lock;
	struct ns_seen *seen;
};

/* One entry of the harness's bucket. */
struct ns_value {
	uint64_t epoch;
	char holder[33];
	int64_t expires_ns;   /* Unix ns */
	uint64_t revision;
	int64_t written_ns;   /* the server's timestamp of the entry */
};

struct ns_lease {
	struct lease_renewal rn; /* the engine's; rn.lease immutable */
	char key[NS_KEY_MAX];    /* immutable */
	char holder[33];         /* immutable */
	uint64_t revision;       /* lock: of our last write */
	natsSubscription *bell;  /* made at grant, destroyed at release */
	int64_t created_ns;      /* immutable: the bucket's creation it was
				    granted in; another is loss */
	char **markers;          /* "w.SCOPE.KEY" per scope; immutable */
	uint64_t *marker_revs;   /* lock */
	size_t nmarkers;
};

static inline struct ns_lease *ns_lease_of(struct lease_renewal *g)
{
	return (struct ns_lease *)((char *)g - offsetof(struct ns_lease, rn));
}

static inline struct ns_store *ns_of(const struct lease_store *store)
{
	return store->priv;
}

/* kv.c */
/* The harness's key for `name`: 0 or -ENAMETOOLONG. */
int ns_key(const char *name, char *out, size_t outsz);
/* Back from a key to the name: 0 or -EINVAL. */
int ns_unkey(const char *key, char *out, size_t outsz);
/* The harness's value at `key`: 1 with *v, 0 if absent, or -errno. */
int ns_get(struct ns_store *ns, kvStore *kv, const char *key,
	   struct ns_value *v, struct lease_err *err);
/* An RFC 3339 time: 0 with *ns (Unix ns), or -EINVAL. */
int ns_rfc3339_parse(const char *s, int64_t *ns);
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
/* A status that says the server is out of reach (not a refusal). */
bool ns_unreachable(natsStatus s);
/* Write `v` at `key`: created if `create`, else conditional on
 * v->revision; v->revision becomes the new one. */
natsStatus ns_write_value(kvStore *kv, const char *key, struct ns_value *v,
			  bool create);

/* server.c: the harness's bucket, the server's clock */
/* The bucket's info: 1 with *b, 0 if there is none, or -errno.  A "ts"
 * in the answer (servers from 2.10) is taken for the clock. */
int ns_bucket_info(struct ns_store *ns, struct ns_bucket *b,
		   struct lease_err *err);
/* The bucket's info, the bucket created as the harness creates it first
 * if there is none (and ours beside it): 0 with *b, or -errno. */
int ns_bucket_ensure(struct ns_store *ns, struct ns_bucket *b,
		     struct lease_err *err);
/* Our bucket, made if it is not there. */
natsStatus ns_own_ensure(struct ns_store *ns);
/* A server timestamp taken between monotonic `from` and `to`. */
void ns_clock_note(struct ns_store *ns, int64_t server_ns, int64_t from,
		   int64_t to);
/* Measure the clock if it was never, or not for NS_CLOCK_FRESH_MS: 0 or
 * -errno (an old measure is still used if the server cannot be asked). */
int ns_clock_fresh(struct ns_store *ns, struct lease_err *err);
/* Bounds of the server's time at monotonic `m`. */
int64_t ns_server_lo(struct ns_store *ns, int64_t m);
int64_t ns_server_hi(struct ns_store *ns, int64_t m);
/* Whether the holder of entry `v` may still believe in it: it was not
 * written expired (a release: expires_at at most min(skew, 0.5 s) past
 * the entry's server timestamp), and the server's time is not certainly past
 * expires_at by the skew tolerated in a harness holder's clock. */
bool ns_live(struct ns_store *ns, const struct ns_value *v);
/* Milliseconds until ns_live(v) may turn false (>= 0). */
int64_t ns_live_ms(struct ns_store *ns, const struct ns_value *v);
/* The skew tolerated between the server's clock and a harness
 * session's: TTL/10. */
int64_t ns_skew_ns(const struct ns_store *ns);
/* Grants wait until the bucket is this old (max_ttl + max_ttl/3). */
int64_t ns_grace_ns(const struct ns_store *ns);

/* epoch.c: the high-water marks */
/* The highest epoch seen of `key` here or recorded in our bucket:
 * 0 or -errno. */
int ns_hwm_get(struct ns_store *ns, const char *key, uint64_t *epoch,
	       struct lease_err *err);
/* Record that `key` was seen or is about to be granted at `epoch`, in
 * memory and in our bucket (never lowering it): 0 or -errno. */
int ns_hwm_raise(struct ns_store *ns, const char *key, uint64_t epoch,
		 struct lease_err *err);
/* In memory only (an epoch merely seen). */
void ns_hwm_note(struct ns_store *ns, const char *key, uint64_t epoch);
void ns_hwm_free(struct ns_store *ns);

/* records.c */
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
/* Set `field` (revoked, released) in the record if its revision is still
 * `rev` (*nrev, if not NULL, the new one): 0, -ENOENT, or -EAGAIN when the
 * record changed (another holder's now). */
int ns_holder_mark(struct ns_store *ns, const char *key, const char *field,
		   uint64_t rev, uint64_t *nrev);
/* Delete `rk` from our bucket if its last revision is `rev` (a delete
 * marker published with Nats-Expected-Last-Subject-Sequence): 0, or
 * -EAGAIN when someone wrote it since (or the server could not be asked).
 * Every delete of a holder's record or marker goes through here, so a
 * late release never removes a successor's. */
int ns_own_delete_if(struct ns_store *ns, const char *rk, uint64_t rev);
/* Live grants within `name`: count, and the first one's name and epoch. */
unsigned ns_within(struct ns_store *ns, const char *key, char *first,
		   size_t firstsz, uint64_t *first_epoch);
/* Put marker `mk` (a grant's value under a scope), *rev its revision. */
natsStatus ns_marker_put(struct ns_store *ns, const char *mk,
			 const struct ns_value *v, uint64_t *rev);

/* holder.c */
extern const struct lease_renew_ops ns_renew_ops;
/* The safe-until of a write sent at `sent` (monotonic). */
int64_t ns_safe_until(struct ns_store *ns, int64_t sent);
/* Renew `pl` (its lease set) from now on, its bell listened to: 0 or
 * -errno. */
int ns_holder_add(struct ns_store *ns, struct ns_lease *pl);
/* No more renewals of `pl`, nor its bell. */
void ns_holder_remove(struct ns_store *ns, struct ns_lease *pl);

/* grant.c */
int ns_try_acquire(struct lease_store *store, const char *name,
		   const struct lease_scopes *sc, int64_t deadline,
		   struct lease **out, struct lease_err *err);
void ns_await_change(struct lease_store *store, const char *name,
		     const struct lease_scopes *sc, int64_t deadline);
int ns_release(struct lease *l, int64_t deadline);
void ns_free_lease(struct lease *l);

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

#endif
