/* SPDX-License-Identifier: MIT */
/* What `leasefs mount` hands its daemon: the CLI fills it, every unit of
 * the daemon reads it (daemon.h runs it). */
#ifndef LEASEFS_MOUNT_OPTS_H
#define LEASEFS_MOUNT_OPTS_H

#include <limits.h>
#include <stdbool.h>
#include <sys/types.h>

#include "placement.h"
#include "session.h"

/* `leasefs mount` as parsed and checked by the CLI. */
struct mount_opts {
	enum placement_id placement;
	const char *leases;
	const char *session;
	double wait_s;
	double ttl_s;
	char *fuse_opts;     /* comma-joined -o options for libfuse, each allowed */
	struct mount_attrs attrs;
	unsigned max_read;   /* -o max_read=N, 0 if not given */
	long files_per_user; /* --files-per-user, 0: the default */
	const char *metrics_dir; /* --metrics-dir */
	uid_t owner_uid;     /* who may watch and control it (besides root): */
	gid_t owner_gid;     /* the caller of mount, or --owner=USER[:GROUP] */
	bool owner_group;    /* the group too (given with --owner) */
	bool allow_other;    /* -o allow_other (a user's mount: asked for) */
	bool allow_stacked_root; /* --allow-stacked-root: ROOT may be on
				  * FUSE or overlayfs (stacked.c) */
	int passthrough;     /* -o passthrough 1, -o nopassthrough 0; -1:
			      * LEASEFS_PASSTHROUGH, else the default */
	bool foreground;
	bool debug;
	int log_level;       /* --log-level: LOG_ERR..LOG_DEBUG */
	const char *root;
	const char *mnt_arg;   /* MOUNTPOINT as given */
	char mountpoint[PATH_MAX];
	char canon_root[PATH_MAX];
	char metrics_canon[PATH_MAX]; /* --metrics-dir, symlinks resolved */
	char leases_abs[PATH_MAX + 16]; /* --leases, a local store's dir absolute */
};

#endif
