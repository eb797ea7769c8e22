/* SPDX-License-Identifier: MIT */
/*
 * The natsstore backend: show, list, revoke and its fence (the buckets:
 * nats_int.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "nats_int.h"

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

/* The fence's look (with a fresh measure of the server's clock) and
 * wait (for the holder's release, published). */
struct fence_ctx {
	struct ns_store *ns;
	const char *key;
	uint64_t epoch;
	natsSubscription *sub;
};

static int fence_look(void *ctx, enum lease_fence *out, bool *leasefs,
		      int64_t *ms, struct lease_err *err)
{
	struct fence_ctx *fc = ctx;

	ns_clock_fresh(fc->ns, NULL);
	return fence_state(fc->ns, fc->key, fc->epoch, out, leasefs, ms, err);
}

static void fence_wait(void *ctx, int64_t until)
{
	struct fence_ctx *fc = ctx;
	natsMsg *m = NULL;

	if (natsSubscription_NextMsg(&m, fc->sub, (until - lease_now_ns()) /
				     1000000 + 1) == NATS_OK)
		natsMsg_Destroy(m);
}

int ns_await_fence(struct lease_store *store, const char *name,
		   uint64_t epoch, int64_t deadline, enum lease_fence *out,
		   struct lease_err *err)
{
	struct ns_store *ns = ns_of(store);
	char key[NS_KEY_MAX], subj[NS_KEY_MAX + 48];
	struct fence_ctx fc = { ns, key, epoch, NULL };
	const struct lease_fence_look fl = {
		.state = fence_look, .wait = fence_wait, .ctx = &fc,
		.slack_ms = 200, .untold = "it releases, or stops renewing and "
		"its entry expires",
	};
	int r;

	*out = LEASE_FENCE_PENDING;
	if (ns_key(name, key, sizeof(key)) < 0)
		return lease_err_set(err, LEASE_E_BADNAME, 0, name, "name too long");
	snprintf(subj, sizeof(subj), NS_SUBJECT ".release.%s", key);
	if (natsConnection_SubscribeSync(&fc.sub, ns->nc, subj) != NATS_OK)
		return lease_err_set(err, LEASE_E_IO, -EIO, name, "natsstore %s: "
				     "cannot subscribe", ns->shown);
	natsConnection_FlushTimeout(ns->nc, 3000);
	r = lease_fence_wait(&fl, name, epoch, deadline, out, err);
	natsSubscription_Unsubscribe(fc.sub);
	natsSubscription_Destroy(fc.sub);
	return r;
}
