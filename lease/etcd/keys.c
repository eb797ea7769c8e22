/* SPDX-License-Identifier: MIT */
/*
 * The etcd backend: keys and the JSON of requests, scope keys, and etcd
 * leases (grant, the spare, revoke).  The layout and what the units share:
 * etcd_int.h.  It calls no other unit of the backend but http.c.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd_int.h"

int64_t etcd_margin_ms_for(int64_t ttl_ms)
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

void etcd_add_put(json_object *ops, const char *kb64, const char *vb64,
		  int64_t lease)
{
	json_object *put = etcd_obj_str("key", kb64);

	if (vb64)
		json_object_object_add(put, "value", json_object_new_string(vb64));
	if (lease)
		json_object_object_add(put, "lease", etcd_json_int64_str(lease));
	json_object_array_add(ops, etcd_wrap("request_put", put));
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

int etcd_grant_new(struct etcd_store *es, int64_t deadline,
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
bool etcd_take_spare(struct etcd_store *es, struct grant *g)
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
bool etcd_put_spare(struct etcd_store *es, const struct grant *g)
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

/* "P!scope/<scope>!" + name ('!' is in no name: the boundary is exact). */
static char *scope_raw(const struct etcd_store *es, const char *scope,
		       const char *name)
{
	char *raw;

	if (asprintf(&raw, "%s" ETCD_SCOPE_DIR "%s!%s", es->prefix, scope,
		     name ? name : "") < 0)
		return NULL;
	return raw;
}

char *etcd_scope_key(const struct etcd_store *es, const char *scope,
		     const char *name)
{
	char *raw = scope_raw(es, scope, name), *out;

	if (!raw)
		return NULL;
	out = etcd_b64(raw, strlen(raw));
	free(raw);
	return out;
}

int etcd_scope_range(const struct etcd_store *es, const char *scope,
		     char **key, char **end)
{
	char *raw = scope_raw(es, scope, NULL);

	*key = raw ? etcd_b64(raw, strlen(raw)) : NULL;
	*end = raw ? etcd_range_end_b64(raw) : NULL;
	free(raw);
	return *key && *end ? 0 : -ENOMEM;
}

char *etcd_scope_holder(const struct etcd_store *es, const char *scope,
			json_object *kv)
{
	json_object *k = etcd_json_get(kv, "key", NULL);
	char *raw = NULL, *pre = scope_raw(es, scope, NULL), *out = NULL;

	if (pre && k && etcd_unb64(json_object_get_string(k), &raw, NULL) == 0 &&
	    strncmp(raw, pre, strlen(pre)) == 0)
		out = strdup(raw + strlen(pre));
	free(raw);
	free(pre);
	return out;
}

json_object *etcd_cmp_none(const char *kb64, const char *endb64)
{
	json_object *c = etcd_cmp_create(kb64, 0);

	json_object_object_add(c, "range_end", json_object_new_string(endb64));
	return c;
}
