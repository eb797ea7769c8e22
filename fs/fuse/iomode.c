/* SPDX-License-Identifier: MIT */
/*
 * The passthrough: how the kernel serves each open.  Three ways:
 *  - cached: reads and writes through the kernel's page cache, every
 *    write sent on at once (there is no writeback cache);
 *  - direct (FOPEN_DIRECT_IO): reads and writes go to the daemon as they
 *    come, nothing of them is cached;
 *  - passthrough (FUSE passthrough, on by default where the kernel and
 *    the daemon's privileges allow it): the kernel reads (and maps) a
 *    registered backing file itself.  Writes never go that way: a write
 *    to the backing file would not pass the gate.
 *
 * The kernel's rules (fs/fuse/iomode.c) shape the bookkeeping: while one
 * open of an inode is passthrough, every open of it must be, of the same
 * backing file; while one is cached, none may be passthrough.  So each
 * inode counts the opens the daemon answered, and the first open of an
 * idle inode decides a *period* for all that follow until the last is
 * released:
 *  - a read-only open (no O_TRUNC, no O_DIRECT), by the file's owner or
 *    root, of an idle inode of at least PT_MIN_SIZE bytes that no
 *    read-write open has been seen on starts a passthrough period where
 *    passthrough is on (another user's reader gets a cached one); later read-only
 *    opens join it, and a write-only open joins with FOPEN_DIRECT_IO: its
 *    writes come to the daemon (and through the gate).  A read-write open
 *    (or a create) never joins one: the kernel would map the backing file
 *    for it, and stores through a shared writable mapping would reach
 *    ROOT past the gate, also after loss, with no way to revoke them.  It
 *    waits up to PT_END_WAIT_MS for the period to end (the kernel sends
 *    RELEASE after close() has returned, so a period its callers have
 *    ended may not have ended here yet), then is refused with ETXTBSY
 *    (the kernel allows no other mode while the period lasts); once a
 *    read-write open was seen, the inode starts no passthrough period
 *    again while the daemon keeps its record;
 *  - a write-only open of an idle inode (a create, a rewrite: tar, cp,
 *    compilers, git checkout) starts a direct period, where the wire lets
 *    a direct open be mapped shared (FUSE_DIRECT_IO_ALLOW_MMAP): every
 *    open that joins it is direct too.  Nothing is cached while it lasts,
 *    so no reader of the inode can see pages older than a write, and the
 *    kernel sends no GETXATTR of security.capability before the first
 *    write (it asks that only on its cached write path; the backing
 *    filesystem, written as the caller, drops capabilities and
 *    set-user-ID itself, and the kill flag covers the rest: attr.c);
 *  - any other first open starts a cached period, which every open joins.
 * When a period in which something wrote past the page cache ends (a
 * direct period, an O_DIRECT writer, a passthrough period a writer
 * joined), the next open drops the inode's page cache, which may be older
 * than the file: a mapping may have read a page while a direct write of it
 * was under way, and a passthrough writer's shared mapping writes the
 * backing file itself.
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
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "lfs_int.h"

/* Files smaller than this are served through the page cache: a period
 * costs two ioctls and a backing open, which small reads do not repay
 * (git status reading its index: 0.69x with them passed through), and
 * exclusive placement keeps their pages across opens anyway. */
#define PT_MIN_SIZE ((off_t)1 << 20)
/* How long one read-write open waits for a passthrough period's pending
 * releases before it is refused.  One waiter at a time: a worker waiting
 * here serves nothing else. */
#define PT_END_WAIT_MS 50

void iomode_init(struct lfs *fs)
{
	pthread_condattr_t a;

	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&fs->io_idle, &a);
	pthread_condattr_destroy(&a);
}

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

/* The wire's passthrough, where the clone for backing files exists. */
static const struct lfs_wire_ops *backing_ops(const struct lfs_session *s,
					      const struct lfs *fs)
{
	return fs->pt_mount_fd >= 0 ? s->wire : NULL;
}

/* Whether a direct period may start: asked for, and a direct open can be
 * mapped shared on this connection (else a reader joining the period
 * could not map the file). */
static bool direct_allowed(const struct lfs_session *s, const struct lfs *fs)
{
	return fs->cfg.direct_writes && s->wire &&
	       s->wire->direct_mmap(s->transport);
}

static bool read_only(int flags)
{
	return (flags & O_ACCMODE) == O_RDONLY &&
	       !(flags & (O_TRUNC | O_DIRECT));
}

static bool write_only(int flags)
{
	return (flags & O_ACCMODE) == O_WRONLY;
}

/* An open that could map the file shared and writable. */
static bool read_write(int flags)
{
	return (flags & O_ACCMODE) == O_RDWR;
}

/* An O_DIRECT writer: its writes go past the page cache in any period. */
static bool direct_writer(int flags)
{
	return (flags & O_DIRECT) && (flags & O_ACCMODE) != O_RDONLY;
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
	/* open_by_handle_at needs CAP_DAC_READ_SEARCH: as the daemon
	 * (outside any caller_enter()). */
	pfd = open_by_handle_at(fs->pt_mount_fd, &hb.fh, O_PATH | O_CLOEXEC);
	if (pfd < 0)
		return neg_errno();
	id = s->wire->backing_open(s->transport, pfd);
	close(pfd);
	return id;
}

/* Join the inode's current period, if it has one (io_lock held): 1, 0
 * if it is idle, -ETXTBSY for an open that may not join a passthrough
 * period (see the top of this file). */
static int join(struct lfs_inode *inode, int flags, bool may_pass,
		struct io_mode *m)
{
	if (inode->opens == 0)
		return 0;
	if (inode->backing_id > 0 && (read_write(flags) || !may_pass))
		return -ETXTBSY;
	inode->opens++;
	inode->bypassed |= direct_writer(flags);
	if (inode->backing_id > 0) {
		m->backing_id = inode->backing_id;
		m->direct_io = !read_only(flags);
		inode->bypassed |= m->direct_io;
	} else {
		m->direct_io = inode->direct;
	}
	return 1;
}

/* Start a period that is not passthrough (io_lock held, the inode idle):
 * direct or cached. */
static void start(struct lfs_inode *inode, bool direct, int flags,
		  struct io_mode *m)
{
	inode->opens = 1;
	inode->backing_id = 0;
	inode->direct = direct;
	inode->bypassed = direct || direct_writer(flags);
	m->direct_io = direct;
	m->drop_cache = inode->cache_stale;
	inode->cache_stale = false;
}

/* Wait (io_lock held) for the inode's passthrough period to end, at most
 * PT_END_WAIT_MS and only if no other open waits: whether it ended. */
static bool wait_period_end(struct lfs *fs, const struct lfs_inode *inode)
{
	struct timespec until;
	int rc = 0;

	if (fs->io_waiting)
		return false;
	fs->io_waiting = true;
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_nsec += PT_END_WAIT_MS * 1000000L;
	until.tv_sec += until.tv_nsec / 1000000000L;
	until.tv_nsec %= 1000000000L;
	while (inode->opens > 0 && inode->backing_id > 0 && rc == 0)
		rc = pthread_cond_timedwait(&fs->io_idle, &fs->io_lock, &until);
	fs->io_waiting = false;
	return inode->opens == 0 || inode->backing_id <= 0;
}

/* Whether an idle inode's read-only open at fd by `uid` may start a
 * passthrough period (io_lock held): only the file's owner or root, since
 * the period refuses every read-write open (ETXTBSY) while it lasts and a
 * reader must not be able to hold someone else's writes off. */
static bool may_start_passthrough(const struct lfs_inode *inode, int fd,
				  uid_t uid)
{
	struct stat st;

	return !inode->read_write && fstat(fd, &st) == 0 &&
	       S_ISREG(st.st_mode) && st.st_size >= PT_MIN_SIZE &&
	       (uid == 0 || uid == st.st_uid);
}

/* A passthrough period, if the wire takes the file open at fd as a
 * backing file (io_lock held, the inode idle). */
static bool start_passthrough(struct lfs *fs, const struct lfs_session *s,
			      struct lfs_inode *inode, int fd, uid_t uid,
			      struct io_mode *m)
{
	int id;

	if (!may_start_passthrough(inode, fd, uid))
		return false;
	id = register_backing(fs, s, fd);
	if (id <= 0)
		return false;
	inode->opens = 1;
	inode->backing_id = m->backing_id = id;
	inode->direct = inode->bypassed = false;
	return true;
}

int iomode_may_open(struct lfs *fs, struct lfs_inode *inode, int flags)
{
	int rc = 0;

	if (!read_write(flags))
		return 0;
	pthread_mutex_lock(&fs->io_lock);
	inode->read_write = true;
	if (inode->opens > 0 && inode->backing_id > 0 &&
	    !wait_period_end(fs, inode))
		rc = -ETXTBSY;
	pthread_mutex_unlock(&fs->io_lock);
	return rc;
}

int iomode_opened(fuse_req_t req, struct lfs_inode *inode, int fd,
		  int flags, bool may_pass, struct io_mode *m)
{
	struct lfs *fs = req_fs(req);
	const struct lfs_session *s = fuse_req_userdata(req);
	const struct lfs_wire_ops *pt = backing_ops(s, fs);
	int rc;

	*m = (struct io_mode){ 0 };
	pthread_mutex_lock(&fs->io_lock);
	inode->read_write |= read_write(flags);
	rc = join(inode, flags, may_pass, m);
	if (rc == -ETXTBSY && wait_period_end(fs, inode))
		rc = join(inode, flags, may_pass, m);
	if (rc != 0)
		goto out;
	if (pt && may_pass && read_only(flags) && pt->passthrough(s->transport) &&
	    start_passthrough(fs, s, inode, fd,
			      fuse_req_ctx(req)->uid, m))
		goto out;
	start(inode, write_only(flags) && direct_allowed(s, fs), flags, m);
out:
	pthread_mutex_unlock(&fs->io_lock);
	return rc < 0 ? rc : 0;
}

void iomode_apply(const struct io_mode *m, struct fuse_file_info *fi)
{
	fi->keep_cache &= !m->drop_cache;
	fi->direct_io |= m->direct_io && m->backing_id <= 0;
}

int iomode_reply_open(fuse_req_t req, struct fuse_file_info *fi,
		      const struct io_mode *m)
{
	const struct lfs_session *s = fuse_req_userdata(req);
	int rc;

	if (m->backing_id <= 0) {
		iomode_apply(m, fi);
		return fuse_reply_open(req, fi);
	}
	/* The transport adds the backing and FOPEN_DIRECT_IO for a writer,
	 * and takes FOPEN_KEEP_CACHE away. */
	fi->direct_io = 0;
	s->wire->next_reply(m->backing_id, m->direct_io);
	rc = fuse_reply_open(req, fi);
	s->wire->next_reply(0, false);
	return rc;
}

void iomode_released(struct lfs *fs, const struct lfs_session *s,
		     struct lfs_inode *inode)
{
	int id = 0;

	pthread_mutex_lock(&fs->io_lock);
	if (inode->opens > 0 && --inode->opens == 0) {
		id = inode->backing_id;
		inode->backing_id = 0;
		/* The page cache may not have seen all the period wrote
		 * (see the top of this file). */
		inode->cache_stale = inode->bypassed;
		inode->direct = inode->bypassed = false;
		if (fs->io_waiting)
			pthread_cond_broadcast(&fs->io_idle);
	}
	pthread_mutex_unlock(&fs->io_lock);
	if (id > 0)
		s->wire->backing_close(s->transport, id);
}
