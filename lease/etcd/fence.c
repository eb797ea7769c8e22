/* SPDX-License-Identifier: MIT */
/*
 * etcd backend: operator revoke, fence entries and scope keys.
 *
 * Keys (P is the store prefix):
 *   P!fence/<name>       "EPOCH LEASE TTL [SCOPE...]": the holder revoked
 *                        at EPOCH, whose etcd lease was LEASE with TTL
 *                        seconds, lived within the SCOPEs.  No successor
 *                        is granted the name while it exists.
 *   P!scope/<S>!<name>   `name` lives within S (attached to the holder's
 *                        etcd lease; after a revoke, part of the fence).
 *
 * Revoke, in this order (the fence proof, README "No two writers"):
 *  1. read the holder: epoch E, etcd lease H, its TTL and scopes;
 *  2. one txn, iff P<name> still has create_revision E: delete it, mark
 *     the high-water mark revoked, put the fence with NO etcd lease, and
 *     put every scope key again with no etcd lease (off H);
 *  3. revoke H: from here on no keepalive of the holder can succeed;
 *  4. grant a fresh etcd lease F of TTL + 1 s, and attach the fence and
 *     the scope keys to it (iff the fence is still the one of step 2).
 * F starts counting after H was revoked, so it expires after the
 * holder's last successful keepalive + TTL, past the holder's safe-until
 * (last keepalive's send time + TTL - margin).  A revoker that dies
 * before step 4 leaves a fence that never expires; whoever meets it
 * next (a revoke, an acquire, a revoker waiting for the fence) completes
 * it once H is gone.  The holder's release after its drain deletes the
 * fence and the scope keys (the acknowledgement); while it is still
 * draining it keeps F alive (etcd_hold_fence()).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd_int.h"

/* ---- fence values ------------------------------------------------------ */

struct fence {
	uint64_t epoch;
	int64_t holder_lease;
	int64_t ttl_s;
	char **scopes;
	size_t n;
	int64_t lease;        /* the etcd lease it is attached to, 0: none */
	int64_t mod;          /* its mod_revision */
	char *value_b64;      /* as stored */
};

static void fence_free(struct fence *f)
{
	for (size_t i = 0; i < f->n; i++)
		free(f->scopes[i]);
	free(f->scopes);
	free(f->value_b64);
	memset(f, 0, sizeof(*f));
}

static char *fence_value(const struct fence *f)
{
	size_t len = 64, off;
	char *s, *out;

	for (size_t i = 0; i < f->n; i++)
		len += strlen(f->scopes[i]) + 1;
	s = malloc(len);
	if (!s)
		return NULL;
	off = (size_t)snprintf(s, len, "%" PRIu64 " %" PRId64 " %" PRId64,
			       f->epoch, f->holder_lease, f->ttl_s);
	for (size_t i = 0; i < f->n; i++)
		off += (size_t)snprintf(s + off, len - off, " %s", f->scopes[i]);
	out = etcd_b64(s, off);
	free(s);
	return out;
}

/* A fence entry's kv parsed (an old entry holds the epoch alone). */
static int fence_parse(json_object *kv, struct fence *f)
{
	json_object *v = etcd_json_get(kv, "value", NULL);
	char *raw = NULL, *save = NULL, *tok;
	int r = -EINVAL;

	memset(f, 0, sizeof(*f));
	if (!v || etcd_unb64(json_object_get_string(v), &raw, NULL) < 0)
		return -EINVAL;
	f->value_b64 = strdup(json_object_get_string(v));
	f->lease = etcd_json_i64(kv, "lease");
	f->mod = etcd_json_i64(kv, "mod_revision");
	tok = strtok_r(raw, " ", &save);
	if (tok && f->value_b64) {
		f->epoch = strtoull(tok, NULL, 10);
		r = 0;
	}
	if ((tok = strtok_r(NULL, " ", &save)))
		f->holder_lease = strtoll(tok, NULL, 10);
	if ((tok = strtok_r(NULL, " ", &save)))
		f->ttl_s = strtoll(tok, NULL, 10);
	while (r == 0 && (tok = strtok_r(NULL, " ", &save))) {
		char **v2 = realloc(f->scopes, (f->n + 1) * sizeof(*v2));

		if (!v2 || !(v2[f->n] = strdup(tok))) {
			f->scopes = v2 ? v2 : f->scopes;
			r = -ENOMEM;
			break;
		}
		f->scopes = v2;
		f->n++;
	}
	free(raw);
	if (r < 0)
		fence_free(f);
	return r;
}

uint64_t etcd_fence_epoch(json_object *kv)
{
	struct fence f;
	uint64_t e;

	if (!kv || fence_parse(kv, &f) < 0)
		return 0;
	e = f.epoch;
	fence_free(&f);
	return e;
}

/* The fence of `name`: 1 (in *f, and the revision after the read in
 * *rev), 0 (none) or -errno. */
static int fence_read(struct etcd_store *es, const char *name, int64_t deadline,
		      struct fence *f, int64_t *rev, struct lease_err *err)
{
	json_object *ans = NULL, *kv;
	int r = etcd_range_key(es, ETCD_FENCE_DIR, name, deadline, &ans, err);

	if (r < 0)
		return r;
	kv = etcd_first_kv(ans);
	if (rev)
		*rev = etcd_json_i64(etcd_json_get(ans, "header", NULL), "revision") + 1;
	r = kv ? fence_parse(kv, f) : 0;
	json_object_put(ans);
	return r < 0 ? r : kv != NULL;
}

/* Compare value(key) == vb64. */
static json_object *cmp_value(const char *kb64, const char *vb64)
{
	json_object *c = etcd_obj_str("key", kb64);

	json_object_object_add(c, "target", json_object_new_string("VALUE"));
	json_object_object_add(c, "result", json_object_new_string("EQUAL"));
	json_object_object_add(c, "value", json_object_new_string(vb64));
	return c;
}

/* base64 of the high-water mark of a revoked epoch. */
static char *hwm_revoked_value(uint64_t epoch, bool acked)
{
	json_object *mark = json_object_new_object();
	const char *ms;
	char *out;

	json_object_object_add(mark, "epoch", etcd_json_int64_str((int64_t)epoch));
	json_object_object_add(mark, "revoked", json_object_new_int(1));
	if (acked)
		json_object_object_add(mark, "acked", json_object_new_int(1));
	ms = json_object_to_json_string_ext(mark, JSON_C_TO_STRING_PLAIN);
	out = etcd_b64(ms, strlen(ms));
	json_object_put(mark);
	return out;
}

/* Put (lease) or delete (lease < 0) the scope keys of `name` in f. */
static int add_scope_ops(const struct etcd_store *es, json_object *ops,
			 const char *name, const struct fence *f, int64_t lease)
{
	for (size_t i = 0; i < f->n; i++) {
		char *k = etcd_scope_key(es, f->scopes[i], name);

		if (!k)
			return -ENOMEM;
		if (lease < 0)
			json_object_array_add(ops, etcd_wrap("request_delete_range",
							     etcd_obj_str("key", k)));
		else
			etcd_add_put(ops, k, NULL, lease);
		free(k);
	}
	return 0;
}

static int run_txn(struct etcd_store *es, const char *name, json_object *body,
		   int64_t deadline, bool *ok, struct lease_err *err)
{
	json_object *ans = NULL;
	int code, r = etcd_call(&es->cli, "/v3/kv/txn", body, deadline, name,
				&ans, &code, err);

	*ok = r == 0 && etcd_txn_ok(ans);
	json_object_put(body);
	json_object_put(ans);
	return r;
}

/* ---- attaching a fence to its expiry ----------------------------------- */

/* The remaining TTL etcd reports for lease `id` (-1: gone), or -errno. */
static int lease_ttl_left(struct etcd_store *es, const char *name, int64_t id,
			  int64_t deadline, int64_t *left, int64_t *granted,
			  struct lease_err *err)
{
	json_object *body = etcd_obj_i64("ID", id), *ans = NULL;
	int code, r = etcd_call(&es->cli, "/v3/lease/timetolive", body,
				deadline, name, &ans, &code, err);

	json_object_put(body);
	if (r == 0) {
		*left = etcd_json_i64(ans, "TTL");
		if (granted)
			*granted = etcd_json_i64(ans, "grantedTTL");
	}
	json_object_put(ans);
	return r;
}

/* A fresh etcd lease of `ttl_s` seconds. */
static int grant_ttl(struct etcd_store *es, const char *name, int64_t ttl_s,
		     int64_t deadline, int64_t *id, struct lease_err *err)
{
	json_object *body = etcd_obj_i64("TTL", ttl_s), *ans = NULL;
	int code, r = etcd_call(&es->cli, "/v3/lease/grant", body, deadline,
				name, &ans, &code, err);

	json_object_put(body);
	if (r == 0)
		*id = etcd_json_i64(ans, "ID");
	json_object_put(ans);
	if (r == 0 && *id == 0)
		r = lease_err_set(err, LEASE_E_CORRUPT, 0, name,
				  "etcd lease grant answered without ID");
	return r;
}

/*
 * Attach fence f of `name` (and its scope keys) to a lease granted now, of
 * the holder's TTL + 1 s.  The caller has seen the holder's etcd lease
 * revoked or gone, so the new lease outlives the holder's safe-until.
 */
static int fence_attach(struct etcd_store *es, const char *name,
			const struct fence *f, int64_t deadline,
			struct lease_err *err)
{
	char *fk = etcd_key_b64(es, ETCD_FENCE_DIR, name);
	json_object *succ;
	int64_t id = 0;
	bool ok = false;
	int r = fk ? grant_ttl(es, name, (f->ttl_s > 0 ? f->ttl_s : 1) + 1,
			       deadline, &id, err) : -ENOMEM;

	if (r == 0) {
		succ = json_object_new_array();
		etcd_add_put(succ, fk, f->value_b64, id);
		r = add_scope_ops(es, succ, name, f, id);
		if (r == 0)
			r = run_txn(es, name, etcd_txn_body(etcd_one(cmp_value(fk,
						f->value_b64)), succ, NULL),
				    deadline, &ok, err);
		else
			json_object_put(succ);
	}
	if (id && !ok) /* acknowledged meanwhile: nothing to expire */
		etcd_revoke_id(es, id, deadline, name, NULL);
	free(fk);
	return r;
}

int etcd_fence_complete(struct etcd_store *es, const char *name,
			int64_t deadline)
{
	struct fence f;
	int64_t left = 0;
	int r = fence_read(es, name, deadline, &f, NULL, NULL);

	if (r <= 0)
		return r;
	if (f.lease == 0 && f.holder_lease &&
	    lease_ttl_left(es, name, f.holder_lease, deadline, &left, NULL,
			   NULL) == 0 && left < 0)
		r = fence_attach(es, name, &f, deadline, NULL);
	else
		r = 0;
	fence_free(&f);
	return r;
}

/* ---- the holder's side -------------------------------------------------- */

int etcd_fence_ack(struct etcd_store *es, const struct lease *l,
		   int64_t deadline)
{
	char *fk = etcd_key_b64(es, ETCD_FENCE_DIR, l->name);
	char *hk = etcd_key_b64(es, ETCD_HWM_DIR, l->name);
	char *hv = hwm_revoked_value(l->epoch, true);
	json_object *succ, *cmp;
	struct fence f = { 0 };
	bool ok = false;
	int r = fk && hk && hv ? fence_read(es, l->name, deadline, &f, NULL, NULL)
			       : -ENOMEM;

	/* The fence may be attached to its expiry between the read and the
	 * txn (its mod_revision moves): read again then. */
	for (int tries = 0; r == 1 && f.epoch == l->epoch && tries < 5; tries++) {
		cmp = etcd_obj_str("key", fk);
		json_object_object_add(cmp, "target", json_object_new_string("MOD"));
		json_object_object_add(cmp, "result", json_object_new_string("EQUAL"));
		json_object_object_add(cmp, "mod_revision", etcd_json_int64_str(f.mod));
		succ = etcd_one(etcd_wrap("request_delete_range",
					  etcd_obj_str("key", fk)));
		etcd_add_put(succ, hk, hv, 0);
		r = add_scope_ops(es, succ, l->name, &f, -1);
		if (r == 0)
			r = run_txn(es, l->name, etcd_txn_body(etcd_one(cmp), succ,
							     NULL), deadline, &ok, NULL);
		else {
			json_object_put(cmp);
			json_object_put(succ);
		}
		fence_free(&f);
		if (r == 0 && !ok)
			r = fence_read(es, l->name, deadline, &f, NULL, NULL);
	}
	fence_free(&f);
	free(fk);
	free(hk);
	free(hv);
	return r < 0 ? r : 0;
}

void etcd_hold_fence(struct lease *l)
{
	struct etcd_lease *el = l->priv;
	struct etcd_store *es = lease_store_of(l)->priv;
	int64_t now = lease_now_ns(), deadline = lease_deadline_ms(ETCD_KA_MAX_MS);
	json_object *body, *ans = NULL;
	struct fence f;
	int code;

	/* Whatever the loss looked like from here (the keepalive may have
	 * seen the revoke before the watch did): a fence of our epoch. */
	if (!el || now < el->hold_next ||
	    fence_read(es, l->name, deadline, &f, NULL, NULL) != 1)
		return;
	/* Often enough for a lease of the holder's TTL + 1 s. */
	el->hold_next = now + etcd_ms_to_ns(el->ttl_ms) / 3;
	if (f.epoch == l->epoch && f.lease) {
		body = etcd_obj_i64("ID", f.lease);
		(void)etcd_call(&es->cli, "/v3/lease/keepalive", body, deadline,
				l->name, &ans, &code, NULL);
		json_object_put(body);
		json_object_put(ans);
	}
	fence_free(&f);
}

/* ---- revoke --------------------------------------------------------------- */

/* The holder of `name`: its epoch, etcd lease and scopes into *f; 1 if
 * the name is not held; or -errno. */
static int read_holder(struct etcd_store *es, const char *name,
		       int64_t deadline, struct fence *f, struct lease_err *err)
{
	json_object *ans = NULL, *kv, *v, *j = NULL, *a;
	char *raw = NULL;
	int r = etcd_range_key(es, "", name, deadline, &ans, err);

	memset(f, 0, sizeof(*f));
	if (r < 0)
		return r;
	kv = etcd_first_kv(ans);
	if (!kv) {
		json_object_put(ans);
		return 1;
	}
	f->epoch = (uint64_t)etcd_json_i64(kv, "create_revision");
	f->holder_lease = etcd_json_i64(kv, "lease");
	v = etcd_json_get(kv, "value", NULL);
	if (v && etcd_unb64(json_object_get_string(v), &raw, NULL) == 0)
		j = json_tokener_parse(raw);
	a = etcd_json_get(j, "scopes", NULL);
	for (size_t i = 0; a && json_object_is_type(a, json_type_array) &&
			   i < json_object_array_length(a); i++) {
		const char *sc = json_object_get_string(json_object_array_get_idx(a, i));
		char **v2 = realloc(f->scopes, (f->n + 1) * sizeof(*v2));

		if (!v2 || !sc || lease_name_validate(sc, NULL) < 0) {
			f->scopes = v2 ? v2 : f->scopes;
			r = v2 ? lease_err_set(err, LEASE_E_CORRUPT, 0, name,
					       "bad scope in the entry of '%s'",
					       name)
			       : -ENOMEM;
			break;
		}
		f->scopes = v2;
		f->scopes[f->n++] = strdup(sc);
	}
	json_object_put(j);
	json_object_put(ans);
	free(raw);
	return r;
}

/* Step 2: the holder's entry goes, the fence (no etcd lease) and its
 * scope keys (off the holder's lease) come.  0, 1 if the entry changed
 * meanwhile, or -errno. */
static int revoke_txn(struct etcd_store *es, const char *name,
		      const struct fence *f, int64_t deadline,
		      struct lease_err *err)
{
	char *k = etcd_key_b64(es, "", name), *hk = etcd_key_b64(es, ETCD_HWM_DIR, name);
	char *fk = etcd_key_b64(es, ETCD_FENCE_DIR, name);
	char *hv = hwm_revoked_value(f->epoch, false);
	json_object *succ;
	bool ok = false;
	int r = -ENOMEM;

	if (k && hk && fk && hv) {
		succ = etcd_one(etcd_wrap("request_delete_range",
					  etcd_obj_str("key", k)));
		etcd_add_put(succ, hk, hv, 0);
		etcd_add_put(succ, fk, f->value_b64, 0);
		r = add_scope_ops(es, succ, name, f, 0);
		if (r == 0)
			r = run_txn(es, name, etcd_txn_body(etcd_one(etcd_cmp_create(
					k, (int64_t)f->epoch)), succ, NULL),
				    deadline, &ok, err);
		else
			json_object_put(succ);
	}
	free(k);
	free(hk);
	free(fk);
	free(hv);
	return r < 0 ? r : ok ? 0 : 1;
}

/* One revoke round: 0, 1 if the holder changed meanwhile, or -errno. */
static int revoke_once(struct etcd_store *es, const char *name,
		       int64_t deadline, uint64_t *epoch,
		       struct lease_err *err)
{
	struct fence f;
	int64_t left = 0;
	int r = read_holder(es, name, deadline, &f, err);

	if (r == 1)
		r = lease_err_not_held(err, name);
	if (r == 0)
		r = lease_ttl_left(es, name, f.holder_lease, deadline, &left,
				   &f.ttl_s, err);
	if (r == 0 && f.ttl_s <= 0)
		r = 1; /* expired under us: look again */
	if (r == 0)
		r = (f.value_b64 = fence_value(&f)) ? 0 : -ENOMEM;
	if (r == 0)
		r = revoke_txn(es, name, &f, deadline, err);
	if (r == 0) {
		*epoch = f.epoch;
		/* Steps 3 and 4.  If either fails the fence stays, without
		 * expiry, until someone completes it: safe, and said. */
		if (etcd_revoke_id(es, f.holder_lease, deadline, name, NULL) == 0)
			(void)fence_attach(es, name, &f, deadline, NULL);
	}
	fence_free(&f);
	return r;
}

int etcd_revoke(struct lease_store *st, const char *name, int64_t deadline,
		uint64_t *epoch, struct lease_err *err)
{
	struct etcd_store *es = st->priv;
	int r = 1;

	/* Retry while the holder changes under us; each round is bounded. */
	for (int i = 0; i < 5 && r == 1; i++)
		r = revoke_once(es, name, deadline, epoch, err);
	if (r == 1)
		r = lease_err_set(err, LEASE_E_IO, -ESTALE, name,
				  "lease '%s' kept changing hands", name);
	return r;
}

/* ---- waiting for the fence ----------------------------------------------- */

static size_t stop_on_event(char *d, size_t s, size_t n, void *ud)
{
	struct etcd_buf *b = ud;

	if (etcd_buf_append(b, d, s * n) < 0 || strstr(b->p, "\"events\""))
		return 0; /* something happened: look again */
	return s * n;
}

void etcd_key_watch(struct etcd_store *es, const char *kb64, const char *end,
		    int64_t rev, int64_t deadline)
{
	struct curl_slist *hdrs = NULL;
	struct etcd_buf b = { 0 };
	int64_t left = (deadline - lease_now_ns()) / 1000000;
	char *req = NULL;
	CURL *h = NULL;

	if (left <= 0 ||
	    asprintf(&req, "{\"create_request\":{\"key\":\"%s\"%s%s%s,"
		     "\"start_revision\":\"%" PRId64 "\"}}", kb64,
		     end ? ",\"range_end\":\"" : "", end ? end : "",
		     end ? "\"" : "", rev) < 0)
		req = NULL;
	if (req)
		h = etcd_easy(&es->cli, atomic_load(&es->cli.preferred) %
			      es->cli.n_endpoints, "/v3/watch", req,
			      stop_on_event, &b, left + 1, &hdrs);
	if (h) {
		curl_easy_perform(h);
		curl_easy_cleanup(h);
	}
	curl_slist_free_all(hdrs);
	etcd_buf_free(&b);
	free(req);
}

/* Whether the high-water mark of `name` records an acknowledgement. */
static bool hwm_acked(struct etcd_store *es, const char *name, int64_t deadline)
{
	json_object *ans = NULL, *v, *j = NULL;
	char *raw = NULL;
	bool acked = false;

	if (etcd_range_key(es, ETCD_HWM_DIR, name, deadline, &ans, NULL) == 0) {
		v = etcd_json_get(etcd_first_kv(ans), "value", NULL);
		if (v && etcd_unb64(json_object_get_string(v), &raw, NULL) == 0)
			j = json_tokener_parse(raw);
		acked = etcd_json_i64(j, "acked") != 0;
	}
	json_object_put(j);
	json_object_put(ans);
	free(raw);
	return acked;
}

int etcd_await_fence(struct lease_store *st, const char *name, uint64_t epoch,
		     int64_t deadline, enum lease_fence *out,
		     struct lease_err *err)
{
	struct etcd_store *es = st->priv;
	int64_t floor = 0, rev = 0;
	char *fk = etcd_key_b64(es, ETCD_FENCE_DIR, name);
	struct fence f = { 0 };
	int r;

	*out = LEASE_FENCE_PENDING;
	if (!fk)
		return lease_err_set(err, LEASE_E_IO, -ENOMEM, name, "out of memory");
	for (;;) {
		/* Each read gets at least ETCD_MIN_TRY_MS, even at the end. */
		floor = lease_deadline_ms(ETCD_MIN_TRY_MS);
		r = fence_read(es, name, deadline > floor ? deadline : floor,
			       &f, &rev, err);
		if (r == 1 && f.epoch != epoch)
			r = 0; /* a later revoke's: ours is done */
		if (r == 1 && f.lease == 0)
			(void)etcd_fence_complete(es, name, deadline);
		fence_free(&f);
		if (r != 1 || lease_deadline_passed(deadline))
			break;
		etcd_key_watch(es, fk, NULL, rev, deadline);
	}
	free(fk);
	if (r < 0)
		return r;
	if (r == 0)
		*out = hwm_acked(es, name, floor) ? LEASE_FENCE_ACKED
						  : LEASE_FENCE_EXPIRED;
	return 0;
}
