/* SPDX-License-Identifier: MIT */
/* etcd v3 JSON gateway client: see etcd_http.h. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "http.h"

#define ETCD_MAX_BODY (64u << 20)
/* Connect attempts are short: a dead endpoint should not eat the deadline. */
#define ETCD_CONNECT_MS 1000

/* ---- global init --------------------------------------------------- */

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static int global_rc;

static void global_init_once(void)
{
	global_rc = curl_global_init(CURL_GLOBAL_ALL) == CURLE_OK ? 0 : -EIO;
}

int etcd_http_global_init(void)
{
	pthread_once(&global_once, global_init_once);
	return global_rc;
}

/* ---- endpoints ----------------------------------------------------- */

static bool endpoint_valid(const char *ep)
{
	const char *colon = strrchr(ep, ':');
	char *end;
	long port;

	if (!colon || colon == ep)
		return false;
	port = strtol(colon + 1, &end, 10);
	return *end == '\0' && end != colon + 1 && port > 0 && port < 65536;
}

static int add_endpoint(struct etcd_client *c, const char *ep, size_t n)
{
	char **v = realloc(c->endpoints, (c->n_endpoints + 1) * sizeof(*v));

	if (!v)
		return -ENOMEM;
	c->endpoints = v;
	v[c->n_endpoints] = strndup(ep, n);
	if (!v[c->n_endpoints])
		return -ENOMEM;
	c->n_endpoints++;
	return 0;
}

static char *dup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

int etcd_client_init(struct etcd_client *c, const char *hosts, bool tls,
		     const struct lease_store_opts *opts, struct lease_err *err)
{
	const char *p = hosts;
	int r;

	memset(c, 0, sizeof(*c));
	c->tls = tls;
	while (*p) {
		size_t n = strcspn(p, ",");

		if (n == 0)
			goto bad;
		r = add_endpoint(c, p, n);
		if (r < 0)
			goto nomem;
		if (!endpoint_valid(c->endpoints[c->n_endpoints - 1]))
			goto bad;
		p += n;
		if (*p == ',' && *++p == '\0')
			goto bad;
	}
	if (c->n_endpoints == 0)
		goto bad;
	if (opts) {
		c->ca_file = dup_or_null(opts->ca_file);
		c->cert_file = dup_or_null(opts->cert_file);
		c->key_file = dup_or_null(opts->key_file);
	}
	return 0;
bad:
	etcd_client_fini(c);
	return lease_err_set(err, LEASE_E_USAGE, 0, NULL,
			     "bad etcd endpoint list '%s' (expected HOST:PORT[,HOST:PORT...])",
			     hosts);
nomem:
	etcd_client_fini(c);
	return lease_err_set(err, LEASE_E_IO, -ENOMEM, NULL, "out of memory");
}

void etcd_client_fini(struct etcd_client *c)
{
	for (size_t i = 0; i < c->n_endpoints; i++)
		free(c->endpoints[i]);
	free(c->endpoints);
	free(c->ca_file);
	free(c->cert_file);
	free(c->key_file);
	memset(c, 0, sizeof(*c));
}

/* ---- buffers ------------------------------------------------------- */

int etcd_buf_append(struct etcd_buf *b, const void *data, size_t n)
{
	if (b->len + n + 1 > ETCD_MAX_BODY)
		return -EFBIG;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 1024;
		char *p;

		while (cap < b->len + n + 1)
			cap *= 2;
		p = realloc(b->p, cap);
		if (!p)
			return -ENOMEM;
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, data, n);
	b->len += n;
	b->p[b->len] = '\0';
	return 0;
}

void etcd_buf_free(struct etcd_buf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

static size_t buf_write_cb(char *data, size_t size, size_t nmemb, void *ud)
{
	size_t n = size * nmemb;

	return etcd_buf_append(ud, data, n) == 0 ? n : 0;
}

/* ---- handles ------------------------------------------------------- */

CURL *etcd_easy(const struct etcd_client *c, size_t ep, const char *path,
		const char *body, curl_write_callback wr, void *userdata,
		int64_t timeout_ms, struct curl_slist **hdrs)
{
	char url[512];
	CURL *h;

	*hdrs = NULL;
	snprintf(url, sizeof(url), "%s://%s%s", c->tls ? "https" : "http",
		 c->endpoints[ep], path);
	h = curl_easy_init();
	if (!h)
		return NULL;
	*hdrs = curl_slist_append(NULL, "Content-Type: application/json");
	if (*hdrs)
		*hdrs = curl_slist_append(*hdrs, "Expect:");
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, *hdrs);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, wr);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, userdata);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, c->tls ? "https" : "http");
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
			 (long)(timeout_ms > 0 && timeout_ms < ETCD_CONNECT_MS ?
				timeout_ms : ETCD_CONNECT_MS));
	if (timeout_ms > 0)
		curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
	if (c->ca_file)
		curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);
	if (c->cert_file)
		curl_easy_setopt(h, CURLOPT_SSLCERT, c->cert_file);
	if (c->key_file)
		curl_easy_setopt(h, CURLOPT_SSLKEY, c->key_file);
	return h;
}

/* ---- one-shot calls ------------------------------------------------ */

enum attempt {
	ATT_OK,        /* HTTP answer in buf/status */
	ATT_NEXT,      /* transport failure or "unavailable": try another */
	ATT_FATAL,     /* local failure (ENOMEM, bad TLS setup) */
};

static enum attempt attempt_one(struct etcd_client *c, size_t ep,
				const char *path, const char *body,
				int64_t timeout_ms, struct etcd_buf *buf,
				long *status, CURLcode *cc)
{
	struct curl_slist *hdrs;
	CURL *h = etcd_easy(c, ep, path, body, buf_write_cb, buf, timeout_ms,
			    &hdrs);

	*status = 0;
	if (!h) {
		curl_slist_free_all(hdrs);
		*cc = CURLE_OUT_OF_MEMORY;
		return ATT_FATAL;
	}
	*cc = curl_easy_perform(h);
	if (*cc == CURLE_OK)
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
	curl_easy_cleanup(h);
	curl_slist_free_all(hdrs);
	switch (*cc) {
	case CURLE_OK:
		return *status >= 500 ? ATT_NEXT : ATT_OK;
	case CURLE_OUT_OF_MEMORY:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CACERT_BADFILE:
		return ATT_FATAL;
	default:
		return ATT_NEXT;
	}
}

static int parse_answer(struct etcd_buf *buf, long status, const char *name,
			json_object **out, int *code, struct lease_err *err)
{
	json_object *j = json_tokener_parse(buf->p ? buf->p : "");
	json_object *msg;

	if (!j)
		return lease_err_set(err, LEASE_E_CORRUPT, 0, name,
				     "etcd: unparsable answer (HTTP %ld)", status);
	if (status == 200) {
		*out = j;
		return 0;
	}
	*code = (int)etcd_json_i64(j, "code");
	if (!json_object_object_get_ex(j, "message", &msg) &&
	    !json_object_object_get_ex(j, "error", &msg))
		msg = NULL;
	lease_err_set(err, LEASE_E_IO, -EIO, name, "etcd: HTTP %ld: %s",
		      status, msg ? json_object_get_string(msg) : "(no message)");
	json_object_put(j);
	return -EREMOTEIO;
}

int etcd_call(struct etcd_client *c, const char *path, json_object *body,
	      int64_t deadline, const char *name, json_object **out, int *code,
	      struct lease_err *err)
{
	const char *text = json_object_to_json_string_ext(body,
							  JSON_C_TO_STRING_PLAIN);
	unsigned first = atomic_load(&c->preferred);
	struct etcd_buf buf = { 0 };
	CURLcode cc = CURLE_OK;
	long status = 0;
	int r;

	*out = NULL;
	*code = 0;
	for (size_t i = 0; i < c->n_endpoints; i++) {
		size_t ep = (first + i) % c->n_endpoints;
		int64_t left_ms = (deadline - lease_now_ns()) / 1000000;
		enum attempt a;

		if (left_ms <= 0)
			break;
		/* Leave the endpoints after this one a share of the time. */
		left_ms = left_ms / (int64_t)(c->n_endpoints - i);
		if (left_ms < 1)
			left_ms = 1;
		etcd_buf_free(&buf);
		a = attempt_one(c, ep, path, text, left_ms, &buf, &status, &cc);
		if (a == ATT_FATAL) {
			r = lease_err_set(err, LEASE_E_IO, -EIO, name,
					  "etcd %s: %s", c->endpoints[ep],
					  curl_easy_strerror(cc));
			goto out;
		}
		if (a == ATT_OK) {
			atomic_store(&c->preferred, (unsigned)ep);
			r = parse_answer(&buf, status, name, out, code, err);
			goto out;
		}
	}
	if (lease_deadline_passed(deadline))
		r = lease_err_set(err, LEASE_E_TIMEOUT, 0, name,
				  "etcd %s: deadline passed (%s)", path,
				  cc == CURLE_OK ? "no answer" : curl_easy_strerror(cc));
	else
		r = lease_err_set(err, LEASE_E_UNREACHABLE, 0, name,
				  "etcd unreachable at %s%s (%s)", c->endpoints[0],
				  c->n_endpoints > 1 ? ",..." : "",
				  status >= 500 ? "server unavailable" :
				  curl_easy_strerror(cc));
out:
	etcd_buf_free(&buf);
	return r;
}

/* ---- encoding ------------------------------------------------------ */

int64_t etcd_json_i64(json_object *o, const char *key)
{
	json_object *v;

	if (!o || !json_object_object_get_ex(o, key, &v))
		return 0;
	if (json_object_is_type(v, json_type_string))
		return strtoll(json_object_get_string(v), NULL, 10);
	return json_object_get_int64(v);
}

json_object *etcd_json_get(json_object *o, ...)
{
	va_list ap;
	const char *k;

	va_start(ap, o);
	while (o && (k = va_arg(ap, const char *)) != NULL) {
		if (!json_object_object_get_ex(o, k, &o))
			o = NULL;
	}
	va_end(ap);
	return o;
}

char *etcd_b64(const void *data, size_t n)
{
	char *out = malloc(4 * ((n + 2) / 3) + 1);

	if (!out)
		return NULL;
	EVP_EncodeBlock((unsigned char *)out, data, (int)n);
	return out;
}

int etcd_unb64(const char *s, char **out, size_t *outlen)
{
	size_t n = strlen(s);
	size_t pad = 0;
	char *p;
	int got;

	*out = NULL;
	if (n % 4 != 0)
		return -EINVAL;
	if (n > 0 && s[n - 1] == '=')
		pad++;
	if (n > 1 && s[n - 2] == '=')
		pad++;
	p = malloc(n / 4 * 3 + 1);
	if (!p)
		return -ENOMEM;
	got = EVP_DecodeBlock((unsigned char *)p, (const unsigned char *)s,
			      (int)n);
	if (got < 0 || (size_t)got < pad) {
		free(p);
		return -EINVAL;
	}
	got -= (int)pad;
	p[got] = '\0';
	*out = p;
	if (outlen)
		*outlen = (size_t)got;
	return 0;
}

json_object *etcd_json_int64_str(int64_t v)
{
	char s[24];

	snprintf(s, sizeof(s), "%" PRId64, v);
	return json_object_new_string(s);
}
