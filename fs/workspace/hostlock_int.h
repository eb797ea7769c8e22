/* SPDX-License-Identifier: MIT */
/*
 * Internals of the host locks shared by hostlock.c (the locks themselves,
 * taken by real root), hostd.c (the arbiter that takes them for everyone
 * else) and hostd_client.c (asking it).  Calls go one way: hostd.c to
 * hostlock.c and hostd_client.c, hostlock.c to hostd_client.c.
 */
#ifndef LEASEFS_HOSTLOCK_INT_H
#define LEASEFS_HOSTLOCK_INT_H

#include <limits.h>
#include <stdbool.h>
#include <sys/types.h>

#include "hostlock.h"
#include "rundir.h"

struct held {
	int fd;                /* the lock file, read-locked; -1: not held */
	int byte;              /* the mode it stands for (B_*) */
	bool target;           /* the directory itself, not one above it */
	char *id;              /* malloc'ed; NULL for locks passed to us */
};

struct hostlock {
	struct held *locks;
	size_t n, cap;
	int rec_fd;            /* our holder record, read-locked; -1: none */
	/* Set when we made the record ourselves (real root): removed when we
	 * let go.  Empty for locks the arbiter passed to us. */
	char rec_path[sizeof(RUNDIR_HOLDERS) + 48];
};

/* Who asks: the record names them, a refusal tells them what they may
 * know (root and the holder's own uid see who holds it); and what their
 * path resolved on, which is what is locked. */
struct hostlock_who {
	uid_t uid;
	pid_t pid;
	const char *mountinfo; /* of the process whose paths spec names */
	/* The mount (mountinfo's first field) each directory of spec's path
	 * resolved on (hostlock_resolve()): path's own first, then each
	 * parent's up to "/". */
	const int *mnt_ids;
	size_t n_mnt_ids;
};

/* Directories in a path at most, "/" included. */
#define HOSTLOCK_MAX_DEPTH (PATH_MAX / 2)

/*
 * The mount each directory of `path` resolves on beneath rootfd (a root
 * directory; lease_open_beneath(): no symlink, no "..", also where the
 * kernel or valgrind lacks openat2), into ids (room for
 * HOSTLOCK_MAX_DEPTH): path's own first, then each parent's up to "/"; a
 * directory not made yet lies on its nearest existing ancestor's.  Locks
 * planned from these name what was resolved, whatever is mounted over or
 * under the path.  The count or -errno.  Real root resolves its own paths
 * with it, the arbiter a caller's (as the caller, from its root).
 */
int hostlock_resolve(int rootfd, const char *path, int *ids);

struct hostlock *hostlock_new(void);
/*
 * Real root: plan, record and take spec's locks for `who`, trying until
 * `deadline`.  0, LEASE_E_HELD (refused, err says by what), or another
 * error.
 */
int hostlock_take_local(struct hostlock *h, const struct hostlock_spec *spec,
			const struct hostlock_who *who, int64_t deadline,
			struct lease_err *err);
/* The locks and the record of h, as fds handed to another process; h keeps
 * them until freed. */
size_t hostlock_fds(const struct hostlock *h, int *fds, size_t max);
/* h without closing or removing anything it holds (handed on). */
void hostlock_forget(struct hostlock *h);

/* hostd_client.c: the same, asked of the arbiter (anyone but real root). */
int hostd_take(const struct hostlock_spec *spec, int64_t deadline,
	       struct hostlock *h, struct lease_err *err);
/* Tell the arbiter that we let go (it collects what is left); never
 * waits. */
void hostd_released(void);
/* A connection to the arbiter, served by root (its send and receive
 * timeouts timeout_s): the fd or -errno (-EPERM: not root's socket). */
int hostd_connect(int timeout_s);
/* Send and receive timeouts on a socket, in seconds. */
void hostd_set_timeouts(int fd, int seconds);

#endif
