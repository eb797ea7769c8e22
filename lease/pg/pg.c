/* SPDX-License-Identifier: MIT */
/*
 * The pgstore backend: the store, its connection and bounded queries (the
 * tables and what the units share: pg_int.h).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pg_int.h"

/* Every query is bounded; this is the bound when the caller has none. */

/* ---- the URI -------------------------------------------------------- */

/* "max_ttl=SECONDS" (1 to 1000000, as natsstore takes it): 0 or
 * LEASE_E_USAGE. */
static int take_max_ttl(const char *v, int64_t *ms, struct lease_err *err)
{
	char *end;
	double d;

	errno = 0;
	d = strtod(v, &end);
	if (errno || end == v || *end || !(d >= 1 && d <= 1e6))
		return lease_err_set(err, LEASE_E_USAGE, 0, NULL, "pgstore: bad "
				     "max_ttl=%.80s (expected seconds, 1 to "
				     "1000000)", v);
	*ms = (int64_t)(d * 1000);
	return 0;
}

/*
 * Take our own query parameters (schema=, table_prefix=, max_ttl=) out of
 * the URI, which libpq would refuse; the rest goes to libpq as it is.
 * schema and table_prefix are checked by the harness's rule; empty is the
 * harness's default (options.go:121-123, :128-130).  0 or LEASE_E_USAGE.
 */
static int take_params(char **uri, char *schema, char *prefix,
		       int64_t *max_ttl_ms, struct lease_err *err)
{
	static const char *const keys[] = { "schema=", "table_prefix=",
					    "max_ttl=" };
	char *q = strchr(*uri, '?'), *out, *p, *save = NULL, sep = '?';
	bool seen[3] = { false, false, false };
	size_t len;

	if (!q)
		return 0;
	*q++ = '\0';
	out = malloc(strlen(*uri) + strlen(q) + 2);
	if (!out)
		return lease_err_set(err, LEASE_E_IO, -ENOMEM, NULL, "out of memory");
	len = (size_t)sprintf(out, "%s", *uri);
	for (p = strtok_r(q, "&", &save); p; p = strtok_r(NULL, "&", &save)) {
		int which = -1, r = 0;
		size_t max;

		for (int i = 0; i < 3; i++)
			if (strncmp(p, keys[i], strlen(keys[i])) == 0)
				which = i;
		if (which < 0) {
			len += (size_t)sprintf(out + len, "%c%s", sep, p);
			sep = '&';
			continue;
		}
		max = which == 1 ? PG_PREFIX_MAX : PG_SCHEMA_MAX;
		p += strlen(keys[which]);
		if (seen[which])
			r = lease_err_set(err, LEASE_E_USAGE, 0, NULL, "pgstore: %.*s "
					  "given twice", (int)strlen(keys[which]) - 1,
					  keys[which]);
		else if (which == 2)
			r = take_max_ttl(p, max_ttl_ms, err);
		else if (*p)
			r = pg_ident_check(which ? "table_prefix" : "schema", p,
					   max, err);
		if (r < 0) {
			free(out);
			return r;
		}
		seen[which] = true;
		if (which < 2 && *p)
			snprintf(which ? prefix : schema, max + 1, "%s", p);
	}
	free(*uri);
	*uri = out;
	return 0;
}

/* ---- the store ------------------------------------------------------ */

static void pg_store_free(struct pg_store *ps)
{
	if (!ps)
		return;
	if (ps->conn)
		PQfinish(ps->conn);
	pthread_mutex_destroy(&ps->lock);
	pthread_cond_destroy(&ps->changed);
	free(ps->conninfo);
	free(ps->shown);
	free(ps);
}

/* `rest` follows "postgres:" or "postgresql:" ("//user@host/db?..."). */
static int pg_open(struct lease_store *store, const char *rest,
		   struct lease_err *err)
{
	struct pg_store *ps = calloc(1, sizeof(*ps));
	/* The harness's defaults (options.go:15-16). */
	char schema[PG_SCHEMA_MAX + 1] = "looprig";
	char prefix[PG_PREFIX_MAX + 1] = "looprig_";
	pthread_condattr_t ca;
	int r;

	if (!ps)
		return lease_err_set(err, LEASE_E_IO, -ENOMEM, NULL, "out of memory");
	pthread_mutex_init(&ps->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&ps->changed, &ca);
	pthread_condattr_destroy(&ca);
	ps->max_ttl_ms = PG_DEFAULT_TTL_MS;
	if (asprintf(&ps->conninfo, "postgresql:%s", rest) < 0) {
		ps->conninfo = NULL;
		r = lease_err_set(err, LEASE_E_IO, -ENOMEM, NULL, "out of memory");
		goto fail;
	}
	r = take_params(&ps->conninfo, schema, prefix, &ps->max_ttl_ms, err);
	if (r < 0)
		goto fail;
	/* No TTL named: the harness's, or max_ttl where that is shorter. */
	ps->ttl_ms = store->opts.ttl_ms ? store->opts.ttl_ms
		: PG_DEFAULT_TTL_MS < ps->max_ttl_ms ? PG_DEFAULT_TTL_MS
		: ps->max_ttl_ms;
	lease_renew_init(&ps->renewer, &ps->lock, &pg_renew_ops, ps, ps->ttl_ms);
	ps->shown = malloc(strlen(ps->conninfo) + 8);
	if (!ps->shown) {
		r = lease_err_set(err, LEASE_E_IO, -ENOMEM, NULL, "out of memory");
		goto fail;
	}
	lease_uri_redact(ps->conninfo, ps->shown, strlen(ps->conninfo) + 8);
	pg_names_set(ps, schema, prefix);
	pthread_mutex_lock(&ps->lock);
	r = pg_connect_locked(ps, lease_deadline_ms(PG_QUERY_MS), err);
	if (r == 0)
		r = pg_schema_open_locked(ps, err);
	if (r == 0)
		r = pg_identity_locked(ps, ps->ident, sizeof(ps->ident), err);
	pthread_mutex_unlock(&ps->lock);
	if (r < 0)
		goto fail;
	store->priv = ps;
	return 0;
fail:
	pg_store_free(ps);
	return r;
}

/* Leases of the store must have been freed before close. */
static void pg_close(struct lease_store *store)
{
	struct pg_store *ps = pg_of(store);

	if (!ps)
		return;
	lease_renew_stop(&ps->renewer);
	pg_store_free(ps);
	store->priv = NULL;
}

#define PG_BACKEND(name) {                                                    \
	.scheme = name,                                                       \
	.open = pg_open,                                                      \
	.close = pg_close,                                                    \
	.try_acquire = pg_try_acquire,                                        \
	.await_change = pg_await_change,                                      \
	.release = pg_release,                                                \
	.free_lease = pg_free_lease,                                          \
	.list = pg_list,                                                      \
	.show = pg_show,                                                      \
	.revoke = pg_revoke,                                                  \
	.await_fence = pg_await_fence,                                        \
}

const struct lease_backend lease_backend_pg = PG_BACKEND("postgres");
const struct lease_backend lease_backend_pgql = PG_BACKEND("postgresql");
