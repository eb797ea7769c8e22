/* SPDX-License-Identifier: MIT */
/*
 * Low-level FUSE passthrough of one root directory: the operations.
 *
 * Names: every backing call resolves one name relative to an O_PATH fd of
 * its parent and never follows a symlink at that name (AT_SYMLINK_NOFOLLOW,
 * O_NOFOLLOW, or calls that never follow); /proc/self/fd/N is used only to
 * reach the inode an O_PATH fd already names.  So no operation can leave
 * ROOT through a symlink, whatever the backing directory holds.  Backing
 * calls made for a caller run as the caller (creds.c); the inode table is
 * inode.c's.
 *
 * Policy comes from struct lfs_config (cache timeouts, whether the page
 * cache is kept across opens); this file decides none of it and knows
 * nothing of leases: the daemon composes the gate in front of lfs_ops().
 *
 * Error convention: helpers return 0 or -errno; reply_err() is the one
 * place that turns an error into a FUSE reply.
 */
#include <dirent.h>
#include <grp.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/openat2.h>
#include <sched.h>
#include <sys/fsuid.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "lfs_int.h"
#include "ops.h"

#define LFS_MAX_WRITE (1u << 20)
/* Cache timeouts (s) once the lease is lost: the root has a new owner. */
#define LFS_LOST_TIMEOUT 1.0


struct lfs_dir {
	DIR *dp;
	uid_t uid;               /* whose budget the open counts against */
	off_t offset;            /* the kernel's view of dp's position */
	struct dirent *pending;  /* read from dp but not yet returned */
};

/* The one mapping of an internal error to a FUSE reply. */
static void reply_err(fuse_req_t req, int rc)
{
	fuse_reply_err(req, rc < 0 ? -rc : rc);
}







/* ---- caller credentials ------------------------------------------------- */











/* ---- inode table -------------------------------------------------------- */
















/* ---- lookup ------------------------------------------------------------- */

static void entry_fill(struct lfs *fs, struct lfs_inode *inode,
		       const struct stat *st, struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = node_id(fs, inode);
	e->attr = *st;
	e->attr_timeout = atomic_load(&fs->attr_timeout);
	e->entry_timeout = atomic_load(&fs->entry_timeout);
}

/*
 * Resolve `name` in the directory `dirfd` to a referenced inode and fill
 * `e`.  Known inodes cost one fstatat; unknown ones an O_PATH open as well.
 */
static int lookup_at(struct lfs *fs, int dirfd, const char *name,
		     struct fuse_entry_param *e)
{
	struct lfs_inode *inode;
	struct stat st;
	int fd, rc;

	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return neg_errno();
	inode = table_ref(fs, st.st_dev, st.st_ino);
	if (inode && inode->fd < 0) {
		struct handle_buf hb;

		if (get_handle(fs, dirfd, name, 0, &hb) == 0 &&
		    record_stale(inode, &hb)) {
			table_detach(fs, inode);
			table_unref(fs, inode, 1);
			inode = NULL;
		}
	}
	if (inode)
		goto found;

	fd = openat(dirfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return neg_errno();
	rc = stat_fd(fd, &st);
	if (rc < 0) {
		close(fd);
		return rc;
	}
	inode = table_ref_or_add(fs, fd, &st);
	if (!inode)
		return -ENOMEM;
found:
	entry_fill(fs, inode, &st, e);
	return 0;
}

/* What a name operation on one parent directory needs. */
struct name_args {
	struct lfs *fs;
	int dirfd;
	const char *name;
	struct fuse_entry_param *e;  /* lookup */
	int flags;                   /* unlink */
	int tfd;                     /* rename: target directory */
	const char *tname;
};

static int lookup_fn(void *a_)
{
	struct name_args *a = a_;

	return lookup_at(a->fs, a->dirfd, a->name, a->e);
}

static void lfs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct lfs *fs = req_fs(req);
	struct lfs_inode *dir = inode_of(fs, parent);
	struct fuse_entry_param e;
	struct name_args a = { .fs = fs, .dirfd = inode_fd(fs, dir),
			       .name = name, .e = &e };
	double neg_timeout = atomic_load(&fs->entry_timeout);
	int rc = a.dirfd;

	/* The kernel never asks for these; they would leave the parent. */
	if (rc >= 0 && is_dot(name))
		rc = -EINVAL;
	else if (rc >= 0)
		rc = as_caller(req, lookup_fn, &a);
	inode_fd_put(dir, a.dirfd);
	if (rc == -ENOENT && neg_timeout > 0) {
		/* Negative entry: cached by the kernel for entry_timeout. */
		memset(&e, 0, sizeof(e));
		e.entry_timeout = neg_timeout;
		rc = 0;
	}
	if (rc < 0)
		reply_err(req, rc);
	else
		fuse_reply_entry(req, &e);
}

static void lfs_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	struct lfs *fs = req_fs(req);

	table_unref(fs, inode_of(fs, ino), nlookup);
	fuse_reply_none(req);
}

static void lfs_forget_multi(fuse_req_t req, size_t count,
			     struct fuse_forget_data *forgets)
{
	struct lfs *fs = req_fs(req);
	size_t i;

	for (i = 0; i < count; i++)
		table_unref(fs, inode_of(fs, forgets[i].ino), forgets[i].nlookup);
	fuse_reply_none(req);
}

/* ---- attributes --------------------------------------------------------- */

static void reply_attr(fuse_req_t req, int rc, const struct stat *st)
{
	if (rc < 0)
		reply_err(req, rc);
	else
		fuse_reply_attr(req, st, atomic_load(&req_fs(req)->attr_timeout));
}

static void lfs_getattr(fuse_req_t req, fuse_ino_t ino,
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

static int set_mode(int ifd, struct fuse_file_info *fi, mode_t mode)
{
	char p[PROC_FD_PATH_MAX];
	int res;

	if (fi)
		res = fchmod(fh_fd(fi), mode);
	else
		res = chmod(proc_path(p, ifd), mode);
	return res < 0 ? neg_errno() : 0;
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
	char p[PROC_FD_PATH_MAX];

	if (fs->switch_creds)
		act_as(fs->own_uid, fs->own_gid);
	return chmod(proc_path(p, fd), m) < 0 ? neg_errno() : 0;
}

/* O_NOATIME on an open file description, as the daemon (a non-owner
 * caller may not set it); for regular files and directories only. */
static void fd_noatime(struct lfs *fs, int fd)
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
static void opened(struct lfs *fs, int fd)
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
static int settle_sxid(fuse_req_t req, fuse_ino_t ino, int fd,
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

static bool has_sxid(int fd, struct stat *st)
{
	return fstat(fd, st) == 0 && (st->st_mode & (S_ISUID | S_ISGID));
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


static void lfs_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
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
	 * group before the chown, as the kernel judges it. */
	bool chown_kill = fd >= 0 && kill_flagged(req) &&
			  (valid & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) &&
			  fuse_req_ctx(req)->uid == 0 && caller_lacks_fsetid(req);
	int rc = 0;

	if (chown_kill)
		rc = stat_fd(fd, &st);
	if (kill)
		a.valid &= ~FUSE_SET_ATTR_MODE;
	if (!rc)
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

static void lfs_readlink(fuse_req_t req, fuse_ino_t ino)
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

/* ---- creating entries --------------------------------------------------- */

struct make_args {
	int dirfd;
	const char *name;
	mode_t mode;
	dev_t rdev;
	const char *target;   /* symlink */
	int oldfd;            /* link: O_PATH fd of the existing inode */
	int open_flags;       /* create */
	bool excl;            /* create: the caller asked for O_EXCL */
	int fd_out;           /* create: the opened file */
};

static int make_node(void *a_)
{
	struct make_args *a = a_;
	int res;

	if (S_ISDIR(a->mode))
		res = mkdirat(a->dirfd, a->name, a->mode & ~S_IFMT);
	else if (S_ISLNK(a->mode))
		res = symlinkat(a->target, a->dirfd, a->name);
	else
		res = mknodat(a->dirfd, a->name, a->mode, a->rdev);
	return res < 0 ? neg_errno() : 0;
}

/* Through /proc: linkat(AT_EMPTY_PATH) would need CAP_DAC_READ_SEARCH,
 * which the caller's fsuid drops. */
static int make_link(void *a_)
{
	struct make_args *a = a_;
	char p[PROC_FD_PATH_MAX];

	if (linkat(AT_FDCWD, proc_path(p, a->oldfd), a->dirfd, a->name,
		   AT_SYMLINK_FOLLOW) < 0)
		return neg_errno();
	return 0;
}

static void reply_made(fuse_req_t req, int dirfd, const char *name, int rc)
{
	struct fuse_entry_param e;

	if (!rc)
		rc = lookup_at(req_fs(req), dirfd, name, &e);
	if (rc < 0)
		reply_err(req, rc);
	else
		fuse_reply_entry(req, &e);
}

static void make_entry(fuse_req_t req, fuse_ino_t parent, const char *name,
		       mode_t mode, dev_t rdev, const char *target)
{
	struct lfs *fs = req_fs(req);
	struct lfs_inode *dir = inode_of(fs, parent);
	struct make_args a = {
		.dirfd = inode_fd(fs, dir), .name = name, .mode = mode,
		.rdev = rdev, .target = target,
	};

	if (a.dirfd < 0)
		reply_err(req, a.dirfd);
	else
		reply_made(req, a.dirfd, name,
			   as_caller_masked(req, make_node, &a, &a.mode));
	inode_fd_put(dir, a.dirfd);
}

static void lfs_mknod(fuse_req_t req, fuse_ino_t parent, const char *name,
		      mode_t mode, dev_t rdev)
{
	make_entry(req, parent, name, mode, rdev, NULL);
}

static void lfs_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
		      mode_t mode)
{
	make_entry(req, parent, name, S_IFDIR | mode, 0, NULL);
}

static void lfs_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
			const char *name)
{
	make_entry(req, parent, name, S_IFLNK, 0, link);
}

static void lfs_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
		     const char *newname)
{
	struct lfs *fs = req_fs(req);
	struct lfs_inode *dir = inode_of(fs, newparent);
	struct lfs_inode *inode = inode_of(fs, ino);
	struct make_args a = {
		.dirfd = inode_fd(fs, dir), .name = newname,
		.oldfd = inode_fd(fs, inode),
	};

	if (a.dirfd < 0 || a.oldfd < 0)
		reply_err(req, a.dirfd < 0 ? a.dirfd : a.oldfd);
	else
		reply_made(req, a.dirfd, newname, as_caller(req, make_link, &a));
	inode_fd_put(dir, a.dirfd);
	inode_fd_put(inode, a.oldfd);
}

/* ---- removing and renaming ---------------------------------------------- */

static int unlink_fn(void *a_)
{
	struct name_args *a = a_;

	return unlinkat(a->dirfd, a->name, a->flags) < 0 ? neg_errno() : 0;
}

static void unlink_entry(fuse_req_t req, fuse_ino_t parent, const char *name,
			 int flags)
{
	struct lfs *fs = req_fs(req);
	struct lfs_inode *dir = inode_of(fs, parent);
	struct name_args a = { .dirfd = inode_fd(fs, dir), .name = name,
			       .flags = flags };
	int rc = a.dirfd < 0 ? a.dirfd : as_caller(req, unlink_fn, &a);

	inode_fd_put(dir, a.dirfd);
	reply_err(req, rc);
}

static void lfs_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	unlink_entry(req, parent, name, 0);
}

static void lfs_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	unlink_entry(req, parent, name, AT_REMOVEDIR);
}

static int rename_fn(void *a_)
{
	struct name_args *a = a_;

	if (renameat2(a->dirfd, a->name, a->tfd, a->tname,
		      (unsigned)a->flags) < 0)
		return neg_errno();
	return 0;
}

static void lfs_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		       fuse_ino_t newparent, const char *newname,
		       unsigned int flags)
{
	struct lfs *fs = req_fs(req);
	struct lfs_inode *from = inode_of(fs, parent);
	struct lfs_inode *to = inode_of(fs, newparent);
	int ffd = -1, tfd = -1, rc;

	if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE)) {
		rc = -EINVAL;
		goto out;
	}
	rc = ffd = inode_fd(fs, from);
	if (rc < 0)
		goto out;
	rc = tfd = inode_fd(fs, to);
	if (rc < 0)
		goto out;
	struct name_args a = { .dirfd = ffd, .name = name, .tfd = tfd,
			       .tname = newname, .flags = (int)flags };

	rc = as_caller(req, rename_fn, &a);
out:
	inode_fd_put(from, ffd);
	inode_fd_put(to, tfd);
	reply_err(req, rc);
}

/* ---- files -------------------------------------------------------------- */

static void open_reply_flags(struct lfs *fs, struct fuse_file_info *fi)
{
	/* Exclusive and held: this mount is the only legitimate writer, so
	 * cached pages stay valid across opens. */
	fi->keep_cache = atomic_load(&fs->keep_cache);
	/* O_DIRECT: the backing file is opened without it (its alignment
	 * rules would apply to the daemon's buffers), and the kernel's page
	 * cache is bypassed for this open instead. */
	fi->direct_io = (fi->flags & O_DIRECT) != 0;
	/* Locks are the kernel's and the backing fs reports errors at write
	 * time, so close needs no FLUSH round trip. */
	fi->noflush = 1;
}

/* Flags for opening the backing file on behalf of an open or create.
 * O_NOFOLLOW is the kernel's business (it resolved the name); an open
 * through /proc/self/fd must not carry it, and create adds its own. */
static int backing_flags(int flags)
{
	return (flags | O_CLOEXEC) &
	       ~(O_CREAT | O_EXCL | O_NOCTTY | O_DIRECT | O_NOFOLLOW);
}

/* A create's flags; for FUSE_TMPFILE (served by the transport as a
 * create) O_EXCL means "never linkable" and is kept. */
static int create_flags(int flags)
{
	bool tmpfile = (flags & O_TMPFILE) == O_TMPFILE;

	return backing_flags(flags) | (tmpfile ? flags & O_EXCL : 0);
}

/* A referenced entry for the object open at fd (whose stat is st). */
static int entry_from_fd(struct lfs *fs, int fd, const struct stat *st,
			 struct fuse_entry_param *e)
{
	char p[PROC_FD_PATH_MAX];
	int pfd = open(proc_path(p, fd), O_PATH | O_CLOEXEC);
	struct lfs_inode *inode;

	if (pfd < 0)
		return neg_errno();
	inode = table_ref_or_add(fs, pfd, st);
	if (!inode)
		return -ENOMEM;
	entry_fill(fs, inode, st, e);
	return 0;
}

/*
 * Always O_EXCL and O_NOFOLLOW: the kernel sends CREATE only for a name it
 * believes absent, so an existing name (a symlink among them) means its
 * cache is stale.  ESTALE makes it look the name up again and open what is
 * there through the mount, where a symlink resolves in the caller's view.
 */
static int make_file(void *a_)
{
	struct make_args *a = a_;

	if ((a->open_flags & O_TMPFILE) == O_TMPFILE) {
		/* Unnamed: in the directory itself, never under a name. */
		a->fd_out = openat(a->dirfd, ".", a->open_flags, a->mode);
		return a->fd_out < 0 ? neg_errno() : 0;
	}
	a->fd_out = openat(a->dirfd, a->name,
			   a->open_flags | O_CREAT | O_EXCL | O_NOFOLLOW,
			   a->mode);
	if (a->fd_out >= 0)
		return 0;
	return errno == EEXIST && !a->excl ? -ESTALE : neg_errno();
}

/* The open file of a failed or unanswered open or create goes, with its
 * place in the caller's budget. */
static void drop_open(struct lfs *fs, int fd, uid_t uid)
{
	if (fd >= 0)
		close(fd);
	open_put(fs, uid);
}

static void lfs_create(fuse_req_t req, fuse_ino_t parent, const char *name,
		       mode_t mode, struct fuse_file_info *fi)
{
	struct lfs *fs = req_fs(req);
	struct lfs_inode *dir = inode_of(fs, parent);
	uid_t uid = fuse_req_ctx(req)->uid;
	struct make_args a = {
		.dirfd = -1, .name = name,
		.mode = mode & ~S_IFMT,
		.open_flags = create_flags(fi->flags),
		.excl = (fi->flags & O_EXCL) != 0,
		.fd_out = -1,
	};
	struct fuse_entry_param e;
	struct stat st;
	int rc = open_get(fs, uid);

	if (rc < 0) {
		reply_err(req, rc);
		return;
	}
	rc = a.dirfd = inode_fd(fs, dir);
	if (a.dirfd >= 0)
		rc = as_caller_masked(req, make_file, &a, &a.mode);
	inode_fd_put(dir, a.dirfd);
	if (!rc)
		rc = fstat(a.fd_out, &st) < 0 ? neg_errno() : 0;
	if (!rc)
		rc = entry_from_fd(fs, a.fd_out, &st, &e);
	if (rc < 0) {
		drop_open(fs, a.fd_out, uid);
		reply_err(req, rc);
		return;
	}
	fi->fh = fh_make(a.fd_out, uid);
	open_reply_flags(fs, fi);
	if (fuse_reply_create(req, &e, fi) != 0) {
		/* The kernel will not release a handle it never received. */
		drop_open(fs, a.fd_out, uid);
		table_unref(fs, inode_of(fs, e.ino), 1);
	}
}

struct reopen_args {
	int ifd;
	int flags;
	int fd_out;
};

/* The inode itself, through its O_PATH fd (a magic link, never a name). */
static int reopen_fn(void *a_)
{
	struct reopen_args *a = a_;
	char p[PROC_FD_PATH_MAX];

	a->fd_out = open(proc_path(p, a->ifd), a->flags);
	return a->fd_out < 0 ? neg_errno() : 0;
}

static void lfs_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct lfs *fs = req_fs(req);
	struct lfs_inode *inode = inode_of(fs, ino);
	uid_t uid = fuse_req_ctx(req)->uid;
	struct reopen_args a = { .ifd = -1, .flags = backing_flags(fi->flags),
				 .fd_out = -1 };
	struct stat before;
	int rc = open_get(fs, uid);

	if (rc < 0) {
		reply_err(req, rc);
		return;
	}
	rc = a.ifd = inode_fd(fs, inode);
	if (a.ifd >= 0)
		rc = as_caller(req, reopen_fn, &a);
	inode_fd_put(inode, a.ifd);
	/* An O_TRUNC open: the kernel's kill flag, judged after the truncate
	 * (the backing open truncated already; no owner changed). */
	if (rc == 0 && (fi->flags & O_TRUNC) && has_sxid(a.fd_out, &before))
		rc = settle_sxid(req, ino, a.fd_out, &before);
	if (rc < 0) {
		drop_open(fs, a.fd_out, uid);
		reply_err(req, rc);
		return;
	}
	opened(fs, a.fd_out);
	fi->fh = fh_make(a.fd_out, uid);
	open_reply_flags(fs, fi);
	if (fuse_reply_open(req, fi) != 0)
		drop_open(fs, a.fd_out, uid);
}

static void lfs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	struct fuse_bufvec buf = FUSE_BUFVEC_INIT(size);

	buf.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	buf.buf[0].fd = fh_fd(fi);
	buf.buf[0].pos = off;
	fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
}

static void lfs_write_buf(fuse_req_t req, fuse_ino_t ino,
			  struct fuse_bufvec *in, off_t off,
			  struct fuse_file_info *fi)
{
	struct fuse_bufvec out = FUSE_BUFVEC_INIT(fuse_buf_size(in));
	struct stat before;
	bool sxid = has_sxid(fh_fd(fi), &before);
	ssize_t n;

	out.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	out.buf[0].fd = fh_fd(fi);
	out.buf[0].pos = off;
	/* As the caller: the backing filesystem clears set-user-ID and
	 * capabilities on a write exactly as natively for this caller. */
	act_as_caller(req);
	n = may_mutate(req);
	if (n == 0)
		n = fuse_buf_copy(&out, in, FUSE_BUF_SPLICE_NONBLOCK);
	if (n >= 0 && sxid) {
		int k = settle_sxid(req, ino, fh_fd(fi), &before);

		n = k < 0 ? k : n;
	}
	if (n < 0)
		reply_err(req, (int)n);
	else
		fuse_reply_write(req, (size_t)n);
}

/* Close-time errors of the backing fs (e.g. NFS) surface here. */
static void lfs_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	int fd = dup(fh_fd(fi));

	if (fd < 0 || close(fd) < 0)
		reply_err(req, neg_errno());
	else
		fuse_reply_err(req, 0);
}

static void lfs_release(fuse_req_t req, fuse_ino_t ino,
			struct fuse_file_info *fi)
{
	drop_open(req_fs(req), fh_fd(fi), fh_uid(fi));
	fuse_reply_err(req, 0);
}

static void lfs_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
		      struct fuse_file_info *fi)
{
	int res = datasync ? fdatasync(fh_fd(fi)) : fsync(fh_fd(fi));

	reply_err(req, res < 0 ? neg_errno() : 0);
}

static void lfs_fallocate(fuse_req_t req, fuse_ino_t ino, int mode,
			  off_t offset, off_t length,
			  struct fuse_file_info *fi)
{
	int res = may_mutate(req);

	if (res == 0)
		res = fallocate(fh_fd(fi), mode, offset, length) < 0 ? neg_errno() : 0;
	reply_err(req, res);
}

static void lfs_copy_file_range(fuse_req_t req, fuse_ino_t ino_in,
				off_t off_in, struct fuse_file_info *fi_in,
				fuse_ino_t ino_out, off_t off_out,
				struct fuse_file_info *fi_out, size_t len,
				int flags)
{
	ssize_t n = may_mutate(req);

	if (n == 0 && (n = copy_file_range(fh_fd(fi_in), &off_in, fh_fd(fi_out),
					   &off_out, len, (unsigned)flags)) < 0)
		n = neg_errno();
	if (n < 0)
		reply_err(req, (int)n);
	else
		fuse_reply_write(req, (size_t)n);
}

static void lfs_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
		      struct fuse_file_info *fi)
{
	off_t res = lseek(fh_fd(fi), off, whence);

	if (res < 0)
		reply_err(req, neg_errno());
	else
		fuse_reply_lseek(req, res);
}

/* ---- directories -------------------------------------------------------- */

static struct lfs_dir *dir_of(struct fuse_file_info *fi)
{
	return (struct lfs_dir *)(uintptr_t)fi->fh;
}

/* A directory stream for req's caller (counted in its budget), or -errno. */
static int open_dir(fuse_req_t req, struct lfs_inode *inode, struct lfs_dir *d)
{
	struct lfs *fs = req_fs(req);
	struct reopen_args a = { .ifd = inode_fd(fs, inode), .fd_out = -1,
				 .flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC };
	int rc = a.ifd < 0 ? a.ifd : as_caller(req, reopen_fn, &a);

	inode_fd_put(inode, a.ifd);
	if (rc < 0)
		return rc;
	opened(fs, a.fd_out);
	d->dp = fdopendir(a.fd_out);
	if (!d->dp) {
		rc = neg_errno();
		close(a.fd_out);
	}
	return rc;
}

static void lfs_opendir(fuse_req_t req, fuse_ino_t ino,
			struct fuse_file_info *fi)
{
	struct lfs *fs = req_fs(req);
	struct lfs_dir *d = calloc(1, sizeof(*d));
	uid_t uid = fuse_req_ctx(req)->uid;
	int rc = d ? open_get(fs, uid) : -ENOMEM;

	if (rc == 0) {
		d->uid = uid;
		rc = open_dir(req, inode_of(fs, ino), d);
		if (rc < 0)
			open_put(fs, uid);
	}
	if (rc < 0) {
		free(d);
		reply_err(req, rc);
		return;
	}
	fi->fh = (uint64_t)(uintptr_t)d;
	/* Exclusive: the kernel's cached listing stays valid; it is
	 * invalidated by changes made through this mount. */
	fi->cache_readdir = atomic_load(&fs->keep_cache);
	fi->keep_cache = atomic_load(&fs->keep_cache);
	if (fuse_reply_open(req, fi) != 0) {
		closedir(d->dp);
		open_put(fs, uid);
		free(d);
	}
}

/* Adds one entry at buf; returns its size (> rem means it did not fit
 * and no reference was taken) or -errno. */
static ssize_t dir_add(fuse_req_t req, int dirfd, char *buf,
		       size_t rem, const struct dirent *de, bool plus)
{
	struct lfs *fs = req_fs(req);
	struct fuse_entry_param e;
	size_t n;
	int rc;

	if (!plus) {
		struct stat st = { .st_ino = de->d_ino,
				   .st_mode = (mode_t)de->d_type << 12 };

		return (ssize_t)fuse_add_direntry(req, buf, rem, de->d_name,
						  &st, de->d_off);
	}
	/* Dots, and names the caller may list but not look up (a directory
	 * with read but no search permission), go without attributes
	 * (node id 0): the kernel then looks them up itself if asked. */
	rc = is_dot(de->d_name) ? -EACCES : lookup_at(fs, dirfd, de->d_name, &e);
	if (rc == -EACCES) {
		memset(&e, 0, sizeof(e));
		e.attr.st_ino = de->d_ino;
		e.attr.st_mode = (mode_t)de->d_type << 12;
		return (ssize_t)fuse_add_direntry_plus(req, buf, rem,
						       de->d_name, &e,
						       de->d_off);
	}
	if (rc < 0)
		return rc;
	n = fuse_add_direntry_plus(req, buf, rem, de->d_name, &e, de->d_off);
	if (n > rem)
		table_unref(fs, inode_of(fs, e.ino), 1);
	return (ssize_t)n;
}

/* The kernel serializes readdir on one open directory, so a handle is
 * never used by two threads at once. */
static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size,
		       off_t off, struct fuse_file_info *fi, bool plus)
{
	struct lfs_dir *d = dir_of(fi);
	char *buf = malloc(size);
	size_t pos = 0;
	int rc = 0;

	if (!buf) {
		reply_err(req, -ENOMEM);
		return;
	}
	if (plus)
		act_as_caller(req); /* the entries' lookups are the caller's */
	if (off != d->offset) {
		seekdir(d->dp, off);
		d->pending = NULL;
		d->offset = off;
	}
	for (;;) {
		ssize_t n;

		if (!d->pending) {
			errno = 0;
			d->pending = readdir(d->dp);
			if (!d->pending) {
				rc = errno ? -errno : 0;
				break;
			}
		}
		n = dir_add(req, dirfd(d->dp), buf + pos, size - pos,
			    d->pending, plus);
		if (n < 0) {
			rc = (int)n;
			break;
		}
		if ((size_t)n > size - pos)
			break;
		pos += (size_t)n;
		d->offset = d->pending->d_off;
		d->pending = NULL;
	}
	/* A partial listing is still progress; the error recurs next call. */
	if (pos == 0 && rc < 0)
		reply_err(req, rc);
	else
		fuse_reply_buf(req, buf, pos);
	free(buf);
}

static void lfs_readdir(fuse_req_t req, fuse_ino_t ino, size_t size,
			off_t off, struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, false);
}

static void lfs_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size,
			    off_t off, struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, true);
}

static void lfs_releasedir(fuse_req_t req, fuse_ino_t ino,
			   struct fuse_file_info *fi)
{
	struct lfs_dir *d = dir_of(fi);

	closedir(d->dp);
	open_put(req_fs(req), d->uid);
	free(d);
	fuse_reply_err(req, 0);
}

static void lfs_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync,
			 struct fuse_file_info *fi)
{
	int fd = dirfd(dir_of(fi)->dp);
	int res = datasync ? fdatasync(fd) : fsync(fd);

	reply_err(req, res < 0 ? neg_errno() : 0);
}

static void lfs_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct lfs *fs = req_fs(req);
	struct lfs_inode *inode = inode_of(fs, ino);
	struct statvfs sv;
	int fd = inode_fd(fs, inode);
	int rc = fd;

	/* The FUSE statfs reply carries no flags: ST_RDONLY after loss comes
	 * from lfs_remount_readonly(). */
	if (fd >= 0)
		rc = fstatvfs(fd, &sv) < 0 ? neg_errno() : 0;
	inode_fd_put(inode, fd);
	if (rc < 0)
		reply_err(req, rc);
	else
		fuse_reply_statfs(req, &sv);
}

/* ---- xattrs --------------------------------------------------------------
 * Through /proc/self/fd/N, which reaches the inode itself (symlinks
 * included, where the kernel refuses user.* with EPERM as natively). */

/* What one xattr call needs; `name` NULL means list. */
struct xattr_args {
	const char *name;
	const char *value;   /* set; NULL for get/list/remove */
	char *buf;           /* get/list result */
	size_t size;
	int flags;
	bool remove;
};

static ssize_t xattr_call(const char *path, const struct xattr_args *a)
{
	if (a->remove)
		return removexattr(path, a->name);
	if (a->value)
		return setxattr(path, a->name, a->value, a->size, a->flags);
	if (a->name)
		return getxattr(path, a->name, a->buf, a->size);
	return listxattr(path, a->buf, a->size);
}

struct xattr_call_args {
	const char *path;
	const struct xattr_args *a;
	ssize_t n;
};

static int xattr_fn(void *a_)
{
	struct xattr_call_args *c = a_;

	c->n = xattr_call(c->path, c->a);
	return c->n < 0 ? neg_errno() : 0;
}

/* The call on inode `ino`, as the caller: result size or -errno. */
static ssize_t xattr_on(fuse_req_t req, fuse_ino_t ino,
			const struct xattr_args *a)
{
	struct lfs *fs = req_fs(req);
	struct lfs_inode *inode = inode_of(fs, ino);
	char p[PROC_FD_PATH_MAX];
	int fd = inode_fd(fs, inode);
	struct xattr_call_args c = { .a = a };
	int rc;

	if (fd < 0)
		return fd;
	c.path = proc_path(p, fd);
	rc = as_caller(req, xattr_fn, &c);
	inode_fd_put(inode, fd);
	return rc < 0 ? rc : c.n;
}

static void lfs_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			 const char *value, size_t size, int flags)
{
	struct xattr_args a = { .name = name, .value = value, .size = size,
				.flags = flags };
	ssize_t n = xattr_on(req, ino, &a);

	reply_err(req, n < 0 ? (int)n : 0);
}

static void lfs_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	struct xattr_args a = { .name = name, .remove = true };
	ssize_t n = xattr_on(req, ino, &a);

	reply_err(req, n < 0 ? (int)n : 0);
}

/* Size query (size == 0) or value; shared by getxattr and listxattr. */
static void reply_xattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			size_t size)
{
	struct xattr_args a = { .name = name, .size = size };
	ssize_t n;

	if (size) {
		a.buf = malloc(size);
		if (!a.buf) {
			reply_err(req, -ENOMEM);
			return;
		}
	}
	n = xattr_on(req, ino, &a);
	/* The kernel asks for ACLs on every permission check: a backing fs
	 * without xattrs has none, which is ENODATA, not an error. */
	if (n == -EOPNOTSUPP && name && strncmp(name, "system.posix_acl_", 17) == 0)
		n = -ENODATA;
	if (n < 0)
		reply_err(req, (int)n);
	else if (size)
		fuse_reply_buf(req, a.buf, (size_t)n);
	else
		fuse_reply_xattr(req, (size_t)n);
	free(a.buf);
}

static void lfs_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			 size_t size)
{
	reply_xattr(req, ino, name, size);
}

static void lfs_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	reply_xattr(req, ino, NULL, size);
}

/* ---- session ------------------------------------------------------------ */

/* Each bit of `caps` the kernel offers; libfuse fails INIT on a wanted
 * bit the kernel lacks. */
static void want(struct fuse_conn_info *conn, unsigned caps)
{
	conn->want |= caps & conn->capable;
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
	 * default ACL (see as_caller_masked). */
	want(conn, FUSE_CAP_POSIX_ACL | FUSE_CAP_DONT_MASK);
	/* An acknowledged write must have passed the gate. */
	conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
	/* The kernel clears suid/sgid itself (via setattr) on write,
	 * truncate and chown by a caller lacking CAP_FSETID. */
	conn->want &= ~FUSE_CAP_HANDLE_KILLPRIV;
	/* flock and POSIX locks are kept by the kernel (no lock ops): one
	 * mount is one lock domain. */
	conn->want &= ~(FUSE_CAP_POSIX_LOCKS | FUSE_CAP_FLOCK_LOCKS);
	if (fs->cfg.sole_writer) {
		conn->want &= ~(FUSE_CAP_READDIRPLUS_AUTO |
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
	struct lfs *fs = calloc(1, sizeof(*fs));
	int rc;

	if (!fs)
		return -ENOMEM;
	fs->cfg = *cfg;
	fs->root.fd = -1;
	fs->mount_fd = -1;
	pthread_mutex_init(&fs->lock, NULL);
	pthread_mutex_init(&fs->open_lock, NULL);
	fs->nbuckets = LFS_TABLE_MIN_BUCKETS;
	fs->buckets = calloc(fs->nbuckets, sizeof(*fs->buckets));
	fs->root_path = strdup(cfg->root);
	if (!fs->buckets || !fs->root_path) {
		rc = -ENOMEM;
		goto fail;
	}
	fs->cfg.root = fs->root_path;
	atomic_init(&fs->entry_timeout, cfg->entry_timeout);
	atomic_init(&fs->attr_timeout, cfg->attr_timeout);
	atomic_init(&fs->keep_cache, cfg->keep_cache);
	rc = save_creds(fs);
	if (rc < 0)
		goto fail;
	set_fd_budget(fs);
	rc = open_root(fs);
	if (rc < 0)
		goto fail;
	*out = fs;
	return 0;
fail:
	lfs_free(fs);
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
}

void lfs_after_loss(struct lfs *fs, struct fuse_session *se)
{
	size_t n, i;
	fuse_ino_t *ids;

	atomic_store(&fs->keep_cache, false);
	atomic_store(&fs->entry_timeout, LFS_LOST_TIMEOUT);
	atomic_store(&fs->attr_timeout, LFS_LOST_TIMEOUT);
	ids = known_nodes(fs, &n);
	/* A node forgotten meanwhile answers ENOENT: nothing to drop. */
	for (i = 0; ids && i < n; i++)
		fuse_lowlevel_notify_inval_inode(se, ids[i], 0, 0);
	free(ids);
}

void lfs_free(struct lfs *fs)
{
	if (!fs)
		return;
	table_free(fs);
	if (fs->root.fd >= 0)
		close(fs->root.fd);
	if (fs->mount_fd >= 0)
		close(fs->mount_fd);
	pthread_mutex_destroy(&fs->lock);
	pthread_mutex_destroy(&fs->open_lock);
	free(fs->root_path);
	free(fs);
}
