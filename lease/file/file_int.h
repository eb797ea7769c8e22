/* SPDX-License-Identifier: MIT */
/*
 * File backend ("file:DIR", "file" = LEASE_FILE_DEFAULT_DIR), what its units
 * share (path.c: paths, byte locks, lock files; bell.c: the doorbell;
 * record.c: records, the epoch floor; watch.c: the watcher; scope.c:
 * markers; file.c: the store and its operations).  Each calls only units
 * listed before it.
 *
 * Per name NAME (segments become subdirectories of DIR):
 *   NAME.lock  lock target; never replaced or deleted.
 *              byte 0: F_OFD_SETLK write lock held for the life of a grant
 *                      (the kernel drops it when the holder dies).
 *              byte 1: record lock, held only around a read-modify-write
 *                      of NAME.rec (acquire, release, revoke).
 *   NAME.rec   the record (version, name, epoch, state, pid, holder and a
 *              sha256 over the rest), replaced atomically by writing
 *              NAME.rec.tmp, fsync, rename, fsync of the directory.
 *   NAME.in/H  a marker of grant H living within NAME (lease_acquire_in(),
 *              H's '/' written '!'), byte 0 write-locked by H's holder for
 *              the life of its grant, fence included.  A grant of NAME
 *              first locks its byte 0, then looks for a locked marker; a
 *              grant within NAME first locks its marker, then looks at
 *              NAME.lock's byte 0: of two that conflict, one sees the
 *              other.  Markers are never removed (an unlocked one means
 *              nothing).
 *
 * Lock order: byte 1 before byte 0.  Nobody ever waits for byte 0 (it is
 * only tried), so the order cannot deadlock.
 *
 * A missing record means epoch 0.  A record that fails to parse or fails
 * its checksum is LEASE_E_CORRUPT and nothing is written.  Writers never
 * lower the epoch.
 *
 * Loss is detected by the holder's watcher: a revoker rings the holder's
 * bell (NAME.bell, a datagram socket the holder binds for the life of the
 * grant), and the watcher rechecks every held record each second for
 * changes made by hand.  The byte-0 lock is kept until the holder
 * releases: that release is its fence acknowledgement (it comes after the
 * holder drained its writes), and no successor can be granted the name
 * before it.  A holder that dies is fenced by the kernel dropping its
 * lock.  A grant costs the holder descriptors only: no kernel object with
 * a per-user limit.
 *
 * Epochs never wrap: a name whose record reached 2^64-1 is refused.
 */
#ifndef LEASEFS_FILE_INT_H
#define LEASEFS_FILE_INT_H

#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "backend.h"

#define REC_MAGIC "leasefs-lease-record v1"
#define REC_MAX 4096
/* A record-lock holder only does a read-modify-write; wait at least this
 * long for it even when the caller's deadline has already passed. */
#define REC_LOCK_GRACE_MS 2000

struct file_lease;

/*
 * The store's one watcher thread for every lease held through the store:
 * it polls their bells and sweeps their records (see "doorbell").
 */
struct hub {
	/* lock protects leases (and each member's next, watched and seen),
	 * running and stopping; the thread checks records and fires losses
	 * under it. */
	pthread_mutex_t lock;
	struct file_lease *leases; /* watched, linked through next */
	int kick_fd;               /* eventfd: the set changed, or stop */
	pthread_t thr;
	bool running;
	bool stopping;
};

struct file_store {
	char *dir;  /* canonical absolute path of the lease directory */
	int dirfd;  /* O_DIRECTORY fd of dir; read-only after open */
	struct hub hub;
};

struct rec {
	uint64_t epoch;
	enum lease_state state;
	pid_t pid;
	char holder[1024];
};

/* One version of a record file, as the sweep compares them. */
struct rec_stamp {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime, ctime;
};

struct file_lease {
	/* fd_lock protects lock_fd (the byte-0 grant lock) and markers. */
	pthread_mutex_t fd_lock;
	int lock_fd;    /* -1 once dropped */
	int *markers;   /* locked markers in the scopes' NAME.in */
	size_t nmarkers;
	struct lease *lease;       /* immutable */
	int bell_fd;               /* immutable until destroy */
	/* Whether NAME.bell is ours; only the lease's own calls (grant,
	 * release, free) touch it, and it is cleared before the grant lock
	 * is dropped. */
	bool bell_linked;
	/* In the store's hub: */
	bool watched;              /* hub.lock */
	struct rec_stamp seen;     /* hub.lock: as last checked */
	struct file_lease *next;   /* hub.lock */
};


static inline struct file_store *fs_of(const struct lease_store *store)
{
	return store->priv;
}

/* path.c */
int fb_abs_path(const struct file_store *fs, const char *name,
		const char *sfx, char *buf, size_t sz);
int fb_grant_is_held(int fd, bool *held);
int fb_grant_trylock(int fd);
int fb_make_parents(int dirfd, const char *name);
int fb_mkdir_p(const char *path);
int fb_open_lockfile(struct file_store *fs, const char *name, bool create);
int fb_open_parent(int dirfd, const char *name);
int fb_rec_lock(const struct file_store *fs, const char *name, int fd,
		int64_t deadline);
void fb_rec_unlock(const struct file_store *fs, const char *name, int fd);
int fb_rel_path(char *buf, size_t sz, const char *name, const char *sfx);

/* bell.c */
/* A bell bound in directory pfd as `bell`, replacing a dead holder's:
 * the socket, or -errno. */
int fb_bell_bind(int pfd, const char *bell);
void fb_bell_ring(struct file_store *fs, const char *name);

/* record.c */
int fb_floor_raise(struct file_store *fs, uint64_t epoch, int64_t deadline);
int fb_floor_read(struct file_store *fs, uint64_t *floor,
		struct lease_err *err);
void fb_holder_clean(char *dst, size_t sz, const char *src);
bool fb_lockfile_current(struct file_store *fs, const char *name, int fd);
int fb_rec_read(struct file_store *fs, const char *name, struct rec *rec,
		bool *exists, struct lease_err *err);
int fb_rec_store(struct file_store *fs, const char *name,
		const struct rec *rec, bool ring, struct lease_err *err);
int fb_rec_write(struct file_store *fs, const char *name,
		const struct rec *rec, struct lease_err *err);
int fb_held_error(const char *name, const struct rec *rec,
		struct lease_err *err);

/* scope.c */
unsigned fb_grants_within(struct file_store *fs, const char *name,
		char *first);
int fb_marker_rel(char *buf, size_t sz, const char *scope, const char *name);
int fb_markers_take(struct file_store *fs, const char *name,
		const struct lease_scopes *sc, int **fds,
		struct lease_err *err);
bool fb_name_granted(struct file_store *fs, const char *name, struct rec *rec);
int fb_scopes_refuse(struct file_store *fs, const char *name,
		const struct lease_scopes *sc, struct lease_err *err);

/* watch.c */
void fb_bell_unlink(struct file_store *fs, struct file_lease *fl);
void fb_close_markers(int *fds, size_t n);
void fb_drop_grant(struct file_lease *fl);
void fb_file_lease_destroy(struct file_store *fs, struct file_lease *fl);
int fb_file_lease_new(struct file_store *fs, struct lease *l,
		struct file_lease **out);
int fb_hub_add(struct file_store *fs, struct file_lease *fl);
void fb_hub_remove(struct file_store *fs, struct file_lease *fl);
void fb_hub_stop(struct hub *h);

#endif
