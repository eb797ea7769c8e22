/* SPDX-License-Identifier: MIT */
/*
 * The leasefs filesystem: a FUSE low-level passthrough of one root, with
 * every mutating operation gated on the coordinator.
 *
 * Split:  passthrough.c  the operations, FUSE-facing, gate-unaware
 *         gate.c         wraps the mutating entries of the ops table:
 *                        coord_enter() -> EROFS if not healthy; the inner
 *                        op runs inside admission; coord_exit() after it
 *         main.c etc.    CLI, daemon lifecycle, control socket
 */
#ifndef LEASEFS_FS_H
#define LEASEFS_FS_H

#define FUSE_USE_VERSION 34
#include <fuse_lowlevel.h>
#include <stdbool.h>

#include "coord.h"

struct lfs_config {
	const char *root;          /* canonical effective root (coord_root()) */
	struct coord *coord;       /* gate; borrowed */
	enum coord_placement placement;
	double entry_timeout;      /* seconds; long in exclusive, short in shared */
	double attr_timeout;
	bool keep_cache;           /* page cache and listings kept across opens */
	unsigned max_threads;      /* 0 = default */
	bool debug;
};

struct lfs;

/*
 * Open ROOT (O_PATH), raise RLIMIT_NOFILE, build the gated ops table and a
 * FUSE session on `args` (which must include argv[0] and any -o options).
 * Does not mount.
 */
int lfs_new(const struct lfs_config *cfg, struct fuse_args *args,
	    struct lfs **out);
struct fuse_session *lfs_session(struct lfs *fs);
/* Mount on `mountpoint`; 0 or -errno. */
int lfs_mount(struct lfs *fs, const char *mountpoint);
/* Serve until unmounted (lfs_unmount() from another thread, or an
 * external fusermount3 -u); multithreaded; 0 or -errno. */
int lfs_run(struct lfs *fs);
void lfs_unmount(struct lfs *fs);
void lfs_free(struct lfs *fs);

/* The gate: returns the ops table with every mutating entry wrapped. */
void lfs_gate_ops(struct fuse_lowlevel_ops *ops);
/* Gate state shared with passthrough.c: set once before the session starts. */
void lfs_gate_init(struct coord *coord);
/* Admission for a mutation; 0 (caller must call lfs_gate_exit) or -EROFS. */
int lfs_gate_enter(void);
void lfs_gate_exit(void);

/*
 * After lease loss: remount the FUSE superblock read-only, so that statfs
 * reports ST_RDONLY (the FUSE statfs reply has no flags field) in every
 * mount namespace.  The kernel refuses with -EBUSY while any file on the
 * mount is open for writing; gated writers get EROFS and usually close
 * soon, so retry.  0 or -errno; call from a non-FUSE thread after
 * lfs_mount().
 */
int lfs_remount_readonly(struct lfs *fs);

/*
 * After lease loss: the root now belongs to someone else, so stop trusting
 * the kernel's caches.  Short timeouts from here on, no page cache kept
 * across opens, and every cached inode's pages and attributes dropped now
 * (bytes written to a shared mapping after loss never reached ROOT and
 * must not be served to readers).  Call from a non-FUSE thread.
 */
void lfs_after_loss(struct lfs *fs);

#endif
