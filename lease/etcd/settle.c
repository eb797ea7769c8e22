/* SPDX-License-Identifier: MIT */
/*
 * The etcd backend: a store made anew grants nothing while a holder from
 * before it may still believe itself valid.
 *
 * An etcd member restarted without its data (or a cluster made again)
 * comes back empty: every key of the prefix is gone, so a grant there
 * would succeed at once while the old holder writes until its safe-until,
 * up to its TTL after its last keepalive that the old store answered.
 * Two keys under the prefix P say how old the store is, on etcd's clock:
 *
 *   P!store   the store's marker, with no etcd lease: made once, by the
 *             first grant try that finds it missing, and never deleted.
 *   P!grace   made in the same transaction, attached to a fresh etcd lease
 *             of max_ttl + max_ttl/3 (whole seconds, rounded up); etcd
 *             deletes it when that lease runs out.
 *
 * A grant needs P!store there and P!grace gone (etcd_settled(); the
 * create transaction compares both again, etcd_settle_guard(), so a store
 * wiped between the look and the create grants nothing).  Every holder's
 * last acknowledged keepalive was answered by the old store, before P!store
 * was made; it believes at most its TTL (<= max_ttl) after that, so none
 * believes once etcd has expired P!grace, as long as the clock rates of
 * etcd's leader and the holders agree within a third.  etcd never expires a
 * lease early: its minimum TTL, a leader change and a restart with data
 * only make it later.  '!' cannot start a name segment, so neither key is
 * a name.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd_int.h"

#define STORE_MARK "!store"
#define GRACE_MARK "!grace"
/* URI parameter bounds (seconds), as pgstore and natsstore take it. */
#define MAX_TTL_MIN_S 1
#define MAX_TTL_MAX_S 1000000

/* What the two keys say: whether P!store is there, the etcd lease P!grace
 * is attached to (0: P!grace gone), the revision of the read. */
struct marks {
	bool store;
	int64_t grace_lease;
	int64_t rev;
};

/* ---- the URI -------------------------------------------------------- */

static int take_max_ttl(const char *v, int64_t *ms, struct lease_err *err)
{
	char *end;
	double d;

	errno = 0;
	d = strtod(v, &end);
	if (errno || end == v || *end || !(d >= MAX_TTL_MIN_S && d <= MAX_TTL_MAX_S))
		return lease_err_set(err, LEASE_E_USAGE, 0, NULL, "etcd: bad "
				     "max_ttl=%.80s (expected seconds, %d to %d)",
				     v, MAX_TTL_MIN_S, MAX_TTL_MAX_S);
	*ms = (int64_t)(d * 1000);
	return 0;
}

int etcd_settle_uri(const char *rest, char **bare, int64_t *max_ttl_ms,
		    struct lease_err *err)
{
	const char *q = strchr(rest, '?');
	char *params, *p, *save = NULL;
	bool seen = false;
	int r = 0;

	*max_ttl_ms = ETCD_DEFAULT_TTL_MS;
	*bare = q ? strndup(rest, (size_t)(q - rest)) : strdup(rest);
	params = q ? strdup(q + 1) : NULL;
	if (!*bare || (q && !params)) {
		r = lease_err_set(err, LEASE_E_IO, -ENOMEM, NULL, "out of memory");
		goto out;
	}
	for (p = params ? strtok_r(params, "&", &save) : NULL; p && r == 0;
	     p = strtok_r(NULL, "&", &save)) {
		if (strncmp(p, "max_ttl=", 8) != 0)
			r = lease_err_set(err, LEASE_E_USAGE, 0, NULL, "etcd: unknown "
					  "store URI parameter '%.80s' (there is: "
					  "max_ttl=SECONDS)", p);
		else if (seen)
			r = lease_err_set(err, LEASE_E_USAGE, 0, NULL, "etcd: "
					  "max_ttl given twice");
		else
			r = take_max_ttl(p + 8, max_ttl_ms, err);
		seen = true;
	}
out:
	free(params);
	if (r < 0) {
		free(*bare);
		*bare = NULL;
	}
	return r;
}

/* ---- the look and the making --------------------------------------- */

static int64_t grace_s(const struct etcd_store *es)
{
	int64_t ms = es->max_ttl_ms + es->max_ttl_ms / 3;

	return (ms + 999) / 1000;
}

/* The TTL is at most the store's max_ttl (which the grace assumes):
 * 0, or LEASE_E_USAGE naming both. */
static int fits(const struct etcd_store *es, struct lease_err *err)
{
	if (es->ttl_ms <= es->max_ttl_ms)
		return 0;
	return lease_err_set(err, LEASE_E_USAGE, 0, NULL, "etcd store %s: a TTL "
			     "of %.3g s is longer than the store's max_ttl of "
			     "%.3g s (the longest TTL any of its holders uses; "
			     "raise max_ttl= in the URI of every mount of the "
			     "store)", es->prefix, (double)es->ttl_ms / 1e3,
			     (double)es->max_ttl_ms / 1e3);
}

static void add_range(json_object *ops, const char *kb64)
{
	json_object_array_add(ops, etcd_wrap("request_range",
					     etcd_obj_str("key", kb64)));
}

/* The marks from a txn answer whose ops were the reads of P!store and
 * P!grace. */
static void marks_from(json_object *ans, struct marks *m)
{
	json_object *kv = etcd_first_kv(etcd_txn_range(ans, 1));

	m->store = etcd_first_kv(etcd_txn_range(ans, 0)) != NULL;
	/* A P!grace with no lease (not ours) would never go: taken as gone. */
	m->grace_lease = kv ? etcd_json_i64(kv, "lease") : 0;
	m->rev = etcd_json_i64(etcd_json_get(ans, "header", NULL), "revision");
}

/* Run `body`, a txn whose ops that ran were the reads of P!store and
 * P!grace: *m, and whether it succeeded in *ok. */
static int run_txn(struct etcd_store *es, json_object *body, const char *name,
		   int64_t deadline, struct marks *m, bool *ok,
		   struct lease_err *err)
{
	json_object *ans = NULL;
	int code, r;

	r = etcd_call(&es->cli, "/v3/kv/txn", body, deadline, name, &ans, &code,
		      err);
	if (r == 0) {
		*ok = etcd_txn_ok(ans);
		marks_from(ans, m);
	}
	json_object_put(ans);
	return r;
}

/* Read both keys. */
static int look(struct etcd_store *es, const char *sk, const char *gk,
		const char *name, int64_t deadline, struct marks *m,
		struct lease_err *err)
{
	json_object *ops = json_object_new_array();
	json_object *body;
	bool ok;
	int r;

	add_range(ops, sk);
	add_range(ops, gk);
	body = etcd_txn_body(NULL, ops, NULL);
	r = run_txn(es, body, name, deadline, m, &ok, err);
	json_object_put(body);
	return r;
}

/* A fresh etcd lease of the grace: its ID in *id. */
static int grant_grace(struct etcd_store *es, const char *name,
		       int64_t deadline, int64_t *id, struct lease_err *err)
{
	json_object *body = etcd_obj_i64("TTL", grace_s(es)), *ans = NULL;
	int64_t ttl;
	int code, r;

	r = etcd_call(&es->cli, "/v3/lease/grant", body, deadline, name, &ans,
		      &code, err);
	json_object_put(body);
	if (r < 0)
		return r;
	*id = etcd_json_i64(ans, "ID");
	ttl = etcd_json_i64(ans, "TTL");
	json_object_put(ans);
	if (*id != 0 && ttl >= grace_s(es))
		return 0;
	if (*id != 0)
		etcd_revoke_id(es, *id, deadline, name, NULL);
	return lease_err_set(err, LEASE_E_CORRUPT, 0, name, "etcd granted the "
			     "store's grace lease without an ID or shorter than "
			     "the %" PRId64 " s asked", grace_s(es));
}

/* Make P!store and P!grace where P!store is missing; where someone else
 * made it first, *m is what the failed transaction read. */
static int make(struct etcd_store *es, const char *sk, const char *gk,
		const char *name, int64_t deadline, struct marks *m,
		struct lease_err *err)
{
	json_object *cmp, *succ, *fail, *body;
	int64_t id = 0;
	bool ok = false;
	int r = grant_grace(es, name, deadline, &id, err);

	if (r < 0)
		return r;
	cmp = etcd_one(etcd_cmp_create(sk, 0));
	succ = json_object_new_array();
	fail = json_object_new_array();
	etcd_add_put(succ, sk, NULL, 0);
	etcd_add_put(succ, gk, NULL, id);
	add_range(fail, sk);
	add_range(fail, gk);
	body = etcd_txn_body(cmp, succ, fail);
	r = run_txn(es, body, name, deadline, m, &ok, err);
	json_object_put(body);
	if (r == 0 && ok) {
		*m = (struct marks){ .store = true, .grace_lease = id, .rev = m->rev };
		return 0;
	}
	etcd_revoke_id(es, id, deadline, name, NULL);
	return r;
}

/* Seconds the grace lease has left on etcd's clock (-1: unknown). */
static int64_t grace_left_s(struct etcd_store *es, int64_t id, int64_t deadline)
{
	json_object *body = etcd_obj_i64("ID", id), *ans = NULL;
	int64_t left = -1;
	int code;

	if (etcd_call(&es->cli, "/v3/lease/timetolive", body, deadline, NULL,
		      &ans, &code, NULL) == 0)
		left = etcd_json_i64(ans, "TTL");
	json_object_put(body);
	json_object_put(ans);
	return left;
}

/* Busy, naming the wait and its reason. */
static int not_yet(struct etcd_store *es, const char *name, int64_t id,
		   int64_t deadline, struct lease_err *err)
{
	int64_t left = grace_left_s(es, id, deadline);
	int r = lease_err_set(err, LEASE_E_HELD, 0, name, "etcd store %s: lease "
			      "'%s' is not granted before the store's marker "
			      "%s" STORE_MARK " is %" PRId64 " s old (max_ttl "
			      "%.3g s and a third; %s%" PRId64 " s to go, on "
			      "etcd's clock): the store is new (the prefix's "
			      "first use, or an etcd that lost its data) and a "
			      "holder from before it may believe itself valid "
			      "until then", es->prefix, name, es->prefix,
			      grace_s(es), (double)es->max_ttl_ms / 1e3,
			      left >= 0 ? "" : "at most ",
			      left >= 0 ? left : grace_s(es));

	if (err)
		err->holder_epoch = 0;
	return r;
}

int etcd_settled(struct etcd_store *es, const char *name, int64_t deadline,
		 struct lease_err *err)
{
	char *sk = etcd_key_b64(es, STORE_MARK, "");
	char *gk = etcd_key_b64(es, GRACE_MARK, "");
	struct marks m = { 0 };
	int r = fits(es, err);

	if (r == 0 && (!sk || !gk))
		r = lease_err_set(err, LEASE_E_IO, -ENOMEM, name, "out of memory");
	if (r == 0)
		r = look(es, sk, gk, name, deadline, &m, err);
	if (r == 0 && !m.store)
		r = make(es, sk, gk, name, deadline, &m, err);
	if (r == 0 && (!m.store || m.grace_lease))
		r = not_yet(es, name, m.grace_lease, deadline, err);
	free(sk);
	free(gk);
	return r;
}

int etcd_settle_guard(const struct etcd_store *es, json_object *txn,
		      const char *name, struct lease_err *err)
{
	char *sk = etcd_key_b64(es, STORE_MARK, "");
	char *gk = etcd_key_b64(es, GRACE_MARK, "");
	json_object *cmp = etcd_json_get(txn, "compare", NULL), *c;

	if (!sk || !gk || !cmp) {
		free(sk);
		free(gk);
		return lease_err_set(err, LEASE_E_IO, -ENOMEM, name, "out of memory");
	}
	c = etcd_cmp_create(sk, 0);
	json_object_object_add(c, "result", json_object_new_string("GREATER"));
	json_object_array_add(cmp, c);
	json_object_array_add(cmp, etcd_cmp_create(gk, 0));
	free(sk);
	free(gk);
	return 0;
}

bool etcd_settle_await(struct etcd_store *es, int64_t deadline)
{
	char *sk = etcd_key_b64(es, STORE_MARK, "");
	char *gk = etcd_key_b64(es, GRACE_MARK, "");
	struct marks m = { 0 };
	bool waited = false;

	if (sk && gk && look(es, sk, gk, NULL, deadline, &m, NULL) == 0 &&
	    m.grace_lease) {
		etcd_key_watch(es, gk, NULL, m.rev + 1, deadline);
		waited = true;
	}
	free(sk);
	free(gk);
	return waited;
}

/* ---- the holder ----------------------------------------------------- */

bool etcd_settle_other_cluster(struct etcd_lease *el, json_object *result)
{
	json_object *id = etcd_json_get(result, "header", "cluster_id", NULL);
	const char *s = id ? json_object_get_string(id) : NULL;

	if (!s || !*s || strlen(s) >= sizeof(el->cluster_id))
		return false;
	if (!el->cluster_id[0]) {
		snprintf(el->cluster_id, sizeof(el->cluster_id), "%s", s);
		return false;
	}
	if (strcmp(el->cluster_id, s) == 0)
		return false;
	lease_mark_lost(el->lease, LEASE_LOSS_STORE);
	return true;
}
