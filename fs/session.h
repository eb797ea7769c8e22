/* SPDX-License-Identifier: MIT */
/*
 * The FUSE session of one mount: mounting, the worker loop, unmounting,
 * and the read-only reconfigure after loss.  Mechanics only; which ops and
 * which policy is the daemon's choice.
 */
#ifndef LEASEFS_SESSION_H
#define LEASEFS_SESSION_H

#include "fs.h"

/* Serve until unmounted (session_unmount() from another thread, or an
 * external fusermount3 -u), with `threads` workers (0: one per CPU, at
 * least two).  0 or -errno. */
int session_run(struct fuse_session *se, unsigned threads);

/*
 * Make the superblock mounted at `mountpoint` read-only, so that statfs
 * reports ST_RDONLY (the FUSE statfs reply has no flags field) in every
 * mount namespace.  Only the superblock's read-only flag changes: the
 * mount's own flags (nosuid, nodev, ...) are never touched.  The kernel
 * refuses with -EBUSY while a file on it is open for writing.  0 or
 * -errno; call from a non-FUSE thread.
 */
int session_remount_readonly(const char *mountpoint);

#endif
