/* SPDX-License-Identifier: MIT */
/*
 * The etcd backend: the holder: its keepalives and safe-until on the store's
 * renewal engine (renew.h), and a thread per grant for the watch on its key.
 * The layout and what the units share: etcd_int.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
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

/* ---- keepalives: the renewal engine's wire (renew.h) --------------- */

/*
 * etcd's rules on the engine: a failed keepalive is retried after
 * min(TTL/3, 200 ms) on the next endpoint; the grant is lost (expired)
 * the moment its safe-until passes, failed keepalive or not; the
 * safe-until never moves back; keepalives stop at any loss (then
 * etcd_hold_fence() keeps the fence).  Each keepalive runs on its own
 * handle of the engine's multi, side by side with the others, and the
 * engine's thread waits on them all.
 */

static struct etcd_lease *of_renewal(struct lease_renewal *g)
{
	return (struct etcd_lease *)(void *)((char *)g -
					     offsetof(struct etcd_lease, rn));
}

static size_t ka_write(char *d, size_t s, size_t n, void *ud)
{
	return etcd_buf_append(ud, d, s * n) == 0 ? s * n : 0;
}

/* Caller holds renew_lock (or is the only thread left). */
static void ka_free(struct etcd_store *es, struct ka_xfer *x)
{
	for (struct ka_xfer **pp = &es->ka_list; *pp; pp = &(*pp)->next) {
		if (*pp == x) {
			*pp = x->next;
			break;
		}
	}
	if (x->h) {
		curl_multi_remove_handle(es->ka_multi, x->h);
		curl_easy_cleanup(x->h);
	}
	curl_slist_free_all(x->hdrs);
	etcd_buf_free(&x->buf);
	free(x);
}

static enum lease_renew_status ka_renew(void *ctx, struct lease_renewal *g,
					int64_t sent,
					struct lease_renew_result *res)
{
	struct etcd_store *es = ctx;
	struct etcd_lease *el = of_renewal(g);
	int64_t tmo = el->ttl_ms / 3 < ETCD_KA_MAX_MS ? el->ttl_ms / 3 :
							 ETCD_KA_MAX_MS;
	struct ka_xfer *x = calloc(1, sizeof(*x));

	(void)res;
	if (!x)
		return LEASE_RENEW_HELD_BACK;
	x->el = el;
	x->sent = sent;
	x->next = es->ka_list;
	es->ka_list = x;
	snprintf(x->body, sizeof(x->body), "{\"ID\":\"%" PRId64 "\"}",
		 el->lease_id);
	x->h = etcd_easy(&es->cli, atomic_load(&el->ep), "/v3/lease/keepalive",
			 x->body, ka_write, &x->buf, tmo, &x->hdrs);
	if (!x->h || curl_easy_setopt(x->h, CURLOPT_PRIVATE, x) != CURLE_OK ||
	    curl_multi_add_handle(es->ka_multi, x->h) != CURLM_OK) {
		ka_free(es, x);
		return LEASE_RENEW_HELD_BACK; /* retried, nothing said */
	}
	el->ka = x;
	return LEASE_RENEW_SENT;
}

/* The TTL (ms) etcd acknowledged, 0 if the lease is gone, <0 on a failed
 * try. */
static int64_t ka_parse(struct etcd_lease *el, struct ka_xfer *x, CURLcode cc)
{
	json_object *j, *res;
	long status = 0;
	int64_t ttl;

	if (cc != CURLE_OK)
		return -EIO;
	curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &status);
	if (status != 200 || !x->buf.p)
		return -EIO;
	j = json_tokener_parse(x->buf.p);
	res = etcd_json_get(j, "result", NULL);
	ttl = res ? etcd_json_i64(res, "TTL") * 1000 : -EIO;
	if (res && etcd_settle_other_cluster(el, res))
		ttl = 0; /* lost (store) */
	json_object_put(j);
	return ttl;
}

/* Caller holds renew_lock: what the keepalive `x` found, to the engine. */
static void ka_answer(struct etcd_store *es, struct ka_xfer *x, CURLcode cc)
{
	struct etcd_lease *el = x->el;
	struct lease_renew_result res = { 0 };
	enum lease_renew_status st = LEASE_RENEW_TAKEN;
	int64_t ttl;

	if (!el)
		return; /* forgotten */
	el->ka = NULL;
	ttl = ka_parse(el, x, cc);
	if (ttl < 0) {
		st = LEASE_RENEW_UNREACHABLE;
		atomic_store(&el->ep, (atomic_load(&el->ep) + 1) %
				      es->cli.n_endpoints);
	} else if (ttl == 0) {
		st = LEASE_RENEW_REFUSED;
		res.why = LEASE_LOSS_EXPIRED;
	} else {
		res.safe_until = x->sent +
				 etcd_ms_to_ns(ttl < el->ttl_ms ? ttl : el->ttl_ms) -
				 el->margin_ns;
	}
	lease_renew_answer_locked(&es->renewer, &el->rn, x->sent, st, &res);
}

static void ka_readable(void *ctx)
{
	struct etcd_store *es = ctx;
	CURLMsg *m;
	int running, left;

	curl_multi_perform(es->ka_multi, &running);
	while ((m = curl_multi_info_read(es->ka_multi, &left)) != NULL) {
		CURLcode cc = m->data.result;
		struct ka_xfer *x;
		char *p = NULL;

		if (m->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &p);
		x = (struct ka_xfer *)(void *)p;
		if (!x)
			continue;
		ka_answer(es, x, cc);
		ka_free(es, x);
	}
}

static void ka_wait(void *ctx, int kick_fd, int timeout_ms)
{
	struct etcd_store *es = ctx;
	struct curl_waitfd kick = { .fd = kick_fd, .events = CURL_WAIT_POLLIN };
	eventfd_t v;

	curl_multi_poll(es->ka_multi, &kick, 1, timeout_ms, NULL);
	(void)eventfd_read(kick_fd, &v); /* EAGAIN: not kicked */
}

static void ka_forget(void *ctx, struct lease_renewal *g)
{
	struct etcd_lease *el = of_renewal(g);

	(void)ctx;
	if (el->ka)
		el->ka->el = NULL;
	el->ka = NULL;
}

static const struct lease_renew_ops etcd_renew_ops = {
	.renew = ka_renew,
	.readable = ka_readable,
	.wait = ka_wait,
	.forget = ka_forget,
};

int etcd_renew_init(struct etcd_store *es)
{
	int64_t third = es->ttl_ms / 3;

	pthread_mutex_init(&es->renew_lock, NULL);
	lease_renew_init(&es->renewer, &es->renew_lock, &etcd_renew_ops, es,
			 es->ttl_ms);
	es->renewer.rules = (struct lease_renew_rules){
		.retry_ms = third < ETCD_RETRY_MS ? third : ETCD_RETRY_MS,
		.expire_at_safe_until = true,
		.safe_until_forward = true,
		.stop_at_loss = true,
	};
	es->ka_multi = curl_multi_init();
	return es->ka_multi ? 0 : -ENOMEM;
}

void etcd_renew_fini(struct etcd_store *es)
{
	lease_renew_stop(&es->renewer);
	while (es->ka_list)
		ka_free(es, es->ka_list);
	if (es->ka_multi)
		curl_multi_cleanup(es->ka_multi);
	es->ka_multi = NULL;
	pthread_mutex_destroy(&es->renew_lock);
}

/* ---- the watch thread: the watch ------------------------------------ */

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
	el->w.ep = atomic_load(&el->ep);
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

/* ---- the watch thread: loop ------------------------------------------ */

static void reap_done(struct etcd_lease *el, int64_t now)
{
	CURLMsg *m;
	int left;

	while ((m = curl_multi_info_read(el->multi, &left)) != NULL) {
		if (m->msg == CURLMSG_DONE && m->easy_handle == el->w.h)
			watch_done(el, now);
	}
}

static int poll_ms(struct etcd_lease *el, int64_t now)
{
	int64_t wake = now + etcd_ms_to_ns(1000);

	if (!el->w.h && el->watch_retry < wake)
		wake = el->watch_retry;
	return wake <= now ? 0 : (int)((wake - now + 999999) / 1000000);
}

/* One step of the watch; it ends at any loss (the lease's loss_fd wakes
 * it, whoever marked it: the watch, the engine's keepalives or expiry). */
static void holder_step(struct etcd_lease *el)
{
	struct curl_waitfd lost = { .fd = el->lease->loss_fd,
				    .events = CURL_WAIT_POLLIN };
	int64_t now = lease_now_ns();
	int running;

	if (el->w.h && el->w.ep != atomic_load(&el->ep))
		watch_done(el, now - etcd_ms_to_ns(ETCD_RETRY_MS)); /* follow failover */
	if (!el->w.h && now >= el->watch_retry)
		watch_start(el, now);
	curl_multi_perform(el->multi, &running);
	reap_done(el, lease_now_ns());
	if (lease_is_lost(el->lease))
		return;
	now = lease_now_ns();
	curl_multi_poll(el->multi, &lost, 1, poll_ms(el, now), NULL);
}

static void *holder_thread(void *arg)
{
	struct etcd_lease *el = arg;

	while (!atomic_load(&el->stop) && !lease_is_lost(el->lease))
		holder_step(el);
	watch_cleanup(el);
	signal_ready(el); /* nobody waits for a watch that will not come */
	return NULL;
}

void etcd_stop_holder(struct etcd_lease *el)
{
	if (!el)
		return;
	lease_renew_remove(&el->es->renewer, &el->rn);
	if (!el->thread_started)
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
	atomic_store(&el->ep, atomic_load(&es->cli.preferred) % es->cli.n_endpoints);
	el->rn.lease = l;
	el->rn.ttl_ms = g->ttl_ms;
	el->w.next_rev = (int64_t)l->epoch + 1;
	if (!el->key_b64 || !el->multi)
		goto fail;
	lease_set_safe_until(l, g->sent + etcd_ms_to_ns(g->ttl_ms) - el->margin_ns);
	l->priv = el;
	r = lease_renew_add_from(&es->renewer, &el->rn, g->sent);
	if (r < 0)
		goto fail;
	r = -pthread_create(&el->thread, NULL, holder_thread, el);
	if (r < 0)
		goto fail;
	el->thread_started = true;
	return 0;
fail:
	lease_renew_remove(&es->renewer, &el->rn);
	l->priv = NULL;
	etcd_lease_free(el);
	return r;
}
