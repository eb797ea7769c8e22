/* SPDX-License-Identifier: MIT */
/*
 * The natsstore backend: leasefs's high-water mark of each name's epoch,
 * so that a mount is never granted an epoch at or below one leasefs has
 * seen of the name, even when the harness's key is gone (its bucket's
 * maximum age, a delete).  Kept twice: in this process's memory, and as
 * "e.KEY" (the epoch in decimal) in our bucket, which has no maximum age.
 * A server that lost its store loses the second; only the first, in a
 * process that lived through it, survives that.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nats_int.h"

#define RAISE_TRIES 5

static struct ns_seen *seen_find(struct ns_store *ns, const char *key)
{
	for (struct ns_seen *s = ns->seen; s; s = s->next)
		if (strcmp(s->key, key) == 0)
			return s;
	return NULL;
}

void ns_hwm_note(struct ns_store *ns, const char *key, uint64_t epoch)
{
	struct ns_seen *s;

	pthread_mutex_lock(&ns->seen_lock);
	s = seen_find(ns, key);
	if (!s && (s = calloc(1, sizeof(*s)))) {
		snprintf(s->key, sizeof(s->key), "%s", key);
		s->next = ns->seen;
		ns->seen = s;
	}
	if (s && s->epoch < epoch)
		s->epoch = epoch;
	pthread_mutex_unlock(&ns->seen_lock);
}

void ns_hwm_free(struct ns_store *ns)
{
	while (ns->seen) {
		struct ns_seen *s = ns->seen;

		ns->seen = s->next;
		free(s);
	}
}

/* Ours in the bucket: 1 with *epoch and *rev, 0 if none, -errno. */
static int stored(struct ns_store *ns, const char *rk, uint64_t *epoch,
		  uint64_t *rev, struct lease_err *err)
{
	kvEntry *e = NULL;
	natsStatus s = kvStore_Get(&e, ns->own, rk);
	char *end;

	if (s == NATS_NOT_FOUND)
		return 0;
	if (s != NATS_OK)
		return ns_fail(ns, s, rk, "read", err);
	errno = 0;
	*epoch = strtoull(kvEntry_ValueString(e), &end, 10);
	*rev = kvEntry_Revision(e);
	/* Digits only, and room for one more. */
	s = (*kvEntry_ValueString(e) < '0' || *kvEntry_ValueString(e) > '9' ||
	     *end || errno || *epoch == UINT64_MAX) ? NATS_ERR : NATS_OK;
	kvEntry_Destroy(e);
	if (s != NATS_OK)
		return lease_err_set(err, LEASE_E_CORRUPT, 0, rk, "natsstore %s: "
				     "%s in " NS_OWN_BUCKET " is not an epoch; "
				     "nothing was granted", ns->shown, rk);
	return 1;
}

int ns_hwm_get(struct ns_store *ns, const char *key, uint64_t *epoch,
	       struct lease_err *err)
{
	char rk[NS_KEY_MAX + 4];
	uint64_t mine = 0, theirs = 0, rev;
	struct ns_seen *s;
	int r;

	snprintf(rk, sizeof(rk), "e.%s", key);
	r = stored(ns, rk, &theirs, &rev, err);
	if (r < 0)
		return r;
	pthread_mutex_lock(&ns->seen_lock);
	s = seen_find(ns, key);
	if (s)
		mine = s->epoch;
	pthread_mutex_unlock(&ns->seen_lock);
	*epoch = mine > theirs ? mine : theirs;
	return 0;
}

int ns_hwm_raise(struct ns_store *ns, const char *key, uint64_t epoch,
		 struct lease_err *err)
{
	char rk[NS_KEY_MAX + 4], val[24];

	ns_hwm_note(ns, key, epoch);
	snprintf(rk, sizeof(rk), "e.%s", key);
	snprintf(val, sizeof(val), "%" PRIu64, epoch);
	for (int i = 0; i < RAISE_TRIES; i++) {
		uint64_t cur = 0, rev = 0, nrev;
		int r = stored(ns, rk, &cur, &rev, err);
		natsStatus s;

		if (r < 0)
			return r;
		if (r == 1 && cur >= epoch)
			return 0;
		s = r == 0 ? kvStore_CreateString(&nrev, ns->own, rk, val)
			   : kvStore_UpdateString(&nrev, ns->own, rk, val, rev);
		if (s == NATS_OK)
			return 0;
		/* Another writer was first: look again. */
	}
	return lease_err_set(err, LEASE_E_IO, -EAGAIN, key, "natsstore %s: "
			     "cannot record epoch %" PRIu64 " of %s in "
			     NS_OWN_BUCKET, ns->shown, epoch, key);
}
