/* SPDX-License-Identifier: MIT */
/*
 * The passthrough: names. Looking up, forgetting, creating, linking,
 * removing and renaming entries.
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

#include "lfs_int.h"

/* ---- lookup ------------------------------------------------------------- */

void entry_fill(struct lfs *fs, struct lfs_inode *inode,
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
int lookup_at(struct lfs *fs, int dirfd, const char *name,
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

void lfs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
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

void lfs_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	struct lfs *fs = req_fs(req);

	table_unref(fs, inode_of(fs, ino), nlookup);
	fuse_reply_none(req);
}

void lfs_forget_multi(fuse_req_t req, size_t count,
			     struct fuse_forget_data *forgets)
{
	struct lfs *fs = req_fs(req);
	size_t i;

	for (i = 0; i < count; i++)
		table_unref(fs, inode_of(fs, forgets[i].ino), forgets[i].nlookup);
	fuse_reply_none(req);
}

/* ---- creating entries --------------------------------------------------- */

static int make_node(void *a_)
{
	struct make_args *a = a_;
	int res;

	if (S_ISDIR(a->mode))
		res = mkdirat(a->dirfd, a->name, a->mode & ~(mode_t)S_IFMT);
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

	if (linkat(a->proc_fd, fd_name(p, a->oldfd), a->dirfd, a->name,
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

void lfs_mknod(fuse_req_t req, fuse_ino_t parent, const char *name,
		      mode_t mode, dev_t rdev)
{
	make_entry(req, parent, name, mode, rdev, NULL);
}

void lfs_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
		      mode_t mode)
{
	make_entry(req, parent, name, S_IFDIR | mode, 0, NULL);
}

void lfs_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
			const char *name)
{
	make_entry(req, parent, name, S_IFLNK, 0, link);
}

void lfs_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
		     const char *newname)
{
	struct lfs *fs = req_fs(req);
	struct lfs_inode *dir = inode_of(fs, newparent);
	struct lfs_inode *inode = inode_of(fs, ino);
	struct make_args a = {
		.dirfd = inode_fd(fs, dir), .name = newname,
		.oldfd = inode_fd(fs, inode), .proc_fd = fs->proc_fd,
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

void lfs_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	unlink_entry(req, parent, name, 0);
}

void lfs_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
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

void lfs_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		       fuse_ino_t newparent, const char *newname,
		       unsigned int flags)
{
	struct lfs *fs = req_fs(req);
	struct lfs_inode *from = inode_of(fs, parent);
	struct lfs_inode *to = inode_of(fs, newparent);
	int ffd = -1, tfd = -1, rc;

	if (flags & ~(unsigned)(RENAME_NOREPLACE | RENAME_EXCHANGE)) {
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
