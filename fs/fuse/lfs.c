/* SPDX-License-Identifier: MIT */
/*
 * Low-level FUSE passthrough of one root directory.  This unit: the object,
 * INIT, the ops table and what a loss changes; the operations live in
 * entry.c, attr.c, file.c, dir.c and xattr.c (the map: lfs_int.h).
 *
 * Names: every backing call resolves one name relative to an O_PATH fd of
 * its parent and never follows a symlink at that name (AT_SYMLINK_NOFOLLOW,
 * O_NOFOLLOW, or calls that never follow); /proc/self/fd/N is used only to
 * reach the inode an O_PATH fd already names.  So no operation can leave
 * ROOT through a symlink, whatever the backing directory holds.  Every
 * backing call is the core's (core/core.h: FUSE-free, acting as the
 * caller, re-checking the admission of a mutation); the lfs_<op> handlers
 * translate a request into one core call and its result into one reply.
 *
 * Policy comes from struct lfs_config (cache timeouts, whether the page
 * cache is kept across opens); the passthrough decides none of it and
 * knows nothing of leases: the daemon composes the gate in front of
 * lfs_ops().
 *
 * Error convention: the core returns 0 or -errno; reply_err() is the one
 * place that turns an error into a FUSE reply.
 */
#include <dirent.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "lfs_int.h"
#include "ops.h"

#define LFS_MAX_WRITE (1u << 20)
/* Cache timeouts (s) once the lease is lost: the root has a new owner. */
#define LFS_LOST_TIMEOUT 1.0

/* ---- session ------------------------------------------------------------ */

/* Each bit of `caps` the kernel offers; libfuse fails INIT on a wanted
 * bit the kernel lacks. */
static void want(struct fuse_conn_info *conn, unsigned caps)
{
	conn->want |= caps & conn->capable;
}

static void refuse(struct fuse_conn_info *conn, unsigned caps)
{
	conn->want &= ~caps;
}

static void lfs_init(void *userdata, struct fuse_conn_info *conn)
{
	struct lfs_session *sess = userdata;
	struct lfs *fs = sess->fs;

	/* Splice both ways.  Measured on 2 cores, interleaved: 512 MiB
	 * dd+fsync 760-816 MB/s with splice-in vs 320-620 without; untar and
	 * small-file metadata within noise of each other. */
	want(conn, FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE |
		   FUSE_CAP_SPLICE_MOVE);
	want(conn, FUSE_CAP_READDIRPLUS | FUSE_CAP_PARALLEL_DIROPS |
		   FUSE_CAP_ASYNC_READ | FUSE_CAP_ATOMIC_O_TRUNC);
	want(conn, FUSE_CAP_CACHE_SYMLINKS);
	/* ACLs enforced by the kernel as ext4 does (it also implies
	 * default_permissions); modes arrive unmasked with the caller's
	 * umask beside them, which the backing fs applies or replaces by a
	 * default ACL (see caller_enter()). */
	want(conn, FUSE_CAP_POSIX_ACL | FUSE_CAP_DONT_MASK);
	/* An acknowledged write must have passed the gate. */
	refuse(conn, FUSE_CAP_WRITEBACK_CACHE);
	/* The kernel clears suid/sgid itself (via setattr) on write,
	 * truncate and chown by a caller lacking CAP_FSETID. */
	refuse(conn, FUSE_CAP_HANDLE_KILLPRIV);
	/* flock and POSIX locks are kept by the kernel (no lock ops): one
	 * mount is one lock domain. */
	refuse(conn, FUSE_CAP_POSIX_LOCKS | FUSE_CAP_FLOCK_LOCKS);
	if (fs->cfg.sole_writer) {
		refuse(conn, FUSE_CAP_READDIRPLUS_AUTO |
		       FUSE_CAP_AUTO_INVAL_DATA);
	} else {
		want(conn, FUSE_CAP_READDIRPLUS_AUTO | FUSE_CAP_AUTO_INVAL_DATA);
	}
	conn->max_write = LFS_MAX_WRITE;
	conn->max_read = fs->cfg.max_read;
	if (sess->serving)
		sess->serving(sess->serving_ud);
}

/* Exactly the op table's operations (ops.h), each lfs_<op>. */
static const struct fuse_lowlevel_ops passthrough_ops = {
	.init = lfs_init,
#define OP(op, kind, doc, params, args) .op = lfs_##op,
	LFS_OPS(OP)
#undef OP
};

const struct fuse_lowlevel_ops *lfs_ops(void)
{
	return &passthrough_ops;
}

int lfs_new(const struct lfs_config *cfg, struct lfs **out)
{
	int rc = core_new(cfg, out);

	/* Without the clone (an unprivileged daemon, a kernel without
	 * open_tree) reads stay the daemon's. */
	if (rc == 0) {
		iomode_init(*out);
		(*out)->pt_setup_err = backing_setup(*out);
	}
	return rc;
}

/* Every regular file and directory the process holds open gets
 * O_NOATIME (the lease store's and the daemon's own included: harmless). */
static void all_fds_noatime(struct lfs *fs)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;

	while (d && (de = readdir(d)) != NULL) {
		int fd = atoi(de->d_name);

		if (de->d_name[0] != '.' && fd != dirfd(d))
			fd_noatime(fs, fd);
	}
	if (d)
		closedir(d);
}

void lfs_stop_atime(struct lfs *fs)
{
	atomic_store(&fs->noatime, true);
	all_fds_noatime(fs);
	backing_noatime(fs);
}

int lfs_passthrough(const struct lfs *fs)
{
	if (fs->pt_mount_fd >= 0)
		return 1;
	return fs->cfg.passthrough ? fs->pt_setup_err : 0;
}

void lfs_after_loss(struct lfs *fs, struct fuse_session *se)
{
	size_t n, i;
	struct lfs_inode **all;

	atomic_store(&fs->keep_cache, false);
	atomic_store(&fs->entry_timeout, LFS_LOST_TIMEOUT);
	atomic_store(&fs->attr_timeout, LFS_LOST_TIMEOUT);
	all = known_inodes(fs, &n);
	/* Only node ids are used, never the records (which may go): a node
	 * forgotten meanwhile answers ENOENT, nothing to drop. */
	for (i = 0; all && i < n; i++)
		fuse_lowlevel_notify_inval_inode(se, node_id(fs, all[i]), 0, 0);
	free(all);
}

void lfs_free(struct lfs *fs)
{
	if (!fs)
		return;
	backing_teardown(fs);
	pthread_cond_destroy(&fs->io_idle);
	core_free(fs);
}
