/* SPDX-License-Identifier: MIT */
/*
 * Host locks: on one host, one exclusive writer per directory tree,
 * whatever the lease stores, however the directory is spelled.
 *
 * A directory's identity is its filesystem (the mount's device number)
 * and its path inside that filesystem: the path is resolved (no symlink
 * followed) and each directory named by the mount it resolved on, as its
 * line in the mount table says; so a bind mount names the same directory
 * as its target, and a mount over a parent cannot make the text of the
 * mount table name another.  A
 * lock on a directory also marks every directory above it: its canonical
 * path's ancestors, and each one's ancestors inside its own filesystem
 * (a bind mount of /srv/ws/sub at /x lies inside /srv/ws).  Modes, as
 * multiple-granularity locking has them:
 *
 *   X   an exclusive mount's root: nothing else at, above or below it;
 *   S   a shared or session mount's root: other S at the same directory
 *       and any shared mount below it, no exclusive one at, above or
 *       below it;
 *   IS  a directory the daemon itself writes (metrics, leases): no
 *       exclusive mount of it or above it.
 *
 * Every lock is an OFD read lock on LEASEFS_RUN_DIR/roots/<hash of the
 * identity>.<mode> (root's, 0700: rundir.h), so the kernel drops it when
 * the daemon dies.  Each holder announces its locks, then checks for
 * conflicting ones: of two holders that conflict, at least one sees the
 * other and is refused.  Real root takes them itself; anyone else gets
 * them from the arbiter (hostd.h) as descriptors, and is refused with
 * LEASE_E_IO, -ENOLCK when no arbiter answers (fail closed).
 */
#ifndef LEASEFS_HOSTLOCK_H
#define LEASEFS_HOSTLOCK_H

#include <stdint.h>

#include "lease.h"

enum hostlock_mode { HOSTLOCK_X, HOSTLOCK_S, HOSTLOCK_IS };

/* One directory to lock, and who asks (for a refused contender). */
struct hostlock_spec {
	const char *path;        /* canonical, absolute, an existing directory */
	enum hostlock_mode mode;
	const char *what;        /* "workspace", "metrics directory", ... */
	const char *lease_name;  /* X: the root lease; else NULL */
	uint64_t epoch;          /* X: the root lease's epoch */
	const char *mountpoint;  /* the mount that holds it */
};

struct hostlock;

/*
 * Take the locks `spec` asks for, retrying until `deadline` (a passed
 * deadline: one try).  Refused: LEASE_E_HELD, err->name = spec->path,
 * err->holder_epoch = the conflicting exclusive holder's epoch (0 for
 * others), err->msg naming what holds it, its mount point and pid.
 */
int hostlock_take(const struct hostlock_spec *spec, int64_t deadline,
		  struct hostlock **out, struct lease_err *err);
/* Let go (NULL: nothing). */
void hostlock_free(struct hostlock *h);

#endif
