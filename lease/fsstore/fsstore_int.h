/* SPDX-License-Identifier: MIT */
/*
 * The fsstore backend ("fsstore:DIR"): the seed harness's laptop store,
 * read and written exactly as the harness does, so that a harness session
 * and a leasefs mount contend for one lease.  What its units share
 * (dir.c: paths, directories, lock files,
 * epochs, our records as read; bell.c: the loss channel and its watcher;
 * holders.c: who holds a lock file; view.c: show, list, revoke;
 * fsstore.c: the store, acquire, release).  Each calls only units listed
 * before it.
 *
 * The harness's part of DIR, kept as the harness keeps it:
 *   leases/NAME.lock  name segments are directories (0700), the file 0600;
 *                     flock(LOCK_EX) held on an open descriptor for the
 *                     life of a grant (the kernel drops it when the holder
 *                     dies); the whole content is the epoch in ASCII
 *                     decimal and "\n" (empty = 0), raised under the lock
 *                     (written at 0, truncated, fsynced) before the grant
 *                     is returned; read without the lock.  Never deleted,
 *                     so an epoch is never reset.
 *
 * leasefs's own part, which the harness never reads (H is the lowercase
 * hex sha256 of a name):
 *   leasefs/holders/H.holder  a leasefs holder's record: the first line
 *                     fixed-width "EPOCH PID STATE" (STATE "held   " or
 *                     "revoked"), then the holder's description; the holder
 *                     keeps flock(LOCK_EX) on it for the life of its grant
 *                     and a moment past; never removed (the next holder's
 *                     replaces it).
 *   leasefs/holders/H.bell    the holder's datagram socket: a revoker sends
 *                     "revoke EPOCH".
 *   leasefs/holders/H.acq   flock(LOCK_EX) by a leasefs acquirer while it
 *                     locks NAME.lock and raises the epoch (fsstore.c).
 *   leasefs/within/S/H  marker of grant H living within scope S: "EPOCH
 *                     NAME\n", flock(LOCK_EX) by its holder, removed at
 *                     release.
 * Every record is made under a temporary name, locked, then renamed into
 * place, so that one found unlocked is a dead holder's.
 *
 * A grant within scopes also holds flock(LOCK_SH) on each scope's
 * NAME.lock: a harness acquirer of the scope (LOCK_EX|LOCK_NB) is refused
 * for as long as it lives, and so is a leasefs one.
 *
 * No TTL: the flock is the fence.  A revoked leasefs holder keeps it until
 * it has drained and released; a harness holder has no loss channel, so a
 * revoke cannot tell it (lease revoke says so and never grants the name).
 * Whether a lock file is held, and by whom, is read from /proc/locks,
 * confirmed by our records and the processes' open files where
 * /proc/locks may have passed a line over (view.c), never by taking the
 * lock: looking never makes a harness acquirer's LOCK_NB fail.
 */
#ifndef LEASEFS_FSSTORE_INT_H
#define LEASEFS_FSSTORE_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "backend.h"

#define FSS_HEX_LEN 64
/* "EPOCH PID STATE\n": 20 + 1 + 10 + 1 + 7 + 1 */
#define FSS_HOLDER_LINE 40
#define FSS_STATE_OFF 32

struct fss_lease;

struct fss_store {
	char *dir;      /* canonical absolute path */
	int dirfd;      /* O_PATH | O_DIRECTORY of dir; read-only after open */
	uid_t owner;    /* DIR's owner: what a root daemon makes is given */
	gid_t group;    /* to it, so that the harness can open it */
	bool chown;     /* we are root and the owner is not */
	/* lock protects leases (and each member's next) and the worker's
	 * running and stopping; the watcher fires losses under it. */
	pthread_mutex_t lock;
	struct fss_lease *leases;
	struct lease_worker worker; /* polls the bells */
};

struct fss_lease {
	struct lease *lease;   /* immutable */
	char hex[FSS_HEX_LEN + 1];
	int lock_fd;           /* flock(LOCK_EX) on NAME.lock; -1 once dropped */
	int acq_fd;            /* H.acq while acquiring (fsstore.c); else -1 */
	int *scope_fds;        /* flock(LOCK_SH) on each scope's NAME.lock */
	int *marker_fds;       /* the markers, locked */
	size_t nscopes;
	int holder_fd;         /* H.holder, locked; -1: none */
	int bell_fd;           /* H.bell, bound; -1: none */
	struct fss_lease *next; /* store lock */
};

static inline struct fss_store *fss_of(const struct lease_store *store)
{
	return store->priv;
}

/* dir.c */
/* Hex sha256 of `name` into out[FSS_HEX_LEN + 1]. */
void fss_hex(const char *name, char *out);
/* "leases/NAME.lock" into buf: 0 or -ENAMETOOLONG. */
int fss_lock_rel(char *buf, size_t sz, const char *name);
/* Open `rel` beneath DIR, never through a symlink: the fd or -errno. */
int fss_openat(struct fss_store *fs, const char *rel, int flags, mode_t mode);
/* The epoch in a lock file: 0, or LEASE_E_CORRUPT naming it.  `strict`:
 * the holder's read under the lock (no retry of a torn read). */
int fss_epoch_read(struct fss_store *fs, int fd, const char *name,
		   bool strict, uint64_t *out, struct lease_err *err);
/* A name's lock file, opened read-only: the fd, -ENOENT if it has none. */
int fss_lock_open(struct fss_store *fs, const char *name, bool create);
/* The directory `rel` beneath DIR (every component a real directory,
 * made 0700 where missing if `create`): an O_PATH fd or -errno. */
int fss_dir_open(struct fss_store *fs, const char *rel, bool create);
/* A record whose lock nobody holds is a dead holder's. */
bool fss_record_live(int fd);
/* The leasefs holder's record of `hex`, if one is alive: 1 with its
 * epoch, pid, whether revoked, and (if `desc`) its description; 0 if
 * there is none (no file, or its holder is gone). */
int fss_holder_read(struct fss_store *fs, const char *hex, uint64_t *epoch,
		    pid_t *pid, bool *revoked, char *desc, size_t descsz);

/* bell.c */
/* Bind H.bell for `fl` and watch it: 0 or -errno. */
int fss_bell_open(struct fss_store *fs, struct fss_lease *fl);
/* Ring the bell of a holder of `name` at `epoch`: 0 or -errno. */
int fss_bell_ring(struct fss_store *fs, const char *hex, uint64_t epoch);
/* Stop watching `fl` and unbind its bell. */
void fss_bell_close(struct fss_store *fs, struct fss_lease *fl);
void fss_watcher_stop(struct fss_store *fs);

/* holders.c */
/* What a look at the holders of lock files saw (/proc/locks, the open
 * files), kept for more names of one walk; the looks' order and why
 * they cannot miss a holder: holders.c. */
struct fss_flock;
struct fss_view {
	bool loaded;             /* /proc/locks read */
	bool whole;              /* ... in one read: a snapshot */
	struct fss_flock *locks; /* its flock(LOCK_EX) lines */
	size_t nlocks;
	bool scanned;            /* the open files scanned */
	struct fss_flock *open;  /* their flock(LOCK_EX) */
	size_t nopen;
};
void fss_view_init(struct fss_view *v);
void fss_view_free(struct fss_view *v);
/* Who holds flock(LOCK_EX) on `name`'s lock file (`fd`, whose epoch
 * reads `epoch`), without locking it: 1 with *pid (0: unknown) if
 * someone does, 0 if nobody did all along the look, -errno if it cannot
 * be told.  _in: with (and into) what `v` saw already. */
int fss_lock_held_in(struct fss_view *v, struct fss_store *fs,
		     const char *name, int fd, uint64_t epoch, pid_t *pid);
int fss_lock_held(struct fss_store *fs, const char *name, int fd,
		  uint64_t epoch, pid_t *pid);

/* view.c */
/* A live marker within `name`: its count, and the first one's name and
 * epoch. */
unsigned fss_within(struct fss_store *fs, const char *name, char *first,
		    size_t firstsz, uint64_t *first_epoch);
int fss_show(struct lease_store *store, const char *name,
	     struct lease_info *info, struct lease_err *err);
int fss_list(struct lease_store *store, lease_list_cb cb, void *userdata,
	     struct lease_err *err);
int fss_revoke(struct lease_store *store, const char *name, int64_t deadline,
	       uint64_t *epoch, struct lease_err *err);
int fss_await_fence(struct lease_store *store, const char *name,
		    uint64_t epoch, int64_t deadline, enum lease_fence *out,
		    struct lease_err *err);

#endif
