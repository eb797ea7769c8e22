/* SPDX-License-Identifier: MIT */
/*
 * The etcd backend: acquire: the create transaction, within scopes, and the holder set-up.
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

void etcd_create_keys_free(struct create_keys *ck)
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

int etcd_create_keys_make(const struct etcd_store *es, const char *name,
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
	etcd_add_put(succ, ck->k, value, lease);
	etcd_add_put(succ, ck->hk, NULL, 0);
	add_range(fail, ck->k, NULL);
	add_range(fail, ck->fk, NULL);
	add_range(fail, ck->in, ck->in_end);
	for (size_t i = 0; i < ck->n; i++) {
		json_object_array_add(cmp, etcd_cmp_create(ck->sk[i], 0));
		json_object_array_add(cmp, etcd_cmp_create(ck->sfk[i], 0));
		etcd_add_put(succ, ck->scope[i], NULL, lease);
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
	int r = etcd_create_keys_make(es, name, sc, &ck);

	if (r < 0 || !value) {
		r = lease_err_set(err, LEASE_E_IO, -ENOMEM, name, "out of memory");
		goto out;
	}
	body = create_body(&ck, value, g->id);
	r = etcd_settle_guard(es, body, name, err);
	if (r == 0)
		r = etcd_call(&es->cli, "/v3/kv/txn", body, deadline, name,
			      &ans, code, err);
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
	etcd_create_keys_free(&ck);
	free(value);
	free(fenced);
	return r;
}

/* Delete P<name> iff it still carries `epoch`. */
int etcd_delete_if_epoch(struct etcd_store *es, const char *name,
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
	bool reused = etcd_take_spare(es, g);
	int code = 0, r;

	if (!reused) {
		r = etcd_grant_new(es, io_deadline, name, g, err);
		if (r < 0)
			return r;
	}
	r = txn_create(es, name, sc, g, io_deadline, epoch, &code, err);
	if (r == -EREMOTEIO && code == ETCD_CODE_NOT_FOUND && reused) {
		/* The kept lease expired while we waited: grant anew. */
		r = etcd_grant_new(es, io_deadline, name, g, err);
		if (r < 0)
			return r;
		r = txn_create(es, name, sc, g, io_deadline, epoch, &code, err);
	}
	if (r == lease_errkind_errno(LEASE_E_HELD)) {
		if (!etcd_put_spare(es, g))
			etcd_revoke_id(es, g->id, io_deadline, name, NULL);
	} else if (r < 0) {
		etcd_revoke_id(es, g->id, io_deadline, name, NULL);
	}
	return r;
}

int etcd_try_acquire(struct lease_store *st, const char *name,
			    const struct lease_scopes *sc, int64_t deadline,
			    struct lease **out, struct lease_err *err)
{
	struct etcd_store *es = etcd_store_priv(st);
	int64_t floor = lease_deadline_ms(ETCD_MIN_TRY_MS);
	int64_t io_deadline = deadline > floor ? deadline : floor;
	struct grant g = { 0 };
	struct lease *l = NULL;
	uint64_t epoch = 0;
	int r;

	r = etcd_settled(es, name, io_deadline, err);
	if (r == 0)
		r = create_with_grant(es, name, sc, io_deadline, &g, &epoch, err);
	if (r < 0)
		return r;
	r = lease_alloc(st, name, epoch, sc, &l);
	if (r < 0)
		goto undo;
	r = etcd_start_holder(es, l, &g);
	if (r < 0)
		goto undo;
	etcd_wait_ready(l->priv, io_deadline);
	*out = l;
	return 0;
undo:
	lease_dispose(l);
	etcd_delete_if_epoch(es, name, epoch, io_deadline, NULL);
	etcd_revoke_id(es, g.id, io_deadline, name, NULL);
	return lease_err_set(err, LEASE_E_IO, r, name,
			     "cannot set up lease holder: %s", strerror(-r));
}
