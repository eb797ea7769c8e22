/* SPDX-License-Identifier: MIT */
/*
 * The backing core: attributes.  getattr, setattr and the suid/sgid rules
 * around them, readlink; the O_NOATIME of every descriptor once the lease
 * is lost.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core.h"

int core_getattr(struct lfs *fs, struct lfs_inode *inode, int fd,
		 struct stat *st)
{
	int ifd, rc;

	if (fd >= 0)
		return fstat(fd, st) < 0 ? neg_errno() : 0;
	ifd = inode_fd(fs, inode);
	rc = ifd < 0 ? ifd : stat_fd(ifd, st);
	inode_fd_put(inode, ifd);
	return rc;
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

static int set_mode(int ifd, int fd, mode_t mode)
{
	if (fd >= 0)
		return fchmod(fd, mode) < 0 ? neg_errno() : 0;
	return chmod_fd(ifd, mode);
}

static int set_owner(int ifd, const struct stat *attr, int valid)
{
	uid_t uid = (valid & SET_UID) ? attr->st_uid : (uid_t)-1;
	gid_t gid = (valid & SET_GID) ? attr->st_gid : (gid_t)-1;

	if (fchownat(ifd, "", uid, gid,
		     AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
		return neg_errno();
	return 0;
}

static int set_size(int ifd, int fd, off_t size)
{
	char p[PROC_FD_PATH_MAX];
	int res;

	if (fd >= 0)
		res = ftruncate(fd, size);
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

static int set_times(int ifd, int fd, const struct stat *attr, int valid)
{
	struct timespec tv[2];
	int res;

	time_spec(&tv[0], valid, SET_ATIME, SET_ATIME_NOW, &attr->st_atim);
	time_spec(&tv[1], valid, SET_MTIME, SET_MTIME_NOW, &attr->st_mtim);
	if (fd >= 0)
		res = futimens(fd, tv);
	else
		res = utimensat(ifd, "", tv,
				AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
	return res < 0 ? neg_errno() : 0;
}

/* ifd: the inode's O_PATH fd; fd: the open file, if the kernel sent one. */
static int do_setattr(int ifd, int fd, const struct stat *attr, int valid)
{
	int rc = 0;

	if (valid & SET_MODE)
		rc = set_mode(ifd, fd, attr->st_mode);
	if (!rc && (valid & (SET_UID | SET_GID)))
		rc = set_owner(ifd, attr, valid);
	if (!rc && (valid & SET_SIZE))
		rc = set_size(ifd, fd, attr->st_size);
	if (!rc && (valid & (SET_ATIME | SET_MTIME | SET_ATIME_NOW |
			     SET_MTIME_NOW)))
		rc = set_times(ifd, fd, attr, valid);
	return rc;
}

/* O_NOATIME on an open file description, as the daemon (a non-owner
 * caller may not set it); for regular files and directories only. */
void fd_noatime(struct lfs *fs, int fd)
{
	struct stat st;
	int fl;

	(void)fs;
	if (fstat(fd, &st) < 0 || !(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)))
		return;
	fl = fcntl(fd, F_GETFL);
	if (fl < 0 || (fl & (O_NOATIME | O_PATH)))
		return;
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
 * The mode ext4 leaves after a write, truncate or chown by `c` when the
 * kernel flagged it (FUSE_HANDLE_KILLPRIV_V2: the caller lacks
 * CAP_FSETID), judged on `st` as it was before the change: set-user-ID
 * goes; set-group-ID goes when group execute is set or the caller is not
 * in the file's group (setattr_should_drop_sgid()).
 */
static mode_t killed_mode(const struct caller *c, const struct stat *st)
{
	mode_t m = st->st_mode & 07777 & ~(mode_t)S_ISUID;

	if ((m & S_ISGID) &&
	    ((m & S_IXGRP) || !caller_in_group(c, st->st_gid)))
		m &= ~(mode_t)S_ISGID;
	return S_ISREG(st->st_mode) ? m : st->st_mode & 07777;
}

/* Bring fd's mode to `want` (only ever fewer bits), as the daemon: a
 * non-owner may not chmod. */
static int kill_to(int fd, mode_t want)
{
	struct stat now;

	if (fstat(fd, &now) < 0)
		return neg_errno();
	want &= now.st_mode & 07777;
	if (want == (now.st_mode & 07777))
		return 0;
	return chmod_fd(fd, want);
}

/* A kill flag's clearing on fd, judged on its mode now (write, truncate
 * and O_TRUNC change no owner, so before and after agree). */
static int kill_suidgid(int fd, const struct caller *c)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return neg_errno();
	return kill_to(fd, killed_mode(c, &st));
}

/* After a write or an O_TRUNC open of a file whose mode had set-user-ID
 * or set-group-ID before: the kernel's kill flag applied; *changed if the
 * mode changed (here, or in the backing filesystem's own write as the
 * caller), so that the front end drops the kernel's cached attributes. */
int settle_sxid(struct lfs *fs, int fd, const struct stat *before,
		bool kill, const struct caller *c, bool *changed)
{
	struct stat st;
	int rc = kill ? kill_suidgid(fd, c) : 0;

	(void)fs;
	*changed = rc == 0 && fstat(fd, &st) == 0 &&
		   st.st_mode != before->st_mode;
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

/*
 * The kernel flags a truncate only for a caller without CAP_FSETID, but
 * every chown; a chown as the caller clears what the backing fs clears
 * for it, except for a uid 0 caller without CAP_FSETID, which acts with
 * the daemon's: its clearing is judged on the mode and group before the
 * chown (*before), as the kernel judges it.  A file without set-ID bits
 * has nothing to clear, and the caller's capabilities (a read of /proc)
 * are not needed.
 */
static bool chown_kills(int ifd, int valid, bool kill, const struct caller *c,
			struct stat *before)
{
	return kill && (valid & (SET_UID | SET_GID)) && c->uid == 0 &&
	       has_sxid(ifd, before) && caller_lacks_fsetid(c);
}

/* The changes as `c`, then what only the daemon may do: a kill the kernel
 * allowed, a chown's or truncate's clearing. */
static int setattr_fd(struct lfs *fs, int ifd, int fd, const struct stat *attr,
		      int valid, bool kill, const struct caller *c,
		      const struct admission *adm)
{
	bool mode_kill = fs->switch_creds && (valid & SET_MODE) &&
			 mode_is_kill(ifd, attr->st_mode);
	struct stat before;
	bool chown_kill = chown_kills(ifd, valid, kill, c, &before);
	struct acting a;
	int rc;

	if (mode_kill)
		valid &= ~SET_MODE;
	rc = caller_enter_admitted(fs, c, NULL, adm, &a);
	if (!rc)
		rc = do_setattr(ifd, fd, attr, valid);
	caller_leave(fs, &a);
	if (!rc && mode_kill)
		rc = chmod_fd(ifd, attr->st_mode & 07777);
	if (!rc && chown_kill)
		rc = kill_to(ifd, killed_mode(c, &before));
	if (!rc && kill && (valid & SET_SIZE))
		rc = kill_suidgid(ifd, c);
	return rc;
}

int core_setattr(struct lfs *fs, struct lfs_inode *inode, int fd,
		 const struct stat *attr, int valid, bool kill,
		 const struct caller *c, const struct admission *adm,
		 struct stat *st)
{
	int ifd = inode_fd(fs, inode);
	int rc = ifd;

	if (ifd >= 0)
		rc = setattr_fd(fs, ifd, fd, attr, valid, kill, c, adm);
	if (!rc)
		rc = stat_fd(ifd, st);
	inode_fd_put(inode, ifd);
	return rc;
}

ssize_t core_readlink(struct lfs *fs, struct lfs_inode *inode, char *buf,
		      size_t size)
{
	int fd = inode_fd(fs, inode);
	ssize_t n;

	if (fd < 0)
		return fd;
	n = readlinkat(fd, "", buf, size);
	n = n < 0 ? neg_errno() : n;
	inode_fd_put(inode, fd);
	if (n >= 0 && (size_t)n >= size)
		return -ENAMETOOLONG;
	if (n >= 0)
		buf[n] = '\0';
	return n;
}
