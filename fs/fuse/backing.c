/* SPDX-License-Identifier: MIT */
/*
 * The passthrough: FUSE passthrough of reads.  A read-only open can be
 * answered with a backing file the kernel then reads (and maps) itself,
 * without a request to the daemon.  Writes never go that way: a write to
 * the backing file would not pass the gate.
 *
 * The kernel's rules (fs/fuse/iomode.c) shape the bookkeeping: while one
 * open of an inode is passthrough, every open of it must be, of the same
 * backing file; while one is not, none may be.  So each inode counts the
 * opens the daemon answered, and the first open of an idle inode decides
 * for all that follow until the last is released:
 *  - a read-only open (no O_TRUNC, no O_DIRECT) of an idle inode starts a
 *    passthrough period; later read-only opens join it;
 *  - a writer during a passthrough period joins with FOPEN_DIRECT_IO: its
 *    reads and writes come to the daemon (and through the gate), only its
 *    mmaps go to the backing file (README: "FUSE passthrough");
 *  - any other first open starts a cached period, which every open joins.
 * The daemon's count is never below the kernel's (the kernel drops an open
 * before its RELEASE is sent), so the daemon never names a mode the
 * kernel would refuse.
 *
 * Backing files are opened by handle on a detached clone of the root's
 * mount: the caller's permission was checked by the daemon's own open as
 * the caller, and after loss the clone alone is made noatime, so that
 * passthrough reads change nothing in ROOT (lfs_stop_atime()).
 * (Conventions: lfs.c; shared internals: lfs_int.h.)
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "lfs_int.h"

static int open_tree_clone(int dirfd)
{
	return (int)syscall(SYS_open_tree, dirfd, "",
			    OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
}

int backing_setup(struct lfs *fs)
{
	if (!fs->cfg.passthrough)
		return 0;
	if (!fs->switch_creds)
		return -EPERM;          /* backing files need CAP_SYS_ADMIN */
	if (fs->root_mnt_id < 0)
		return -EOPNOTSUPP;     /* no file handles to open them by */
	fs->pt_tree_fd = open_tree_clone(fs->root.fd);
	if (fs->pt_tree_fd < 0)
		return neg_errno();
	fs->pt_mount_fd = openat(fs->pt_tree_fd, ".",
				 O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fs->pt_mount_fd < 0) {
		int rc = neg_errno();

		close(fs->pt_tree_fd);
		fs->pt_tree_fd = -1;
		return rc;
	}
	return 0;
}

void backing_teardown(struct lfs *fs)
{
	if (fs->pt_mount_fd >= 0)
		close(fs->pt_mount_fd);
	if (fs->pt_tree_fd >= 0)
		close(fs->pt_tree_fd);
	fs->pt_tree_fd = fs->pt_mount_fd = -1;
}

void backing_noatime(struct lfs *fs)
{
	struct mount_attr a = { .attr_set = MOUNT_ATTR_NOATIME,
				.attr_clr = MOUNT_ATTR__ATIME };

	if (fs->pt_tree_fd >= 0)
		(void)syscall(SYS_mount_setattr, fs->pt_tree_fd, "",
			      AT_EMPTY_PATH, &a, sizeof(a)); /* see README */
}

static const struct lfs_backing_ops *ops_of(const struct lfs_session *s,
					    const struct lfs *fs)
{
	return fs->pt_mount_fd >= 0 ? s->backing : NULL;
}

static bool read_only(int flags)
{
	return (flags & O_ACCMODE) == O_RDONLY &&
	       !(flags & (O_TRUNC | O_DIRECT));
}

/* The file open at fd registered as a backing file: the same inode
 * through the clone, as the daemon.  Its id, or -errno (-EXDEV: on
 * another mount than the root's). */
static int register_backing(struct lfs *fs, const struct lfs_session *s,
			    int fd)
{
	struct handle_buf hb = { .fh.handle_bytes = MAX_HANDLE_SZ };
	int mnt_id, pfd, id;

	if (name_to_handle_at(fd, "", &hb.fh, &mnt_id, AT_EMPTY_PATH) < 0)
		return neg_errno();
	if (mnt_id != fs->root_mnt_id)
		return -EXDEV;
	/* open_by_handle_at needs CAP_DAC_READ_SEARCH, which a caller's
	 * fsuid has dropped. */
	act_as(fs->own_uid, fs->own_gid);
	pfd = open_by_handle_at(fs->pt_mount_fd, &hb.fh, O_PATH | O_CLOEXEC);
	if (pfd < 0)
		return neg_errno();
	id = s->backing->open(s->transport, pfd);
	close(pfd);
	return id;
}

/* Join the inode's current period, if it has one (pt_lock held). */
static bool join(struct lfs_inode *inode, int flags, struct io_mode *m)
{
	if (inode->opens == 0)
		return false;
	inode->opens++;
	if (inode->backing_id > 0) {
		m->backing_id = inode->backing_id;
		m->direct_io = !read_only(flags);
		inode->pt_wrote |= m->direct_io;
	}
	return true;
}

/* Start a cached period (pt_lock held, the inode idle). */
static void start_cached(struct lfs_inode *inode, struct io_mode *m)
{
	inode->opens = 1;
	inode->backing_id = 0;
	m->drop_cache = inode->cache_stale;
	inode->cache_stale = false;
}

void backing_opened(fuse_req_t req, struct lfs_inode *inode, int fd,
		    int flags, bool may_pass, struct io_mode *m)
{
	struct lfs *fs = req_fs(req);
	const struct lfs_session *s = fuse_req_userdata(req);
	const struct lfs_backing_ops *ops = ops_of(s, fs);
	int id;

	*m = (struct io_mode){ 0 };
	if (!ops)
		return;
	pthread_mutex_lock(&fs->pt_lock);
	if (join(inode, flags, m))
		goto out;
	if (!may_pass || !read_only(flags) || !ops->available(s->transport)) {
		start_cached(inode, m);
		goto out;
	}
	id = register_backing(fs, s, fd);
	if (id <= 0) {
		start_cached(inode, m);
		goto out;
	}
	inode->opens = 1;
	inode->backing_id = m->backing_id = id;
	inode->pt_wrote = false;
out:
	pthread_mutex_unlock(&fs->pt_lock);
}

int backing_reply_open(fuse_req_t req, struct fuse_file_info *fi,
		       const struct io_mode *m)
{
	const struct lfs_session *s = fuse_req_userdata(req);
	int rc;

	if (m->backing_id <= 0) {
		fi->keep_cache &= !m->drop_cache;
		return fuse_reply_open(req, fi);
	}
	/* The transport adds the backing and FOPEN_DIRECT_IO for a writer,
	 * and takes FOPEN_KEEP_CACHE away. */
	fi->direct_io = 0;
	s->backing->next_reply(m->backing_id, m->direct_io);
	rc = fuse_reply_open(req, fi);
	s->backing->next_reply(0, false);
	return rc;
}

void backing_released(struct lfs *fs, const struct lfs_session *s,
		      struct lfs_inode *inode)
{
	const struct lfs_backing_ops *ops = ops_of(s, fs);
	int id = 0;

	if (!ops)
		return;
	pthread_mutex_lock(&fs->pt_lock);
	if (inode->opens > 0 && --inode->opens == 0 && inode->backing_id > 0) {
		id = inode->backing_id;
		inode->backing_id = 0;
		/* A writer's shared mapping wrote the backing file, which
		 * the inode's page cache never saw. */
		inode->cache_stale = inode->pt_wrote;
	}
	pthread_mutex_unlock(&fs->pt_lock);
	if (id > 0)
		ops->close(s->transport, id);
}
