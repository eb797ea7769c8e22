/* SPDX-License-Identifier: MIT */
/*
 * etcd v3 JSON gateway client: endpoints, one-shot POSTs with failover,
 * and the encoding quirks (int64 as strings, base64 keys, omitted zeros).
 * Internal to the etcd backend.
 */
#ifndef LEASEFS_ETCD_HTTP_H
#define LEASEFS_ETCD_HTTP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>
#include <json-c/json.h>

#include "lease.h"

/* gRPC status codes the gateway reports in {"code": N}. */
#define ETCD_CODE_NOT_FOUND 5
#define ETCD_CODE_UNAVAILABLE 14

struct etcd_client {
	char **endpoints;        /* "host:port", immutable after init */
	size_t n_endpoints;
	bool tls;
	char *ca_file, *cert_file, *key_file; /* NULL = curl default */
	_Atomic unsigned preferred; /* index of the endpoint that last answered */
};

/* Growable response body; `p` is always NUL-terminated when non-NULL. */
struct etcd_buf {
	char *p;
	size_t len, cap;
};

/*
 * Parse "H:P[,H:P...]" into `c`.  TLS files are copied.  LEASE_E_USAGE on
 * a malformed list.
 */
int etcd_client_init(struct etcd_client *c, const char *hosts, bool tls,
		     const struct lease_store_opts *opts, struct lease_err *err);
void etcd_client_fini(struct etcd_client *c);

/* One-time libcurl global initialisation; safe from any thread. */
int etcd_http_global_init(void);

/* Append to a buffer (a curl write callback's body).  -ENOMEM. */
int etcd_buf_append(struct etcd_buf *b, const void *data, size_t n);
void etcd_buf_free(struct etcd_buf *b);

/*
 * A configured POST handle for endpoint `ep` and `path` (e.g. "/v3/kv/txn").
 * `body` must outlive the transfer.  The write callback receives the
 * response body.  `timeout_ms` 0 means no total timeout (streams).
 * `hdrs` receives the header list the caller frees after the transfer.
 */
CURL *etcd_easy(const struct etcd_client *c, size_t ep, const char *path,
		const char *body, curl_write_callback wr, void *userdata,
		int64_t timeout_ms, struct curl_slist **hdrs);

/*
 * POST `body` to `path`, trying each endpoint (the last good one first)
 * until one answers, all within `deadline`.
 *  0         HTTP 200; *out is the parsed JSON (caller puts it).
 *  -EREMOTEIO etcd answered with an error; *code is its gRPC code and
 *            err is LEASE_E_IO with etcd's message.
 *  otherwise LEASE_E_UNREACHABLE, LEASE_E_TIMEOUT (deadline passed) or
 *            LEASE_E_CORRUPT (unparsable answer).
 * `name` only labels the error.
 */
int etcd_call(struct etcd_client *c, const char *path, json_object *body,
	      int64_t deadline, const char *name, json_object **out, int *code,
	      struct lease_err *err);

/* ---- encoding ------------------------------------------------------ */

/* int64 field that may be a string, a number or absent (= 0). */
int64_t etcd_json_i64(json_object *o, const char *key);
/* Nested object lookup: etcd_json_get(o, "result", "header", NULL). */
json_object *etcd_json_get(json_object *o, ...) __attribute__((sentinel));
/* Base64 of n bytes, malloc'ed.  NULL on ENOMEM. */
char *etcd_b64(const void *data, size_t n);
/* Decode base64 into a malloc'ed NUL-terminated buffer.  -EINVAL/-ENOMEM. */
int etcd_unb64(const char *s, char **out, size_t *outlen);
/* JSON string holding an int64 the way the gateway expects. */
json_object *etcd_json_int64_str(int64_t v);

#endif
