/* SPDX-License-Identifier: MIT */
/*
 * The etcd backend: the operator view (show, list).
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
			/* Acknowledged (the holder's release after its
			 * drain): free again. */
			revoked = etcd_json_i64(j, "revoked") != 0 &&
				  etcd_json_i64(j, "acked") == 0;
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

int etcd_show(struct lease_store *st, const char *name,
		     struct lease_info *info, struct lease_err *err)
{
	struct etcd_store *es = etcd_store_priv(st);
	char *k = etcd_key_b64(es, "", name), *hk = etcd_key_b64(es, ETCD_HWM_DIR, name);
	char *fk = etcd_key_b64(es, ETCD_FENCE_DIR, name);
	char *in = NULL, *in_end = NULL;
	json_object *body, *succ, *ans = NULL, *kv, *rin;
	int code, r;

	memset(info, 0, sizeof(*info));
	snprintf(info->name, sizeof(info->name), "%s", name);
	if (!k || !hk || !fk || etcd_scope_range(es, name, &in, &in_end) < 0) {
		r = lease_err_set(err, LEASE_E_IO, -ENOMEM, name, "out of memory");
		goto out;
	}
	succ = etcd_one(etcd_wrap("request_range", etcd_obj_str("key", k)));
	json_object_array_add(succ, etcd_wrap("request_range", etcd_obj_str("key", hk)));
	rin = etcd_obj_str("key", in);
	json_object_object_add(rin, "range_end", json_object_new_string(in_end));
	json_object_object_add(rin, "limit", etcd_json_int64_str(1));
	json_object_array_add(succ, etcd_wrap("request_range", rin));
	json_object_array_add(succ, etcd_wrap("request_range", etcd_obj_str("key", fk)));
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
	/* Revoked means not yet fenced: the fence entry gone (acknowledged,
	 * or expired past the holder's safe-until), the name is free. */
	if (info->state == LEASE_STATE_REVOKED &&
	    !etcd_first_kv(etcd_txn_range(ans, 3)))
		info->state = LEASE_STATE_FREE;
out:
	json_object_put(ans);
	free(k);
	free(fk);
	free(hk);
	free(in);
	free(in_end);
	return r;
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

int etcd_list(struct lease_store *st, lease_list_cb cb, void *userdata,
		     struct lease_err *err)
{
	struct etcd_store *es = etcd_store_priv(st);
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
