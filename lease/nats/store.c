/* SPDX-License-Identifier: MIT */
/*
 * The natsstore backend: the store, its connection and backend table (the
 * buckets and what the units share: nats_int.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

#include "nats_int.h"

/* ---- the store ------------------------------------------------------ */

/* The reconnect, or an advisory about the harness's bucket (updated,
 * deleted, created): the thread looks at the bucket before it renews.
 * On the library's threads: no lock, nothing that blocks. */
static void look_again(struct ns_store *ns)
{
	atomic_store(&ns->recheck, true);
	lease_renew_kick(&ns->renewer);
}

static void reconnected(natsConnection *nc, void *ud)
{
	(void)nc;
	look_again(ud);
}

static void advised(natsConnection *nc, natsSubscription *sub, natsMsg *msg,
		    void *ud)
{
	(void)nc;
	(void)sub;
	natsMsg_Destroy(msg);
	look_again(ud);
}

/* "nats://a:1,b:2" (or tls://): the servers, each with its scheme. */
static natsStatus servers(natsOptions *o, const char *uri)
{
	const char *rest = strstr(uri, "://");
	char scheme[16], *copy, *save = NULL;
	const char *list[16];
	char *urls[16];
	int n = 0;
	natsStatus s;

	snprintf(scheme, sizeof(scheme), "%s",
		 strncmp(uri, "nats+tls:", 9) == 0 ? "tls" : "nats");
	copy = strdup(rest + 3);
	if (!copy)
		return NATS_NO_MEMORY;
	for (char *p = strtok_r(copy, ",", &save); p && n < 16;
	     p = strtok_r(NULL, ",", &save)) {
		if (asprintf(&urls[n], "%s://%s", scheme, p) < 0)
			break;
		list[n] = urls[n];
		n++;
	}
	s = n ? natsOptions_SetServers(o, list, n) : NATS_INVALID_ARG;
	for (int i = 0; i < n; i++)
		free(urls[i]);
	free(copy);
	return s;
}

/* Credentials and TLS as NATS clients take them, from the environment. */
static natsStatus security(natsOptions *o, const char *uri)
{
	const char *creds = getenv("LEASEFS_NATS_CREDS");
	const char *ca = getenv("LEASEFS_NATS_CA");
	const char *cert = getenv("LEASEFS_NATS_CERT");
	const char *key = getenv("LEASEFS_NATS_KEY");
	natsStatus s = NATS_OK;

	if (creds && *creds)
		s = natsOptions_SetUserCredentialsFromFiles(o, creds, NULL);
	if (s == NATS_OK && (strncmp(uri, "nats+tls:", 9) == 0 || (ca && *ca)))
		s = natsOptions_SetSecure(o, true);
	if (s == NATS_OK && ca && *ca)
		s = natsOptions_LoadCATrustedCertificates(o, ca);
	if (s == NATS_OK && cert && *cert && key && *key)
		s = natsOptions_LoadCertificatesChain(o, cert, key);
	return s;
}

static natsStatus connect_all(struct ns_store *ns, const char *uri)
{
	kvStore *kv = NULL;
	natsOptions *o = NULL;
	jsOptions jo;
	natsStatus s = natsOptions_Create(&o);

	if (s == NATS_OK)
		s = servers(o, uri);
	if (s == NATS_OK)
		s = security(o, uri);
	if (s == NATS_OK)
		s = natsOptions_SetTimeout(o, NS_REQUEST_MS);
	/* Reconnect for as long as we live: a grant's safe-until, not the
	 * connection, decides when it is lost. */
	if (s == NATS_OK)
		s = natsOptions_SetMaxReconnect(o, -1);
	if (s == NATS_OK)
		s = natsOptions_SetReconnectWait(o, 250);
	if (s == NATS_OK)
		s = natsOptions_SetName(o, "leasefs");
	/* A request in flight when the link drops fails then and there, not
	 * at its timeout. */
	if (s == NATS_OK)
		s = natsOptions_SetFailRequestsOnDisconnect(o, true);
	if (s == NATS_OK)
		s = natsOptions_SetReconnectedCB(o, reconnected, ns);
	/* The bells and the advisory share the library's delivery thread
	 * instead of a thread each: their callbacks only set a flag. */
	if (s == NATS_OK)
		s = natsOptions_UseGlobalMessageDelivery(o, true);
	if (s == NATS_OK)
		s = natsConnection_Connect(&ns->nc, o);
	natsOptions_Destroy(o);
	jsOptions_Init(&jo);
	jo.Wait = NS_REQUEST_MS;
	if (s == NATS_OK)
		s = natsConnection_JetStream(&ns->js, ns->nc, &jo);
	if (s == NATS_OK)
		s = natsConnection_Subscribe(&ns->advisory, ns->nc,
					     "$JS.EVENT.ADVISORY.STREAM.*.KV_"
					     NS_BUCKET, advised, ns);
	/* Bound to by name: an absent bucket is made (and looked at again)
	 * by ns_bucket_ensure() before anything is granted. */
	if (s == NATS_OK)
		s = js_KeyValue(&kv, ns->js, NS_OWN_BUCKET);
	if (s == NATS_NOT_FOUND)
		s = NATS_OK;
	kvStore_Destroy(kv);
	return s;
}

/* The buckets (the harness's made as the harness makes it, if it is not
 * there), bound, and a first measure of the server's clock. */
static int buckets_open(struct ns_store *ns, struct lease_err *err)
{
	struct ns_bucket b;
	natsStatus s;
	int r = ns_bucket_ensure(ns, &b, err);

	if (r < 0)
		return r;
	s = ns_own_ensure(ns);
	if (s == NATS_OK)
		s = js_KeyValue(&ns->kv, ns->js, NS_BUCKET);
	if (s == NATS_OK)
		s = js_KeyValue(&ns->own, ns->js, NS_OWN_BUCKET);
	if (s != NATS_OK)
		return lease_err_set(err, LEASE_E_UNREACHABLE, 0, NULL, "natsstore "
				     "%s: %s", ns->shown, natsStatus_GetText(s));
	return ns_clock_fresh(ns, err);
}

static void ns_store_free(struct ns_store *ns)
{
	if (!ns)
		return;
	if (ns->advisory) {
		natsSubscription_Unsubscribe(ns->advisory);
		natsSubscription_Destroy(ns->advisory);
	}
	if (ns->nc)
		natsConnection_Close(ns->nc);
	kvStore_Destroy(ns->kv);
	kvStore_Destroy(ns->own);
	jsCtx_Destroy(ns->js);
	natsConnection_Destroy(ns->nc);
	pthread_mutex_destroy(&ns->lock);
	pthread_mutex_destroy(&ns->view_lock);
	ns_hwm_free(ns);
	pthread_mutex_destroy(&ns->seen_lock);
	free(ns->shown);
	free(ns);
}

/* "?max_ttl=SECONDS" after the servers, taken off `uri`: 0 or -errno. */
static int uri_params(struct ns_store *ns, char *uri, struct lease_err *err)
{
	char *q = strchr(uri, '?'), *save = NULL, *end;

	ns->max_ttl_ms = NS_HARNESS_TTL_MS;
	if (!q)
		return 0;
	*q++ = '\0';
	for (char *p = strtok_r(q, "&", &save); p; p = strtok_r(NULL, "&", &save)) {
		double v;

		if (strncmp(p, "max_ttl=", 8) != 0)
			return lease_err_set(err, LEASE_E_USAGE, 0, NULL, "natsstore: "
					     "unknown parameter '%s' (the one "
					     "there is: max_ttl=SECONDS)", p);
		errno = 0;
		v = strtod(p + 8, &end);
		if (errno || end == p + 8 || *end || !(v >= 1 && v <= 1e6))
			return lease_err_set(err, LEASE_E_USAGE, 0, NULL, "natsstore: "
					     "bad %s (expected seconds, 1 to "
					     "1000000)", p);
		ns->max_ttl_ms = (int64_t)(v * 1000);
	}
	return 0;
}

static int ns_open(struct lease_store *store, const char *rest,
		   struct lease_err *err)
{
	struct ns_store *ns = calloc(1, sizeof(*ns));
	char *uri = NULL;
	natsStatus s;
	int r;

	if (!ns || asprintf(&uri, "%s:%s", store->be->scheme, rest) < 0) {
		free(ns);
		return lease_err_set(err, LEASE_E_IO, -ENOMEM, NULL, "out of memory");
	}
	pthread_mutex_init(&ns->lock, NULL);
	pthread_mutex_init(&ns->view_lock, NULL);
	pthread_mutex_init(&ns->seen_lock, NULL);
	ns->ttl_ms = store->opts.ttl_ms ? store->opts.ttl_ms : NS_DEFAULT_TTL_MS;
	lease_renew_init(&ns->renewer, &ns->lock, &ns_renew_ops, ns, ns->ttl_ms);
	ns->shown = malloc(strlen(uri) + 8);
	if (!ns->shown || strncmp(rest, "//", 2) != 0) {
		r = ns->shown ? lease_err_set(err, LEASE_E_USAGE, 0, NULL, "natsstore: "
					      "'%s' is not nats://HOST:PORT[,...]", uri)
			      : lease_err_set(err, LEASE_E_IO, -ENOMEM, NULL,
					      "out of memory");
		goto fail;
	}
	lease_uri_redact(uri, ns->shown, strlen(uri) + 8);
	r = uri_params(ns, uri, err);
	if (r < 0)
		goto fail;
	s = connect_all(ns, uri);
	if (s != NATS_OK) {
		r = lease_err_set(err, LEASE_E_UNREACHABLE, 0, NULL, "natsstore %s: "
				  "%s", ns->shown, natsStatus_GetText(s));
		goto fail;
	}
	r = buckets_open(ns, err);
	if (r < 0)
		goto fail;
	free(uri);
	store->priv = ns;
	return 0;
fail:
	free(uri);
	ns_store_free(ns);
	return r;
}

/* Leases of the store must have been freed before close. */
static void ns_close(struct lease_store *store)
{
	struct ns_store *ns = ns_of(store);

	if (!ns)
		return;
	lease_renew_stop(&ns->renewer);
	ns_store_free(ns);
	store->priv = NULL;
}

#define NS_BACKEND(name) {                                                    \
	.scheme = name,                                                       \
	.open = ns_open,                                                      \
	.close = ns_close,                                                    \
	.try_acquire = ns_try_acquire,                                        \
	.await_change = ns_await_change,                                      \
	.release = ns_release,                                                \
	.free_lease = ns_free_lease,                                          \
	.list = ns_list,                                                      \
	.show = ns_show,                                                      \
	.revoke = ns_revoke,                                                  \
	.await_fence = ns_await_fence,                                        \
}

const struct lease_backend lease_backend_nats = NS_BACKEND("nats");
const struct lease_backend lease_backend_natstls = NS_BACKEND("nats+tls");
