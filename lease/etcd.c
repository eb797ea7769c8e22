/* SPDX-License-Identifier: MIT */
/*
 * etcd v3 backend over the JSON gateway.
 *
 * Layout under the store prefix P (default "/leasefs/"):
 *   P<name>          held entry, attached to the holder's etcd lease; its
 *                    value is {"holder": "...", "pid": N}.  The epoch is the
 *                    key's create_revision (cluster-wide, never decreasing).
 *   P!epoch/<name>   high-water mark, written in the same txn that creates
 *                    P<name> (so its mod_revision is the last epoch granted);
 *                    operator revoke rewrites it as {"epoch": N, "revoked": 1},
 *                    and the revoked holder's acknowledgement adds "acked": 1.
 *   P!fence/<name>   written by operator revoke in the txn that deletes
 *                    P<name>: the revoked epoch N, attached to a fresh etcd
 *                    lease with the holder's own TTL.  While it exists the
 *                    name is not granted.  It goes when the holder
 *                    acknowledges (its release after it drained deletes it)
 *                    or when its TTL runs out; since the holder's
 *                    safe_until is bounded by its last keepalive sent before
 *                    the revoke + TTL - margin, the holder has fenced itself
 *                    by then (Chubby's lock-delay).
 *                    '!' cannot start a name segment, so it never collides.
 *
 * Holding: one thread per lease drives, on one curl multi handle, the
 * keepalives (every TTL/3, quick retry on failure) and a watch on P<name>
 * from epoch+1.  safe_until = send time of the last acknowledged keepalive
 * + TTL - margin, published before the grant is returned; the thread also
 * marks the lease EXPIRED when that deadline passes unrenewed.
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

#include "backend.h"
#include "etcd_int.h"

/* ---- small helpers -------------------------------------------------- */

static struct etcd_store *store_priv(struct lease_store *s)
{
	return s->priv;
}


static int64_t margin_ms_for(int64_t ttl_ms)
{
	return ttl_ms / 5 < 1000 ? ttl_ms / 5 : 1000;
}

/* malloc'ed base64 of prefix + mid + name. */
char *etcd_key_b64(const struct etcd_store *es, const char *mid,
		     const char *name)
{
	char *raw, *out;

	if (asprintf(&raw, "%s%s%s", es->prefix, mid, name) < 0)
		return NULL;
	out = etcd_b64(raw, strlen(raw));
	free(raw);
	return out;
}

json_object *etcd_obj_str(const char *k, const char *v)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, k, json_object_new_string(v));
	return o;
}

json_object *etcd_obj_i64(const char *k, int64_t v)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, k, etcd_json_int64_str(v));
	return o;
}

/* {"kind": inner} as a single-element array entry helper. */
json_object *etcd_wrap(const char *kind, json_object *inner)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, kind, inner);
	return o;
}

/* Compare create_revision(key) == rev. */
json_object *etcd_cmp_create(const char *kb64, int64_t rev)
{
	json_object *c = etcd_obj_str("key", kb64);

	json_object_object_add(c, "target", json_object_new_string("CREATE"));
	json_object_object_add(c, "result", json_object_new_string("EQUAL"));
	json_object_object_add(c, "create_revision", etcd_json_int64_str(rev));
	return c;
}

json_object *etcd_txn_body(json_object *cmp, json_object *succ,
			     json_object *fail)
{
	json_object *t = json_object_new_object();

	if (cmp)
		json_object_object_add(t, "compare", cmp);
	if (succ)
		json_object_object_add(t, "success", succ);
	if (fail)
		json_object_object_add(t, "failure", fail);
	return t;
}

json_object *etcd_one(json_object *o)
{
	json_object *a = json_object_new_array();

	json_object_array_add(a, o);
	return a;
}

json_object *etcd_first_kv(json_object *range_resp)
{
	json_object *kvs = etcd_json_get(range_resp, "kvs", NULL);

	if (!kvs || !json_object_is_type(kvs, json_type_array) ||
	    json_object_array_length(kvs) == 0)
		return NULL;
	return json_object_array_get_idx(kvs, 0);
}

/* responses[i].response_range of a txn answer. */
json_object *etcd_txn_range(json_object *ans, size_t i)
{
	json_object *rs = etcd_json_get(ans, "responses", NULL);

	if (!rs || !json_object_is_type(rs, json_type_array) ||
	    json_object_array_length(rs) <= i)
		return NULL;
	return etcd_json_get(json_object_array_get_idx(rs, i),
			     "response_range", NULL);
}

bool etcd_txn_ok(json_object *ans)
{
	json_object *s = etcd_json_get(ans, "succeeded", NULL);

	return s && json_object_get_boolean(s);
}

/* ---- store ---------------------------------------------------------- */

/* The holder description this process's entries carry. */
static int holder_desc(struct etcd_store *es, const struct lease_store *st)
{
	if (st->opts.holder)
		es->holder = strdup(st->opts.holder);
	else if (asprintf(&es->holder, "pid %d", (int)getpid()) < 0)
		es->holder = NULL;
	return es->holder ? 0 : -ENOMEM;
}

static int parse_prefix(struct etcd_store *es, const char *path)
{
	size_t n = path ? strlen(path) : 0;

	if (n == 0)
		es->prefix = strdup(ETCD_DEFAULT_PREFIX);
	else if (path[n - 1] == '/')
		es->prefix = strdup(path);
	else if (asprintf(&es->prefix, "%s/", path) < 0)
		es->prefix = NULL;
	return es->prefix ? 0 : -ENOMEM;
}

static void store_free(struct etcd_store *es)
{
	if (!es)
		return;
	etcd_client_fini(&es->cli);
	free(es->prefix);
	free(es->holder);
	pthread_mutex_destroy(&es->spare_lock);
	free(es);
}

static int open_common(struct lease_store *st, const char *rest, bool tls,
		       struct lease_err *err)
{
	struct etcd_store *es;
	const char *slash;
	char *hosts = NULL;
	int r;

	if (strncmp(rest, "//", 2) != 0)
		return lease_err_set(err, LEASE_E_USAGE, 0, NULL,
				     "etcd URI must be etcd%s://HOST:PORT[,HOST:PORT...][/prefix]",
				     tls ? "s" : "");
	rest += 2;
	if (etcd_http_global_init() < 0)
		return lease_err_set(err, LEASE_E_IO, -EIO, NULL,
				     "libcurl initialisation failed");
	es = calloc(1, sizeof(*es));
	if (!es)
		return lease_err_set(err, LEASE_E_IO, -ENOMEM, NULL, "out of memory");
	pthread_mutex_init(&es->spare_lock, NULL);
	slash = strchr(rest, '/');
	hosts = slash ? strndup(rest, (size_t)(slash - rest)) : strdup(rest);
	if (!hosts) {
		r = lease_err_set(err, LEASE_E_IO, -ENOMEM, NULL, "out of memory");
		goto fail;
	}
	r = etcd_client_init(&es->cli, hosts, tls, &st->opts, err);
	if (r < 0)
		goto fail;
	if (parse_prefix(es, slash) < 0 || holder_desc(es, st) < 0) {
		r = lease_err_set(err, LEASE_E_IO, -ENOMEM, NULL, "out of memory");
		goto fail;
	}
	es->ttl_ms = st->opts.ttl_ms > 0 ? st->opts.ttl_ms : ETCD_DEFAULT_TTL_MS;
	st->priv = es;
	free(hosts);
	return 0;
fail:
	free(hosts);
	store_free(es);
	return r;
}

static int etcd_open(struct lease_store *st, const char *rest,
		     struct lease_err *err)
{
	return open_common(st, rest, false, err);
}

static int etcds_open(struct lease_store *st, const char *rest,
		      struct lease_err *err)
{
	return open_common(st, rest, true, err);
}

/* Revoke an etcd lease; "not found" counts as done. */
int etcd_revoke_id(struct etcd_store *es, int64_t id, int64_t deadline,
		     const char *name, struct lease_err *err)
{
	json_object *body = etcd_obj_i64("ID", id);
	json_object *ans = NULL;
	int code, r;

	r = etcd_call(&es->cli, "/v3/lease/revoke", body, deadline, name, &ans,
		      &code, err);
	json_object_put(body);
	json_object_put(ans);
	if (r == -EREMOTEIO && code == ETCD_CODE_NOT_FOUND)
		r = 0;
	return r;
}

static void etcd_close(struct lease_store *st)
{
	struct etcd_store *es = store_priv(st);

	if (!es)
		return;
	if (es->spare_id)
		etcd_revoke_id(es, es->spare_id, lease_deadline_ms(1000), NULL, NULL);
	store_free(es);
	st->priv = NULL;
}

/* ---- grants --------------------------------------------------------- */

static int grant_new(struct etcd_store *es, int64_t deadline,
		     const char *name, struct grant *g, struct lease_err *err)
{
	int64_t ttl_s = (es->ttl_ms + 999) / 1000;
	json_object *body = etcd_obj_i64("TTL", ttl_s);
	json_object *ans = NULL;
	int64_t granted;
	int code, r;

	g->sent = lease_now_ns();
	r = etcd_call(&es->cli, "/v3/lease/grant", body, deadline, name, &ans,
		      &code, err);
	json_object_put(body);
	if (r < 0)
		return r;
	g->id = etcd_json_i64(ans, "ID");
	granted = etcd_json_i64(ans, "TTL") * 1000;
	json_object_put(ans);
	if (g->id == 0 || granted <= 0)
		return lease_err_set(err, LEASE_E_CORRUPT, 0, name,
				     "etcd lease grant answered without ID/TTL");
	g->ttl_ms = granted < es->ttl_ms ? granted : es->ttl_ms;
	return 0;
}

/* Take the spare lease if it is young enough to be worth reusing. */
static bool take_spare(struct etcd_store *es, struct grant *g)
{
	bool got = false;

	pthread_mutex_lock(&es->spare_lock);
	if (es->spare_id &&
	    lease_now_ns() - es->spare_sent < etcd_ms_to_ns(es->spare_ttl_ms) / 2) {
		g->id = es->spare_id;
		g->sent = es->spare_sent;
		g->ttl_ms = es->spare_ttl_ms;
		got = true;
	}
	es->spare_id = 0;
	pthread_mutex_unlock(&es->spare_lock);
	return got;
}

/* Keep `g` for the next try; false if a spare is already kept. */
static bool put_spare(struct etcd_store *es, const struct grant *g)
{
	bool kept = false;

	pthread_mutex_lock(&es->spare_lock);
	if (!es->spare_id) {
		es->spare_id = g->id;
		es->spare_sent = g->sent;
		es->spare_ttl_ms = g->ttl_ms;
		kept = true;
	}
	pthread_mutex_unlock(&es->spare_lock);
	return kept;
}

/* ---- fence record ---------------------------------------------------- */






/* ---- acquire -------------------------------------------------------- */

/* base64 of the held entry's value: who holds it, and what it lives
 * within (a revoker moves those scope keys into the fence). */
static char *holder_value(const struct etcd_store *es,
			  const struct lease_scopes *sc)
{
	json_object *v = json_object_new_object(), *a = json_object_new_array();
	const char *str;
	char *out;

	json_object_object_add(v, "holder", json_object_new_string(es->holder));
	json_object_object_add(v, "pid", json_object_new_int(getpid()));
	for (size_t i = 0; i < sc->n; i++)
		json_object_array_add(a, json_object_new_string(sc->names[i]));
	json_object_object_add(v, "scopes", a);
	str = json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN);
	out = etcd_b64(str, strlen(str));
	json_object_put(v);
	return out;
}

static void add_range(json_object *ops, const char *kb64, const char *end)
{
	json_object *r = etcd_obj_str("key", kb64);

	if (end) {
		json_object_object_add(r, "range_end", json_object_new_string(end));
		json_object_object_add(r, "limit", etcd_json_int64_str(1));
	}
	json_object_array_add(ops, etcd_wrap("request_range", r));
}

static void add_put(json_object *ops, const char *kb64, const char *vb64,
		    int64_t lease)
{
	json_object *put = etcd_obj_str("key", kb64);

	if (vb64)
		json_object_object_add(put, "value", json_object_new_string(vb64));
	if (lease)
		json_object_object_add(put, "lease", etcd_json_int64_str(lease));
	json_object_array_add(ops, etcd_wrap("request_put", put));
}

/* Keys a create of `name` within sc compares and reads, in the order of
 * the failure reads: P<name>, its fence, the range within it, then per
 * scope P<scope> and its fence. */
struct create_keys {
	char *k, *hk, *fk, *in, *in_end;
	char **sk, **sfk, **scope;  /* per scope: P<S>, fence, scope key */
	size_t n;
};

static void create_keys_free(struct create_keys *ck)
{
	for (size_t i = 0; i < ck->n; i++) {
		free(ck->sk[i]);
		free(ck->sfk[i]);
		free(ck->scope[i]);
	}
	free(ck->sk);
	free(ck->sfk);
	free(ck->scope);
	free(ck->k);
	free(ck->hk);
	free(ck->fk);
	free(ck->in);
	free(ck->in_end);
}

static int create_keys_make(const struct etcd_store *es, const char *name,
			    const struct lease_scopes *sc, struct create_keys *ck)
{
	bool ok;

	memset(ck, 0, sizeof(*ck));
	ck->k = etcd_key_b64(es, "", name);
	ck->hk = etcd_key_b64(es, ETCD_HWM_DIR, name);
	ck->fk = etcd_key_b64(es, ETCD_FENCE_DIR, name);
	ok = ck->k && ck->hk && ck->fk &&
	     etcd_scope_range(es, name, &ck->in, &ck->in_end) == 0;
	ck->sk = calloc(sc->n + 1, sizeof(char *));
	ck->sfk = calloc(sc->n + 1, sizeof(char *));
	ck->scope = calloc(sc->n + 1, sizeof(char *));
	ok = ok && ck->sk && ck->sfk && ck->scope;
	for (size_t i = 0; ok && i < sc->n; i++) {
		ck->n = i + 1;
		ck->sk[i] = etcd_key_b64(es, "", sc->names[i]);
		ck->sfk[i] = etcd_key_b64(es, ETCD_FENCE_DIR, sc->names[i]);
		ck->scope[i] = etcd_scope_key(es, sc->names[i], name);
		ok = ck->sk[i] && ck->sfk[i] && ck->scope[i];
	}
	return ok ? 0 : -ENOMEM;
}

/* The txn: create P<name> (and its high-water mark, and a scope key in
 * every scope) attached to `lease` iff nothing refuses it. */
static json_object *create_body(const struct create_keys *ck,
				const char *value, int64_t lease)
{
	json_object *cmp = etcd_one(etcd_cmp_create(ck->k, 0));
	json_object *succ = json_object_new_array();
	json_object *fail = json_object_new_array();

	json_object_array_add(cmp, etcd_cmp_create(ck->fk, 0));
	json_object_array_add(cmp, etcd_cmp_none(ck->in, ck->in_end));
	add_put(succ, ck->k, value, lease);
	add_put(succ, ck->hk, NULL, 0);
	add_range(fail, ck->k, NULL);
	add_range(fail, ck->fk, NULL);
	add_range(fail, ck->in, ck->in_end);
	for (size_t i = 0; i < ck->n; i++) {
		json_object_array_add(cmp, etcd_cmp_create(ck->sk[i], 0));
		json_object_array_add(cmp, etcd_cmp_create(ck->sfk[i], 0));
		add_put(succ, ck->scope[i], NULL, lease);
		add_range(fail, ck->sk[i], NULL);
		add_range(fail, ck->sfk[i], NULL);
	}
	return etcd_txn_body(cmp, succ, fail);
}

static int refused(struct lease_err *err, const char *who, uint64_t epoch,
		   const char *how)
{
	int r = lease_err_set(err, LEASE_E_HELD, 0, who, "lease '%s' %s at "
			      "epoch %" PRIu64, who, how, epoch);

	if (err)
		err->holder_epoch = epoch;
	return r;
}

/* What refused a create (its failure reads, see create_keys); a fence in
 * the way is named in *fenced (malloc'ed) for etcd_fence_complete(). */
static int create_refused(const struct etcd_store *es, const char *name,
			  const struct lease_scopes *sc, json_object *ans,
			  char **fenced, struct lease_err *err)
{
	json_object *kv;
	char *inner;
	int r;

	if ((kv = etcd_first_kv(etcd_txn_range(ans, 0))))
		return refused(err, name, (uint64_t)etcd_json_i64(kv, "create_revision"),
			       "is held");
	if ((kv = etcd_first_kv(etcd_txn_range(ans, 1)))) {
		*fenced = strdup(name);
		return refused(err, name, etcd_fence_epoch(kv), "was revoked; its "
			       "holder has neither released nor expired yet,");
	}
	if ((kv = etcd_first_kv(etcd_txn_range(ans, 2)))) {
		inner = etcd_scope_holder(es, name, kv);
		r = refused(err, inner ? inner : "(unknown)",
			    (uint64_t)etcd_json_i64(kv, "create_revision"),
			    "is held within it");
		free(inner);
		return r;
	}
	for (size_t i = 0; i < sc->n; i++) {
		if ((kv = etcd_first_kv(etcd_txn_range(ans, 3 + 2 * i))))
			return refused(err, sc->names[i],
				       (uint64_t)etcd_json_i64(kv, "create_revision"),
				       "is held");
		if ((kv = etcd_first_kv(etcd_txn_range(ans, 4 + 2 * i)))) {
			*fenced = strdup(sc->names[i]);
			return refused(err, sc->names[i], etcd_fence_epoch(kv),
				       "was revoked and is not yet fenced,");
		}
	}
	/* Gone by the time of the reads: a try could now succeed. */
	return refused(err, name, 0, "changed hands");
}

/*
 * Create P<name> within sc attached to g->id iff nothing refuses it.  0
 * with *epoch on success; LEASE_E_HELD naming what refused it (a stale
 * fence in the way is completed, so that it expires); -EREMOTEIO with
 * *code from etcd.
 */
static int txn_create(struct etcd_store *es, const char *name,
		      const struct lease_scopes *sc, const struct grant *g,
		      int64_t deadline, uint64_t *epoch, int *code,
		      struct lease_err *err)
{
	struct create_keys ck;
	json_object *ans = NULL, *body;
	char *value = holder_value(es, sc), *fenced = NULL;
	int r = create_keys_make(es, name, sc, &ck);

	if (r < 0 || !value) {
		r = lease_err_set(err, LEASE_E_IO, -ENOMEM, name, "out of memory");
		goto out;
	}
	body = create_body(&ck, value, g->id);
	r = etcd_call(&es->cli, "/v3/kv/txn", body, deadline, name, &ans, code,
		      err);
	json_object_put(body);
	if (r < 0)
		goto out;
	if (etcd_txn_ok(ans)) {
		*epoch = (uint64_t)etcd_json_i64(etcd_json_get(ans, "header", NULL),
						 "revision");
		r = *epoch ? 0 : lease_err_set(err, LEASE_E_CORRUPT, 0, name,
					       "etcd txn answered without revision");
		goto out;
	}
	r = create_refused(es, name, sc, ans, &fenced, err);
	if (fenced)
		etcd_fence_complete(es, fenced, deadline);
out:
	json_object_put(ans);
	create_keys_free(&ck);
	free(value);
	free(fenced);
	return r;
}

static void *holder_thread(void *arg);

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

/*
 * Wait until the watch is registered (or the lease is lost, or the
 * deadline passes: the grant stands, the watch keeps trying).  etcd
 * delivers events to a watch created after the change only on its next
 * sync of lagging watchers, up to 100 ms later.
 */
static void wait_ready(struct etcd_lease *el, int64_t deadline)
{
	struct timespec ts = { deadline / 1000000000LL, deadline % 1000000000LL };

	pthread_mutex_lock(&el->ready_lock);
	while (!el->watch_ready && !lease_is_lost(el->lease) &&
	       pthread_cond_timedwait(&el->ready_cond, &el->ready_lock, &ts) == 0)
		;
	pthread_mutex_unlock(&el->ready_lock);
}

static void etcd_lease_free(struct etcd_lease *el)
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

static int start_holder(struct etcd_store *es, struct lease *l,
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
	el->margin_ns = etcd_ms_to_ns(margin_ms_for(g->ttl_ms));
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

/* Delete P<name> iff it still carries `epoch`. */
static int delete_if_epoch(struct etcd_store *es, const char *name,
			   uint64_t epoch, int64_t deadline,
			   struct lease_err *err)
{
	char *k = etcd_key_b64(es, "", name);
	json_object *body, *ans = NULL;
	int code, r;

	if (!k)
		return lease_err_set(err, LEASE_E_IO, -ENOMEM, name, "out of memory");
	body = etcd_txn_body(etcd_one(etcd_cmp_create(k, (int64_t)epoch)),
			etcd_one(etcd_wrap("request_delete_range", etcd_obj_str("key", k))),
			NULL);
	r = etcd_call(&es->cli, "/v3/kv/txn", body, deadline, name, &ans, &code,
		      err);
	json_object_put(body);
	json_object_put(ans);
	free(k);
	return r;
}

/* One create attempt with a reused or fresh grant; keeps the grant on
 * contention. */
static int create_with_grant(struct etcd_store *es, const char *name,
			     const struct lease_scopes *sc, int64_t io_deadline,
			     struct grant *g, uint64_t *epoch,
			     struct lease_err *err)
{
	bool reused = take_spare(es, g);
	int code = 0, r;

	if (!reused) {
		r = grant_new(es, io_deadline, name, g, err);
		if (r < 0)
			return r;
	}
	r = txn_create(es, name, sc, g, io_deadline, epoch, &code, err);
	if (r == -EREMOTEIO && code == ETCD_CODE_NOT_FOUND && reused) {
		/* The kept lease expired while we waited: grant anew. */
		r = grant_new(es, io_deadline, name, g, err);
		if (r < 0)
			return r;
		r = txn_create(es, name, sc, g, io_deadline, epoch, &code, err);
	}
	if (r == lease_errkind_errno(LEASE_E_HELD)) {
		if (!put_spare(es, g))
			etcd_revoke_id(es, g->id, io_deadline, name, NULL);
	} else if (r < 0) {
		etcd_revoke_id(es, g->id, io_deadline, name, NULL);
	}
	return r;
}

static int etcd_try_acquire(struct lease_store *st, const char *name,
			    const struct lease_scopes *sc, int64_t deadline,
			    struct lease **out, struct lease_err *err)
{
	struct etcd_store *es = store_priv(st);
	int64_t floor = lease_deadline_ms(ETCD_MIN_TRY_MS);
	int64_t io_deadline = deadline > floor ? deadline : floor;
	struct grant g = { 0 };
	struct lease *l = NULL;
	uint64_t epoch = 0;
	int r;

	r = create_with_grant(es, name, sc, io_deadline, &g, &epoch, err);
	if (r < 0)
		return r;
	r = lease_alloc(st, name, epoch, sc, &l);
	if (r < 0)
		goto undo;
	r = start_holder(es, l, &g);
	if (r < 0)
		goto undo;
	wait_ready(l->priv, io_deadline);
	*out = l;
	return 0;
undo:
	lease_dispose(l);
	delete_if_epoch(es, name, epoch, io_deadline, NULL);
	etcd_revoke_id(es, g.id, io_deadline, name, NULL);
	return lease_err_set(err, LEASE_E_IO, r, name,
			     "cannot set up lease holder: %s", strerror(-r));
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
	json_object_put(j);
	return ttl;
}

static void ka_done(struct etcd_lease *el, CURLcode cc, int64_t now)
{
	int64_t ttl = ka_parse(el, cc);
	int64_t interval = etcd_ms_to_ns(el->ttl_ms) / 3;

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

static void stop_holder(struct etcd_lease *el)
{
	if (!el || !el->thread_started)
		return;
	atomic_store(&el->stop, true);
	curl_multi_wakeup(el->multi);
	pthread_join(el->thread, NULL);
	el->thread_started = false;
}

/* ---- release / free -------------------------------------------------- */

static int etcd_release(struct lease *l, int64_t deadline)
{
	struct etcd_lease *el = l->priv;
	struct etcd_store *es = store_priv(l->store);
	int r, r2;

	stop_holder(el);
	r = delete_if_epoch(es, l->name, l->epoch, deadline, NULL);
	r2 = el ? etcd_revoke_id(es, el->lease_id, deadline, l->name, NULL) : 0;
	if (r == 0)
		r = r2;
	/* After a revoke (however it was noticed: the watch or a keepalive
	 * that found the lease gone): this release comes after the holder
	 * drained, so it is the acknowledgement that lets a successor in. */
	if (lease_loss_reason(l) != LEASE_LOSS_RELEASED) {
		r2 = etcd_fence_ack(es, l, deadline);
		if (r == 0)
			r = r2;
	}
	return r;
}

static void etcd_free_lease(struct lease *l)
{
	struct etcd_lease *el = l->priv;

	stop_holder(el);
	etcd_lease_free(el);
	l->priv = NULL;
}

/* ---- operator view --------------------------------------------------- */

/* Fill holder/pid from a held entry's value. */
static void info_from_value(struct lease_info *info, json_object *kv)
{
	json_object *v = etcd_json_get(kv, "value", NULL), *j, *h;
	char *raw = NULL;

	if (!v || etcd_unb64(json_object_get_string(v), &raw, NULL) < 0)
		return;
	j = json_tokener_parse(raw);
	h = etcd_json_get(j, "holder", NULL);
	if (h)
		snprintf(info->holder, sizeof(info->holder), "%s",
			 json_object_get_string(h));
	info->holder_pid = (pid_t)etcd_json_i64(j, "pid");
	json_object_put(j);
	free(raw);
}

static void info_held(struct lease_info *info, json_object *kv)
{
	info->state = LEASE_STATE_HELD;
	info->epoch = (uint64_t)etcd_json_i64(kv, "create_revision");
	info_from_value(info, kv);
}

/* High-water mark entry: epoch in the value if revoked, else mod_revision. */
static void info_hwm(struct lease_info *info, json_object *kv)
{
	json_object *v = etcd_json_get(kv, "value", NULL), *j = NULL;
	char *raw = NULL;
	uint64_t epoch = (uint64_t)etcd_json_i64(kv, "mod_revision");
	bool revoked = false;

	if (v && etcd_unb64(json_object_get_string(v), &raw, NULL) == 0 && *raw) {
		j = json_tokener_parse(raw);
		if (etcd_json_i64(j, "epoch") > 0) {
			epoch = (uint64_t)etcd_json_i64(j, "epoch");
			revoked = etcd_json_i64(j, "revoked") != 0;
		}
	}
	if (epoch > info->epoch)
		info->epoch = epoch;
	if (info->state != LEASE_STATE_HELD)
		info->state = revoked ? LEASE_STATE_REVOKED : LEASE_STATE_FREE;
	json_object_put(j);
	free(raw);
}

/* The grants within `name`: their number and one of them, from a range
 * read of its scope keys (limit 1: etcd still counts them all). */
static void info_within(struct lease_info *info, const struct etcd_store *es,
			json_object *range)
{
	json_object *kv = etcd_first_kv(range);
	char *inner = kv ? etcd_scope_holder(es, info->name, kv) : NULL;

	info->within = (unsigned)etcd_json_i64(range, "count");
	if (inner)
		snprintf(info->within_name, sizeof(info->within_name), "%s", inner);
	if (kv)
		info->within_epoch = (uint64_t)etcd_json_i64(kv, "create_revision");
	free(inner);
}

static int etcd_show(struct lease_store *st, const char *name,
		     struct lease_info *info, struct lease_err *err)
{
	struct etcd_store *es = store_priv(st);
	char *k = etcd_key_b64(es, "", name), *hk = etcd_key_b64(es, ETCD_HWM_DIR, name);
	char *in = NULL, *in_end = NULL;
	json_object *body, *succ, *ans = NULL, *kv, *rin;
	int code, r;

	memset(info, 0, sizeof(*info));
	snprintf(info->name, sizeof(info->name), "%s", name);
	if (!k || !hk || etcd_scope_range(es, name, &in, &in_end) < 0) {
		r = lease_err_set(err, LEASE_E_IO, -ENOMEM, name, "out of memory");
		goto out;
	}
	succ = etcd_one(etcd_wrap("request_range", etcd_obj_str("key", k)));
	json_object_array_add(succ, etcd_wrap("request_range", etcd_obj_str("key", hk)));
	rin = etcd_obj_str("key", in);
	json_object_object_add(rin, "range_end", json_object_new_string(in_end));
	json_object_object_add(rin, "limit", etcd_json_int64_str(1));
	json_object_array_add(succ, etcd_wrap("request_range", rin));
	body = etcd_txn_body(NULL, succ, NULL);
	r = etcd_call(&es->cli, "/v3/kv/txn", body, lease_deadline_ms(5000),
		      name, &ans, &code, err);
	json_object_put(body);
	if (r < 0)
		goto out;
	kv = etcd_first_kv(etcd_txn_range(ans, 0));
	if (kv)
		info_held(info, kv);
	kv = etcd_first_kv(etcd_txn_range(ans, 1));
	if (kv)
		info_hwm(info, kv);
	info_within(info, es, etcd_txn_range(ans, 2));
out:
	json_object_put(ans);
	free(k);
	free(hk);
	free(in);
	free(in_end);
	return r;
}

/* Base64 of the first key after every key with this prefix. */
char *etcd_range_end_b64(const char *prefix)
{
	size_t n = strlen(prefix);
	char *end = strdup(prefix), *out;

	if (!end)
		return NULL;
	while (n > 0 && (unsigned char)end[n - 1] == 0xff)
		n--;
	if (n == 0) {
		free(end);
		return strdup("AA=="); /* "\0": every key */
	}
	end[n - 1]++;
	out = etcd_b64(end, n);
	free(end);
	return out;
}

static int info_cmp(const void *a, const void *b)
{
	return strcmp(((const struct lease_info *)a)->name,
		      ((const struct lease_info *)b)->name);
}

/* Name of a kv under the prefix, and whether it is a high-water mark. */
static bool kv_name(const struct etcd_store *es, json_object *kv, char *name,
		    size_t namesz, bool *hwm)
{
	json_object *k = etcd_json_get(kv, "key", NULL);
	size_t pl = strlen(es->prefix), hl = strlen(ETCD_HWM_DIR);
	char *raw = NULL;
	const char *rest;
	bool ok = false;

	if (!k || etcd_unb64(json_object_get_string(k), &raw, NULL) < 0)
		return false;
	if (strncmp(raw, es->prefix, pl) != 0)
		goto out;
	rest = raw + pl;
	*hwm = strncmp(rest, ETCD_HWM_DIR, hl) == 0;
	if (*hwm)
		rest += hl;
	if (lease_name_validate(rest, NULL) == 0 && strlen(rest) < namesz) {
		snprintf(name, namesz, "%s", rest);
		ok = true;
	}
out:
	free(raw);
	return ok;
}

/* Fold a second entry of the same name (held entry or high-water mark)
 * into `dst`: the held entry's state and holder, the larger epoch. */
static void merge_info(struct lease_info *dst, const struct lease_info *src)
{
	uint64_t epoch = dst->epoch > src->epoch ? dst->epoch : src->epoch;

	if (src->state == LEASE_STATE_HELD)
		*dst = *src;
	dst->epoch = epoch;
}

/* Infos for all kvs, sorted by name with one entry per name. */
static int collect_infos(const struct etcd_store *es, json_object *kvs,
			 struct lease_info **out, size_t *count)
{
	size_t n = json_object_array_length(kvs), m = 0;
	struct lease_info *v = calloc(n ? n : 1, sizeof(*v));
	bool hwm;

	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		json_object *kv = json_object_array_get_idx(kvs, i);

		if (!kv_name(es, kv, v[m].name, sizeof(v[m].name), &hwm))
			continue;
		if (hwm)
			info_hwm(&v[m], kv);
		else
			info_held(&v[m], kv);
		m++;
	}
	qsort(v, m, sizeof(*v), info_cmp);
	*count = 0;
	for (size_t i = 0; i < m; i++) {
		if (*count > 0 && strcmp(v[*count - 1].name, v[i].name) == 0)
			merge_info(&v[*count - 1], &v[i]);
		else
			v[(*count)++] = v[i];
	}
	*out = v;
	return 0;
}

static int etcd_list(struct lease_store *st, lease_list_cb cb, void *userdata,
		     struct lease_err *err)
{
	struct etcd_store *es = store_priv(st);
	char *k = etcd_b64(es->prefix, strlen(es->prefix));
	char *end = etcd_range_end_b64(es->prefix);
	json_object *body, *ans = NULL, *kvs;
	struct lease_info *v = NULL;
	size_t n = 0;
	int code, r;

	if (!k || !end) {
		r = lease_err_set(err, LEASE_E_IO, -ENOMEM, NULL, "out of memory");
		goto out;
	}
	body = etcd_obj_str("key", k);
	json_object_object_add(body, "range_end", json_object_new_string(end));
	r = etcd_call(&es->cli, "/v3/kv/range", body, lease_deadline_ms(5000),
		      NULL, &ans, &code, err);
	json_object_put(body);
	if (r < 0)
		goto out;
	kvs = etcd_json_get(ans, "kvs", NULL);
	if (!kvs || !json_object_is_type(kvs, json_type_array))
		goto out;
	r = collect_infos(es, kvs, &v, &n);
	if (r < 0) {
		r = lease_err_set(err, LEASE_E_IO, r, NULL, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n && r == 0; i++)
		r = cb(&v[i], userdata);
out:
	free(v);
	json_object_put(ans);
	free(k);
	free(end);
	return r;
}


/* Range read of the one key P<mid><name>; *ans is the answer. */
int etcd_range_key(struct etcd_store *es, const char *mid, const char *name,
		     int64_t deadline, json_object **ans, struct lease_err *err)
{
	char *k = etcd_key_b64(es, mid, name);
	json_object *body;
	int code, r;

	if (!k)
		return lease_err_set(err, LEASE_E_IO, -ENOMEM, name, "out of memory");
	body = etcd_obj_str("key", k);
	r = etcd_call(&es->cli, "/v3/kv/range", body, deadline, name, ans,
		      &code, err);
	json_object_put(body);
	free(k);
	return r;
}









/* A read of [kb64, end) (end NULL: the one key), at most one kv: whether
 * there is one, and the revision after the read in *rev. */
static bool present_at(struct etcd_store *es, const char *kb64,
		       const char *end, int64_t deadline, int64_t *rev)
{
	json_object *body = etcd_obj_str("key", kb64), *ans = NULL;
	bool present = false;
	int code;

	if (end) {
		json_object_object_add(body, "range_end", json_object_new_string(end));
		json_object_object_add(body, "limit", etcd_json_int64_str(1));
	}
	if (etcd_call(&es->cli, "/v3/kv/range", body, deadline, NULL, &ans,
		      &code, NULL) == 0) {
		present = etcd_first_kv(ans) != NULL;
		*rev = etcd_json_i64(etcd_json_get(ans, "header", NULL),
				     "revision") + 1;
	}
	json_object_put(body);
	json_object_put(ans);
	return present;
}

/*
 * Wait until what refuses `name` within sc changes: the first of its held
 * entry, its fence, the grants within it, a scope's held entry or fence
 * that is there is watched from the revision the read saw, so nothing in
 * between is missed.
 */
static void etcd_await_change(struct lease_store *st, const char *name,
			      const struct lease_scopes *sc, int64_t deadline)
{
	struct etcd_store *es = store_priv(st);
	struct create_keys ck;
	int64_t rev = 0;

	if (create_keys_make(es, name, sc, &ck) < 0)
		goto out;
	if (present_at(es, ck.k, NULL, deadline, &rev))
		etcd_key_watch(es, ck.k, NULL, rev, deadline);
	else if (present_at(es, ck.fk, NULL, deadline, &rev))
		etcd_key_watch(es, ck.fk, NULL, rev, deadline);
	else if (present_at(es, ck.in, ck.in_end, deadline, &rev))
		etcd_key_watch(es, ck.in, ck.in_end, rev, deadline);
	else
		for (size_t i = 0; i < ck.n; i++) {
			const char *k = present_at(es, ck.sk[i], NULL, deadline, &rev)
				? ck.sk[i]
				: present_at(es, ck.sfk[i], NULL, deadline, &rev)
				? ck.sfk[i] : NULL;

			if (k) {
				etcd_key_watch(es, k, NULL, rev, deadline);
				break;
			}
		}
out:
	create_keys_free(&ck);
}

const struct lease_backend lease_backend_etcd = {
	.scheme = "etcd",
	.open = etcd_open,
	.close = etcd_close,
	.try_acquire = etcd_try_acquire,
	.release = etcd_release,
	.free_lease = etcd_free_lease,
	.list = etcd_list,
	.show = etcd_show,
	.revoke = etcd_revoke,
	.await_fence = etcd_await_fence,
	.await_change = etcd_await_change,
	.hold_fence = etcd_hold_fence,
};

const struct lease_backend lease_backend_etcds = {
	.scheme = "etcds",
	.open = etcds_open,
	.close = etcd_close,
	.try_acquire = etcd_try_acquire,
	.release = etcd_release,
	.free_lease = etcd_free_lease,
	.list = etcd_list,
	.show = etcd_show,
	.revoke = etcd_revoke,
	.await_fence = etcd_await_fence,
	.await_change = etcd_await_change,
	.hold_fence = etcd_hold_fence,
};
