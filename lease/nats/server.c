/* SPDX-License-Identifier: MIT */
/*
 * The natsstore backend: what the server says of the harness's bucket
 * (its creation, its maximum age), the bucket made exactly as the harness
 * makes it, and the server's clock against ours (why each: README.md
 * beside this file).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

#include "nats_int.h"

#define STREAM "KV_" NS_BUCKET
/* The JetStream API's "stream not found" and "stream name already in
 * use" (nats-server's errors.json). */
#define JS_STREAM_NOT_FOUND 10059
#define JS_STREAM_NAME_IN_USE 10058
/* A measure of the server's clock older than this is taken again before
 * a grant. */
#define NS_CLOCK_FRESH_MS 10000

/*
 * The stream the harness asks for: natsstore's provisionBuckets
 * (natsstore.go:335) calls jetstream's CreateOrUpdateKeyValue with
 * leaseBucketConfig(leaseBucketName, defaultLeaseTTL) (seam.go:254-262):
 *   Bucket   "natsstore_leases"                    (natsstore.go:43)
 *   TTL      backstopBucketTTL(30 s) = max(100 * 30 s, 1 h) = 1 h
 *                                    (lease.go:22, lease.go:428-434)
 *   Storage  FileStorage, History 1, Replicas 1    (seam.go:258-260)
 * which nats.go v1.53.1's prepareKeyValueConfig (jetstream/kv.go:614-730)
 * turns into this StreamConfig (kv.go:672-693), marshalled in the order of
 * its fields (jetstream/stream_config.go:58-216; omitempty drops the zero
 * ones):
 *   name KV_natsstore_leases                          kv.go:673
 *   subjects [$KV.natsstore_leases.>]                 kv.go:727
 *   retention limits (the zero policy)                stream_config.go:76
 *   max_consumers -1, max_msgs -1                     kv.go:686, 685
 *   max_bytes -1 (MaxBytes 0 -> -1)                   kv.go:638-641, 676
 *   discard new                                       kv.go:690
 *   max_age 1 h (the TTL)                             kv.go:677
 *   max_msgs_per_subject 1 (History 1)                kv.go:623-629, 675
 *   max_msg_size -1 (MaxValueSize 0 -> -1)            kv.go:642-645, 678
 *   storage file, num_replicas 1                      kv.go:679-680, 631-634
 *   duplicate_window 2 min (1 h is not below 2 min)   kv.go:651-654, 684
 *   deny_delete, allow_rollup_hdrs                    kv.go:682-683
 *   compression none                                  kv.go:655-658, 689
 *   allow_direct true                                 kv.go:687
 *   mirror_direct false (no mirror)                   stream_config.go:182
 *   consumer_limits {} (a struct: omitempty keeps it) stream_config.go:186
 * after an account info request that only checks JetStream is there
 * (kv.go:618).
 * CreateOrUpdateStream (jetstream/jetstream.go:795-806) sends it to
 * $JS.API.STREAM.UPDATE.<stream> first and, when the stream is not found,
 * to $JS.API.STREAM.CREATE.<stream>.  We send the same body to CREATE
 * only: a bucket that is there is never changed by us.
 */
static const char harness_stream[] =
	"{\"name\":\"" STREAM "\","
	"\"subjects\":[\"$KV." NS_BUCKET ".>\"],"
	"\"retention\":\"limits\","
	"\"max_consumers\":-1,"
	"\"max_msgs\":-1,"
	"\"max_bytes\":-1,"
	"\"discard\":\"new\","
	"\"max_age\":3600000000000,"
	"\"max_msgs_per_subject\":1,"
	"\"max_msg_size\":-1,"
	"\"storage\":\"file\","
	"\"num_replicas\":1,"
	"\"duplicate_window\":120000000000,"
	"\"deny_delete\":true,"
	"\"allow_rollup_hdrs\":true,"
	"\"compression\":\"none\","
	"\"allow_direct\":true,"
	"\"mirror_direct\":false,"
	"\"consumer_limits\":{}}";

/* ---- the JetStream API ---------------------------------------------- */

/* A request to the API: 0 with *out (the answer, parsed) and the
 * monotonic times it was sent and answered, or -errno. */
static int js_api(struct ns_store *ns, const char *subj, const char *body,
		  json_object **out, int64_t *sent, int64_t *recv,
		  struct lease_err *err)
{
	natsMsg *reply = NULL;
	natsStatus s;

	*sent = lease_now_ns();
	s = natsConnection_Request(&reply, ns->nc, subj, body,
				   body ? (int)strlen(body) : 0, NS_REQUEST_MS);
	*recv = lease_now_ns();
	if (s != NATS_OK)
		return ns_fail(ns, s, NULL, subj, err);
	*out = json_tokener_parse(natsMsg_GetData(reply) ?
				  natsMsg_GetData(reply) : "");
	natsMsg_Destroy(reply);
	if (!*out)
		return lease_err_set(err, LEASE_E_IO, -EPROTO, NULL, "natsstore "
				     "%s: %s: an answer that is not JSON",
				     ns->shown, subj);
	return 0;
}

/* The API error code in an answer, 0 if none. */
static int api_error(json_object *o)
{
	json_object *e, *c;

	if (!json_object_object_get_ex(o, "error", &e))
		return 0;
	if (json_object_object_get_ex(e, "err_code", &c))
		return json_object_get_int(c);
	return -1;
}

static int64_t get_i64(json_object *o, const char *a, const char *b)
{
	json_object *x;

	if (!json_object_object_get_ex(o, a, &x) ||
	    (b && !json_object_object_get_ex(x, b, &x)))
		return -1;
	return json_object_get_int64(x);
}

static int get_time(json_object *o, const char *a, const char *b,
		    int64_t *ns)
{
	json_object *x;

	if (!json_object_object_get_ex(o, a, &x) ||
	    (b && !json_object_object_get_ex(x, b, &x)) ||
	    !json_object_is_type(x, json_type_string))
		return -EINVAL;
	return ns_rfc3339_parse(json_object_get_string(x), ns);
}

int ns_bucket_info(struct ns_store *ns, struct ns_bucket *b,
		   struct lease_err *err)
{
	json_object *o = NULL;
	int64_t ts;
	int r = js_api(ns, "$JS.API.STREAM.INFO." STREAM, NULL, &o, &b->sent_ns,
		       &b->recv_ns, err);

	if (r < 0)
		return r;
	r = api_error(o);
	if (r == JS_STREAM_NOT_FOUND) {
		json_object_put(o);
		return 0;
	}
	b->max_age_ns = get_i64(o, "config", "max_age");
	b->last_seq = (uint64_t)get_i64(o, "state", "last_seq");
	if (get_time(o, "state", "last_ts", &b->last_ts_ns) < 0)
		b->last_ts_ns = 0;
	if (r == 0 && get_time(o, "created", NULL, &b->created_ns) == 0 &&
	    b->max_age_ns >= 0) {
		/* Servers from 2.10 say their time ("ts"). */
		if (get_time(o, "ts", NULL, &ts) == 0)
			ns_clock_note(ns, ts, b->sent_ns, b->recv_ns);
		r = 1;
	} else {
		r = lease_err_set(err, LEASE_E_IO, -EPROTO, NULL, "natsstore %s: "
				  "the bucket " NS_BUCKET "'s info: %s", ns->shown,
				  json_object_to_json_string(o));
	}
	json_object_put(o);
	if (r == 1) {
		pthread_mutex_lock(&ns->view_lock);
		ns->bucket = *b;
		pthread_mutex_unlock(&ns->view_lock);
	}
	return r;
}

/* Our own bucket, made if it is not there: no maximum age (it keeps the
 * epochs' high-water marks), history 1. */
natsStatus ns_own_ensure(struct ns_store *ns)
{
	kvStore *kv = NULL;
	kvConfig cfg;
	natsStatus s = js_KeyValue(&kv, ns->js, NS_OWN_BUCKET);

	if (s == NATS_NOT_FOUND) {
		kvConfig_Init(&cfg);
		cfg.Bucket = NS_OWN_BUCKET;
		cfg.History = 1;
		cfg.StorageType = js_FileStorage;
		s = js_CreateKeyValue(&kv, ns->js, &cfg);
		/* Made by someone else meanwhile: theirs will do. */
		if (s != NATS_OK)
			s = js_KeyValue(&kv, ns->js, NS_OWN_BUCKET);
	}
	kvStore_Destroy(kv);
	return s;
}

static int harness_create(struct ns_store *ns, struct lease_err *err)
{
	json_object *o = NULL;
	int64_t sent, recv;
	int r = js_api(ns, "$JS.API.STREAM.CREATE." STREAM, harness_stream, &o,
		       &sent, &recv, err);

	if (r < 0)
		return r;
	r = api_error(o);
	if (r != 0 && r != JS_STREAM_NAME_IN_USE)
		r = lease_err_set(err, LEASE_E_IO, -EIO, NULL, "natsstore %s: "
				  "cannot create the bucket " NS_BUCKET ": %s",
				  ns->shown, json_object_to_json_string(o));
	else
		r = 0;
	json_object_put(o);
	return r;
}

int ns_bucket_ensure(struct ns_store *ns, struct ns_bucket *b,
		     struct lease_err *err)
{
	natsStatus s;
	int r = ns_bucket_info(ns, b, err);

	if (r != 0)
		return r < 0 ? r : 0;
	r = harness_create(ns, err);
	if (r == 0 && (s = ns_own_ensure(ns)) != NATS_OK)
		r = ns_fail(ns, s, NULL, "create " NS_OWN_BUCKET, err);
	if (r == 0)
		r = ns_bucket_info(ns, b, err);
	if (r == 0)
		r = lease_err_set(err, LEASE_E_IO, -EIO, NULL, "natsstore %s: "
				  "the bucket " NS_BUCKET " is gone again "
				  "right after it was made", ns->shown);
	return r < 0 ? r : 0;
}

/* ---- the server's clock --------------------------------------------- */

/* How far the bounds have widened at monotonic m. */
static int64_t widen(const struct ns_clock *c, int64_t m)
{
	return m > c->at ? (m - c->at) / (1000000 / NS_RATE_PPM) : 0;
}

void ns_clock_note(struct ns_store *ns, int64_t server_ns, int64_t from,
		   int64_t to)
{
	struct ns_clock n = { .lo = server_ns - to, .hi = server_ns - from,
			      .at = to };

	pthread_mutex_lock(&ns->view_lock);
	/* Kept unless the new one is at least as narrow as the old one has
	 * become. */
	if (!ns->clock.at || n.hi - n.lo <= ns->clock.hi - ns->clock.lo +
					    2 * widen(&ns->clock, to))
		ns->clock = n;
	pthread_mutex_unlock(&ns->view_lock);
}

/* A write of ours and its timestamp read back: the server's time lies
 * between the write's sending and the read's answer. */
static int clock_probe(struct ns_store *ns, struct lease_err *err)
{
	kvEntry *e = NULL;
	uint64_t rev = 0;
	int64_t from = lease_now_ns(), to;
	natsStatus s = kvStore_PutString(&rev, ns->own, "clock", "");

	if (s == NATS_OK)
		s = kvStore_Get(&e, ns->own, "clock");
	to = lease_now_ns();
	if (s != NATS_OK)
		return ns_fail(ns, s, NULL, "read the server's clock", err);
	ns_clock_note(ns, kvEntry_Created(e), from, to);
	kvEntry_Destroy(e);
	return 0;
}

int ns_clock_fresh(struct ns_store *ns, struct lease_err *err)
{
	int64_t at;
	int r;

	pthread_mutex_lock(&ns->view_lock);
	at = ns->clock.at;
	pthread_mutex_unlock(&ns->view_lock);
	if (at && lease_now_ns() - at < (int64_t)NS_CLOCK_FRESH_MS * 1000000)
		return 0;
	r = clock_probe(ns, err);
	return r < 0 && !at ? r : 0;
}

/* Never measured (the server could not be asked): our wall clock. */
static int64_t wall_at(int64_t m)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec - lease_now_ns() + m;
}

int64_t ns_server_lo(struct ns_store *ns, int64_t m)
{
	int64_t r;

	pthread_mutex_lock(&ns->view_lock);
	r = ns->clock.at ? m + ns->clock.lo - widen(&ns->clock, m) : wall_at(m);
	pthread_mutex_unlock(&ns->view_lock);
	return r;
}

int64_t ns_server_hi(struct ns_store *ns, int64_t m)
{
	int64_t r;

	pthread_mutex_lock(&ns->view_lock);
	r = ns->clock.at ? m + ns->clock.hi + widen(&ns->clock, m) : wall_at(m);
	pthread_mutex_unlock(&ns->view_lock);
	return r;
}

int64_t ns_skew_ns(const struct ns_store *ns)
{
	return ns->ttl_ms / 10 * 1000000;
}

int64_t ns_grace_ns(const struct ns_store *ns)
{
	return (ns->max_ttl_ms + ns->max_ttl_ms / 3) * 1000000;
}

/* An entry written to expire no later than this after its server
 * timestamp was written expired: a release.  (A renewal's is a TTL of at
 * least 1 s after it; a release's is the writer's clock less the
 * server's.) */
static int64_t released_ns(const struct ns_store *ns)
{
	int64_t s = ns_skew_ns(ns);

	return s < 500000000 ? s : 500000000;
}

int64_t ns_live_ms(struct ns_store *ns, const struct ns_value *v)
{
	int64_t left = v->expires_ns + ns_skew_ns(ns) -
		       ns_server_lo(ns, lease_now_ns());

	if (v->written_ns && v->expires_ns <= v->written_ns + released_ns(ns))
		return 0;
	return left > 0 ? left / 1000000 + 1 : 0;
}

bool ns_live(struct ns_store *ns, const struct ns_value *v)
{
	return ns_live_ms(ns, v) > 0;
}
