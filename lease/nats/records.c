/* SPDX-License-Identifier: MIT */
/*
 * The natsstore backend: our own bucket's holder records and markers
 * (the buckets: nats_int.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "nats_int.h"

int ns_holder_read(struct ns_store *ns, const char *key, struct ns_record *rec)
{
	char rk[NS_KEY_MAX + 4];
	kvEntry *e = NULL;
	json_object *o, *x;
	int r = 0;

	memset(rec, 0, sizeof(*rec));
	snprintf(rk, sizeof(rk), "h.%s", key);
	if (kvStore_Get(&e, ns->own, rk) != NATS_OK)
		return 0;
	o = json_tokener_parse(kvEntry_ValueString(e));
	if (o && json_object_object_get_ex(o, "epoch", &x)) {
		rec->epoch = (uint64_t)json_object_get_int64(x);
		if (json_object_object_get_ex(o, "holder", &x))
			snprintf(rec->holder, sizeof(rec->holder), "%s",
				 json_object_get_string(x));
		rec->revoked = json_object_object_get_ex(o, "revoked", &x) &&
			       json_object_get_boolean(x);
		rec->released = json_object_object_get_ex(o, "released", &x) &&
				json_object_get_boolean(x);
		if (json_object_object_get_ex(o, "pid", &x))
			rec->pid = json_object_get_int(x);
		if (json_object_object_get_ex(o, "description", &x))
			snprintf(rec->desc, sizeof(rec->desc), "%s",
				 json_object_get_string(x));
		rec->rev = kvEntry_Revision(e);
		r = 1;
	}
	json_object_put(o);
	kvEntry_Destroy(e);
	return r;
}

int ns_holder_mark(struct ns_store *ns, const char *key, const char *field,
		   uint64_t rev, uint64_t *nrev)
{
	char rk[NS_KEY_MAX + 4];
	kvEntry *e = NULL;
	json_object *o;
	uint64_t got = 0;
	natsStatus s;

	snprintf(rk, sizeof(rk), "h.%s", key);
	if (kvStore_Get(&e, ns->own, rk) != NATS_OK)
		return -ENOENT;
	o = kvEntry_Revision(e) == rev
		? json_tokener_parse(kvEntry_ValueString(e)) : NULL;
	kvEntry_Destroy(e);
	if (!o)
		return -EAGAIN; /* changed since `rev`, or unreadable */
	json_object_object_add(o, field, json_object_new_boolean(true));
	s = kvStore_UpdateString(&got, ns->own, rk, json_object_to_json_string(o),
				 rev);
	json_object_put(o);
	if (s != NATS_OK)
		return -EAGAIN;
	if (nrev)
		*nrev = got;
	return 0;
}

int ns_own_delete_if(struct ns_store *ns, const char *rk, uint64_t rev)
{
	char subj[NS_KEY_MAX * 2 + 64];
	natsMsg *m = NULL;
	jsPubOptions o;
	natsStatus s;

	if (!rev)
		return -EINVAL; /* 0 would make the condition none */
	snprintf(subj, sizeof(subj), "$KV." NS_OWN_BUCKET ".%s", rk);
	jsPubOptions_Init(&o);
	o.ExpectLastSubjectSeq = rev;
	s = natsMsg_Create(&m, subj, NULL, NULL, 0);
	if (s == NATS_OK)
		s = natsMsgHeader_Set(m, "KV-Operation", "DEL");
	if (s == NATS_OK)
		s = js_PublishMsg(NULL, ns->js, m, &o, NULL);
	natsMsg_Destroy(m);
	return s == NATS_OK ? 0 : -EAGAIN;
}

unsigned ns_within(struct ns_store *ns, const char *key, char *first,
		   size_t firstsz, uint64_t *first_epoch)
{
	char filter[NS_KEY_MAX + 8];
	kvWatchOptions o;
	kvWatcher *w = NULL;
	kvEntry *e = NULL;
	unsigned n = 0;

	kvWatchOptions_Init(&o);
	o.IgnoreDeletes = true;
	snprintf(filter, sizeof(filter), "w.%s.*", key);
	if (kvStore_Watch(&w, ns->own, filter, &o) != NATS_OK)
		return 0;
	/* The initial values, up to the NULL entry that ends them. */
	while (kvWatcher_Next(&e, w, 2000) == NATS_OK && e) {
		const char *k = strrchr(kvEntry_Key(e), '.') + 1;
		struct ns_value mv;

		mv.written_ns = kvEntry_Created(e);
		if (ns_value_parse(kvEntry_Value(e), kvEntry_ValueLen(e), &mv) == 0 &&
		    ns_live(ns, &mv) && n++ == 0)
			ns_unkey(k, first, firstsz);
		kvEntry_Destroy(e);
		e = NULL;
	}
	kvEntry_Destroy(e);
	kvWatcher_Destroy(w);
	if (n && first_epoch) {
		struct ns_value v;
		char ik[NS_KEY_MAX];

		if (ns_key(first, ik, sizeof(ik)) == 0 &&
		    ns_get(ns, ns->kv, ik, &v, NULL) == 1)
			*first_epoch = v.epoch;
	}
	return n;
}

natsStatus ns_marker_put(struct ns_store *ns, const char *mk,
			 const struct ns_value *v, uint64_t *rev)
{
	char *json = ns_value_json(v);
	natsStatus s;

	if (!json)
		return NATS_NO_MEMORY;
	s = kvStore_PutString(rev, ns->own, mk, json);
	free(json);
	return s;
}
