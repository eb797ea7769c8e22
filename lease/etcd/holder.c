/* SPDX-License-Identifier: MIT */
/*
 * The etcd backend: the holder thread: keepalives, the watch, the safe-until.
 * The layout and what the units share: etcd_int.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "etcd_int.h"

/* ---- the watch is registered ----------------------------------------- */

static void init_ready(struct etcd_lease *el)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&el->ready_cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&el->ready_lock, NULL);
}

static void signal_ready(struct etcd_lease *el)
{
	pthread_mutex_lock(&el->ready_lock);
	el->watch_ready = true;
	pthread_cond_broadcast(&el->ready_cond);
	pthread_mutex_unlock(&el->ready_lock);
}

/* ---- holder thread: keepalives -------------------------------------- */

static size_t ka_write(char *d, size_t s, size_t n, void *ud)
{
	return etcd_buf_append(ud, d, s * n) == 0 ? s * n : 0;
}

static void ka_start(struct etcd_lease *el, int64_t now)
{
	int64_t interval = etcd_ms_to_ns(el->ttl_ms) / 3;
	int64_t tmo = el->ttl_ms / 3 < ETCD_KA_MAX_MS ? el->ttl_ms / 3 :
							 ETCD_KA_MAX_MS;

	el->ka.sent = now;
	el->ka.h = etcd_easy(&el->es->cli, el->ep, "/v3/lease/keepalive",
			     el->ka_body, ka_write, &el->ka.buf, tmo,
			     &el->ka.hdrs);
	if (!el->ka.h || curl_multi_add_handle(el->multi, el->ka.h) != CURLM_OK) {
		if (el->ka.h)
			curl_easy_cleanup(el->ka.h);
		curl_slist_free_all(el->ka.hdrs);
		el->ka.h = NULL;
		el->ka.hdrs = NULL;
		el->next_ka = now + (interval < etcd_ms_to_ns(ETCD_RETRY_MS) ?
				     interval : etcd_ms_to_ns(ETCD_RETRY_MS));
	}
}

static void ka_cleanup(struct etcd_lease *el)
{
	if (el->ka.h) {
		curl_multi_remove_handle(el->multi, el->ka.h);
		curl_easy_cleanup(el->ka.h);
	}
	curl_slist_free_all(el->ka.hdrs);
	etcd_buf_free(&el->ka.buf);
	el->ka.h = NULL;
	el->ka.hdrs = NULL;
}

/* Publish a later safe_until; never moves it backwards. */
static void advance_safe_until(struct etcd_lease *el, int64_t sent,
			       int64_t ttl_ms)
{
	int64_t t = sent + etcd_ms_to_ns(ttl_ms) - el->margin_ns;

	if (t > lease_safe_until(el->lease))
		lease_set_safe_until(el->lease, t);
}

/* Returns the TTL (ms) etcd acknowledged, 0 if the lease is gone, <0 on
 * a failed try. */
static int64_t ka_parse(struct etcd_lease *el, CURLcode cc)
{
	json_object *j, *res;
	long status = 0;
	int64_t ttl;

	if (cc != CURLE_OK)
		return -EIO;
	curl_easy_getinfo(el->ka.h, CURLINFO_RESPONSE_CODE, &status);
	if (status != 200 || !el->ka.buf.p)
		return -EIO;
	j = json_tokener_parse(el->ka.buf.p);
	res = etcd_json_get(j, "result", NULL);
	ttl = res ? etcd_json_i64(res, "TTL") * 1000 : -EIO;
	if (res && etcd_settle_other_cluster(el, res))
		ttl = 0; /* lost (store) */
	json_object_put(j);
	return ttl;
}

static void ka_done(struct etcd_lease *el, CURLcode cc, int64_t now)
{
	int64_t ttl = ka_parse(el, cc);
	int64_t interval = etcd_ms_to_ns(el->ttl_ms) / 3;

	lease_store_reach(el->lease->store, ttl >= 0);
	if (ttl == 0) {
		lease_mark_lost(el->lease, LEASE_LOSS_EXPIRED);
	} else if (ttl > 0) {
		advance_safe_until(el, el->ka.sent,
				   ttl < el->ttl_ms ? ttl : el->ttl_ms);
		el->next_ka = el->ka.sent + interval;
	} else {
		/* Quick retry, on the next endpoint. */
		el->ep = (el->ep + 1) % el->es->cli.n_endpoints;
		el->next_ka = now + (interval < etcd_ms_to_ns(ETCD_RETRY_MS) ?
				     interval : etcd_ms_to_ns(ETCD_RETRY_MS));
	}
	ka_cleanup(el);
}

/* ---- holder thread: watch ------------------------------------------- */

static void watch_event(struct etcd_lease *el, json_object *ev)
{
	json_object *type = etcd_json_get(ev, "type", NULL);
	json_object *kv = etcd_json_get(ev, "kv", NULL);
	int64_t mod = etcd_json_i64(kv, "mod_revision");

	if (mod >= el->w.next_rev)
		el->w.next_rev = mod + 1;
	if (type && strcmp(json_object_get_string(type), "DELETE") == 0)
		lease_mark_lost(el->lease,
				lease_safe_until(el->lease) < lease_now_ns() ?
				LEASE_LOSS_EXPIRED : LEASE_LOSS_REVOKED);
	else if ((uint64_t)etcd_json_i64(kv, "create_revision") != el->lease->epoch)
		lease_mark_lost(el->lease, LEASE_LOSS_TAKEOVER);
}

/* Verify the key directly (after the watch history was compacted). */
static void watch_verify(struct etcd_lease *el)
{
	json_object *body = etcd_obj_str("key", el->key_b64), *ans = NULL;
	json_object *kv;
	int code;

	if (etcd_call(&el->es->cli, "/v3/kv/range", body,
		      lease_deadline_ms(ETCD_KA_MAX_MS), el->lease->name, &ans,
		      &code, NULL) == 0) {
		kv = etcd_first_kv(ans);
		if (!kv)
			lease_mark_lost(el->lease, LEASE_LOSS_REVOKED);
		else if ((uint64_t)etcd_json_i64(kv, "create_revision") !=
			 el->lease->epoch)
			lease_mark_lost(el->lease, LEASE_LOSS_TAKEOVER);
		el->w.next_rev = etcd_json_i64(etcd_json_get(ans, "header", NULL),
					       "revision") + 1;
	}
	json_object_put(body);
	json_object_put(ans);
}

static void watch_message(struct etcd_lease *el, json_object *m)
{
	json_object *res = etcd_json_get(m, "result", NULL);
	json_object *evs = etcd_json_get(res, "events", NULL);
	size_t n = evs && json_object_is_type(evs, json_type_array) ?
		   json_object_array_length(evs) : 0;

	if (res && json_object_get_boolean(etcd_json_get(res, "created", NULL)))
		signal_ready(el);
	for (size_t i = 0; i < n; i++)
		watch_event(el, json_object_array_get_idx(evs, i));
	if (res && etcd_json_i64(res, "compact_revision") > 0)
		watch_verify(el);
}

static size_t watch_write(char *d, size_t s, size_t n, void *ud)
{
	struct etcd_lease *el = ud;
	size_t len = s * n, off = 0;

	while (off < len) {
		json_object *m = json_tokener_parse_ex(el->w.tok, d + off,
						       (int)(len - off));
		enum json_tokener_error e = json_tokener_get_error(el->w.tok);
		size_t used = json_tokener_get_parse_end(el->w.tok);

		if (m) {
			watch_message(el, m);
			json_object_put(m);
		} else if (e != json_tokener_continue) {
			return 0; /* garbage: abort and restart the watch */
		}
		if (used == 0 && !m)
			break;
		off += used ? used : len - off;
	}
	return len;
}

static void watch_cleanup(struct etcd_lease *el)
{
	if (el->w.h) {
		curl_multi_remove_handle(el->multi, el->w.h);
		curl_easy_cleanup(el->w.h);
	}
	curl_slist_free_all(el->w.hdrs);
	if (el->w.tok)
		json_tokener_free(el->w.tok);
	free(el->w.body);
	el->w.h = NULL;
	el->w.hdrs = NULL;
	el->w.tok = NULL;
	el->w.body = NULL;
}

static void watch_start(struct etcd_lease *el, int64_t now)
{
	el->w.ep = el->ep;
	if (asprintf(&el->w.body,
		     "{\"create_request\":{\"key\":\"%s\",\"start_revision\":\"%" PRId64 "\"}}",
		     el->key_b64, el->w.next_rev) < 0) {
		el->w.body = NULL;
		goto retry;
	}
	el->w.tok = json_tokener_new();
	if (!el->w.tok)
		goto retry;
	el->w.h = etcd_easy(&el->es->cli, el->w.ep, "/v3/watch", el->w.body,
			    watch_write, el, 0, &el->w.hdrs);
	if (!el->w.h || curl_multi_add_handle(el->multi, el->w.h) != CURLM_OK)
		goto retry;
	return;
retry:
	watch_cleanup(el);
	el->watch_retry = now + etcd_ms_to_ns(ETCD_RETRY_MS);
}

static void watch_done(struct etcd_lease *el, int64_t now)
{
	watch_cleanup(el);
	el->watch_retry = now + etcd_ms_to_ns(ETCD_RETRY_MS);
}

/* ---- holder thread: loop -------------------------------------------- */

static void reap_done(struct etcd_lease *el, int64_t now)
{
	CURLMsg *m;
	int left;

	while ((m = curl_multi_info_read(el->multi, &left)) != NULL) {
		if (m->msg != CURLMSG_DONE)
			continue;
		if (m->easy_handle == el->ka.h)
			ka_done(el, m->data.result, now);
		else if (m->easy_handle == el->w.h)
			watch_done(el, now);
	}
}

static int64_t min64(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

static int poll_ms(struct etcd_lease *el, int64_t now)
{
	int64_t wake = lease_safe_until(el->lease);

	if (!el->ka.h)
		wake = min64(wake, el->next_ka);
	if (!el->w.h)
		wake = min64(wake, el->watch_retry);
	wake = min64(wake, now + etcd_ms_to_ns(1000));
	return wake <= now ? 0 : (int)((wake - now + 999999) / 1000000);
}

static void holder_step(struct etcd_lease *el)
{
	int64_t now = lease_now_ns();
	int running;

	if (lease_safe_until(el->lease) <= now) {
		lease_mark_lost(el->lease, LEASE_LOSS_EXPIRED);
		return;
	}
	if (!el->ka.h && now >= el->next_ka)
		ka_start(el, now);
	if (el->w.h && el->w.ep != el->ep)
		watch_done(el, now - etcd_ms_to_ns(ETCD_RETRY_MS)); /* follow failover */
	if (!el->w.h && now >= el->watch_retry)
		watch_start(el, now);
	curl_multi_perform(el->multi, &running);
	reap_done(el, lease_now_ns());
	if (lease_is_lost(el->lease))
		return;
	now = lease_now_ns();
	curl_multi_poll(el->multi, NULL, 0, poll_ms(el, now), NULL);
}

static void *holder_thread(void *arg)
{
	struct etcd_lease *el = arg;

	while (!atomic_load(&el->stop) && !lease_is_lost(el->lease))
		holder_step(el);
	ka_cleanup(el);
	watch_cleanup(el);
	signal_ready(el); /* nobody waits for a watch that will not come */
	return NULL;
}

void etcd_stop_holder(struct etcd_lease *el)
{
	if (!el || !el->thread_started)
		return;
	atomic_store(&el->stop, true);
	curl_multi_wakeup(el->multi);
	pthread_join(el->thread, NULL);
	el->thread_started = false;
}

/*
 * Wait until the watch is registered (or the lease is lost, or the
 * deadline passes: the grant stands, the watch keeps trying).  etcd
 * delivers events to a watch created after the change only on its next
 * sync of lagging watchers, up to 100 ms later.
 */
void etcd_wait_ready(struct etcd_lease *el, int64_t deadline)
{
	struct timespec ts = { deadline / 1000000000LL, deadline % 1000000000LL };

	pthread_mutex_lock(&el->ready_lock);
	while (!el->watch_ready && !lease_is_lost(el->lease) &&
	       pthread_cond_timedwait(&el->ready_cond, &el->ready_lock, &ts) == 0)
		;
	pthread_mutex_unlock(&el->ready_lock);
}

void etcd_lease_free(struct etcd_lease *el)
{
	if (!el)
		return;
	pthread_cond_destroy(&el->ready_cond);
	pthread_mutex_destroy(&el->ready_lock);
	if (el->multi)
		curl_multi_cleanup(el->multi);
	free(el->key_b64);
	free(el);
}

int etcd_start_holder(struct etcd_store *es, struct lease *l,
			const struct grant *g)
{
	struct etcd_lease *el = calloc(1, sizeof(*el));
	int r = -ENOMEM;

	if (!el)
		return -ENOMEM;
	init_ready(el);
	el->es = es;
	el->lease = l;
	el->lease_id = g->id;
	el->ttl_ms = g->ttl_ms;
	el->margin_ns = etcd_ms_to_ns(etcd_margin_ms_for(g->ttl_ms));
	el->key_b64 = etcd_key_b64(es, "", l->name);
	el->multi = curl_multi_init();
	el->ep = atomic_load(&es->cli.preferred) % es->cli.n_endpoints;
	el->next_ka = g->sent + etcd_ms_to_ns(g->ttl_ms) / 3;
	el->w.next_rev = (int64_t)l->epoch + 1;
	snprintf(el->ka_body, sizeof(el->ka_body), "{\"ID\":\"%" PRId64 "\"}",
		 g->id);
	if (!el->key_b64 || !el->multi)
		goto fail;
	lease_set_safe_until(l, g->sent + etcd_ms_to_ns(g->ttl_ms) - el->margin_ns);
	l->priv = el;
	r = -pthread_create(&el->thread, NULL, holder_thread, el);
	if (r < 0)
		goto fail;
	el->thread_started = true;
	return 0;
fail:
	l->priv = NULL;
	etcd_lease_free(el);
	return r;
}
