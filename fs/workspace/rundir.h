/* SPDX-License-Identifier: MIT */
/*
 * The host's run directory, LEASEFS_RUN_DIR: host locks, their holders,
 * control sockets and the host lock arbiter's socket (README.md: the
 * threat model).
 *
 *   LEASEFS_RUN_DIR          0755 root
 *     roots/      host lock files (hostlock.h)      0700 root, files 0600 root
 *     holders/    who holds which host lock          0700 root, files 0600 root
 *     ctl/        root's control sockets (control.h) 0711 root
 *     ctl/<uid>/  a user's control sockets           0700 <uid>, made by root
 *     hostd.sock  the arbiter (hostd.h)              0666, bound by root
 *
 * Nothing under it is a name a user can create: a user's daemon gets its
 * host locks from the arbiter and binds its sockets in ctl/<uid>, which
 * only it (and root) can write.  Real root (rundir_real_root()) creates and
 * repairs the layout; everyone else only checks that it is there.
 */
#ifndef LEASEFS_RUNDIR_H
#define LEASEFS_RUNDIR_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "roots.h"

#define RUNDIR_ROOTS LEASEFS_RUN_DIR "/roots"
#define RUNDIR_HOLDERS LEASEFS_RUN_DIR "/holders"
#define RUNDIR_CTL LEASEFS_RUN_DIR "/ctl"
#define RUNDIR_HOSTD LEASEFS_RUN_DIR "/hostd.sock"

/*
 * Whether this process is root of the host: euid 0 in the initial user
 * namespace, asked of the kernel through a pidfd of our own
 * (PIDFD_GET_USER_NAMESPACE: the namespace's inode, which no mount can
 * fake), falling back to /proc/self/ns/user on kernels without the ioctl.
 * An euid 0 in any other user namespace is the unprivileged user it maps
 * to.  Cached after the first call.
 */
bool rundir_real_root(void);

/* The uid whose ctl/ directory our control sockets go in: 0 for real
 * root, else the uid the arbiter saw us as (rundir_set_host_uid()), else
 * our euid. */
uid_t rundir_host_uid(void);
void rundir_set_host_uid(uid_t uid);
/* `uid` through our user namespace's uid_map: outward, as our namespace
 * sees it to as the one above does (the host, for a namespace made from
 * the initial one: a rootless container); else the other way.  The
 * identity in the initial namespace.  0, or -ENOENT if unmapped. */
int rundir_uid_map(uid_t uid, bool outward, uid_t *out);

/* Make sure the layout above exists (real root: create or repair it;
 * anyone else: check it).  0, or -errno with `msg` saying what is wrong. */
int rundir_prepare(char *msg, size_t msgsz);

/* Real root: ctl/<uid> exists, a directory 0700 owned by uid (made or
 * repaired).  0 or -errno. */
int rundir_ctl_dir(uid_t uid);

/*
 * The key that names `uid`'s control sockets (control.h), ctl/<uid>/key:
 * 32 random bytes, readable by that uid and root alone, so that the names
 * (which /proc/net/unix shows everyone) say nothing of the mount points.
 * With `create` (the uid's own daemon) made if absent; a key once there is
 * never replaced.  0 or -errno (-EACCES: not ours to read).
 */
int rundir_ctl_key(uid_t uid, bool create, unsigned char key[32]);

/*
 * Real root: remove what no live holder has any more: lock files and
 * holder records nobody locks (taken write-locked, non-blocking, before
 * the unlink, so that a live holder is never raced), and control sockets
 * no daemon listens on.  Returns how many names were removed.
 */
int rundir_sweep(void);
/* The same for one lock file or record of ours just let go. */
void rundir_collect(const char *path);

/*
 * Open `path` (in roots/ or holders/) read-only and read-lock it whole,
 * creating it (0600) with `create`: never through a symlink or a
 * non-regular file.  The lock is what makes the name live: a sweep never
 * removes a locked file, and one removed before we locked it is opened
 * anew.  The fd, -ENOENT (absent, without `create`), or -errno.
 */
int rundir_lock_file(const char *path, bool create);

/* Whether another open file description holds a lock on fd's file (a
 * holder's read lock; a sweep's write lock is no holder). 1, 0 or
 * -errno. */
int rundir_file_held(int fd);

#endif
