/* SPDX-License-Identifier: MIT */
/*
 * The natsstore backend: keys, times and values of the harness's bucket,
 * and the requests' statuses (the buckets and what the units share:
 * nats_int.h).  The lowest unit: it calls no other of natsstore.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

#include "nats_int.h"

/* ---- keys ----------------------------------------------------------- */

int ns_key(const char *name, char *out, size_t outsz)
{
	size_t n = 0;

	for (const char *p = name; *p; p++) {
		const char *rep = *p == '_' ? "_u" : *p == '.' ? "_d"
				: *p == '/' ? "_s" : NULL;

		if (n + 3 > outsz)
			return -ENAMETOOLONG;
		if (rep) {
			out[n++] = rep[0];
			out[n++] = rep[1];
		} else {
			out[n++] = *p;
		}
	}
	out[n] = '\0';
	return 0;
}

int ns_unkey(const char *key, char *out, size_t outsz)
{
	size_t n = 0;

	for (const char *p = key; *p; p++) {
		char c = *p;

		if (c == '_') {
			c = p[1] == 'u' ? '_' : p[1] == 'd' ? '.' : p[1] == 's' ? '/' : 0;
			if (!c)
				return -EINVAL;
			p++;
		}
		if (n + 2 > outsz)
			return -ENAMETOOLONG;
		out[n++] = c;
	}
	out[n] = '\0';
	return 0;
}

/* ---- time ----------------------------------------------------------- */

static void rfc3339(int64_t ns, char *buf, size_t sz)
{
	time_t s = (time_t)(ns / 1000000000);
	struct tm tm;

	gmtime_r(&s, &tm);
	snprintf(buf, sz, "%04d-%02d-%02dT%02d:%02d:%02d.%09" PRId64 "Z",
		 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
		 tm.tm_min, tm.tm_sec, ns % 1000000000);
}

/* "YYYY-MM-DDTHH:MM:SS[.frac](Z|+HH:MM|-HH:MM)". */
int ns_rfc3339_parse(const char *s, int64_t *ns)
{
	struct tm tm = { 0 };
	int64_t frac = 0, scale = 1000000000;
	int off = 0, n = 0, oh, om;
	const char *p;

	if (sscanf(s, "%4d-%2d-%2d%*1[Tt ]%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon,
		   &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &n) != 6)
		return -EINVAL;
	p = s + n;
	if (*p == '.') {
		for (p++; *p >= '0' && *p <= '9'; p++)
			if (scale > 1) {
				scale /= 10;
				frac += (*p - '0') * scale;
			}
	}
	if (*p == 'Z' || *p == 'z')
		p++;
	else if ((*p == '+' || *p == '-') && sscanf(p + 1, "%2d:%2d", &oh, &om) == 2) {
		off = (*p == '+' ? 1 : -1) * (oh * 3600 + om * 60);
		p += 6;
	} else
		return -EINVAL;
	/* Between 1970 and 2262 (Unix ns in 64 bits): Go's zero time, for
	 * one, is not a time here. */
	if (*p || tm.tm_year < 1970 || tm.tm_year > 2261)
		return -EINVAL;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	*ns = ((int64_t)timegm(&tm) - off) * 1000000000 + frac;
	return *ns >= 0 ? 0 : -EINVAL;
}

/* ---- values --------------------------------------------------------- */

char *ns_value_json(const struct ns_value *v)
{
	char when[64], *s = NULL;

	rfc3339(v->expires_ns, when, sizeof(when));
	if (asprintf(&s, "{\"epoch\":%" PRIu64 ",\"holder\":\"%s\","
		     "\"expires_at\":\"%s\"}", v->epoch, v->holder, when) < 0)
		return NULL;
	return s;
}

/* Exactly the harness's three fields, of their types. */
int ns_value_parse(const char *text, int len, struct ns_value *v)
{
	json_tokener *tok = json_tokener_new();
	json_object *o = tok ? json_tokener_parse_ex(tok, text, len) : NULL;
	json_object *e, *h, *x;
	int r = -EINVAL;

	if (o && json_object_is_type(o, json_type_object) &&
	    json_object_object_length(o) == 3 &&
	    json_object_object_get_ex(o, "epoch", &e) &&
	    json_object_object_get_ex(o, "holder", &h) &&
	    json_object_object_get_ex(o, "expires_at", &x) &&
	    (json_object_is_type(e, json_type_int) ||
	     json_object_is_type(e, json_type_double)) &&
	    json_object_is_type(h, json_type_string) &&
	    json_object_get_string_len(h) == 32 &&
	    json_object_is_type(x, json_type_string) &&
	    json_object_get_int64(e) >= 0 &&
	    ns_rfc3339_parse(json_object_get_string(x), &v->expires_ns) == 0) {
		v->epoch = (uint64_t)json_object_get_int64(e);
		snprintf(v->holder, sizeof(v->holder), "%s", json_object_get_string(h));
		r = 0;
	}
	json_object_put(o);
	if (tok)
		json_tokener_free(tok);
	return r;
}

int ns_fail(struct ns_store *ns, natsStatus s, const char *name,
	    const char *what, struct lease_err *err)
{
	enum lease_errkind kind = s == NATS_TIMEOUT ? LEASE_E_TIMEOUT
		: (s == NATS_CONNECTION_CLOSED || s == NATS_NO_SERVER ||
		   s == NATS_CONNECTION_DISCONNECTED || s == NATS_NO_RESPONDERS)
		? LEASE_E_UNREACHABLE : LEASE_E_IO;

	return lease_err_set(err, kind, -EIO, name, "natsstore %s: %s%s%s: %s",
			     ns->shown, what, name ? " " : "", name ? name : "",
			     natsStatus_GetText(s));
}

int ns_get(struct ns_store *ns, kvStore *kv, const char *key,
	   struct ns_value *v, struct lease_err *err)
{
	kvEntry *e = NULL;
	natsStatus s = kvStore_Get(&e, kv, key);
	int r;

	if (s == NATS_NOT_FOUND)
		return 0;
	if (s != NATS_OK)
		return ns_fail(ns, s, key, "get", err);
	r = ns_value_parse(kvEntry_Value(e), kvEntry_ValueLen(e), v);
	v->revision = kvEntry_Revision(e);
	v->written_ns = kvEntry_Created(e);
	kvEntry_Destroy(e);
	if (r < 0)
		return lease_err_set(err, LEASE_E_CORRUPT, 0, key, "natsstore %s: "
				     "the value at %s is not the harness's "
				     "{epoch, holder, expires_at}; nothing was "
				     "written", ns->shown, key);
	return 1;
}

void ns_publish(struct ns_store *ns, const char *what, const char *key)
{
	char subj[NS_KEY_MAX + 64];

	snprintf(subj, sizeof(subj), NS_SUBJECT ".%s.%s", what, key);
	natsConnection_PublishString(ns->nc, subj, "1");
	natsConnection_FlushTimeout(ns->nc, NS_REQUEST_MS);
}


/* A status that says the server is out of reach (not a refusal). */
bool ns_unreachable(natsStatus s)
{
	return s == NATS_TIMEOUT || s == NATS_CONNECTION_CLOSED ||
	       s == NATS_NO_SERVER || s == NATS_CONNECTION_DISCONNECTED ||
	       s == NATS_NO_RESPONDERS || s == NATS_NO_MEMORY;
}

/* Write `v` at `key`: created if `create`, else conditional on
 * v->revision; v->revision becomes the new one. */
natsStatus ns_write_value(kvStore *kv, const char *key, struct ns_value *v,
			   bool create)
{
	char *json = ns_value_json(v);
	uint64_t rev = 0;
	natsStatus s;

	if (!json)
		return NATS_NO_MEMORY;
	s = create ? kvStore_CreateString(&rev, kv, key, json)
		   : kvStore_UpdateString(&rev, kv, key, json, v->revision);
	free(json);
	if (s == NATS_OK)
		v->revision = rev;
	return s;
}

