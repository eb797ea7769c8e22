/* SPDX-License-Identifier: MIT */
/*
 * The FUSE session of one mount: the read-only reconfigure after loss
 * (the worker loop is the transport's, transport.h).  Mechanics only; which ops and
 * which policy is the daemon's choice.
 */
#ifndef LEASEFS_SESSION_H
#define LEASEFS_SESSION_H

#include "fs.h"

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
