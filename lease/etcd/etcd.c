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
 *   P!store, P!grace the store's age: no grant while it is new (settle.c).
 *
 * Holding: the store's renewal engine (renew.h, with etcd's rules: see
 * holder.c) sends the keepalives (every TTL/3, quick retry on failure)
 * and marks the lease EXPIRED when its safe-until passes unrenewed; one
 * thread per lease runs a watch on P<name> from epoch+1.  safe_until =
 * send time of the last acknowledged keepalive + TTL - margin, published
 * before the grant is returned.
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
	if (es->renew_inited)
		etcd_renew_fini(es);
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
	char *hosts = NULL, *bare = NULL;
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
	r = etcd_settle_uri(rest, &bare, &es->max_ttl_ms, err);
	if (r < 0)
		goto fail;
	rest = bare;
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
	es->ttl_ms = st->opts.ttl_ms > 0 ? st->opts.ttl_ms
		   : ETCD_DEFAULT_TTL_MS < es->max_ttl_ms ? ETCD_DEFAULT_TTL_MS
		   : es->max_ttl_ms;
	es->renew_inited = true;
	if (etcd_renew_init(es) < 0) {
		r = lease_err_set(err, LEASE_E_IO, -ENOMEM, NULL, "out of memory");
		goto fail;
	}
	st->priv = es;
	free(hosts);
	free(bare);
	return 0;
fail:
	free(hosts);
	free(bare);
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

static void etcd_close(struct lease_store *st)
{
	struct etcd_store *es = etcd_store_priv(st);

	if (!es)
		return;
	if (es->spare_id)
		etcd_revoke_id(es, es->spare_id, lease_deadline_ms(1000), NULL, NULL);
	store_free(es);
	st->priv = NULL;
}

/* ---- release / free -------------------------------------------------- */

static int etcd_release(struct lease *l, int64_t deadline)
{
	struct etcd_lease *el = l->priv;
	struct etcd_store *es = etcd_store_priv(l->store);
	int r, r2;

	etcd_stop_holder(el);
	r = etcd_delete_if_epoch(es, l->name, l->epoch, deadline, NULL);
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

	etcd_stop_holder(el);
	etcd_lease_free(el);
	l->priv = NULL;
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
	struct etcd_store *es = etcd_store_priv(st);
	struct create_keys ck;
	int64_t rev = 0;

	if (etcd_settle_await(es, deadline))
		return;
	if (etcd_create_keys_make(es, name, sc, &ck) < 0)
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
	etcd_create_keys_free(&ck);
}

/* The two schemes differ only in how a store is opened (etcds: TLS). */
#define ETCD_BACKEND(name, open_fn) {                                         \
	.scheme = name,                                                       \
	.open = open_fn,                                                      \
	.close = etcd_close,                                                  \
	.try_acquire = etcd_try_acquire,                                      \
	.release = etcd_release,                                              \
	.free_lease = etcd_free_lease,                                        \
	.list = etcd_list,                                                    \
	.show = etcd_show,                                                    \
	.revoke = etcd_revoke,                                                \
	.await_fence = etcd_await_fence,                                      \
	.await_change = etcd_await_change,                                    \
	.hold_fence = etcd_hold_fence,                                        \
}

const struct lease_backend lease_backend_etcd = ETCD_BACKEND("etcd", etcd_open);
const struct lease_backend lease_backend_etcds = ETCD_BACKEND("etcds", etcds_open);
