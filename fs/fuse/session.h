/* SPDX-License-Identifier: MIT */
/*
 * The FUSE session of one mount: the read-only reconfigure after loss
 * (the worker loop is the transport's, transport.h).  Mechanics only; which ops and
 * which policy is the daemon's choice.
 */
#ifndef LEASEFS_SESSION_H
#define LEASEFS_SESSION_H

#include "fs.h"

/* Mount attributes leasefs applies itself once mounted (the atime family,
 * which libfuse 3.14 does not parse). */
struct mount_attrs {
	bool atime_set;
	unsigned atime;    /* MOUNT_ATTR_RELATIME, _NOATIME or _STRICTATIME */
	int nodiratime;    /* -1 as the kernel sets it, else 0 or 1 */
	int lazytime;      /* -1 as the kernel sets it, else 0 or 1 */
};

/*
 * Make the superblock mounted at `mountpoint` read-only, so that statfs
 * reports ST_RDONLY (the FUSE statfs reply has no flags field) in every
 * mount namespace.  Only the superblock's read-only flag changes: the
 * mount's own flags (nosuid, nodev, ...) are never touched.  The kernel
 * refuses with -EBUSY while a file on it is open for writing.  0 or
 * -errno; call from a non-FUSE thread.
 */
int session_remount_readonly(const char *mountpoint);

/*
 * Apply `a` to the mount at `mountpoint`: the mount's atime attributes
 * (mount_setattr) and the superblock's lazytime (a reconfigure of that
 * flag alone).  Never touches nosuid, nodev or any other flag.  0 or
 * -errno.
 */
int session_apply_attrs(const char *mountpoint, const struct mount_attrs *a);

#endif
