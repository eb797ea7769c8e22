/* SPDX-License-Identifier: MIT */
/*
 * The passthrough: attributes. getattr, setattr and the suid/sgid
 * rules around them, readlink; the O_NOATIME of every descriptor once the
 * lease is lost.
 * (Conventions: lfs.c; shared internals: lfs_int.h.)
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sys/fsuid.h>
#include <sys/syscall.h>

#include "lfs_int.h"

/* ---- attributes --------------------------------------------------------- */

static void reply_attr(fuse_req_t req, int rc, const struct stat *st)
{
	if (rc < 0)
		reply_err(req, rc);
	else
		fuse_reply_attr(req, st, atomic_load(&req_fs(req)->attr_timeout));
}

void lfs_getattr(fuse_req_t req, fuse_ino_t ino,
			struct fuse_file_info *fi)
{
	struct lfs *fs = req_fs(req);
	struct lfs_inode *inode = inode_of(fs, ino);
	struct stat st;
	int fd, rc;

	if (fi) {
		rc = fstat(fh_fd(fi), &st) < 0 ? neg_errno() : 0;
	} else {
		fd = inode_fd(fs, inode);
		rc = fd < 0 ? fd : stat_fd(fd, &st);
		inode_fd_put(inode, fd);
	}
	reply_attr(req, rc, &st);
}

#ifndef SYS_fchmodat2
#define SYS_fchmodat2 452       /* Linux 6.6; glibc 2.36 does not name it */
#endif

/* chmod of the inode an O_PATH fd names, as the acting identity: with
 * fchmodat2(AT_EMPTY_PATH) (1.3 us against 3.6 us for a chmod through
 * /proc/self/fd/N, which walks /proc), or through /proc where the kernel
 * predates it.  0 or -errno. */
static int chmod_fd(int ifd, mode_t mode)
{
	static atomic_bool no_fchmodat2;
	char p[PROC_FD_PATH_MAX];

	if (!atomic_load_explicit(&no_fchmodat2, memory_order_relaxed)) {
		if (syscall(SYS_fchmodat2, ifd, "", mode, AT_EMPTY_PATH) == 0)
			return 0;
		if (errno != ENOSYS)
			return neg_errno();
		atomic_store_explicit(&no_fchmodat2, true, memory_order_relaxed);
	}
	return chmod(proc_path(p, ifd), mode) < 0 ? neg_errno() : 0;
}

static int set_mode(int ifd, struct fuse_file_info *fi, mode_t mode)
{
	if (fi)
		return fchmod(fh_fd(fi), mode) < 0 ? neg_errno() : 0;
	return chmod_fd(ifd, mode);
}

static int set_owner(int ifd, const struct stat *attr, int valid)
{
	uid_t uid = (valid & FUSE_SET_ATTR_UID) ? attr->st_uid : (uid_t)-1;
	gid_t gid = (valid & FUSE_SET_ATTR_GID) ? attr->st_gid : (gid_t)-1;

	if (fchownat(ifd, "", uid, gid,
		     AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
		return neg_errno();
	return 0;
}

static int set_size(int ifd, struct fuse_file_info *fi, off_t size)
{
	char p[PROC_FD_PATH_MAX];
	int res;

	if (fi)
		res = ftruncate(fh_fd(fi), size);
	else
		res = truncate(proc_path(p, ifd), size);
	return res < 0 ? neg_errno() : 0;
}

static void time_spec(struct timespec *ts, int valid, int set_bit,
		      int now_bit, const struct timespec *given)
{
	if (valid & now_bit)
		ts->tv_nsec = UTIME_NOW;
	else if (valid & set_bit)
		*ts = *given;
	else
		ts->tv_nsec = UTIME_OMIT;
}

static int set_times(int ifd, struct fuse_file_info *fi,
		     const struct stat *attr, int valid)
{
	struct timespec tv[2];
	int res;

	time_spec(&tv[0], valid, FUSE_SET_ATTR_ATIME, FUSE_SET_ATTR_ATIME_NOW,
		  &attr->st_atim);
	time_spec(&tv[1], valid, FUSE_SET_ATTR_MTIME, FUSE_SET_ATTR_MTIME_NOW,
		  &attr->st_mtim);
	if (fi)
		res = futimens(fh_fd(fi), tv);
	else
		res = utimensat(ifd, "", tv,
				AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
	return res < 0 ? neg_errno() : 0;
}

/* ifd: the inode's O_PATH fd; fi: the open file, if the kernel sent one. */
static int do_setattr(int ifd, struct stat *attr, int valid,
		      struct fuse_file_info *fi)
{
	int rc = 0;

	if (valid & FUSE_SET_ATTR_MODE)
		rc = set_mode(ifd, fi, attr->st_mode);
	if (!rc && (valid & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)))
		rc = set_owner(ifd, attr, valid);
	if (!rc && (valid & FUSE_SET_ATTR_SIZE))
		rc = set_size(ifd, fi, attr->st_size);
	if (!rc && (valid & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME |
			     FUSE_SET_ATTR_ATIME_NOW | FUSE_SET_ATTR_MTIME_NOW)))
		rc = set_times(ifd, fi, attr, valid);
	return rc;
}

struct setattr_args {
	int ifd;
	struct stat *attr;
	int valid;
	struct fuse_file_info *fi;
};

static int setattr_fn(void *a_)
{
	struct setattr_args *a = a_;

	return do_setattr(a->ifd, a->attr, a->valid, a->fi);
}

/* chmod as the daemon, for clearing bits the kernel has already allowed
 * to be cleared (the caller may not be the owner). */
static int chmod_as_daemon(struct lfs *fs, int fd, mode_t m)
{
	if (fs->switch_creds)
		act_as(fs->own_uid, fs->own_gid);
	return chmod_fd(fd, m);
}

/* O_NOATIME on an open file description, as the daemon (a non-owner
 * caller may not set it); for regular files and directories only. */
void fd_noatime(struct lfs *fs, int fd)
{
	struct stat st;
	int fl;

	if (fstat(fd, &st) < 0 || !(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)))
		return;
	fl = fcntl(fd, F_GETFL);
	if (fl < 0 || (fl & (O_NOATIME | O_PATH)))
		return;
	if (fs->switch_creds)
		act_as(fs->own_uid, fs->own_gid);
	(void)fcntl(fd, F_SETFL, fl | O_NOATIME); /* best effort: see README */
}

/* A file description just opened for a caller: after loss, no atime. The
 * flag is read after the open, and set before lfs_after_loss() walks the
 * open descriptors, so none is missed. */
void opened(struct lfs *fs, int fd)
{
	if (atomic_load(&fs->noatime))
		fd_noatime(fs, fd);
}

/*
 * The mode ext4 leaves after a write, truncate or chown by req's caller
 * when the kernel flagged it (FUSE_HANDLE_KILLPRIV_V2: the caller lacks
 * CAP_FSETID), judged on `st` as it was before the change: set-user-ID
 * goes; set-group-ID goes when group execute is set or the caller is not
 * in the file's group (setattr_should_drop_sgid()).
 */
static mode_t killed_mode(fuse_req_t req, const struct stat *st)
{
	mode_t m = st->st_mode & 07777 & ~(mode_t)S_ISUID;

	if ((m & S_ISGID) &&
	    ((m & S_IXGRP) || !caller_in_group(req, st->st_gid)))
		m &= ~(mode_t)S_ISGID;
	return S_ISREG(st->st_mode) ? m : st->st_mode & 07777;
}

/* Bring fd's mode to `want` (only ever fewer bits), as the daemon: a
 * non-owner may not chmod. */
static int kill_to(fuse_req_t req, int fd, mode_t want)
{
	struct stat now;

	if (fstat(fd, &now) < 0)
		return neg_errno();
	want &= now.st_mode & 07777;
	if (want == (now.st_mode & 07777))
		return 0;
	return chmod_as_daemon(req_fs(req), fd, want);
}

/* A kill flag's clearing on fd, judged on its mode now (write, truncate
 * and O_TRUNC change no owner, so before and after agree). */
static int kill_suidgid(fuse_req_t req, int fd)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return neg_errno();
	return kill_to(req, fd, killed_mode(req, &st));
}

/*
 * After a write or an O_TRUNC open of a file whose mode had set-user-ID
 * or set-group-ID before (`before`): apply the kernel's kill flag, and if
 * the mode changed (here, or in the backing filesystem's own write as the
 * caller), drop the kernel's cached attributes of `ino`, so that a statx
 * of the mode alone does not serve the old bits.
 */
int settle_sxid(fuse_req_t req, fuse_ino_t ino, int fd,
		       const struct stat *before)
{
	struct lfs_session *sess = fuse_req_userdata(req);
	struct stat st;
	int rc = kill_flagged(req) ? kill_suidgid(req, fd) : 0;

	if (rc == 0 && fstat(fd, &st) == 0 && st.st_mode != before->st_mode &&
	    sess->se)
		fuse_lowlevel_notify_inval_inode(sess->se, ino, -1, 0);
	return rc;
}

/*
 * Mode, owner and group only, never the timestamps: on a filesystem with
 * multigrain timestamps (ext4, xfs, btrfs and tmpfs since Linux 6.13) a
 * stat that reads the ctime makes the next write stamp a fine-grained time
 * and dirty the inode, which a stat before every write turned into a
 * journalled inode update per write (4 KiB random writes on ext4: 14-15 us
 * of the daemon's CPU per write with a full stat, 12-13 with this).
 */
bool has_sxid(int fd, struct stat *st)
{
	struct statx sx;

	if (statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW,
		  STATX_TYPE | STATX_MODE | STATX_UID | STATX_GID, &sx) < 0)
		return false;
	*st = (struct stat){ .st_mode = sx.stx_mode, .st_uid = sx.stx_uid,
			     .st_gid = sx.stx_gid };
	return st->st_mode & (S_ISUID | S_ISGID);
}

/*
 * Whether a SETATTR's mode only clears set-user-ID/set-group-ID bits of
 * the current mode: the kernel's own kill (on write, truncate or chown by
 * a caller without CAP_FSETID, when KILLPRIV_V2 is off), which it has
 * already allowed; a chmod by a non-owner never gets here (the kernel
 * checks ownership first).  Applied as the daemon: a non-owner may not
 * chmod the backing file itself.
 */
static bool mode_is_kill(int fd, mode_t want)
{
	const mode_t sxid = S_ISUID | S_ISGID;
	struct stat st;
	mode_t cur;

	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return false;
	cur = st.st_mode & 07777;
	want &= 07777;
	return want != cur && (want & ~sxid) == (cur & ~sxid) &&
	       (want & ~cur) == 0;
}


void lfs_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
			int valid, struct fuse_file_info *fi)
{
	struct lfs *fs = req_fs(req);
	struct lfs_inode *inode = inode_of(fs, ino);
	struct stat st;
	int fd = inode_fd(fs, inode);
	struct setattr_args a = { .ifd = fd, .attr = attr, .valid = valid,
				  .fi = fi };
	bool kill = fd >= 0 && fs->switch_creds && (valid & FUSE_SET_ATTR_MODE) &&
		    mode_is_kill(fd, attr->st_mode);
	/* The kernel flags a truncate only for a caller without CAP_FSETID,
	 * but every chown; a chown as the caller clears what the backing fs
	 * clears for it, except for a uid 0 caller without CAP_FSETID, which
	 * acts with the daemon's: its clearing is judged on the mode and
	 * group before the chown, as the kernel judges it.  A file without
	 * set-ID bits has nothing to clear, and the caller's capabilities
	 * (a read of /proc) are not needed. */
	bool chown_kill = fd >= 0 && kill_flagged(req) &&
			  (valid & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) &&
			  fuse_req_ctx(req)->uid == 0 && has_sxid(fd, &st) &&
			  caller_lacks_fsetid(req);
	int rc;

	if (kill)
		a.valid &= ~FUSE_SET_ATTR_MODE;
	rc = fd < 0 ? fd : as_caller(req, setattr_fn, &a);
	if (!rc && kill)
		rc = chmod_as_daemon(fs, fd, attr->st_mode & 07777);
	if (!rc && chown_kill)
		rc = kill_to(req, fd, killed_mode(req, &st));
	if (!rc && kill_flagged(req) && (valid & FUSE_SET_ATTR_SIZE))
		rc = kill_suidgid(req, fd);
	if (!rc)
		rc = stat_fd(fd, &st);
	inode_fd_put(inode, fd);
	reply_attr(req, rc, &st);
}

void lfs_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct lfs *fs = req_fs(req);
	struct lfs_inode *inode = inode_of(fs, ino);
	char buf[PATH_MAX + 1];
	int fd = inode_fd(fs, inode);
	ssize_t n = fd < 0 ? -1 : readlinkat(fd, "", buf, sizeof(buf));

	if (fd < 0)
		errno = -fd;
	inode_fd_put(inode, fd);
	if (n < 0)
		reply_err(req, neg_errno());
	else if ((size_t)n >= sizeof(buf))
		reply_err(req, -ENAMETOOLONG);
	else {
		buf[n] = '\0';
		fuse_reply_readlink(req, buf);
	}
}
