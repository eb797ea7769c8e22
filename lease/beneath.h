/* SPDX-License-Identifier: MIT */
/*
 * Opening what an untrusted user can write, never through a symlink
 * (beneath.c).  Apart from lease.h (which includes it) so that the FUSE
 * passthrough opens its root with lease_open_canonical_dir() without
 * seeing the lease API.
 */
#ifndef LEASEFS_BENEATH_H
#define LEASEFS_BENEATH_H

#include <errno.h>
#include <sys/types.h>

/* What lease_open_beneath() returns for a path that is not a regular
 * file (lease_strerror() says so). */
#define LEASE_ENOTREG EMEDIUMTYPE
/*
 * Open `rel` beneath `dirfd`: never through a symlink, "..", or a magic
 * link, never out of dirfd, never waiting on what is there (O_NONBLOCK: a
 * FIFO, a file under a kernel lease), O_CLOEXEC; unless `flags` has
 * O_DIRECTORY or O_PATH, the result is a regular file or -LEASE_ENOTREG,
 * and one opened for writing has a single link, else -EMLINK.
 * The fd or -errno.
 */
int lease_open_beneath(int dirfd, const char *rel, int flags, mode_t mode);
/* The directory holding `rel`'s last component, opened beneath dirfd as
 * above (O_PATH), and that component in *last (pointing into rel): the
 * fd or -errno.  The *_beneath() calls below make their one change
 * there: 0 or -errno. */
int lease_parent_beneath(int dirfd, const char *rel, const char **last);
int lease_mkdir_beneath(int dirfd, const char *rel, mode_t mode);
int lease_unlink_beneath(int dirfd, const char *rel, int flags);
int lease_rename_beneath(int dirfd, const char *from, const char *to);
/* An absolute path with no symlink in it (realpath()'s), opened as a
 * directory with `flags` only if it still has none: the fd or -errno
 * (-ELOOP: a component became a symlink since). */
int lease_open_canonical_dir(const char *path, int flags);
#endif
