/* SPDX-License-Identifier: MIT */
/*
 * The natsstore backend: our records, show, list, revoke and its fence
 * (the buckets: nats_int.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "nats_int.h"

/* A fence is looked at this often when nothing is published (a harness
 * release, an expiry). */
#define FENCE_LOOK_MS 500

/* ---- our records ---------------------------------------------------- */

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

/* ---- show and list -------------------------------------------------- */

static int show_key(struct ns_store *ns, const char *name, const char *key,
		    struct lease_info *info, struct lease_err *err)
{
	struct ns_value v;
	struct ns_record rec;
	int r;

	memset(info, 0, sizeof(*info));
	snprintf(info->name, sizeof(info->name), "%s", name);
	info->within = ns_within(ns, key, info->within_name,
				 sizeof(info->within_name), &info->within_epoch);
	r = ns_get(ns, ns->kv, key, &v, err);
	if (r <= 0)
		return r;
	info->epoch = v.epoch;
	if (!ns_live(ns, &v))
		return 0;
	info->state = LEASE_STATE_HELD;
	if (ns_holder_read(ns, key, &rec) && rec.epoch == v.epoch &&
	    strcmp(rec.holder, v.holder) == 0) {
		info->holder_pid = rec.pid;
		snprintf(info->holder, sizeof(info->holder), "%s", rec.desc);
		if (rec.revoked)
			info->state = LEASE_STATE_REVOKED;
	} else {
		snprintf(info->holder, sizeof(info->holder), "not a leasefs mount "
			 "(no loss channel but its expiry)");
	}
	return 0;
}

int ns_show(struct lease_store *store, const char *name,
	    struct lease_info *info, struct lease_err *err)
{
	char key[NS_KEY_MAX];

	if (ns_key(name, key, sizeof(key)) < 0)
		return lease_err_set(err, LEASE_E_BADNAME, 0, name, "name too long");
	ns_clock_fresh(ns_of(store), NULL);
	return show_key(ns_of(store), name, key, info, err);
}

int ns_list(struct lease_store *store, lease_list_cb cb, void *userdata,
	    struct lease_err *err)
{
	struct ns_store *ns = ns_of(store);
	kvKeysList keys = { 0 };
	natsStatus s;
	int r = 0;

	ns_clock_fresh(ns, NULL);
	s = kvStore_Keys(&keys, ns->kv, NULL);
	if (s == NATS_NOT_FOUND)
		return 0;
	if (s != NATS_OK)
		return ns_fail(ns, s, NULL, "list", err);
	for (int i = 0; r == 0 && i < keys.Count; i++) {
		char name[LEASE_NAME_MAX + 1];
		struct lease_info info;

		if (ns_unkey(keys.Keys[i], name, sizeof(name)) == 0 &&
		    lease_name_validate(name, NULL) == 0 &&
		    show_key(ns, name, keys.Keys[i], &info, NULL) == 0)
			r = cb(&info, userdata);
	}
	kvKeysList_Destroy(&keys);
	return r;
}

/* ---- revoke --------------------------------------------------------- */

int ns_revoke(struct lease_store *store, const char *name, int64_t deadline,
	      uint64_t *epoch, struct lease_err *err)
{
	struct ns_store *ns = ns_of(store);
	char key[NS_KEY_MAX];
	struct ns_value v;
	struct ns_record rec;
	int r;

	(void)deadline;
	if (ns_key(name, key, sizeof(key)) < 0)
		return lease_err_set(err, LEASE_E_BADNAME, 0, name, "name too long");
	ns_clock_fresh(ns, NULL);
	r = ns_get(ns, ns->kv, key, &v, err);
	if (r < 0)
		return r;
	if (r == 0 || !ns_live(ns, &v))
		return lease_err_not_held(err, name);
	*epoch = v.epoch;
	if (!ns_holder_read(ns, key, &rec) || rec.epoch != v.epoch ||
	    strcmp(rec.holder, v.holder) != 0)
		return 0; /* a harness holder: await_fence says it cannot be told */
	if (rec.revoked)
		return lease_err_not_held(err, name); /* revoked already: nothing held */
	r = ns_holder_mark(ns, key, "revoked", rec.rev, NULL);
	if (r < 0)
		return lease_err_set(err, LEASE_E_IO, r, name, "natsstore %s: "
				     "revoke %s: its holder's record changed "
				     "meanwhile", ns->shown, name);
	ns_publish(ns, "revoke", key);
	return 0;
}

/* Whether the record (read into *rec when `read`) is that of the holder
 * `holder` of epoch `epoch`. */
static bool record_of(const struct ns_record *rec, bool read, uint64_t epoch,
		      const char *holder)
{
	return read && rec->epoch == epoch && strcmp(rec->holder, holder) == 0;
}

/*
 * 1 fenced (*out), 0 not yet (*ms to its expiry), -errno.  *leasefs:
 * whether the holder, when last seen holding, was a leasefs mount (it
 * has a record, and deletes it when it releases; a harness holder only
 * expires).  The entry and the record are two reads, so they are ordered
 * against the holder's release, which marks its record released, then
 * gives the entry back (expired), then deletes the record: the record is
 * read before the entry, so a record missing while the entry still lives
 * was never there; and an expired entry is judged on the record read
 * after it, which by then says released or is gone if the holder let go.
 */
static int fence_state(struct ns_store *ns, const char *key, uint64_t epoch,
		       enum lease_fence *out, bool *leasefs, int64_t *ms,
		       struct lease_err *err)
{
	struct ns_value v;
	struct ns_record rec;
	bool read = ns_holder_read(ns, key, &rec), record;
	int r = ns_get(ns, ns->kv, key, &v, err);

	if (r < 0)
		return r;
	if (r == 0) {
		*out = LEASE_FENCE_ACKED;
		return 1;
	}
	/* The successor's grant overwrote the holder's record: whether the
	 * holder released or expired first is no longer written anywhere. */
	if (v.epoch > epoch) {
		*out = LEASE_FENCE_SUCCEEDED;
		return 1;
	}
	record = record_of(&rec, read, epoch, v.holder);
	if (record && rec.released) {
		*out = LEASE_FENCE_ACKED;
		return 1;
	}
	if (!ns_live(ns, &v)) {
		read = ns_holder_read(ns, key, &rec);
		if (record_of(&rec, read, epoch, v.holder))
			*out = rec.released ? LEASE_FENCE_ACKED : LEASE_FENCE_EXPIRED;
		else
			*out = (record || *leasefs) ? LEASE_FENCE_ACKED
						    : LEASE_FENCE_EXPIRED;
		return 1;
	}
	*leasefs = record;
	*ms = ns_live_ms(ns, &v);
	return 0;
}

int ns_await_fence(struct lease_store *store, const char *name,
		   uint64_t epoch, int64_t deadline, enum lease_fence *out,
		   struct lease_err *err)
{
	struct ns_store *ns = ns_of(store);
	char key[NS_KEY_MAX], subj[NS_KEY_MAX + 48];
	natsSubscription *sub = NULL;
	bool leasefs = true;
	int64_t ms = 0, first_expiry = 0;
	int r;

	*out = LEASE_FENCE_PENDING;
	if (ns_key(name, key, sizeof(key)) < 0)
		return lease_err_set(err, LEASE_E_BADNAME, 0, name, "name too long");
	snprintf(subj, sizeof(subj), NS_SUBJECT ".release.%s", key);
	if (natsConnection_SubscribeSync(&sub, ns->nc, subj) != NATS_OK)
		return lease_err_set(err, LEASE_E_IO, -EIO, name, "natsstore %s: "
				     "cannot subscribe", ns->shown);
	natsConnection_FlushTimeout(ns->nc, 3000);
	for (;;) {
		natsMsg *m = NULL;
		int64_t look;

		ns_clock_fresh(ns, NULL);
		r = fence_state(ns, key, epoch, out, &leasefs, &ms, err);
		if (r != 0 || lease_deadline_passed(deadline))
			break;
		/* A harness holder cannot be told: it is fenced only if it has
		 * stopped renewing, which its first expiry shows. */
		if (!leasefs && !first_expiry)
			first_expiry = lease_deadline_ms(ms + 200);
		if (!leasefs && lease_deadline_passed(first_expiry))
			break;
		look = lease_deadline_ms(ms > 0 && ms < FENCE_LOOK_MS ? ms + 1
					 : FENCE_LOOK_MS);
		if (look > deadline)
			look = deadline;
		if (natsSubscription_NextMsg(&m, sub, (look - lease_now_ns()) /
					     1000000 + 1) == NATS_OK)
			natsMsg_Destroy(m);
	}
	natsSubscription_Unsubscribe(sub);
	natsSubscription_Destroy(sub);
	if (r > 0)
		return 0;
	if (r == 0 && !leasefs)
		lease_err_untold(err, name, epoch, "it releases, or stops renewing "
				 "and its entry expires");
	return r;
}
