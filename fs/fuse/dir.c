/* SPDX-License-Identifier: MIT */
/*
 * The passthrough: directories. opendir, readdir(plus), releasedir,
 * fsyncdir; statfs.
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
#include <sys/statvfs.h>

#include "lfs_int.h"

struct lfs_dir {
	DIR *dp;
	uid_t uid;               /* whose budget the open counts against */
	off_t offset;            /* the kernel's view of dp's position */
	struct dirent *pending;  /* read from dp but not yet returned */
};

/* ---- directories -------------------------------------------------------- */

static struct lfs_dir *dir_of(struct fuse_file_info *fi)
{
	return (struct lfs_dir *)(uintptr_t)fi->fh;
}

/* A directory stream for req's caller (counted in its budget), or -errno. */
static int open_dir(fuse_req_t req, struct lfs_inode *inode, struct lfs_dir *d)
{
	int rc = 0, fd = reopen_inode(req, inode,
				      O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0)
		return fd;
	opened(req_fs(req), fd);
	d->dp = fdopendir(fd);
	if (!d->dp) {
		rc = neg_errno();
		close(fd);
	}
	return rc;
}

void lfs_opendir(fuse_req_t req, fuse_ino_t ino,
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
static void do_readdir(fuse_req_t req, size_t size, off_t off,
		       struct fuse_file_info *fi, bool plus)
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

void lfs_readdir(fuse_req_t req, fuse_ino_t ino, size_t size,
			off_t off, struct fuse_file_info *fi)
{
	(void)ino; /* the handle names the directory */
	do_readdir(req, size, off, fi, false);
}

void lfs_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size,
			    off_t off, struct fuse_file_info *fi)
{
	(void)ino; /* the handle names the directory */
	do_readdir(req, size, off, fi, true);
}

void lfs_releasedir(fuse_req_t req, fuse_ino_t ino,
			   struct fuse_file_info *fi)
{
	struct lfs_dir *d = dir_of(fi);

	(void)ino; /* the handle names the directory */
	closedir(d->dp);
	open_put(req_fs(req), d->uid);
	free(d);
	fuse_reply_err(req, 0);
}

void lfs_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync,
			 struct fuse_file_info *fi)
{
	int fd = dirfd(dir_of(fi)->dp);
	int res = datasync ? fdatasync(fd) : fsync(fd);

	(void)ino; /* the handle names the directory */
	reply_err(req, res < 0 ? neg_errno() : 0);
}

void lfs_statfs(fuse_req_t req, fuse_ino_t ino)
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
