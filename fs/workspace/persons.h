/* SPDX-License-Identifier: MIT */
/*
 * Who a caller is for a per-caller allowance: a person, not a uid.  A uid
 * inside a subordinate range (/etc/subuid: the uids newuidmap gives a
 * user's containers and `unshare --map-auto`) is its range's owner, so a
 * person with 65,536 uids has one allowance.  uid 0 is always its own
 * person; a range root owns is one person of its own, never root.
 *
 * The arbiter's slots (hostd.c) and the passthrough's open-file budgets
 * (fs/fuse/README.md, "Budgets") count by it.
 */
#ifndef LEASEFS_PERSONS_H
#define LEASEFS_PERSONS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Subordinate uids [start, end) and the person they count as. */
struct ws_subrange {
	uint32_t start, end;
	uint64_t person;
};

struct ws_persons {
	struct ws_subrange *r;  /* sorted by start */
	size_t n;
	size_t skipped;         /* lines that did not parse */
};

/*
 * The subordinate ranges in `path` (NULL or missing: none, every uid its
 * own person).  Opened O_NONBLOCK|O_NOFOLLOW (a FIFO or a symlink there is
 * refused, not waited on), at most 4 MiB and 16,384 ranges; a line that
 * does not parse (OWNER:START:COUNT) is skipped.  Owners are numeric or
 * names; names are resolved from /etc/passwd read the same way, never
 * through NSS (which may wait on the network): a name not there is one
 * person of its own for all its ranges.  0 or -errno; p is empty on error.
 */
int ws_persons_load(struct ws_persons *p, const char *path);
/* uid's person: uid itself, or its range's owner (a key above every uid
 * for names not in /etc/passwd and for root's ranges).  No lock: p is
 * read-only once loaded. */
uint64_t ws_person_of(const struct ws_persons *p, uid_t uid);
void ws_persons_free(struct ws_persons *p);

#endif
